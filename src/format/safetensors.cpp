// safetensors: 8-byte little-endian header length N, N bytes of UTF-8 JSON,
// then the data region. Validation follows huggingface/safetensors
// (SafeTensors::read_metadata + Metadata::validate) and is stricter where
// upstream is silent (duplicate names, nesting depth, metadata types). Every
// broken rule has its own error code; see the table in tests/test_safetensors.cpp.
// Only the header is read; tensor data is never touched.
#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <unordered_set>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "format/json_members.hpp"
#include "format/readers.hpp"
#include "format/safetensors_json.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace {

// Upstream MAX_HEADER_SIZE (safetensors/src/tensor.rs): 100_000_000 bytes.
constexpr uint64_t kMaxHeader = 100'000'000;
// Headers are flat (object → entry → array); anything deeper is hostile. The
// limit keeps the JSON DOM (and its destructor) shallow.
constexpr int kMaxDepth = 32;

using json = nlohmann::json;

// The dtypes of the safetensors spec (huggingface/safetensors Dtype, v0.8).
// An explicit list: our DType table also holds C128 and the ggml block types,
// which safetensors does not have.
constexpr DType kSafetensorsDTypes[] = {
    DType::BOOL,    DType::F4,      DType::F6_E2M3, DType::F6_E3M2,     DType::U8,          DType::I8,
    DType::F8_E5M2, DType::F8_E4M3, DType::F8_E8M0, DType::F8_E4M3FNUZ, DType::F8_E5M2FNUZ, DType::I16,
    DType::U16,     DType::F16,     DType::BF16,    DType::I32,         DType::U32,         DType::F32,
    DType::C64,     DType::F64,     DType::I64,     DType::U64,
};

std::optional<DType> safetensors_dtype(std::string_view name) {
  auto d = dtype_from_name(name);
  if (d && std::find(std::begin(kSafetensorsDTypes), std::end(kSafetensorsDTypes), *d) != std::end(kSafetensorsDTypes))
    return d;
  return std::nullopt;
}

std::string safetensors_dtype_list() {
  std::string s;
  for (DType d : kSafetensorsDTypes) s += (s.empty() ? "" : " ") + std::string(dtype_name(d));
  return s;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // data_offsets, relative to the data region
  uint64_t nbytes;
};

class Reader {
 public:
  Reader(const Source& src, bool one_pass) : src_(src), one_pass_(one_pass) {}

