// GGUF reader. Layout (v2/v3, little-endian; ggml/docs/gguf.md):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv × {string key, u32 type, value},
//   n_tensors × {string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset},
//   padding to general.alignment, tensor data (offsets relative to here).
// string = u64 length + bytes; array = u32 elem type + u64 count + elements.
#include "format/gguf.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "format/readers.hpp"
#include "core/units.hpp"

namespace nunchaku {

static_assert(std::endian::native == std::endian::little,
              "GGUF fields are read by memcpy; a big-endian host would need byte swaps here");

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view kNames[] = {"uint8", "int8",  "uint16", "int16",  "uint32",
                                                "int32", "float32", "bool", "string", "array",
                                                "uint64", "int64", "float64"};
  auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : std::string_view("unknown");
}

// ---- GgufValue accessors ----------------------------------------------------

std::optional<GgufType> GgufValue::elem_type() const {
  if (const auto* a = std::get_if<GgufArray>(&data)) return static_cast<GgufType>(a->index());
  return std::nullopt;
}

uint64_t GgufValue::array_size() const {
  if (const auto* a = std::get_if<GgufArray>(&data))
    return std::visit([](const auto& v) -> uint64_t { return v.size(); }, *a);
  return 0;
}

std::optional<int64_t> GgufValue::as_int() const {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return static_cast<int64_t>(v);
        }
        return std::nullopt;
      },
      data);
}

std::optional<uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  auto i = as_int();
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

std::optional<double> GgufValue::as_double() const {
  if (const auto* f = std::get_if<float>(&data)) return *f;
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (auto i = as_int()) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&data); }

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : kvs)
    if (k == key) return &v;
  return nullptr;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS; llama.cpp rejects more
constexpr int kMaxNesting = 16;         // arrays of arrays; gguf-py writes at most 2 levels
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;          // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset
constexpr size_t kChunk = 64 * 1024;
// Counts are checked against the bytes left, but an in-memory element can be
// several times its smallest encoding (a std::string per 8-byte empty string),
// so reservations are capped and vectors grow only as elements really parse.
constexpr uint64_t kReserveCap = 1 << 16;

size_t capped(uint64_t n) { return static_cast<size_t>(std::min(n, kReserveCap)); }

// Metadata memory is bounded by the header bytes it came from: an 8-byte empty string
// costs a 32-byte std::string, so a header of millions of them could take several
// times the file's size. String arrays are stored compactly (GgufStrings: 8 bytes per
// element on top of the text, the same as the length prefix in the file), and
// kMetadataSlack + 2 bytes per header byte read is far above real files.
constexpr uint64_t kMetadataSlack = 64ull << 20;

// Sequential reads over a Source through one buffer: the header is parsed in
// kChunk reads, never one syscall per field, never the whole file.
class Cursor {
 public:
  explicit Cursor(const Source& src) : src_(src), size_(src.size()) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& path() const { return src_.path(); }

  [[noreturn]] void fail(const std::string& code, const std::string& msg, uint64_t offset,
                         const std::string& tensor = "", const std::string& hint = "") const {
    throw Error(code, msg, {.file = path(), .tensor = tensor, .offset = offset, .hint = hint});
  }

