// ggml block layouts and their dequantization, one block at a time (internal header).
// Everything here is `static inline` on purpose: kernels_avx2.cpp is compiled with
// -mavx2 and must not hand the linker an AVX2 copy of a function the scalar path uses.
//
// Layouts (little endian, no padding), y = dequantized values in block order:
//   Q8_0 (34 B / 32):  f16 d; int8 q[32];                      y[i] = d*q[i]
//   Q4_0 (18 B / 32):  f16 d; u8 q[16];                        y[i] = d*((q[i]&15)-8), y[i+16] = d*((q[i]>>4)-8)
//   Q4_1 (20 B / 32):  f16 d, m; u8 q[16];                    y[i] = d*(q[i]&15)+m, y[i+16] = d*(q[i]>>4)+m
//   Q5_0 (22 B / 32):  f16 d; u32 qh; u8 q[16];  5th bit of value i in bit i of qh; y = d*(q5-16)
//   Q5_1 (24 B / 32):  f16 d, m; u32 qh; u8 q[16];            y = d*q5 + m
//   Q4_K (144 B / 256): f16 d, dmin; u8 scales[12]; u8 q[128]; 8 sub-blocks of 32 with 6-bit
//                      scale sc and min m: y = d*sc*q4 - dmin*m
//   Q5_K (176 B / 256): f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 q[128]; as Q4_K with a
//                      5th bit per value from qh: y = d*sc*q5 - dmin*m
//   Q6_K (210 B / 256): u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; 16 sub-blocks of 16:
//                      y = d*scale*(q6 - 32)
#pragma once

#include <cstdint>
#include <cstring>

#include "format/dtype.hpp"

namespace nunchaku::engine::blocks {

static inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    float f = float(man) * (1.0f / 16777216.0f);  // subnormal (or zero): man * 2^-24
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

static inline float bf16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

static inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

static inline void dequant_q8_0(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b));
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * float(q[i]);
}

static inline void dequant_q4_0(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b));
  const uint8_t* q = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * float(int(q[i] & 15) - 8);
    y[i + 16] = d * float(int(q[i] >> 4) - 8);
  }
}

static inline void dequant_q4_1(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
  const uint8_t* q = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * float(q[i] & 15) + m;
    y[i + 16] = d * float(q[i] >> 4) + m;
  }
}

static inline uint32_t load_u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

static inline void dequant_q5_0(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b));
  uint32_t qh = load_u32(b + 2);
  const uint8_t* q = b + 6;
  for (int i = 0; i < 16; ++i) {
    int lo = int((q[i] & 15) | (((qh >> i) & 1) << 4)), hi = int((q[i] >> 4) | (((qh >> (i + 16)) & 1) << 4));
    y[i] = d * float(lo - 16);
    y[i + 16] = d * float(hi - 16);
  }
}

static inline void dequant_q5_1(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
  uint32_t qh = load_u32(b + 4);
  const uint8_t* q = b + 8;
  for (int i = 0; i < 16; ++i) {
    int lo = int((q[i] & 15) | (((qh >> i) & 1) << 4)), hi = int((q[i] >> 4) | (((qh >> (i + 16)) & 1) << 4));
    y[i] = d * float(lo) + m;
    y[i + 16] = d * float(hi) + m;
  }
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K block.
static inline void q4k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

static inline void dequant_q4_k(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 8; j += 2) {  // 64 values per pair of sub-blocks, sharing 32 bytes
    int sc0, m0, sc1, m1;
    q4k_scale_min(j, scales, sc0, m0);
    q4k_scale_min(j + 1, scales, sc1, m1);
    float d0 = d * float(sc0), mm0 = dmin * float(m0), d1 = d * float(sc1), mm1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      y[l] = d0 * float(q[l] & 15) - mm0;
      y[l + 32] = d1 * float(q[l] >> 4) - mm1;
    }
    y += 64;
    q += 32;
  }
}

static inline void dequant_q5_k(const uint8_t* b, float* y) {
  float d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  for (int j = 0; j < 8; j += 2) {  // 64 values per pair of sub-blocks; qh bits j, j+1
    int sc0, m0, sc1, m1;
    q4k_scale_min(j, scales, sc0, m0);
    q4k_scale_min(j + 1, scales, sc1, m1);
    float d0 = d * float(sc0), mm0 = dmin * float(m0), d1 = d * float(sc1), mm1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      y[l] = d0 * float((q[l] & 15) | (((qh[l] >> j) & 1) << 4)) - mm0;
      y[l + 32] = d1 * float((q[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4)) - mm1;
    }
    y += 64;
    q += 32;
  }
}

static inline void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = half_to_float(load_u16(b + 208));
  for (int half = 0; half < 2; ++half) {  // 128 values each
    for (int l = 0; l < 32; ++l) {
      int is = l / 16;
      int q1 = int((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
      int q2 = int((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
      int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// Dequantizes `nblocks` consecutive blocks of a quantized type (Quant::None: nothing).
enum class Quant { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, None };

static inline Quant quant_of(DType t) {
  switch (t) {
    case DType::Q8_0: return Quant::Q8_0;
    case DType::Q4_0: return Quant::Q4_0;
    case DType::Q4_1: return Quant::Q4_1;
    case DType::Q5_0: return Quant::Q5_0;
    case DType::Q5_1: return Quant::Q5_1;
    case DType::Q4_K: return Quant::Q4_K;
    case DType::Q5_K: return Quant::Q5_K;
    case DType::Q6_K: return Quant::Q6_K;
    default: return Quant::None;
  }
}

static inline void dequant_blocks(Quant q, const uint8_t* src, int64_t nblocks, float* y) {
  switch (q) {
    case Quant::Q8_0: for (int64_t i = 0; i < nblocks; ++i) dequant_q8_0(src + i * 34, y + i * 32); break;
    case Quant::Q4_0: for (int64_t i = 0; i < nblocks; ++i) dequant_q4_0(src + i * 18, y + i * 32); break;
    case Quant::Q4_1: for (int64_t i = 0; i < nblocks; ++i) dequant_q4_1(src + i * 20, y + i * 32); break;
    case Quant::Q5_0: for (int64_t i = 0; i < nblocks; ++i) dequant_q5_0(src + i * 22, y + i * 32); break;
    case Quant::Q5_1: for (int64_t i = 0; i < nblocks; ++i) dequant_q5_1(src + i * 24, y + i * 32); break;
    case Quant::Q5_K: for (int64_t i = 0; i < nblocks; ++i) dequant_q5_k(src + i * 176, y + i * 256); break;
    case Quant::Q4_K: for (int64_t i = 0; i < nblocks; ++i) dequant_q4_k(src + i * 144, y + i * 256); break;
    case Quant::Q6_K: for (int64_t i = 0; i < nblocks; ++i) dequant_q6_k(src + i * 210, y + i * 256); break;
    case Quant::None: break;
  }
}

}  // namespace nunchaku::engine::blocks