  Checkpoint run() {
    const uint64_t size = src_.size();
    if (size < 8)
      fail("safetensors.too_small", "file has " + plural(size, "byte") + ", fewer than the 8-byte header length",
           {}, 0);
    uint8_t lenbuf[8];
    src_.read_at(0, lenbuf, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | lenbuf[i];
    if (n > kMaxHeader)
      fail("safetensors.header_too_large",
           "header length " + std::to_string(n) + " exceeds the " + std::to_string(kMaxHeader) + "-byte limit", {}, 0,
           "not a safetensors file, or a corrupt one");
    if (n > size - 8)
      fail("safetensors.header_out_of_file",
           "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size - 8) +
               " bytes after the length field)",
           {}, 0, "the file is truncated");
    header_len_ = n;
    data_start_ = 8 + n;
    data_len_ = size - data_start_;

    const std::vector<uint8_t> text = src_.read_vec(8, static_cast<size_t>(n));
    text_ = std::string_view(reinterpret_cast<const char*>(text.data()), text.size());
    Checkpoint ck;
    ck.format = Format::Safetensors;
    ck.path = src_.path();
    ck.files.push_back({src_.path(), size});
    std::vector<Entry> entries;
    if (!one_pass_ || !plain_header(ck, entries)) checked_header(ck, entries);
    check_layout(entries);

    ck.tensors.reserve(entries.size());
    for (auto& e : entries) {
      TensorInfo t;
      t.name = std::move(e.name);
      t.dtype = e.dtype;
      t.shape = std::move(e.shape);
      t.file = 0;
      t.offset = data_start_ + e.begin;  // cannot overflow: begin <= data_len_ was checked
      t.nbytes = e.nbytes;
      ck.tensors.push_back(std::move(t));
    }
    return ck;
  }

 private:
  // The usual header, read in one pass (detail::scan_plain_header says why its checks hold).
  // False, with `ck` and `entries` untouched, for anything the checked path must look at:
  // it finds any error again, in its own order.
  bool plain_header(Checkpoint& ck, std::vector<Entry>& entries) const {
    detail::PlainHeader h;
    if (!detail::scan_plain_header(text_, h)) return false;
    std::unordered_set<std::string_view> seen;
    seen.reserve(h.entries.size());
    for (const auto& e : h.entries)
      if (!seen.insert(e.name).second) return false;
    try {
      std::vector<Entry> out;
      out.reserve(h.entries.size());
      const std::span<const uint64_t> dims(h.dims);
      for (const auto& e : h.entries)
        out.push_back(finish(e.name, e.dtype, dims.subspan(e.shape_at, e.shape_size), e.begin, e.end, 8 + e.name_at));
      if (h.metadata_at != std::string_view::npos) ck.metadata = metadata(parse_text(h.metadata, 0), h.metadata_at);
      entries = std::move(out);
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  // Any header: UTF-8, depth and NUL checked over the whole text, members split, each
  // entry read directly when plain, else by the JSON parser.
  void checked_header(Checkpoint& ck, std::vector<Entry>& entries) const {
    const std::string_view text = text_;
    if (size_t bad = first_invalid_utf8(text); bad != std::string::npos)
      fail("safetensors.header_not_utf8", "header is not valid UTF-8", {}, 8 + bad);
    const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
    if (size_t deep = detail::too_deep_at(bytes, text.size(), kMaxDepth); deep != std::string::npos)
      fail("safetensors.header_too_deep", "header JSON nests deeper than " + std::to_string(kMaxDepth) + " levels",
           {}, 8 + deep);

    // JSON never holds a raw NUL (not even in strings), but nlohmann's lexer
    // takes one as end of input and would ignore whatever follows it.
    if (size_t nul = text.find('\0'); nul != std::string_view::npos)
      fail("safetensors.header_not_json", "header is not valid JSON (NUL byte)", {}, 8 + nul,
           "headers are padded with spaces, not NUL bytes");
    std::vector<detail::JsonMember> members = split(text);

    entries.reserve(members.size());
    detail::PlainEntry plain;
    for (const auto& m : members) {
      // The usual entry is read directly; anything else goes through the JSON parser.
      if (m.key != "__metadata__" &&
          detail::parse_plain_entry(text.substr(m.value_at, m.value_end - m.value_at), plain)) {
        entries.push_back(finish(m.key, plain.dtype, plain.shape, plain.begin, plain.end, 8 + m.key_at));
        continue;
      }
      json value = parse_value(m);
      if (m.key == "__metadata__") {
        ck.metadata = metadata(value, m.key_at);
        continue;
      }
      entries.push_back(entry(m.key, value, 8 + m.key_at));
    }
  }

  [[noreturn]] void fail(const std::string& code, const std::string& msg, std::string_view tensor,
                         std::optional<uint64_t> offset, std::string hint = {}) const {
    throw Error(code, msg, {.file = src_.path(), .tensor = std::string(tensor), .offset = offset, .hint = std::move(hint)});
  }

  // Absolute offset of a data-region offset, if representable.
  std::optional<uint64_t> abs(uint64_t rel) const { return checked_add(data_start_, rel); }
  // Where to point a message about an entry: its data when that offset is representable,
  // else the entry's name in the header (`at`), so every error has a byte offset.
  uint64_t data_or(uint64_t rel, uint64_t at) const { return abs(rel).value_or(at); }

  [[noreturn]] void not_json(uint64_t at, const std::string& why = {}) const {
    fail("safetensors.header_not_json", "header is not valid JSON" + why, {}, std::min<uint64_t>(at, 8 + header_len_));
  }

  // The top-level members, each value still text: one linear pass, no DOM of the whole
  // header (100,000 tensors index in milliseconds). Duplicate names are refused here,
  // before any entry is looked at.
  std::vector<detail::JsonMember> split(std::string_view text) const {
    std::vector<detail::JsonMember> members;
    size_t bad = 0;
    if (!detail::split_object(text, members, bad)) {
      const size_t first = text.find_first_not_of(" \t\n\r");
      if (first == std::string_view::npos || text[first] != '{') {
        // Not an object at all: parse it whole to name what it is (or where it breaks).
        json doc = parse_text(text, 0);
        fail("safetensors.header_not_object", std::string("header JSON is a ") + doc.type_name() + ", not an object",
             {}, 8);
      }
      not_json(8 + bad);
    }
    std::unordered_set<std::string_view> seen;
    seen.reserve(members.size());
    for (const auto& m : members)
      if (!seen.insert(m.key).second)
        fail("safetensors.duplicate_name", "the header names this tensor twice", m.key, 8 + m.key_at);
    return members;
  }

  json parse_value(const detail::JsonMember& m) const {
    return parse_text(text_.substr(m.value_at, m.value_end - m.value_at), m.value_at);
  }

  // Parses `text`, which starts at header byte `at`.
  json parse_text(std::string_view text, size_t at) const {
    try {
      return json::parse(text);
    } catch (const json::parse_error& e) {
      not_json(8 + at + (e.byte > 0 ? e.byte - 1 : 0));  // e.byte is 1-based
    } catch (const json::exception&) {
      // out_of_range 406: a number literal beyond double range (e.g. 1e400); serde_json rejects it too.
      not_json(8 + at, " (number out of range)");
    }
  }

  json metadata(const json& v, size_t key_at) const {
    if (v.is_null()) return json::object();  // upstream: Option<HashMap<String,String>>
    if (!v.is_object())
      fail("safetensors.bad_metadata", std::string("__metadata__ is a ") + v.type_name() + ", not an object of strings",
           {}, 8 + key_at);
    for (auto& [k, val] : v.items())
      if (!val.is_string())
        fail("safetensors.bad_metadata",
             "__metadata__[\"" + k + "\"] is a " + val.type_name() + "; metadata values must be strings", {},
             8 + key_at);
    return v;
  }

  static bool as_u64(const json& v, uint64_t& out) {
    if (v.is_number_unsigned()) { out = v.get<uint64_t>(); return true; }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) { out = static_cast<uint64_t>(v.get<int64_t>()); return true; }
    return false;
  }

  // `at`: the absolute offset of the entry's name in the file.
  Entry entry(std::string_view name, const json& v, uint64_t at) const {
    auto bad = [&](const std::string& why) {
      fail("safetensors.bad_entry", why, name, at,
           "each tensor entry is {\"dtype\": \"F32\", \"shape\": [..], \"data_offsets\": [begin, end]}");
    };
    if (!v.is_object()) bad(std::string("entry is a ") + v.type_name() + ", not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) bad("\"dtype\" is missing or not a string");
    if (sh == v.end() || !sh->is_array()) bad("\"shape\" is missing or not an array");
    if (off == v.end() || !off->is_array() || off->size() != 2) bad("\"data_offsets\" is missing or not [begin, end]");

    std::vector<uint64_t> dims;
    dims.reserve(sh->size());
    for (const auto& x : *sh) {
      uint64_t dim;
      if (!as_u64(x, dim)) bad("shape dimensions must be non-negative integers");
      dims.push_back(dim);
    }
    uint64_t begin = 0, end = 0;
    if (!as_u64((*off)[0], begin) || !as_u64((*off)[1], end)) bad("data_offsets must be non-negative integers");
    return finish(name, dt->get_ref<const std::string&>(), dims, begin, end, at);
  }

  // The checks of an entry's values, however they were read.
  Entry finish(std::string_view name, std::string_view dname, std::span<const uint64_t> dims, uint64_t begin,
               uint64_t end, uint64_t at) const {
    Entry e;
    e.name = std::string(name);
    e.begin = begin;
    e.end = end;
    auto d = safetensors_dtype(dname);
    if (!d)
      fail("safetensors.unknown_dtype", "unknown dtype \"" + std::string(dname) + "\"", name, at,
           "safetensors dtypes: " + safetensors_dtype_list());
    e.dtype = *d;
    bool dims_fit = true;
    e.shape.reserve(dims.size());
    for (uint64_t dim : dims) {
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) dims_fit = false;
      e.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(dim, std::numeric_limits<int64_t>::max())));
    }
    auto numel = checked_numel(e.shape);
    if (!dims_fit || !numel)
      fail("safetensors.overflow", "the element count of the shape overflows 64 bits", name, data_or(e.begin, at));
    const auto& info = dtype_info(e.dtype);
    if (*numel % info.block_elems != 0)
      fail("safetensors.misaligned", std::to_string(*numel) + " elements of " + std::string(info.name) +
               " do not fill whole bytes", name, data_or(e.begin, at));
    auto nbytes = dtype_nbytes(e.dtype, *numel);
    if (!nbytes) fail("safetensors.overflow", "the byte size of the tensor overflows 64 bits", name, data_or(e.begin, at));
    e.nbytes = *nbytes;

