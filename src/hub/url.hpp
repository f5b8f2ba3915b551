// The few URL operations the Hub client needs (no general URL parser): percent coding,
// an origin (scheme, host, port) to decide where the token may go, and resolving a
// redirect's Location against the URL that sent it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nunchaku::hub {

// RFC 3986 unreserved characters stay; `keep_slash` leaves '/' (a path in a repo).
std::string percent_encode(std::string_view s, bool keep_slash);
// %XX back to bytes; a malformed escape is kept as written.
std::string percent_decode(std::string_view s);

struct Origin {
  std::string scheme;  // lower case
  std::string host;    // lower case, without brackets
  uint16_t port = 0;   // the scheme's default when not written
  bool operator==(const Origin&) const = default;
};
// The origin of an absolute http(s) URL; scheme empty when it is not one.
Origin url_origin(std::string_view url);

// An absolute URL for `location` (absolute, scheme-relative "//host/..", or a path "/..").
std::string resolve_location(std::string_view base, std::string_view location);

}  // namespace nunchaku::hub