  void read(void* out, uint64_t n, std::string_view what, const std::string& tensor = "") {
    if (n > left())
      fail("gguf.truncated",
           "file ends inside " + std::string(what) + " (needs " + std::to_string(n) + " bytes, " +
               std::to_string(left()) + " left)",
           pos_, tensor, "the file is truncated; re-download or re-convert it");
    auto* dst = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (pos_ >= buf_start_ && pos_ < buf_start_ + buf_.size()) {
        size_t at = static_cast<size_t>(pos_ - buf_start_);
        size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf_.size() - at));
        std::memcpy(dst, buf_.data() + at, k);
        dst += k, pos_ += k, n -= k;
      } else if (n >= kChunk) {  // large string/array payloads go straight to their destination
        src_.read_at(pos_, dst, static_cast<size_t>(n));
        pos_ += n, n = 0;
      } else {
        buf_.resize(static_cast<size_t>(std::min<uint64_t>(kChunk, left())));
        src_.read_at(pos_, buf_.data(), buf_.size());
        buf_start_ = pos_;
      }
    }
  }

  template <class T>
  T get(std::string_view what, const std::string& tensor = "") {
    T v;
    read(&v, sizeof v, what, tensor);
    return v;
  }

  // Counts `bytes` of memory against the metadata budget (see kMetadataSlack).
  void charge(uint64_t bytes) {
    used_ += bytes;
    if (used_ > kMetadataSlack + 2 * pos_)
      fail("gguf.metadata_too_large",
           "metadata would take more than " + std::to_string(used_ >> 20) + " MiB of memory for " +
               std::to_string(pos_ >> 20) + " MiB of header",
           pos_, "", "the file's metadata arrays are hostile or corrupt");
  }

  std::string string(std::string_view what, const std::string& tensor = "") {
    uint64_t at = pos_;
    auto len = get<uint64_t>(what, tensor);
    if (len > left())
      fail("gguf.string_too_long",
           std::string(what) + " claims " + std::to_string(len) + " bytes but only " +
               std::to_string(left()) + " remain in the file",
           at, tensor);
    std::string s(static_cast<size_t>(len), '\0');
    read(s.data(), len, what, tensor);
    return s;
  }

 private:
  const Source& src_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
  uint64_t buf_start_ = 0;
  uint64_t used_ = 0;  // metadata bytes in memory, as charged
};

GgufType read_type(Cursor& c, std::string_view what) {
  uint64_t at = c.pos();
  auto t = c.get<uint32_t>(what);
  if (t > static_cast<uint32_t>(GgufType::F64))
    c.fail("gguf.bad_value_type", std::string(what) + " " + std::to_string(t) + " is not a GGUF value type (0..12)",
           at, "", "the file is corrupt or from a newer GGUF revision");
  return static_cast<GgufType>(t);
}

uint64_t min_elem_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: return 8;   // the length prefix
    case GgufType::ARRAY: return 12;   // elem type + count
  }
  return 1;
}

GgufValue read_value(Cursor& c, GgufType t, int depth);

template <size_t I>
GgufArray read_fixed_array(Cursor& c, uint64_t n) {
  using Vec = std::variant_alternative_t<I, GgufArray>;
  Vec v(static_cast<size_t>(n));
  c.read(v.data(), n * sizeof(typename Vec::value_type), "an array");
  return GgufArray(std::in_place_index<I>, std::move(v));
}

GgufArray read_array(Cursor& c, int depth) {
  if (depth >= kMaxNesting)
    c.fail("gguf.nesting_too_deep", "arrays nested more than " + std::to_string(kMaxNesting) + " levels", c.pos());
  GgufType et = read_type(c, "array element type");
  uint64_t at = c.pos();
  auto n = c.get<uint64_t>("array length");
  // Checked before allocating: each element takes at least min_elem_bytes in the file.
  if (n > c.left() / min_elem_bytes(et))
    c.fail("gguf.array_too_long",
           "array of " + std::string(gguf_type_name(et)) + " claims " + std::to_string(n) +
               " elements but only " + std::to_string(c.left()) + " bytes remain",
           at);
  switch (et) {
    case GgufType::U8: return read_fixed_array<0>(c, n);
    case GgufType::I8: return read_fixed_array<1>(c, n);
    case GgufType::U16: return read_fixed_array<2>(c, n);
    case GgufType::I16: return read_fixed_array<3>(c, n);
    case GgufType::U32: return read_fixed_array<4>(c, n);
    case GgufType::I32: return read_fixed_array<5>(c, n);
    case GgufType::F32: return read_fixed_array<6>(c, n);
    case GgufType::U64: return read_fixed_array<10>(c, n);
    case GgufType::I64: return read_fixed_array<11>(c, n);
    case GgufType::F64: return read_fixed_array<12>(c, n);
    case GgufType::BOOL: {
      std::vector<bool> v(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) v[i] = c.get<uint8_t>("a bool") != 0;
      return GgufArray(std::in_place_index<7>, std::move(v));
    }
    case GgufType::STRING: {
      GgufStrings v;
      v.reserve(capped(n));
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t at = c.pos();
        const auto len = c.get<uint64_t>("an array string");
        if (len > c.left())
          c.fail("gguf.string_too_long",
                 "an array string claims " + std::to_string(len) + " bytes but only " + std::to_string(c.left()) +
                     " remain in the file",
                 at);
        c.charge(sizeof(uint64_t) + len);
        c.read(v.append_uninitialized(static_cast<size_t>(len)), len, "an array string");
      }
      return GgufArray(std::in_place_index<8>, std::move(v));
    }
    case GgufType::ARRAY: {
      std::vector<GgufValue> v;
      v.reserve(capped(n));
      for (uint64_t i = 0; i < n; ++i) {
        c.charge(sizeof(GgufValue));
        v.push_back(GgufValue{GgufValue::Data(std::in_place_index<9>, read_array(c, depth + 1))});
      }
      return GgufArray(std::in_place_index<9>, std::move(v));
    }
  }
  return {};
}

