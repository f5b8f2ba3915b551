// estimate --device cpu's measured decode speed (engine/speed_probe.hpp): which weights a
// decode step reads, by type and row width, and the probe's text line and JSON object.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/speed_probe.hpp"
#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku::cli {

// The language model's matrices one decode step of `batch` sequences multiplies by, by type
// and shape: every layer's and the head's (the tied embedding as the head; a stack [E, rows,
// cols] as E matrices), routed experts by the share a batch reaches (decode_bound.hpp's
// routed_fraction); the embedding lookup and vectors are left out.
std::vector<engine::ProbeClass> decode_classes(const Checkpoint& ck, const ModelLayout& layout, int64_t batch);

// "decode on this CPU at batch B, measured: exact X tok/s, --fast-math Y tok/s (...)".
std::string probe_line(const engine::SpeedProbe& p);
nlohmann::json probe_json(const engine::SpeedProbe& p);

}  // namespace nunchaku::cli