    if (e.begin > e.end)
      fail("safetensors.offsets_reversed",
           "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] end before they begin", name,
           data_or(e.begin, at));
    if (e.end - e.begin != e.nbytes)
      fail("safetensors.size_mismatch",
           "data_offsets span " + std::to_string(e.end - e.begin) + " bytes but the shape and dtype need " +
               std::to_string(e.nbytes),
           name, data_or(e.begin, at));
    return e;
  }

  // Sorted by begin, the tensors must tile [0, data_len_) exactly.
  void check_layout(std::vector<Entry>& es) const {
    std::sort(es.begin(), es.end(), [](const Entry& a, const Entry& b) {
      if (a.begin != b.begin) return a.begin < b.begin;
      if (a.end != b.end) return a.end < b.end;  // zero-size tensors first at a shared offset
      return a.name < b.name;
    });
    uint64_t at = 0;
    for (const auto& e : es) {
      if (e.begin > at)
        fail("safetensors.offsets_gap",
             "bytes [" + std::to_string(at) + ", " + std::to_string(e.begin) +
                 ") of the data region belong to no tensor",
             e.name, abs(at));
      if (e.begin < at)
        fail("safetensors.offsets_overlap",
             "data_offsets begin at " + std::to_string(e.begin) + ", inside the previous tensor (which ends at " +
                 std::to_string(at) + ")",
             e.name, abs(e.begin));
      if (e.end > data_len_)
        fail("safetensors.data_out_of_file",
             "tensor data ends at data offset " + std::to_string(e.end) + " but the data region has " +
                 std::to_string(data_len_) + " bytes",
             e.name, abs(e.begin), "the file is truncated");
      at = e.end;
    }
    if (at != data_len_)
      fail("safetensors.data_not_covered",
           "tensors cover " + std::to_string(at) + " bytes of the " + std::to_string(data_len_) +
               "-byte data region; the rest belongs to no tensor",
           {}, abs(at));
  }

  const Source& src_;
  const bool one_pass_;
  std::string_view text_;  // the header, valid during run()
  uint64_t header_len_ = 0;
  uint64_t data_start_ = 0;
  uint64_t data_len_ = 0;
};

}  // namespace

Checkpoint read_safetensors(const Source& src) { return Reader(src, true).run(); }
Checkpoint read_safetensors_checked(const Source& src) { return Reader(src, false).run(); }

}  // namespace nunchaku
