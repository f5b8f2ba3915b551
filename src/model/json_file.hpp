// A small JSON file beside a checkpoint (config.json, model_index.json), read whole and
// parsed with errors that name the file: config.unreadable, config.too_large (over 16 MiB;
// real ones are a few KB) and config.bad_json with the byte offset (exit 2).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace nunchaku {

nlohmann::json read_json_file(const std::string& path);

}  // namespace nunchaku
