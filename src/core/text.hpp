// Text from files and the command line, made safe to show. The project's one UTF-8
// validator/sanitizer and its one escaping function: every string that came from
// input and reaches a terminal or a log line goes through printable(); JSON output
// keeps exact strings (utf8_replace_invalid only where JSON needs valid UTF-8), and every
// JSON document is serialized by dump_json().
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace nunchaku {

// Bytes in the valid UTF-8 character at s[i] (1-4), or 0 when none starts there; then
// *skip is the length of the maximal invalid subpart to replace (Unicode's "substitution
// of maximal subparts", as Rust's from_utf8_lossy and Python's errors="replace").
// Strict: no overlongs, no surrogates, nothing past U+10FFFF.
size_t utf8_char_at(std::string_view s, size_t i, size_t* skip = nullptr);

// Index of the first byte that is not part of valid UTF-8, or npos.
size_t first_invalid_utf8(std::string_view s);

// Invalid sequences replaced by U+FFFD, one per maximal invalid subpart.
std::string utf8_replace_invalid(std::string_view s);

// Cap for a name (tensor, key, flag value) inside a message.
inline constexpr size_t kNameShown = 200;
// Cap for a whole message or a path.
inline constexpr size_t kMessageShown = 4000;

// `s` made safe for a terminal and one log line: invalid UTF-8 as U+FFFD; \n \r \t as
// those two-character escapes; other C0/C1 controls, DEL and the bidi/line-separator
// format characters (which reorder or break the displayed line) as \xNN / \u{NNNN};
// cut at a character boundary to at most `max_bytes` bytes of output plus "...".
// Backslashes are kept as they are: escaping an escaped string changes nothing (within
// the cap), so a message may hold printable() names and be escaped again as a whole.
std::string printable(std::string_view s, size_t max_bytes = kNameShown);

// An exception's what() without nlohmann's "[json.exception.parse_error.101] " prefix
// (a message for people: "parse error at line 1, column 5: ...").
std::string json_error_message(const std::exception& e);

// `j` as JSON text (indent, ensure_ascii as nlohmann's dump; -1: one line). A string or
// key that is not valid UTF-8 (a GGUF tensor name is bytes; nlohmann would throw) is
// written with utf8_replace_invalid, so the text is always valid JSON and parses back to
// the replaced names. Two keys of one object that become equal that way are
// Error("json.name_collision", exit 2) naming them, never one silently dropped.
std::string dump_json(const nlohmann::json& j, int indent = -1, bool ensure_ascii = false);

}  // namespace nunchaku
