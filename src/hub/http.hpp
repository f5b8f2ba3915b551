// HTTP GETs for the Hub client, on libcurl. One HttpClient per thread (it owns a curl
// handle, whose connections are reused). Redirects are followed here, not by curl, so the
// rule huggingface_hub keeps is explicit: the Authorization header goes only to the
// endpoint's origin (scheme, host, port); a redirect elsewhere (the file store's signed
// URL) is requested without it. Proxies come from the environment (http_proxy,
// https_proxy, no_proxy: libcurl's own reading of them).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "hub/hub_env.hpp"

namespace nunchaku::hub {

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names in lower case, of the last response
  std::string body;
  std::string url;                             // the URL that answered (after redirects)
  std::string header(const std::string& lower_name) const;
};

// Counted across threads: what the network cost.
struct HttpCounters {
  std::atomic<uint64_t> requests{0};  // HTTP requests sent (each redirect hop counts)
  std::atomic<uint64_t> bytes{0};     // bytes received: bodies and headers
};

// false when nunchaku was built without libcurl (every remote read is then an error).
bool built_with_curl();

class HttpClient {
 public:
  HttpClient(const HubEnv& env, HttpCounters& counters);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GET `url` (bytes [first, last] when `range`), up to 10 redirects. `max_body` caps what
  // is kept (a larger body is an error: hub.too_large). Network failures and timeouts
  // throw Error("hub.network", exit 2) naming the URL and curl's reason; HTTP errors are
  // returned (status >= 400) for the caller to explain.
  HttpResponse get(const std::string& url, std::optional<std::pair<uint64_t, uint64_t>> range = std::nullopt,
                   uint64_t max_body = 64u << 20);

  bool available() const;  // false when nunchaku was built without libcurl

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const HubEnv& env_;
  HttpCounters& counters_;
};

}  // namespace nunchaku::hub
