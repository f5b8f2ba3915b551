#include "model/report.hpp"

#include <fnmatch.h>

#include "core/text.hpp"

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

namespace {

using nlohmann::json;

json tensor_json(const Checkpoint& ck, const TensorInfo& t) {
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
  return tj;
}

// Appends `s` as a JSON string literal, as dump_json writes it.
void append_json_string(std::string& out, const std::string& s) {
  for (char c : s)
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x80) {
      out += dump_json(json(s));
      return;
    }
  out += '"';
  out += s;
  out += '"';
}

// `v` as dump_json(.., 2) writes an array of integers whose closing bracket is indented `pad`.
template <class Int>
void int_array(std::string& out, const std::vector<Int>& v, std::string_view pad) {
  if (v.empty()) {
    out += "[]";
    return;
  }
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    out += i ? ",\n" : "\n";
    out.append(pad).append("  ") += std::to_string(v[i]);
  }
  out += '\n';
  out.append(pad) += ']';
}

// The "tensors" array as dump_json(document, 2) writes it, one level into the document:
// what tensor_json would give, without a DOM of 100k objects.
void tensors_text(std::string& out, const Checkpoint& ck, const std::string& filter) {
  std::vector<std::string> files(ck.files.size());
  for (size_t i = 0; i < ck.files.size(); ++i) append_json_string(files[i], ck.files[i].path);
  bool first = true;
  for (const auto& t : ck.tensors) {
    if (!glob_match(filter, t.name)) continue;
    out += first ? "[\n    {\n      \"dtype\": \"" : ",\n    {\n      \"dtype\": \"";
    first = false;
    out.append(dtype_name(t.dtype)).append("\",\n      \"file\": ").append(files.at(t.file));
    out.append(",\n      \"name\": ");
    append_json_string(out, t.name);
    out.append(",\n      \"offset\": ").append(std::to_string(t.offset));
    out.append(",\n      \"shape\": ");
    int_array(out, t.shape, "      ");
    out.append(",\n      \"size_bytes\": ").append(std::to_string(t.nbytes));
    if (!t.storage.empty()) {
      out.append(",\n      \"storage\": ");
      append_json_string(out, t.storage);
      out.append(",\n      \"storage_offset\": ").append(std::to_string(t.storage_offset));
    }
    if (!t.strides.empty()) {
      out.append(",\n      \"strides\": ");
      int_array(out, t.strides, "      ");
    }
    out += "\n    }";
  }
  out += first ? "[]" : "\n  ]";
}

}  // namespace

nlohmann::json inspect_json(const Checkpoint& ck, const ModelLayout& layout, const std::string& filter, bool with_tensors) {
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
    if (with_tensors) tensors.push_back(tensor_json(ck, t));
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

std::string dump_inspect_json(const nlohmann::json& doc, const Checkpoint& ck, const std::string& filter) {
  std::string text = dump_json(doc, 2);
  // A top-level member's name follows a newline and two spaces; a raw newline is never
  // inside a string, so this is the document's own "tensors" and no nested one.
  constexpr std::string_view kEmpty = "\n  \"tensors\": []";
  const size_t at = text.find(kEmpty);
  if (at == std::string::npos) return text;
  std::string out;
  out.reserve(text.size() + ck.tensors.size() * 320);
  out.append(text, 0, at + kEmpty.size() - 2);
  tensors_text(out, ck, filter);
  out.append(text, at + kEmpty.size());
  return out;
}

}  // namespace nunchaku
