// The members of one JSON object, found without building a DOM: each key decoded and
// each value delimited by its byte span, in one linear pass. Safetensors headers are
// one flat object of up to ~10^5 members; parsing each small value on its own keeps the
// cost linear in the member count (nlohmann's callback parser is quadratic in it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nunchaku::detail {

struct JsonMember {
  std::string_view key;           // decoded: into the text, or into `decoded` when it has escapes
  std::unique_ptr<std::string> decoded;  // on the heap, so `key` survives moves
  size_t key_at = 0;              // offset of the key's opening quote in the text
  size_t value_at = 0, value_end = 0;  // the value's bytes: [value_at, value_end)
};

// Splits `text` (one JSON object with optional surrounding whitespace) into members,
// in text order. Only the object's own structure is checked (quotes, colons, commas,
// brackets balanced); each value's content is for its consumer to parse. Returns false
// with `error_at` set to the offending byte when the structure is broken, or when the
// text does not start with '{' (error_at = first non-space byte; the caller parses it
// whole to say what it is).
bool split_object(std::string_view text, std::vector<JsonMember>& out, size_t& error_at);

// A safetensors entry in its usual form, {"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}
// (keys in any order, any whitespace), read without a DOM. Returns false for anything else
// (escapes, other or repeated keys, numbers that are not plain non-negative integers);
// the caller then parses the value with the full JSON parser, which also words the error.
struct PlainEntry {
  std::string_view dtype;        // into the text
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;
};
bool parse_plain_entry(std::string_view text, PlainEntry& out);

// A whole safetensors header in its usual form, read in one pass: one object of entries in
// parse_plain_entry's form and at most one "__metadata__" object of strings, every string
// printable ASCII without escapes. Such a text is valid UTF-8, holds no NUL, nests 3 deep and
// splits into exactly these members, so the checks that guard the general path all pass.
// Returns false for anything else; the caller then takes that path, which words the errors.
struct PlainHeader {
  struct Entry {
    std::string_view name, dtype;  // into the text
    size_t name_at = 0;            // offset of the name's opening quote
    uint32_t shape_at = 0, shape_size = 0;  // the shape: dims[shape_at, shape_at + shape_size)
    uint64_t begin = 0, end = 0;
  };
  std::vector<Entry> entries;  // in text order
  std::vector<uint64_t> dims;
  std::string_view metadata;   // the "__metadata__" value's text, if any
  size_t metadata_at = std::string_view::npos;  // offset of its name's opening quote
};
bool scan_plain_header(std::string_view text, PlainHeader& out);

// An index JSON in its usual form, read in one pass: one object whose single "weight_map" is
// an object of printable-ASCII strings without escapes, and whose other members (names
// likewise plain) are only delimited: their text is for the caller to check and parse.
// Returns false for anything else (no weight_map, escapes, other shapes).
struct PlainIndex {
  std::vector<std::pair<std::string_view, std::string_view>> weight_map;  // into the text, in text order
  std::vector<std::pair<std::string_view, std::string_view>> others;      // name, value text
};
bool scan_plain_index(std::string_view text, PlainIndex& out);

}  // namespace nunchaku::detail