GgufValue read_value(Cursor& c, GgufType t, int depth) {
  using D = GgufValue::Data;
  switch (t) {
    case GgufType::U8: return {D(std::in_place_index<0>, c.get<uint8_t>("a uint8"))};
    case GgufType::I8: return {D(std::in_place_index<1>, c.get<int8_t>("an int8"))};
    case GgufType::U16: return {D(std::in_place_index<2>, c.get<uint16_t>("a uint16"))};
    case GgufType::I16: return {D(std::in_place_index<3>, c.get<int16_t>("an int16"))};
    case GgufType::U32: return {D(std::in_place_index<4>, c.get<uint32_t>("a uint32"))};
    case GgufType::I32: return {D(std::in_place_index<5>, c.get<int32_t>("an int32"))};
    case GgufType::F32: return {D(std::in_place_index<6>, c.get<float>("a float32"))};
    case GgufType::BOOL: return {D(std::in_place_index<7>, c.get<uint8_t>("a bool") != 0)};
    case GgufType::STRING: return {D(std::in_place_index<8>, c.string("a string value"))};
    case GgufType::ARRAY: return {D(std::in_place_index<9>, read_array(c, depth))};
    case GgufType::U64: return {D(std::in_place_index<10>, c.get<uint64_t>("a uint64"))};
    case GgufType::I64: return {D(std::in_place_index<11>, c.get<int64_t>("an int64"))};
    case GgufType::F64: return {D(std::in_place_index<12>, c.get<double>("a float64"))};
  }
  return {};
}

void read_magic_and_version(Cursor& c, GgufFile& f) {
  char magic[4] = {};
  if (c.left() < 4 || (c.read(magic, 4, "the magic"), std::memcmp(magic, "GGUF", 4) != 0)) {
    std::string m(magic, 4);
    std::string hint = "not a GGUF file";
    // Pre-GGUF llama.cpp formats wrote their u32 magic little-endian.
    if (m == "lmgg" || m == "fmgg" || m == "tjgg")
      hint = "this is a legacy GGML/GGMF/GGJT file; re-convert it with a current llama.cpp convert script";
    c.fail("gguf.bad_magic", "the file does not start with \"GGUF\"", 0, "", hint);
  }
  f.version = c.get<uint32_t>("the version");
  if (f.version == 2 || f.version == 3) return;
  if (f.version == 1)
    c.fail("gguf.unsupported_version", "GGUF v1 is not supported (32-bit counts and lengths)", 4, "",
           "re-convert the model with a current llama.cpp convert script to get GGUF v3");
  uint32_t swapped = __builtin_bswap32(f.version);
  if (swapped >= 1 && swapped <= 3)
    c.fail("gguf.big_endian", "big-endian GGUF v" + std::to_string(swapped) + " is not supported", 4, "",
           "convert it to little-endian (gguf-py: gguf_convert_endian.py FILE little)");
  c.fail("gguf.unsupported_version", "GGUF version " + std::to_string(f.version) + " is not supported (2 or 3)", 4);
}

