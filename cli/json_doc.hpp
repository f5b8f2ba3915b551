// Every JSON document nunchaku prints (`--json`, `plan --format json`, `run --stats`, each
// line of run, tokenize --json and bench -o jsonl, `--version --json`) says what it is:
// "command", the subcommand that wrote it, "path", the model as given (not --version), and
// "format_version", that command's document version, bumped when a key is renamed, removed
// or changes type (added keys do not bump it). The names follow one vocabulary (docs/json.md);
// each command's document is described by docs/schema/<command>.json (JSON Schema).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nunchaku::cli {

// Per command; docs/json.md lists what each version changed.
inline int json_format_version(std::string_view command) {
  if (command == "inspect" || command == "estimate" || command == "plan" || command == "load" || command == "convert" ||
      command == "run" || command == "version")
    return 2;
  if (command == "bench" || command == "tokenize") return 1;
  throw std::logic_error("json_format_version: no version for command '" + std::string(command) + "'");
}

inline nlohmann::json json_document(std::string_view command) {
  return {{"command", command}, {"format_version", json_format_version(command)}};
}

// `j` (an object) with "command" and "format_version" set.
inline nlohmann::json& stamp(nlohmann::json& j, std::string_view command) {
  j["command"] = command;
  j["format_version"] = json_format_version(command);
  return j;
}

}  // namespace nunchaku::cli
