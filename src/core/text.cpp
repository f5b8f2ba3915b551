#include "core/text.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace nunchaku {

size_t utf8_char_at(std::string_view s, size_t i, size_t* skip) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (skip) *skip = 1;
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (excludes overlongs, surrogates, > U+10FFFF)
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char x = b(k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return 0;
    if (skip) *skip = k + 1;
  }
  return n;
}

size_t first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_char_at(s, i);
    if (!n) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t skip = 1;
    const size_t n = utf8_char_at(s, i, &skip);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += skip;
    }
  }
  return out;
}

namespace {

uint32_t decode(std::string_view s, size_t i, size_t n) {
  const auto c = static_cast<unsigned char>(s[i]);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// The escape for code point `cp`, or "" when it is shown as it is.
std::string escape_of(uint32_t cp) {
  char buf[16];
  if (cp == '\n') return "\\n";
  if (cp == '\r') return "\\r";
  if (cp == '\t') return "\\t";
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) {
    std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
    return buf;
  }
  // Bidi embeddings/overrides/isolates, LRM/RLM/ALM, line/paragraph separators.
  if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F ||
      cp == 0x061C || cp == 0x2028 || cp == 0x2029) {
    std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
    return buf;
  }
  return {};
}

}  // namespace

std::string printable(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 3);
  for (size_t i = 0; i < s.size();) {
    size_t skip = 1;
    const size_t n = utf8_char_at(s, i, &skip);
    std::string_view piece;
    std::string esc;
    if (!n) {
      piece = "\xEF\xBF\xBD";
      i += skip;
    } else {
      esc = escape_of(decode(s, i, n));
      piece = esc.empty() ? s.substr(i, n) : std::string_view(esc);
      i += n;
    }
    if (out.size() + piece.size() > max_bytes) {
      out += "...";
      return out;
    }
    out.append(piece);
  }
  return out;
}

namespace {

// A copy of `j` whose strings and keys are valid UTF-8.
nlohmann::json valid_utf8(const nlohmann::json& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    return first_invalid_utf8(s) == std::string_view::npos ? j : nlohmann::json(utf8_replace_invalid(s));
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : j) out.push_back(valid_utf8(e));
    return out;
  }
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string key = utf8_replace_invalid(it.key());
      if (out.contains(key))
        throw Error("json.name_collision",
                    "two names differ only in bytes that are not valid UTF-8 and cannot both be written as JSON: '" +
                        printable(it.key()) + "' and another one",
                    {.tensor = it.key(), .hint = "rename one of them in the checkpoint"});
      out[key] = valid_utf8(it.value());
    }
    return out;
  }
  return j;
}

}  // namespace

std::string json_error_message(const std::exception& e) {
  std::string_view w = e.what();
  constexpr std::string_view kPrefix = "[json.exception.";
  if (w.substr(0, kPrefix.size()) == kPrefix) {
    const size_t end = w.find("] ");
    if (end != std::string_view::npos) w.remove_prefix(end + 2);
  }
  return std::string(w);
}

std::string dump_json(const nlohmann::json& j, int indent, bool ensure_ascii) {
  try {
    return j.dump(indent, ' ', ensure_ascii);
  } catch (const nlohmann::json::type_error& e) {
    if (e.id != 316) throw;  // 316: invalid UTF-8; the copy is made only then
  }
  return valid_utf8(j).dump(indent, ' ', ensure_ascii);
}

}  // namespace nunchaku