void read_kvs(Cursor& c, GgufFile& f, uint64_t n_kv) {
  std::unordered_set<std::string> seen;
  std::optional<uint64_t> align_at;
  f.kvs.reserve(capped(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t key_at = c.pos();
    std::string key = c.string("a metadata key");
    if (!seen.insert(key).second)
      c.fail("gguf.duplicate_key", "metadata key '" + key + "' appears twice", key_at);
    GgufType t = read_type(c, "value type of '" + key + "'");
    if (key == "general.alignment") align_at = c.pos();
    f.kvs.emplace_back(std::move(key), read_value(c, t, 0));
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    const auto* v = std::get_if<uint32_t>(&a->data);
    if (!v)
      c.fail("gguf.bad_alignment", "general.alignment must be a uint32, found " + std::string(gguf_type_name(a->type())),
             *align_at);
    if (*v == 0 || !std::has_single_bit(*v))
      c.fail("gguf.bad_alignment", "general.alignment " + std::to_string(*v) + " is not a nonzero power of two",
             *align_at);
    f.alignment = *v;
  }
}

void read_tensor_infos(Cursor& c, GgufFile& f, uint64_t n_tensors, std::vector<uint64_t>& offset_field_at) {
  std::unordered_set<std::string> seen;
  f.tensors.reserve(capped(n_tensors));
  offset_field_at.reserve(capped(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.info_offset = c.pos();
    t.name = c.string("a tensor name");
    if (!seen.insert(t.name).second)
      c.fail("gguf.duplicate_tensor", "tensor name appears twice", t.info_offset, t.name);
    uint64_t dims_at = c.pos();
    auto n_dims = c.get<uint32_t>("n_dims", t.name);
    if (n_dims > kMaxDims)
      c.fail("gguf.too_many_dims", std::to_string(n_dims) + " dimensions (ggml allows at most 4)", dims_at, t.name);
    t.ne.resize(n_dims);
    for (auto& d : t.ne) {
      uint64_t at = c.pos();
      d = c.get<uint64_t>("a dimension", t.name);
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.fail("gguf.bad_shape", "dimension " + std::to_string(d) + " does not fit int64", at, t.name);
    }
    uint64_t type_at = c.pos();
    t.ggml_type = c.get<uint32_t>("the tensor type", t.name);
    auto dt = dtype_from_ggml(t.ggml_type);
    if (!dt)
      c.fail("gguf.unknown_type", "unknown ggml type id " + std::to_string(t.ggml_type), type_at, t.name,
             "the file may need a newer ggml type table");
    t.dtype = *dt;
    const auto& info = dtype_info(t.dtype);
    std::vector<int64_t> shape(t.ne.begin(), t.ne.end());
    auto numel = checked_numel(shape);
    uint64_t row = t.ne.empty() ? 1 : t.ne[0];
    if (!numel)
      c.fail("gguf.bad_shape", "element count overflows", dims_at, t.name);
    if (row % info.block_elems != 0)
      c.fail("gguf.bad_shape",
             "ne[0]=" + std::to_string(row) + " is not a multiple of the " + std::string(info.name) +
                 " block size " + std::to_string(info.block_elems),
             dims_at, t.name);
    auto nbytes = dtype_nbytes(t.dtype, *numel);
    if (!nbytes) c.fail("gguf.bad_shape", "byte size overflows", dims_at, t.name);
    t.nbytes = *nbytes;
    offset_field_at.push_back(c.pos());
    t.rel_offset = c.get<uint64_t>("the tensor offset", t.name);
    f.tensors.push_back(std::move(t));
  }
}

// Offsets aligned, data inside the file, no two tensors sharing bytes.
void place_tensors(Cursor& c, GgufFile& f, const std::vector<uint64_t>& offset_field_at) {
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    auto& t = f.tensors[i];
    if (t.rel_offset % f.alignment != 0)
      c.fail("gguf.misaligned_offset",
             "data offset " + std::to_string(t.rel_offset) + " is not a multiple of the alignment " +
                 std::to_string(f.alignment),
             offset_field_at[i], t.name);
    auto abs = checked_add(f.data_offset, t.rel_offset);
    auto end = abs ? checked_add(*abs, t.nbytes) : std::nullopt;
    if (!end || *end > f.file_size)
      c.fail("gguf.tensor_out_of_file",
             "data [" + (abs ? std::to_string(*abs) : std::string("overflow")) + ", +" + std::to_string(t.nbytes) +
                 ") extends past the end of the file (" + std::to_string(f.file_size) + " bytes)",
             offset_field_at[i], t.name, "the file is truncated or its tensor infos are corrupt");
    t.offset = *abs;
  }
  std::vector<size_t> order(f.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return f.tensors[a].offset < f.tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = f.tensors[order[k - 1]];
    const auto& cur = f.tensors[order[k]];
    if (cur.offset < prev.offset + prev.nbytes)
      c.fail("gguf.tensor_overlap", "data overlaps tensor '" + prev.name + "'", offset_field_at[order[k]], cur.name);
  }
}

// ---- metadata as JSON -------------------------------------------------------

constexpr size_t kInlineArrayMax = 1024;

// Keys and strings may hold any bytes; JSON output needs UTF-8, so invalid
// sequences become U+FFFD (the GgufFile keeps the exact bytes).

// A float32 as the shortest decimal that round-trips (1e-05, not 9.99999974737875e-06).
double float_for_json(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

nlohmann::json value_to_json(const GgufValue& v);

nlohmann::json array_to_json(const GgufArray& a) {
  return std::visit(
      [&](const auto& vec) -> nlohmann::json {
        using E = typename std::decay_t<decltype(vec)>::value_type;
        if (vec.size() > kInlineArrayMax)
          return {{"array", std::string(gguf_type_name(static_cast<GgufType>(a.index())))}, {"length", vec.size()}};
        auto out = nlohmann::json::array();
        for (const auto& e : vec) {
          if constexpr (std::is_same_v<E, GgufValue>) out.push_back(value_to_json(e));
          else if constexpr (std::is_same_v<E, std::string_view>) out.push_back(utf8_replace_invalid(e));
          else if constexpr (std::is_same_v<E, float>) out.push_back(float_for_json(e));
          else if constexpr (std::is_same_v<E, bool>) out.push_back(static_cast<bool>(e));
          else out.push_back(e);
        }
        return out;
      },
      a);
}

nlohmann::json value_to_json(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufArray>) return array_to_json(x);
        else if constexpr (std::is_same_v<T, std::string>) return utf8_replace_invalid(x);
        else if constexpr (std::is_same_v<T, float>) return float_for_json(x);
        else return x;
      },
      v.data);
}

}  // namespace

