// `estimate --svg` and `plan --svg`: the numbers of an Estimate or a DevicePlan as stacked
// bars (core/bar_chart.hpp). Nothing is computed here that the estimate or plan did not:
// every segment is one of their byte counts, so the picture and the table agree.
//
//   estimate  one bar per device kind the estimate charges (per GPU or per CPU process, and
//             the host when it has host components), its components bottom to top; the
//             weights split by module kind and layer range when the per-module costs add up
//             to the weights component (one GPU), else one "weights" segment; the budget
//             the verdict used (--vram). --runtime all: one group per runtime.
//   plan      one bar per device of the plan (cuda:N, cpu, disk): the weights of the layers
//             and modules it holds by range, KV cache, activations, logits, training
//             states, overheads, staging; its budget (none for disk).
#pragma once

#include <optional>
#include <vector>

#include "core/bar_chart.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"

namespace nunchaku {

BarChart estimate_chart(const std::vector<Estimate>& es, const std::vector<std::optional<Verdict>>& verdicts);
BarChart plan_chart(const DevicePlan& p, const Estimate& e, const std::string& verdict_text);

// The weights of modules `held` (indices into e.modules, in order) as segments: non-layer
// modules by kind ("weights: embedding"), decoder layers by contiguous range, at most
// `max_ranges` ranges of equal count ("weights: layers 0-7"). When they do not add up to
// `expected`, one segment {"weights", expected}.
std::vector<BarSegment> weight_segments(const Estimate& e, const std::vector<size_t>& held, uint64_t expected,
                                        size_t max_ranges = 4);

}  // namespace nunchaku
