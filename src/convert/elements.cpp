#include "convert/elements.hpp"

#include <cmath>
#include <cstring>

#include "engine/quant_blocks.hpp"
#include "io/convert.hpp"

namespace nunchaku::convert {

namespace blk = engine::blocks;

bool can_read_as_float(DType t) {
  switch (t) {
    case DType::F64: case DType::F32: case DType::F16: case DType::BF16: return true;
    default: return blk::quant_of(t) != blk::Quant::None;
  }
}

bool can_write_from_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
}

void to_f32(DType from, const uint8_t* s, float* d, uint64_t n) {
  switch (from) {
    case DType::F32: std::memcpy(d, s, n * 4); return;
    case DType::F64:
      for (uint64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, s + 8 * i, 8);
        d[i] = static_cast<float>(v);  // as torch's double -> float cast
      }
      return;
    case DType::F16:
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        d[i] = f32_from_bits(from == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h));
      }
      return;
    default: {
      const auto& di = dtype_info(from);
      blk::dequant_blocks(blk::quant_of(from), s, int64_t(n / di.block_elems), d);
    }
  }
}

void quantize_q8_0_block(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = f32_to_f16(f32_bits(d));
  std::memcpy(out, &dh, 2);
  for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

void from_f32(DType to, const float* s, uint8_t* d, uint64_t n) {
  switch (to) {
    case DType::F32: std::memcpy(d, s, n * 4); return;
    case DType::F16:
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint32_t b = f32_bits(s[i]);
        const uint16_t h = to == DType::F16 ? f32_to_f16(b) : f32_to_bf16(b);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    case DType::Q8_0:
      for (uint64_t b = 0; b < n / 32; ++b) quantize_q8_0_block(s + 32 * b, d + 34 * b);
      return;
    default: break;
  }
}

}  // namespace nunchaku::convert
