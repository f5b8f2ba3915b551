#include "model/pipeline.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/json_file.hpp"

namespace nunchaku {
namespace fs = std::filesystem;

namespace {

// Whether a part's folder holds weights diffusers / transformers would load.
bool has_weights(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".safetensors" || ext == ".bin" || ext == ".gguf") return true;
  }
  return false;
}

}  // namespace

std::optional<Pipeline> read_pipeline(const std::string& path) {
  std::error_code ec;
  const fs::path index = fs::path(path) / "model_index.json";
  if (!fs::is_directory(path, ec) || !fs::is_regular_file(index, ec)) return std::nullopt;
  const nlohmann::json j = read_json_file(index.string());
  const std::string file = index.string();
  if (!j.is_object()) throw Error("pipeline.bad_index", "model_index.json: the top level is not a JSON object", {.file = file});
  Pipeline p;
  p.path = path;
  if (auto it = j.find("_class_name"); it != j.end() && it->is_string()) p.class_name = it->get<std::string>();
  for (const auto& [key, v] : j.items()) {
    if (key.empty() || key.front() == '_') continue;  // _class_name, _diffusers_version, _name_or_path
    if (v.is_null() || (v.is_array() && v.size() == 2 && v[0].is_null())) {  // a part the pipeline leaves out
      p.no_weights.push_back(key);
      continue;
    }
    if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_string())
      throw Error("pipeline.bad_index", fmt::format("model_index.json: '{}' is not [library, class]", key), {.file = file});
    const fs::path dir = fs::path(path) / key;
    if (key.find('/') != std::string::npos || key.find("..") != std::string::npos || !fs::is_directory(dir, ec) ||
        !has_weights(dir)) {
      p.no_weights.push_back(key);
      continue;
    }
    p.parts.push_back({key, v[0].get<std::string>(), v[1].get<std::string>(), dir.string()});
  }
  if (p.parts.empty())
    throw Error("pipeline.no_weights", "model_index.json names no part with weights in its folder", {.file = file});
  return p;
}

}  // namespace nunchaku
