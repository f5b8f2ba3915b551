// One dtype vocabulary for every format. Plain types use the safetensors
// spelling (F32, BF16, F8_E4M3, ...); block-quantized types use the ggml
// spelling (Q4_K, IQ2_XXS, MXFP4, ...). Byte sizes are exact: a tensor of
// `numel` elements takes numel / block_elems * block_bytes bytes and numel
// must be a multiple of block_elems (sub-byte floats F4/F6 are "blocks" too).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace nunchaku {

enum class DType : uint16_t {
  // plain
  BOOL, U8, I8, U16, I16, U32, I32, U64, I64,
  F16, BF16, F32, F64, C64, C128,
  F8_E4M3, F8_E5M2, F8_E8M0, F4, F6_E2M3, F6_E3M2,
  // ggml block quantized (current table)
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
  Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K,
  IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M,
  TQ1_0, TQ2_0, MXFP4,
  // ggml types removed upstream but still found in old files (repacked Q4_0 / IQ4_NL)
  Q4_0_4_4, Q4_0_4_8, Q4_0_8_8, IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8,
  // ggml types added later (ggml ids 40, 41); appended so earlier enum values stay put
  NVFP4, Q1_0,
  // safetensors >= 0.8 (AMD fp8 variants: no Inf, one NaN, bias +1); appended for the same reason
  F8_E4M3FNUZ, F8_E5M2FNUZ,
  Count
};

enum class DTypeKind : uint8_t { Bool, UInt, Int, Float, Complex, Quantized };

struct DTypeInfo {
  DType type;
  std::string_view name;
  uint32_t block_elems;  // elements per block (1 for plain byte-aligned types)
  uint32_t block_bytes;  // bytes per block
  DTypeKind kind;
  int ggml_id;           // ggml_type value, -1 when ggml has no such type
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }

// Canonical name lookup (exact, case-sensitive), e.g. "BF16", "Q4_K".
std::optional<DType> dtype_from_name(std::string_view name);
// ggml_type id as stored in GGUF tensor infos.
std::optional<DType> dtype_from_ggml(uint32_t ggml_id);
// torch dtype name without the "torch." prefix ("bfloat16", "float", "half", ...).
std::optional<DType> dtype_from_torch(std::string_view name);
// user-facing names for --dtype options: "fp16", "bf16", "fp32", "f16", "float16", "int8", ...
std::optional<DType> dtype_from_user(std::string_view name);

// Exact bytes for `numel` elements; nullopt if numel is not a multiple of the
// block size or the product overflows.
[[nodiscard]] std::optional<uint64_t> dtype_nbytes(DType t, uint64_t numel);

inline bool dtype_is_float(DType t) {
  auto k = dtype_info(t).kind;
  return k == DTypeKind::Float;
}

}  // namespace nunchaku
