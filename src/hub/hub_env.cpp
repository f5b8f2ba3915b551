#include "hub/hub_env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace nunchaku::hub {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string home_cache() {
  if (auto x = env("XDG_CACHE_HOME"); !x.empty()) return x;
  if (auto h = env("HOME"); !h.empty()) return h + "/.cache";
  return ".cache";
}

// huggingface_hub's _is_true.
bool is_true(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

HubEnv hub_env() {
  HubEnv e;
  if (auto ep = env("HF_ENDPOINT"); !ep.empty()) e.endpoint = ep;
  while (!e.endpoint.empty() && e.endpoint.back() == '/') e.endpoint.pop_back();
  const std::string hf_home = !env("HF_HOME").empty() ? env("HF_HOME") : home_cache() + "/huggingface";
  e.hub_cache = !env("HF_HUB_CACHE").empty()            ? env("HF_HUB_CACHE")
                : !env("HUGGINGFACE_HUB_CACHE").empty() ? env("HUGGINGFACE_HUB_CACHE")
                                                        : hf_home + "/hub";
  e.header_cache = home_cache() + "/nunchaku/hub";
  if (auto t = trimmed(env("HF_TOKEN")); !t.empty()) {
    e.token = t;
    e.token_source = "HF_TOKEN";
  } else {
    const std::string path = !env("HF_TOKEN_PATH").empty() ? env("HF_TOKEN_PATH") : hf_home + "/token";
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    if (auto t = trimmed(ss.str()); f && !t.empty()) {
      e.token = t;
      e.token_source = path;
    }
  }
  e.offline = is_true(env("HF_HUB_OFFLINE"));
  if (auto t = env("HF_HUB_DOWNLOAD_TIMEOUT"); !t.empty()) {
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (end && *end == '\0' && v > 0) e.timeout_s = v;
  }
  return e;
}

}  // namespace nunchaku::hub
