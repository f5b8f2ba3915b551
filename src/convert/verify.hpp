// `convert --verify`: the written output opened again with nunchaku's own readers (as
// inspect would) must list exactly the planned tensors with their dtypes and shapes, and
// every tensor's bytes must equal the input converted once more, chunk by chunk.
#pragma once

#include <string>

#include "convert/plan.hpp"

namespace nunchaku::convert {

// Throws Error("convert.verify_failed", exit 1) naming the tensor and output offset.
void verify_output(const ConvertPlan& plan, const Checkpoint& in, const std::string& out_path, bool gguf,
                   uint64_t buffer_bytes);

}  // namespace nunchaku::convert
