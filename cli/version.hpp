// `nunchaku --version [--json]`: what this binary is (version, git commit, build type,
// compiler), whether CUDA is compiled in (toolkit version) and which devices answer, and
// the instruction set the CPU engine uses on this machine.
#pragma once

#include <nlohmann/json.hpp>

namespace nunchaku::cli {

nlohmann::json version_json();
// Prints the text form, or the JSON document with --json.
void print_version(bool json);

}  // namespace nunchaku::cli
