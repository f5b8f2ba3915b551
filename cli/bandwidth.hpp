// The decode bound's words (memory/decode_bound.hpp) for plan and estimate: --bandwidth,
// the text line and the JSON object.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "memory/decode_bound.hpp"

namespace nunchaku::cli {

// --bandwidth "gpu=1TB,pcie=25GB,host=60GB,disk=3GB" (each optional); Error usage.bandwidth.
Bandwidths parse_bandwidths(const std::string& text);
void add_bandwidth_option(CLI::App* cmd, std::string& to);
// "decode at batch B: at most X tok/s, reading ... per step (...)".
std::string decode_line(const DecodeBound& d, const Bandwidths& bw);
nlohmann::json decode_json(const DecodeBound& d, const Bandwidths& bw);

}  // namespace nunchaku::cli
