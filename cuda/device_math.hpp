// Per-element arithmetic of the CUDA engine kernels, compiled both by nvcc (as
// __host__ __device__ functions used inside the kernels of engine_ops.cu) and by the host
// compiler (for the CPU-twin tests in tests/test_cuda_twin.cpp, which check every function
// here against the CPU engine's independent implementations in src/engine/quant_blocks.hpp
// and kernels.cpp). No CUDA includes, no dependency on src/.
//
// Weight types are ggml's block layouts (see src/engine/quant_blocks.hpp for the byte
// layout of each); `dequant_at(row, type, i)` returns element i of a row exactly as the
// CPU engine dequantizes it (same float operations, so the same value bit for bit).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define NK_HD __host__ __device__ __forceinline__
#else
#define NK_HD inline
#endif

namespace nunchaku::cuda {

// The weight element types the device kernels read (values match format/dtype's names).
enum class WType : int { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

// Elements per block and bytes per block (1 and the element size for the float types).
NK_HD int block_elems(WType t) {
  switch (t) {
    case WType::F32: case WType::F16: case WType::BF16: return 1;
    case WType::Q4_K: case WType::Q5_K: case WType::Q6_K: return 256;
    default: return 32;
  }
}
NK_HD int block_bytes(WType t) {
  switch (t) {
    case WType::F32: return 4;
    case WType::F16: case WType::BF16: return 2;
    case WType::Q8_0: return 34;
    case WType::Q4_0: return 18;
    case WType::Q4_1: return 20;
    case WType::Q5_0: return 22;
    case WType::Q5_1: return 24;
    case WType::Q4_K: return 144;
    case WType::Q5_K: return 176;
    case WType::Q6_K: return 210;
  }
  return 0;
}

NK_HD float bits_to_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  union { uint32_t u; float f; } v{b};
  return v.f;
#endif
}

// IEEE half -> float, exact (subnormals included), by bit manipulation.
NK_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float f = float(man) * (1.0f / 16777216.0f);  // man * 2^-24, exact
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}
NK_HD float bf16_bits_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

// a * b and a + b each rounded on its own. nvcc contracts `a * b + c` into one FMA (one
// rounding) by default; the CPU engine's dequantization (compiled without FMA) rounds twice,
// so dequantized weights would differ from it in the last bit. The _rn intrinsics are never
// contracted.
NK_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
NK_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Unaligned little-endian loads (block fields are not aligned in the file layouts).
NK_HD uint16_t ld16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
NK_HD uint32_t ld32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
NK_HD float ldh(const uint8_t* p) { return half_bits_to_float(ld16(p)); }

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 scale bytes.
NK_HD void k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Element i (0..block_elems-1) of the block at b.
NK_HD float dequant_in_block(const uint8_t* b, WType t, int i) {
  switch (t) {
    case WType::F32: return bits_to_float(ld32(b));
    case WType::F16: return half_bits_to_float(ld16(b));
    case WType::BF16: return bf16_bits_to_float(ld16(b));
    case WType::Q8_0: return ldh(b) * float(int8_t(b[2 + i]));
    case WType::Q4_0: {
      const uint8_t q = b[2 + (i & 15)];
      return ldh(b) * float(int(i < 16 ? q & 15 : q >> 4) - 8);
    }
    case WType::Q4_1: {
      const uint8_t q = b[4 + (i & 15)];
      return add_rn(mul_rn(ldh(b), float(i < 16 ? q & 15 : q >> 4)), ldh(b + 2));
    }
    case WType::Q5_0: {
      const uint8_t q = b[6 + (i & 15)];
      const int v = int((i < 16 ? q & 15 : q >> 4) | (((ld32(b + 2) >> i) & 1) << 4));
      return ldh(b) * float(v - 16);
    }
    case WType::Q5_1: {
      const uint8_t q = b[8 + (i & 15)];
      const int v = int((i < 16 ? q & 15 : q >> 4) | (((ld32(b + 4) >> i) & 1) << 4));
      return add_rn(mul_rn(ldh(b), float(v)), ldh(b + 2));
    }
    case WType::Q4_K:
    case WType::Q5_K: {
      // 64 values per pair of sub-blocks (j, j+1) sharing 32 quant bytes: low nibbles
      // for sub-block j, high for j+1.
      const int pair = i / 64, l = i % 32, j = 2 * pair + ((i % 64) >= 32 ? 1 : 0);
      int sc, m;
      k_scale_min(j, b + 4, sc, m);
      const float d = mul_rn(ldh(b), float(sc)), mm = mul_rn(ldh(b + 2), float(m));
      const bool q5 = t == WType::Q5_K;
      const uint8_t q = b[(q5 ? 48 : 16) + pair * 32 + l];
      int v = (j & 1) ? q >> 4 : q & 15;
      if (q5) v |= ((b[16 + l] >> j) & 1) << 4;
      return add_rn(mul_rn(d, float(v)), -mm);
    }
    case WType::Q6_K: {
      // Two halves of 128; within a half, four groups of 32 (l = i % 32).
      const int half = i / 128, r = i % 128, g = r / 32, l = r % 32;
      const uint8_t* ql = b + half * 64;
      const uint8_t* qh = b + 128 + half * 32;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + half * 8);
      const uint8_t lo = (g & 1) ? ql[l + 32] : ql[l];
      const int nib = (g < 2) ? (lo & 15) : (lo >> 4);
      const int q = int(nib | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
      return ldh(b + 208) * float(sc[l / 16 + 2 * g]) * float(q);
    }
  }
  return 0.0f;
}

// Element i of a row of `t` starting at `row`.
NK_HD float dequant_at(const uint8_t* row, WType t, int64_t i) {
  const int be = block_elems(t);
  return dequant_in_block(row + (i / be) * block_bytes(t), t, int(i % be));
}

// RMSNorm's scale from the sum of squares (accumulated in double, as the CPU engine does).
NK_HD float rms_inv(double sumsq, int64_t n, float eps) {
  return float(1.0 / sqrt(sumsq / double(n) + double(eps)));
}

NK_HD float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }
// GELU with the tanh approximation (torch's gelu(approximate="tanh"), HF gelu_pytorch_tanh),
// times u. One definition for the CPU engine (kernels.cpp) and the kernels.
NK_HD float gelu_tanh_times(float g, float u) {
  const float inner = 0.7978845608028654f * (g + 0.044715f * (g * g * g));
  return 0.5f * g * (1.0f + tanhf(inner)) * u;
}
// Tanh soft-capping of a logit: cap * tanh(x / cap) (gemma2's attention and final logits).
NK_HD float softcap_of(float x, float cap) { return cap * tanhf(x / cap); }

// Rotary angle cos/sin for position `pos` and pair frequency `inv_freq` (computed in
// double from the float angle, as the CPU engine does).
NK_HD void rope_cs(int64_t pos, float inv_freq, float& c, float& s) {
  const float angle = float(pos) * inv_freq;
  c = float(cos(double(angle)));
  s = float(sin(double(angle)));
}

// The element indices of rotary pair i in a head of `hd`: NeoX (i, i + hd/2), interleaved (2i, 2i+1).
NK_HD void rope_pair(bool neox, int64_t hd, int64_t i, int64_t& a, int64_t& b) {
  a = neox ? i : 2 * i;
  b = neox ? i + hd / 2 : 2 * i + 1;
}

}  // namespace nunchaku::cuda
