// GGUF (v2, v3) parsed in full: every metadata KV with its arrays kept whole
// (tokenizer.ggml.tokens as vector<string>, scores as vector<float>, ...) and
// the tensor infos in GGUF's own terms (ne order, ggml type id, relative
// offset). The tokenizer and engine read this; read_gguf (readers.hpp) builds
// the format-neutral Checkpoint on top of it with large arrays summarised.
//
// Parsing reads the header sequentially through a 64 KiB buffer, never tensor
// data. Every count and length is checked against the bytes left before any
// allocation, so memory stays within a small multiple of the file's header
// size; a hostile file fails with a gguf.* Error naming file, tensor and offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "format/dtype.hpp"
#include "core/source.hpp"

namespace nunchaku {

// gguf_type ids as stored in the file.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
// Spec spelling: "uint8", "int32", "float32", "bool", "string", "array", ...
std::string_view gguf_type_name(GgufType t);

// An array of strings in one buffer: the bytes back to back and one end offset per
// element, 8 bytes of overhead per string where a vector<string> takes 32 before any
// text. Vocabularies of hundreds of thousands of tokens, or hostile arrays of millions
// of empty strings, stay close to their size in the file.
class GgufStrings {
 public:
  using value_type = std::string_view;
  class iterator {
   public:
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const GgufStrings* s, size_t i) : s_(s), i_(i) {}
    std::string_view operator*() const { return (*s_)[i_]; }
    iterator& operator++() { return ++i_, *this; }
    iterator operator++(int) { auto t = *this; ++i_; return t; }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
   private:
    const GgufStrings* s_ = nullptr;
    size_t i_ = 0;
  };

  GgufStrings() = default;
  GgufStrings(std::initializer_list<std::string_view> items) {
    for (auto s : items) push_back(s);
  }
  void push_back(std::string_view s) { bytes_.append(s), ends_.push_back(bytes_.size()); }
  // Appends an element of n bytes and returns where to write them.
  char* append_uninitialized(size_t n) {
    bytes_.resize(bytes_.size() + n), ends_.push_back(bytes_.size());
    return bytes_.data() + bytes_.size() - n;
  }
  void reserve(size_t n) { ends_.reserve(n); }
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::string_view operator[](size_t i) const {
    const uint64_t b = i ? ends_[i - 1] : 0;
    return std::string_view(bytes_).substr(b, ends_[i] - b);
  }
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }
  std::vector<std::string> to_vector() const { return {begin(), end()}; }
  bool operator==(const GgufStrings&) const = default;

 private:
  std::string bytes_;
  std::vector<uint64_t> ends_;
};

struct GgufValue;
// One alternative per element type, in GgufType id order, so index() == element type id.
// Nested arrays (ARRAY of ARRAY) hold one GgufValue per inner array.
using GgufArray = std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                               std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
                               std::vector<float>, std::vector<bool>, GgufStrings,
                               std::vector<GgufValue>, std::vector<uint64_t>, std::vector<int64_t>,
                               std::vector<double>>;

struct GgufValue {
  // Alternatives in GgufType id order, so index() == type id.
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                            std::string, GgufArray, uint64_t, int64_t, double>;
  Data data;

  GgufType type() const { return static_cast<GgufType>(data.index()); }
  bool is_array() const { return type() == GgufType::ARRAY; }
  // Element type of an array (nullopt for scalars).
  std::optional<GgufType> elem_type() const;
  // Elements of an array, 0 for scalars.
  uint64_t array_size() const;

  // Lenient scalar accessors: any integer type whose value fits (as_uint
  // rejects negatives), any numeric type for as_double. nullopt otherwise.
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  std::optional<double> as_double() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;  // nullptr unless a STRING scalar
  // The array's elements when its element type is exactly T's, else nullptr.
  // e.g. v.strings() for tokens, v.array<float>() for scores.
  template <class T>
  const std::vector<T>* array() const {
    const auto* a = std::get_if<GgufArray>(&data);
    return a ? std::get_if<std::vector<T>>(a) : nullptr;
  }
  const GgufStrings* strings() const {
    const auto* a = std::get_if<GgufArray>(&data);
    return a ? std::get_if<GgufStrings>(a) : nullptr;
  }
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;   // GGUF/ggml order: ne[0] is the contiguous (innermost) dim
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  uint64_t rel_offset = 0;    // as stored: relative to GgufFile::data_offset
  uint64_t offset = 0;        // absolute byte offset in the file
  uint64_t nbytes = 0;        // exact, block quantization included
  uint64_t info_offset = 0;   // where this tensor's info starts in the header (for messages)
};

struct GgufFile {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version = 0;
  uint64_t alignment = 32;    // general.alignment or the default 32
  uint64_t data_offset = 0;   // aligned end of the header: where tensor data starts
  std::vector<std::pair<std::string, GgufValue>> kvs;  // file order, keys unique
  std::vector<GgufTensor> tensors;                      // header order, names unique

  const GgufValue* find(std::string_view key) const;   // linear scan; nullptr if absent
  const GgufTensor* find_tensor(std::string_view name) const;
};

// Throws nunchaku::Error (gguf.bad_magic, gguf.unsupported_version, gguf.big_endian,
// gguf.truncated, gguf.too_many_kvs, gguf.too_many_tensors, gguf.string_too_long,
// gguf.array_too_long, gguf.bad_value_type, gguf.nesting_too_deep, gguf.bad_alignment,
// gguf.too_many_dims, gguf.unknown_type, gguf.bad_shape, gguf.misaligned_offset,
// gguf.tensor_out_of_file, gguf.tensor_overlap, gguf.duplicate_tensor, gguf.duplicate_key).
[[nodiscard]] GgufFile read_gguf_file(const Source& src);

}  // namespace nunchaku
