#include "format/dtype.hpp"

#include <array>
#include <cctype>
#include <string>

#include "core/checked.hpp"

namespace nunchaku {
namespace {

using K = DTypeKind;
// Block sizes of the ggml types: ggml/src/ggml.c type_traits (blck_size, type_size),
// checked against gguf-py 0.19 GGML_QUANT_SIZES. gguf-py still says Q8_1 is 40 bytes
// (two f32); ggml's block_q8_1 has been two f16 + 32 quants = 36 bytes for years.
constexpr std::array<DTypeInfo, static_cast<size_t>(DType::Count)> kTable{{
    {DType::BOOL, "BOOL", 1, 1, K::Bool, -1},
    {DType::U8, "U8", 1, 1, K::UInt, -1},
    {DType::I8, "I8", 1, 1, K::Int, 24},
    {DType::U16, "U16", 1, 2, K::UInt, -1},
    {DType::I16, "I16", 1, 2, K::Int, 25},
    {DType::U32, "U32", 1, 4, K::UInt, -1},
    {DType::I32, "I32", 1, 4, K::Int, 26},
    {DType::U64, "U64", 1, 8, K::UInt, -1},
    {DType::I64, "I64", 1, 8, K::Int, 27},
    {DType::F16, "F16", 1, 2, K::Float, 1},
    {DType::BF16, "BF16", 1, 2, K::Float, 30},
    {DType::F32, "F32", 1, 4, K::Float, 0},
    {DType::F64, "F64", 1, 8, K::Float, 28},
    {DType::C64, "C64", 1, 8, K::Complex, -1},
    {DType::C128, "C128", 1, 16, K::Complex, -1},
    {DType::F8_E4M3, "F8_E4M3", 1, 1, K::Float, -1},
    {DType::F8_E5M2, "F8_E5M2", 1, 1, K::Float, -1},
    {DType::F8_E8M0, "F8_E8M0", 1, 1, K::Float, -1},
    {DType::F4, "F4", 2, 1, K::Float, -1},
    {DType::F6_E2M3, "F6_E2M3", 4, 3, K::Float, -1},
    {DType::F6_E3M2, "F6_E3M2", 4, 3, K::Float, -1},
    {DType::Q4_0, "Q4_0", 32, 18, K::Quantized, 2},
    {DType::Q4_1, "Q4_1", 32, 20, K::Quantized, 3},
    {DType::Q5_0, "Q5_0", 32, 22, K::Quantized, 6},
    {DType::Q5_1, "Q5_1", 32, 24, K::Quantized, 7},
    {DType::Q8_0, "Q8_0", 32, 34, K::Quantized, 8},
    {DType::Q8_1, "Q8_1", 32, 36, K::Quantized, 9},
    {DType::Q2_K, "Q2_K", 256, 84, K::Quantized, 10},
    {DType::Q3_K, "Q3_K", 256, 110, K::Quantized, 11},
    {DType::Q4_K, "Q4_K", 256, 144, K::Quantized, 12},
    {DType::Q5_K, "Q5_K", 256, 176, K::Quantized, 13},
    {DType::Q6_K, "Q6_K", 256, 210, K::Quantized, 14},
    {DType::Q8_K, "Q8_K", 256, 292, K::Quantized, 15},
    {DType::IQ2_XXS, "IQ2_XXS", 256, 66, K::Quantized, 16},
    {DType::IQ2_XS, "IQ2_XS", 256, 74, K::Quantized, 17},
    {DType::IQ3_XXS, "IQ3_XXS", 256, 98, K::Quantized, 18},
    {DType::IQ1_S, "IQ1_S", 256, 50, K::Quantized, 19},
    {DType::IQ4_NL, "IQ4_NL", 32, 18, K::Quantized, 20},
    {DType::IQ3_S, "IQ3_S", 256, 110, K::Quantized, 21},
    {DType::IQ2_S, "IQ2_S", 256, 82, K::Quantized, 22},
    {DType::IQ4_XS, "IQ4_XS", 256, 136, K::Quantized, 23},
    {DType::IQ1_M, "IQ1_M", 256, 56, K::Quantized, 29},
    {DType::TQ1_0, "TQ1_0", 256, 54, K::Quantized, 34},
    {DType::TQ2_0, "TQ2_0", 256, 66, K::Quantized, 35},
    {DType::MXFP4, "MXFP4", 32, 17, K::Quantized, 39},
    {DType::Q4_0_4_4, "Q4_0_4_4", 32, 18, K::Quantized, 31},
    {DType::Q4_0_4_8, "Q4_0_4_8", 32, 18, K::Quantized, 32},
    {DType::Q4_0_8_8, "Q4_0_8_8", 32, 18, K::Quantized, 33},
    {DType::IQ4_NL_4_4, "IQ4_NL_4_4", 32, 18, K::Quantized, 36},
    {DType::IQ4_NL_4_8, "IQ4_NL_4_8", 32, 18, K::Quantized, 37},
    {DType::IQ4_NL_8_8, "IQ4_NL_8_8", 32, 18, K::Quantized, 38},
    // block_nvfp4: 4 UE4M3 sub-block scales + 32 bytes of E2M1 pairs per 64 elements
    {DType::NVFP4, "NVFP4", 64, 36, K::Quantized, 40},
    // block_q1_0: f16 scale + 1 bit per element, 128 elements
    {DType::Q1_0, "Q1_0", 128, 18, K::Quantized, 41},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 1, 1, K::Float, -1},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 1, 1, K::Float, -1},
}};

constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].type) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kTable must follow the DType enum order");

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kTable.at(static_cast<size_t>(t)); }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kTable)
    if (i.name == name) return i.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml(uint32_t id) {
  for (const auto& i : kTable)
    if (i.ggml_id >= 0 && static_cast<uint32_t>(i.ggml_id) == id) return i.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_torch(std::string_view n) {
  if (n == "float32" || n == "float") return DType::F32;
  if (n == "float64" || n == "double") return DType::F64;
  if (n == "float16" || n == "half") return DType::F16;
  if (n == "bfloat16") return DType::BF16;
  if (n == "int64" || n == "long") return DType::I64;
  if (n == "int32" || n == "int") return DType::I32;
  if (n == "int16" || n == "short") return DType::I16;
  if (n == "int8") return DType::I8;
  if (n == "uint8") return DType::U8;
  if (n == "uint16") return DType::U16;
  if (n == "uint32") return DType::U32;
  if (n == "uint64") return DType::U64;
  if (n == "bool") return DType::BOOL;
  if (n == "complex64" || n == "cfloat") return DType::C64;
  if (n == "complex128" || n == "cdouble") return DType::C128;
  if (n == "float8_e4m3fn") return DType::F8_E4M3;
  if (n == "float8_e5m2") return DType::F8_E5M2;
  if (n == "float8_e8m0fnu") return DType::F8_E8M0;
  if (n == "float8_e4m3fnuz") return DType::F8_E4M3FNUZ;
  if (n == "float8_e5m2fnuz") return DType::F8_E5M2FNUZ;
  return std::nullopt;
}

std::optional<DType> dtype_from_user(std::string_view name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "fp16" || n == "f16") return DType::F16;
  if (n == "bf16") return DType::BF16;
  if (n == "fp32" || n == "f32") return DType::F32;
  if (n == "fp64" || n == "f64") return DType::F64;
  if (n == "fp8" || n == "f8" || n == "fp8_e4m3" || n == "f8_e4m3") return DType::F8_E4M3;
  if (n == "fp8_e5m2" || n == "f8_e5m2") return DType::F8_E5M2;
  if (n == "int8" || n == "i8") return DType::I8;
  if (auto t = dtype_from_torch(n)) return t;
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return dtype_from_name(upper);
}

std::optional<uint64_t> dtype_nbytes(DType t, uint64_t numel) {
  const auto& i = dtype_info(t);
  if (numel % i.block_elems != 0) return std::nullopt;
  return checked_mul(numel / i.block_elems, i.block_bytes);
}

}  // namespace nunchaku
