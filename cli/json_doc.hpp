// Every JSON document nunchaku prints (`--json`, `plan --format json`, `run --stats`,
// `--version --json`) says what it is: "command", the subcommand that wrote it, and
// "format_version", bumped when a key changes meaning or type (added keys do not bump it).
// Each command's document is described by docs/schema/<command>.json (JSON Schema).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace nunchaku::cli {

inline constexpr int kJsonFormatVersion = 1;

inline nlohmann::json json_document(std::string_view command) {
  return {{"command", command}, {"format_version", kJsonFormatVersion}};
}

// `j` (an object) with "command" and "format_version" set.
inline nlohmann::json& stamp(nlohmann::json& j, std::string_view command) {
  j["command"] = command;
  j["format_version"] = kJsonFormatVersion;
  return j;
}

}  // namespace nunchaku::cli
