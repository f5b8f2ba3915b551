#include "io/placement.hpp"

#include <fstream>
#include <sstream>

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
  for (const auto& [name, v] : j[key].items()) {
    if (!v.is_string())
      throw Error("plan.schema", "device of module '" + printable(name) + "' is not a string", {.file = file});
    auto d = parse_device(v.get<std::string>());
    if (!d)
      throw Error("plan.device", "unknown device '" + printable(v.get<std::string>()) + "' for module '" + printable(name) + "'",
                  {.file = file, .hint = "devices are \"cuda:N\", \"cpu\" or \"disk\""});
    p.modules[name] = *d;
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
}

Placement place_all(const ModelLayout& layout, Device d) {
  Placement p;
  p.source = "--device " + d.str();
  for (const auto& m : layout.modules) p.modules[m.name] = d;
  return p;
}

}  // namespace nunchaku
