#include "format/json_members.hpp"

#include <array>

#include <nlohmann/json.hpp>

namespace nunchaku::detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// s[i] == '"': the index one past the closing quote, or npos.
size_t string_end(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == '"') return i + 1;
  }
  return std::string_view::npos;
}

// One past the end of the value starting at s[i], or npos when it never ends.
size_t value_end(std::string_view s, size_t i) {
  if (s[i] == '"') return string_end(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"') {
        i = string_end(s, i);
        if (i == std::string_view::npos) return i;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      ++i;
    }
    return std::string_view::npos;
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !is_space(s[i])) ++i;
  return i;
}

// Decodes the string literal s[b, e) into m.key; false if it is not a valid JSON string.
bool decode_key(std::string_view s, size_t b, size_t e, JsonMember& m) {
  std::string_view lit = s.substr(b, e - b);
  const std::string_view body = lit.substr(1, lit.size() - 2);
  bool plain = true;
  for (char c : body)
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20) plain = false;
  if (plain) {
    m.key = body;
    return true;
  }
  try {
    m.decoded = std::make_unique<std::string>(nlohmann::json::parse(lit).get<std::string>());
    m.key = *m.decoded;
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

bool split_object(std::string_view s, std::vector<JsonMember>& out, size_t& error_at) {
  out.clear();
  size_t i = skip_space(s, 0);
  if (i >= s.size() || s[i] != '{') {
    error_at = i;
    return false;
  }
  i = skip_space(s, i + 1);
  bool first = true;
  for (;;) {
    if (i >= s.size()) { error_at = s.size(); return false; }
    if (s[i] == '}' && first) break;
    if (!first) {
      if (s[i] == '}') break;
      if (s[i] != ',') { error_at = i; return false; }
      i = skip_space(s, i + 1);
      if (i >= s.size()) { error_at = s.size(); return false; }
    }
    first = false;
    if (s[i] != '"') { error_at = i; return false; }
    JsonMember m;
    m.key_at = i;
    size_t ke = string_end(s, i);
    if (ke == std::string_view::npos || !decode_key(s, i, ke, m)) { error_at = i; return false; }
    i = skip_space(s, ke);
    if (i >= s.size() || s[i] != ':') { error_at = std::min(i, s.size()); return false; }
    i = skip_space(s, i + 1);
    if (i >= s.size()) { error_at = s.size(); return false; }
    size_t ve = value_end(s, i);
    if (ve == std::string_view::npos || ve == i) { error_at = i; return false; }
    m.value_at = i;
    m.value_end = ve;
    out.push_back(std::move(m));
    i = skip_space(s, ve);
  }
  i = skip_space(s, i + 1);
  if (i != s.size()) {
    error_at = i;
    return false;
  }
  return true;
}

namespace {

// The bytes a plain string may hold: no quote, backslash or control character; with `ascii`
// also nothing above 0x7E.
constexpr std::array<bool, 256> plain_bytes(bool ascii) {
  std::array<bool, 256> ok{};
  for (int c = 0x20; c < (ascii ? 0x7f : 0x100); ++c) ok[c] = c != '"' && c != '\\';
  return ok;
}
constexpr std::array<bool, 256> kPlainBytes = plain_bytes(false), kAsciiBytes = plain_bytes(true);

// A plain string (no escapes, no control characters; with `ascii`, no byte above 0x7E) at
// s[i]; i moves past it.
bool plain_string(std::string_view s, size_t& i, std::string_view& out, bool ascii = false) {
  if (i >= s.size() || s[i] != '"') return false;
  const size_t b = ++i;
  const auto& ok = ascii ? kAsciiBytes : kPlainBytes;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size() && ok[p[i]]) ++i;
  if (i >= s.size() || s[i] != '"') return false;
  out = s.substr(b, i - b);
  ++i;
  return true;
}

// A JSON integer >= 0 that fits 64 bits (no sign, fraction, exponent or leading zero).
bool plain_uint(std::string_view s, size_t& i, uint64_t& out) {
  const size_t b = i;
  out = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
    if (__builtin_mul_overflow(out, 10, &out) || __builtin_add_overflow(out, uint64_t(s[i] - '0'), &out)) return false;
  if (i == b || (s[b] == '0' && i - b > 1)) return false;
  return i >= s.size() || (s[i] != '.' && s[i] != 'e' && s[i] != 'E');
}

bool plain_uints(std::string_view s, size_t& i, std::vector<uint64_t>& out) {
  if (i >= s.size() || s[i] != '[') return false;
  i = skip_space(s, i + 1);
  if (i < s.size() && s[i] == ']') return ++i, true;
  for (;;) {
    uint64_t v;
    if (!plain_uint(s, i, v)) return false;
    out.push_back(v);
    i = skip_space(s, i);
    if (i >= s.size()) return false;
    if (s[i] == ']') return ++i, true;
    if (s[i] != ',') return false;
    i = skip_space(s, i + 1);
  }
}

// The entry object at s[i] (i at its '{'), in parse_plain_entry's form; i moves past its '}'.
// Its shape is appended to `shape`.
bool plain_entry_at(std::string_view s, size_t& i, std::string_view& dtype, std::vector<uint64_t>& shape,
                    uint64_t& begin, uint64_t& end, bool ascii) {
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_space(s, i + 1);
  unsigned seen = 0;
  for (int k = 0; k < 3; ++k) {
    std::string_view key;
    if (!plain_string(s, i, key, ascii)) return false;
    i = skip_space(s, i);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_space(s, i + 1);
    if (key == "dtype" && !(seen & 1)) {
      if (!plain_string(s, i, dtype, ascii)) return false;
      seen |= 1;
    } else if (key == "shape" && !(seen & 2)) {
      if (!plain_uints(s, i, shape)) return false;
      seen |= 2;
    } else if (key == "data_offsets" && !(seen & 4)) {
      const size_t at = shape.size();
      if (!plain_uints(s, i, shape) || shape.size() - at != 2) return false;
      begin = shape[at];
      end = shape[at + 1];
      shape.resize(at);
      seen |= 4;
    } else {
      return false;
    }
    i = skip_space(s, i);
    if (i >= s.size() || s[i] != (k < 2 ? ',' : '}')) return false;
    i = k < 2 ? skip_space(s, i + 1) : i + 1;
  }
  return true;
}

// An object of plain ASCII strings at s[i] ("__metadata__" and weight_map as every writer
// leaves them); i moves past its '}'. Members are appended to `out` when given.
bool plain_string_object_at(std::string_view s, size_t& i,
                            std::vector<std::pair<std::string_view, std::string_view>>* out = nullptr) {
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_space(s, i + 1);
  if (i < s.size() && s[i] == '}') return ++i, true;
  for (;;) {
    std::string_view key, value;
    if (!plain_string(s, i, key, true)) return false;
    i = skip_space(s, i);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_space(s, i + 1);
    if (!plain_string(s, i, value, true)) return false;
    if (out) out->emplace_back(key, value);
    i = skip_space(s, i);
    if (i >= s.size()) return false;
    if (s[i] == '}') return ++i, true;
    if (s[i] != ',') return false;
    i = skip_space(s, i + 1);
  }
}

}  // namespace

