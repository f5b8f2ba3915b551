// `nunchaku trace FILE --svg OUT`: a trace that `load --trace` or `run --trace` wrote
// (docs/schema/trace.json) as a static SVG for CI logs and READMEs:
//   one lane per thread with its phases (adjacent phases of one name that would overlap
//     on screen drawn as one block), and a legend: each phase's name, count and total time;
//   one panel per sampled counter: its samples as a step line, its prediction ("NAME
//     (predicted)") as a dashed line, the measured peak marked and labelled, the predicted
//     peak labelled beside it; counters at 0 throughout (and predicted 0) named on one line.
// Everything drawn is read from the events themselves (not from otherData).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace nunchaku {

// Throws Error("trace.format", exit 2) naming `file` and the event index when the document
// is not a trace of that shape (no traceEvents array, an event without ph/ts, ...).
std::string timeline_svg(const nlohmann::json& trace, const std::string& file);

}  // namespace nunchaku
