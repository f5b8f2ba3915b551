#include "model/report.hpp"

#include <fnmatch.h>

namespace nunchaku {

bool glob_match(const std::string& pattern, const std::string& name) {
  return pattern.empty() || ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::map<std::string, DTypeTotals> dtype_totals(const Checkpoint& ck, const std::string& filter) {
  std::map<std::string, DTypeTotals> out;
  for (const auto& t : ck.tensors) {
    if (!glob_match(filter, t.name)) continue;
    auto& d = out[std::string(dtype_name(t.dtype))];
    d.tensors++;
    d.parameters += t.numel();
    d.bytes += t.nbytes;
  }
  return out;
}

nlohmann::json inspect_json(const Checkpoint& ck, const ModelLayout& layout, const std::string& filter) {
  using nlohmann::json;
  json j;
  j["format"] = std::string(format_name(ck.format));
  j["path"] = ck.path;
  json files = json::array();
  for (const auto& f : ck.files) files.push_back({{"path", f.path}, {"size_bytes", f.bytes}});
  j["files"] = files;
  j["config_path"] = ck.config_path.empty() ? json(nullptr) : json(ck.config_path);

  uint64_t count = 0, params = 0, bytes = 0;
  json tensors = json::array();
  for (const auto& t : ck.tensors) {
    if (!glob_match(filter, t.name)) continue;
    count++;
    params += t.numel();
    bytes += t.nbytes;
    json tj = {{"name", t.name},
               {"dtype", std::string(dtype_name(t.dtype))},
               {"shape", t.shape},
               {"size_bytes", t.nbytes},
               {"file", ck.files.at(t.file).path},
               {"offset", t.offset}};
    if (!t.strides.empty()) tj["strides"] = t.strides;
    if (!t.storage.empty()) {
      tj["storage"] = t.storage;
      tj["storage_offset"] = t.storage_offset;
    }
    tensors.push_back(std::move(tj));
  }
  j["filter"] = filter.empty() ? json(nullptr) : json(filter);
  j["num_tensors"] = count;
  j["num_parameters"] = params;
  // The model's parameters as the runtimes see them: quantized stores by the values they
  // hold, scales and MTP layers left out; per token with routed experts at top_k / experts.
  j["num_model_parameters"] = layout.num_parameters;
  j["num_active_parameters"] = layout.num_active_parameters;
  j["weight_bytes"] = bytes;
  json dt = json::object();
  for (const auto& [name, d] : dtype_totals(ck, filter))
    dt[name] = {{"num_tensors", d.tensors}, {"num_parameters", d.parameters}, {"weight_bytes", d.bytes}};
  j["dtypes"] = dt;
  j["model"] = layout.spec ? layout.spec->to_json() : json(nullptr);
  j["metadata"] = ck.metadata;
  json modules = json::array();
  for (const auto& m : layout.modules)
    modules.push_back({{"name", m.name},
                       {"kind", std::string(module_kind_name(m.kind))},
                       {"layer", m.kind == ModuleKind::Layer ? json(m.layer) : json(nullptr)},
                       {"num_tensors", m.tensors.size()},
                       {"num_parameters", m.parameters},
                       {"weight_bytes", m.bytes},
                       {"component", m.component.empty() ? json(nullptr) : json(m.component)}});
  j["modules"] = modules;
  j["tied"] = layout.tied;
  json warnings = ck.warnings;
  for (const auto& w : layout.warnings) warnings.push_back(w);
  j["warnings"] = warnings;
  j["tensors"] = std::move(tensors);
  return j;
}

}  // namespace nunchaku
