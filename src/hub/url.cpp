#include "hub/url.hpp"

#include <algorithm>
#include <cctype>

namespace nunchaku::hub {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

}  // namespace

std::string percent_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += char(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

Origin url_origin(std::string_view url) {
  Origin o;
  const size_t colon = url.find("://");
  if (colon == std::string_view::npos) return o;
  const std::string scheme = lower(url.substr(0, colon));
  if (scheme != "http" && scheme != "https") return o;
  std::string_view rest = url.substr(colon + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);  // user:pass@
  std::string_view host = rest, port;
  if (!rest.empty() && rest[0] == '[') {  // [::1]:8080
    const size_t close = rest.find(']');
    host = rest.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1);
    if (close != std::string_view::npos && close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (const size_t c = rest.rfind(':'); c != std::string_view::npos) {
    host = rest.substr(0, c);
    port = rest.substr(c + 1);
  }
  o.scheme = scheme;
  o.host = lower(host);
  o.port = scheme == "https" ? 443 : 80;
  if (!port.empty()) {
    unsigned v = 0;
    for (char c : port) v = c >= '0' && c <= '9' && v < 65536 ? v * 10 + unsigned(c - '0') : 65536;
    if (v < 65536) o.port = uint16_t(v);
  }
  return o;
}

std::string resolve_location(std::string_view base, std::string_view location) {
  if (url_origin(location).scheme.size()) return std::string(location);
  const size_t colon = base.find("://");
  if (colon == std::string_view::npos) return std::string(location);
  if (location.substr(0, 2) == "//") return std::string(base.substr(0, colon + 1)) + std::string(location);
  const size_t path = base.find('/', colon + 3);
  const std::string_view root = base.substr(0, path);
  if (!location.empty() && location[0] == '/') return std::string(root) + std::string(location);
  // Relative to the base's folder (the Hub sends absolute paths; this is for completeness).
  std::string_view dir = path == std::string_view::npos ? std::string_view("/") : base.substr(path);
  dir = dir.substr(0, dir.find_first_of("?#"));
  dir = dir.substr(0, dir.rfind('/') + 1);
  return std::string(root) + std::string(dir) + std::string(location);
}

}  // namespace nunchaku::hub