GgufFile read_gguf_file(const Source& src) {
  Cursor c(src);
  GgufFile f;
  f.path = src.path();
  f.file_size = src.size();
  read_magic_and_version(c, f);
  auto n_tensors = c.get<uint64_t>("the tensor count");
  uint64_t kv_count_at = c.pos();
  auto n_kv = c.get<uint64_t>("the metadata count");
  if (n_tensors > c.left() / kMinTensorInfoBytes)
    c.fail("gguf.too_many_tensors",
           plural(n_tensors, "tensor") + " cannot fit in the " + std::to_string(c.left()) + " bytes left",
           kv_count_at - 8);
  if (n_kv > (c.left() - n_tensors * kMinTensorInfoBytes) / kMinKvBytes)
    c.fail("gguf.too_many_kvs",
           plural(n_kv, "metadata entry", "metadata entries") + " cannot fit in the " + std::to_string(c.left()) + " bytes left",
           kv_count_at);
  read_kvs(c, f, n_kv);
  std::vector<uint64_t> offset_field_at;
  read_tensor_infos(c, f, n_tensors, offset_field_at);
  // The data section starts at the header's end rounded up to the alignment
  // (cannot overflow: pos <= file size and alignment <= 2^31).
  f.data_offset = (c.pos() + f.alignment - 1) / f.alignment * f.alignment;
  place_tensors(c, f, offset_field_at);
  return f;
}

Checkpoint read_gguf(const Source& src) {
  GgufFile g = read_gguf_file(src);
  Checkpoint ck;
  ck.format = Format::GGUF;
  ck.path = src.path();
  ck.files.push_back({src.path(), src.size()});
  auto& md = ck.metadata;
  for (const auto& [k, v] : g.kvs) md[utf8_replace_invalid(k)] = value_to_json(v);
  md["gguf.version"] = g.version;
  md["gguf.alignment"] = g.alignment;
  md["gguf.tensor_data_offset"] = g.data_offset;
  ck.tensors.reserve(g.tensors.size());
  for (auto& t : g.tensors) {
    TensorInfo ti;
    ti.name = std::move(t.name);
    ti.dtype = t.dtype;
    ti.shape.assign(t.ne.rbegin(), t.ne.rend());  // PyTorch order: outermost first
    ti.offset = t.offset;
    ti.nbytes = t.nbytes;
    ck.tensors.push_back(std::move(ti));
  }
  std::stable_sort(ck.tensors.begin(), ck.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) { return a.offset < b.offset; });
  return ck;
}

}  // namespace nunchaku