bool parse_plain_entry(std::string_view s, PlainEntry& out) {
  out.shape.clear();
  size_t i = skip_space(s, 0);
  if (!plain_entry_at(s, i, out.dtype, out.shape, out.begin, out.end, false)) return false;
  return skip_space(s, i) == s.size();
}

bool scan_plain_header(std::string_view s, PlainHeader& out) {
  out = PlainHeader{};
  size_t i = skip_space(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_space(s, i + 1);
  if (i < s.size() && s[i] == '}') return skip_space(s, i + 1) == s.size();
  for (;;) {
    PlainHeader::Entry e;
    e.name_at = i;
    if (!plain_string(s, i, e.name, true)) return false;
    i = skip_space(s, i);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_space(s, i + 1);
    if (e.name == "__metadata__") {
      if (out.metadata_at != std::string_view::npos) return false;  // twice: the checked path says so
      out.metadata_at = e.name_at;
      const size_t b = i;
      if (!plain_string_object_at(s, i)) return false;
      out.metadata = s.substr(b, i - b);
    } else {
      e.shape_at = static_cast<uint32_t>(out.dims.size());
      if (!plain_entry_at(s, i, e.dtype, out.dims, e.begin, e.end, true)) return false;
      e.shape_size = static_cast<uint32_t>(out.dims.size() - e.shape_at);
      out.entries.push_back(e);
    }
    i = skip_space(s, i);
    if (i >= s.size()) return false;
    if (s[i] == '}') return skip_space(s, i + 1) == s.size();
    if (s[i] != ',') return false;
    i = skip_space(s, i + 1);
  }
}

bool scan_plain_index(std::string_view s, PlainIndex& out) {
  out = PlainIndex{};
  size_t i = skip_space(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_space(s, i + 1);
  if (i < s.size() && s[i] == '}') return false;  // no weight_map
  bool map = false;
  for (;;) {
    std::string_view key;
    if (!plain_string(s, i, key, true)) return false;
    i = skip_space(s, i);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_space(s, i + 1);
    if (i >= s.size()) return false;
    if (key == "weight_map") {
      if (map) return false;  // twice: the parser keeps the last
      map = true;
      if (!plain_string_object_at(s, i, &out.weight_map)) return false;
    } else {
      const size_t e = value_end(s, i);
      if (e == std::string_view::npos || e == i) return false;
      out.others.emplace_back(key, s.substr(i, e - i));
      i = e;
    }
    i = skip_space(s, i);
    if (i >= s.size()) return false;
    if (s[i] == '}') return map && skip_space(s, i + 1) == s.size();
    if (s[i] != ',') return false;
    i = skip_space(s, i + 1);
  }
}

}  // namespace nunchaku::detail
