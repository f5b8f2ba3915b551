#include "hub/http.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"
#include "hub/response.hpp"

#if NUNCHAKU_HAVE_CURL
#include <curl/curl.h>
#endif

namespace nunchaku::hub {

std::string HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

#if NUNCHAKU_HAVE_CURL

namespace {

constexpr int kMaxRedirects = 10;

struct Transfer {
  HttpResponse* out = nullptr;
  uint64_t max_body = 0;
  bool too_large = false;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (!append_body(t->out->body, std::string_view(data, len), t->max_body)) {
    t->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  return len;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  parse_header_line(std::string_view(data, len), t->out->headers);
  return len;
}

}  // namespace

struct HttpClient::Impl {
  CURL* curl = nullptr;
};

HttpClient::HttpClient(const HubEnv& env, HttpCounters& counters) : impl_(std::make_unique<Impl>()), env_(env), counters_(counters) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  impl_->curl = curl_easy_init();
  if (!impl_->curl) throw Error("hub.curl", "libcurl could not start a transfer", {}, Exit::Internal);
}

HttpClient::~HttpClient() {
  if (impl_ && impl_->curl) curl_easy_cleanup(impl_->curl);
}

bool built_with_curl() { return true; }
bool HttpClient::available() const { return true; }

HttpResponse HttpClient::get(const std::string& first_url, std::optional<std::pair<uint64_t, uint64_t>> range, uint64_t max_body) {
  CURL* c = impl_->curl;
  std::string url = first_url;
  const long timeout_ms = std::max(1L, long(std::lround(env_.timeout_s * 1000)));
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    HttpResponse resp;
    Transfer t{&resp, max_body};
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    // A read timeout: no byte for timeout_s seconds ends the transfer.
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, long(std::ceil(env_.timeout_s))));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "nunchaku/" NUNCHAKU_VERSION);
    std::string range_text;
    if (range) {
      range_text = std::to_string(range->first) + "-" + std::to_string(range->second);
      curl_easy_setopt(c, CURLOPT_RANGE, range_text.c_str());
    }
    curl_slist* headers = nullptr;
    std::string auth;
    if (!env_.token.empty() && sends_token(url, env_.endpoint)) {
      auth = "Authorization: Bearer " + env_.token;
      headers = curl_slist_append(headers, auth.c_str());
    }
    headers = curl_slist_append(headers, "Accept-Encoding: identity");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    log::debug("GET {}{}", url, range ? " bytes=" + range_text : std::string());
    const CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    counters_.requests.fetch_add(1);
    curl_off_t down = 0;
    long head = 0;
    curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &down);
    curl_easy_getinfo(c, CURLINFO_HEADER_SIZE, &head);
    counters_.bytes.fetch_add(uint64_t(down) + uint64_t(head));
    if (t.too_large)
      throw Error("hub.too_large", "the response is larger than the " + std::to_string(max_body) + " bytes expected",
                  {.file = url});
    if (rc != CURLE_OK) {
      const bool timeout = rc == CURLE_OPERATION_TIMEDOUT;
      throw Error("hub.network", std::string(timeout ? "timed out: " : "network failure: ") + curl_easy_strerror(rc),
                  {.file = url,
                   .hint = timeout ? "no answer within HF_HUB_DOWNLOAD_TIMEOUT=" + std::to_string(std::lround(env_.timeout_s)) +
                                         " s; raise it, check the connection or proxy, or set HF_HUB_OFFLINE=1 to use the local cache only"
                                   : "check the connection, HF_ENDPOINT and the proxy variables, or set HF_HUB_OFFLINE=1 to use the local cache only"});
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
    resp.url = url;
    const auto next = redirect_target(resp);
    if (!next) return resp;
    url = *next;
  }
  throw Error("hub.network", "more than " + std::to_string(kMaxRedirects) + " redirects", {.file = first_url});
}

#else  // built without libcurl: every remote read says so

struct HttpClient::Impl {};

HttpClient::HttpClient(const HubEnv& env, HttpCounters& counters) : env_(env), counters_(counters) {}
HttpClient::~HttpClient() = default;
bool built_with_curl() { return false; }
bool HttpClient::available() const { return false; }

HttpResponse HttpClient::get(const std::string& url, std::optional<std::pair<uint64_t, uint64_t>>, uint64_t) {
  throw Error("hub.no_http", "this nunchaku was built without libcurl, so it cannot read from the Hub",
              {.file = url, .hint = "install libcurl4-openssl-dev and rebuild (scripts/setup.sh), or download the model first"});
}

#endif

}  // namespace nunchaku::hub
