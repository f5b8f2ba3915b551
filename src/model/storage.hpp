// Quantized stores counted by the values they hold. A published checkpoint may store a
// weight packed (MXFP4 `*_blocks` U8 with `*_scales`, GPTQ/AWQ `qweight` int32 with qzeros,
// scales and g_idx, bitsandbytes U8 with absmax/quant_map/quant_state, FP8 with
// `weight_scale_inv`): the model's parameters are the unpacked values, and the scales,
// zero points and quantization state are not parameters at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"

namespace nunchaku {

// Per tensor of `ck` (parallel to ck.tensors): the logical parameters it holds. `bits` is
// the packed integer width (quantization_config.bits, 4 when unstated).
std::vector<uint64_t> logical_parameters(const Checkpoint& ck, int bits);

}  // namespace nunchaku
