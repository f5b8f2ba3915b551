#include "io/placement.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku {

std::string Device::str() const {
  switch (kind) {
    case Kind::Cuda: return "cuda:" + std::to_string(index);
    case Kind::Cpu: return "cpu";
    case Kind::Disk: return "disk";
  }
  return "cpu";
}

std::optional<Device> parse_device(std::string_view t) {
  if (t == "cpu") return Device{Device::Kind::Cpu, 0};
  if (t == "disk") return Device{Device::Kind::Disk, 0};
  if (t == "cuda") return Device{Device::Kind::Cuda, 0};
  if (t.starts_with("cuda:") && t.size() > 5 && t.size() <= 8) {
    int n = 0;
    for (char c : t.substr(5)) {
      if (c < '0' || c > '9') return std::nullopt;
      n = n * 10 + (c - '0');
    }
    return Device{Device::Kind::Cuda, n};
  }
  return std::nullopt;
}

Device Placement::device_of(const std::string& module) const {
  auto it = modules.find(module);
  if (it == modules.end())
    throw Error("plan.missing_module", "module '" + module + "' has no device in the placement",
                {.hint = "list every module under \"device_map\" (see docs/load.md)"});
  return it->second;
}

Placement parse_plan(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("plan.json", std::string("plan is not valid JSON: ") + json_error_message(e), {.file = file});
  }
  // "device_map" since plan format_version 2; "modules" in the plans older versions wrote.
  const char* key = j.is_object() && j.contains("device_map") ? "device_map" : "modules";
  if (!j.is_object() || !j.contains(key) || !j[key].is_object())
    throw Error("plan.schema", "plan has no \"device_map\" object", {.file = file,
                .hint = "expected {\"device_map\": {\"model.layers.0\": \"cuda:0\", ...}}"});
  Placement p;
  p.source = file.empty() ? "plan" : "plan file " + file;
  p.file = file;
  auto read_map = [&](const nlohmann::json& map, const char* what, std::map<std::string, Device>& out) {
    for (const auto& [name, v] : map.items()) {
      if (!v.is_string())
        throw Error("plan.schema", fmt::format("{} of module '{}' is not a string", what, printable(name)), {.file = file});
      auto d = parse_device(v.get<std::string>());
      if (!d)
        throw Error("plan.device", fmt::format("unknown device '{}' for {} '{}'", printable(v.get<std::string>()),
                                               std::string_view(what) == "device" ? "module" : "the experts of", printable(name)),
                    {.file = file, .hint = "devices are \"cuda:N\", \"cpu\" or \"disk\""});
      out[name] = *d;
    }
  };
  read_map(j[key], "device", p.modules);
  if (j.contains("expert_map")) {
    if (!j["expert_map"].is_object())
      throw Error("plan.schema", "\"expert_map\" is not an object", {.file = file,
                  .hint = "expected {\"expert_map\": {\"model.layers.3\": \"disk\", ...}}"});
    read_map(j["expert_map"], "experts' device", p.experts);
  }
  return p;
}

Placement read_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("plan.open", "cannot open the plan file", {.file = path});
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_plan(ss.str(), path);
}

void check_placement(const Placement& p, const ModelLayout& layout) {
  std::map<std::string, int> known;
  for (const auto& m : layout.modules) known[m.name] = 1;
  // Unknown names first: a plan made for another checkpoint is the likely cause, and its
  // first foreign name says so better than the first module it lacks.
  for (const auto& [name, _] : p.modules)
    if (!known.count(name))
      throw Error("plan.unknown_module", "the plan places module '" + name + "' that the checkpoint does not have",
                  {.file = p.file, .hint = "was the plan made for this checkpoint?"});
  for (const auto& m : layout.modules)
    if (!p.modules.count(m.name))
      throw Error("plan.missing_module", "the plan does not place module '" + m.name + "'",
                  {.file = p.file, .hint = "was the plan made for this checkpoint?"});
  for (const auto& [name, _] : p.experts) {
    auto m = std::find_if(layout.modules.begin(), layout.modules.end(), [&](const Module& x) { return x.name == name; });
    if (m == layout.modules.end())
      throw Error("plan.unknown_module", "the plan's expert_map names module '" + printable(name) + "' that the checkpoint does not have",
                  {.file = p.file, .hint = "was the plan made for this checkpoint?"});
    if (std::none_of(m->roles.begin(), m->roles.end(), is_expert_role))
      throw Error("plan.no_experts", "the plan's expert_map names module '" + printable(name) + "', which holds no routed experts",
                  {.file = p.file, .hint = "only MoE layers' routed experts can be placed apart"});
  }
}

Placement place_all(const ModelLayout& layout, Device d) {
  Placement p;
  p.source = "--device " + d.str();
  for (const auto& m : layout.modules) p.modules[m.name] = d;
  return p;
}

}  // namespace nunchaku
