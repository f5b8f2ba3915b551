// What the Hub client makes of the Hub's answers (src/hub/response.hpp), without a network:
// the pure functions http.cpp and remote.cpp call and tests/fuzz/fuzz_hub.cpp fuzzes. The
// cases hold what fuzzing and reading them found (paths from a listing or a typed
// revision that led outside the caches, an offset overflow in a cached header) and how
// libcurl hands header lines over (one call per line, CR LF included).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "hub/repo_ref.hpp"
#include "hub/response.hpp"
#include "hub/url.hpp"

using namespace nunchaku;
using namespace nunchaku::hub;

namespace {

constexpr const char* kSha = "0123456789abcdef0123456789abcdef01234567";

std::string code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return "";
}

// A safetensors file of one F32 tensor "w" of 4 elements (its header padded to 8 bytes).
std::string safetensors_file() {
  std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  while (header.size() % 8) header += ' ';
  std::string out(8, '\0');
  out[0] = char(header.size());
  return out + header + std::string(16, '\x01');
}

}  // namespace

TEST_CASE("Hub responses: header lines as libcurl hands them, the last response's only", "[hub][hub-response]") {
  std::map<std::string, std::string> h;
  for (const char* line : {"HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 302 Found\r\n", "Location:  /x\r\n",
                           "X-Error-Code:\tGatedRepo \r\n", "Content-Length: 0\r\n", "\r\n"})
    parse_header_line(line, h);
  CHECK(h == std::map<std::string, std::string>{{"location", "/x"}, {"x-error-code", "GatedRepo"}, {"content-length", "0"}});
  parse_header_line("HTTP/2 200\r\n", h);
  CHECK(h.empty());
}

TEST_CASE("Hub responses: redirects, and where the token goes", "[hub][hub-response]") {
  HttpResponse r;
  r.status = 302;
  r.url = "https://huggingface.co/org/name/resolve/main/model.safetensors";
  r.headers["location"] = "/api/resolve-cache/models/org/name/x";
  CHECK(redirect_target(r) == "https://huggingface.co/api/resolve-cache/models/org/name/x");
  r.headers["location"] = "https://cdn-lfs.hf.co/x?sig=1";
  CHECK(redirect_target(r) == "https://cdn-lfs.hf.co/x?sig=1");
  r.status = 200;
  CHECK_FALSE(redirect_target(r));
  r.status = 307;
  r.headers["location"] = "";
  CHECK_FALSE(redirect_target(r));

  CHECK(sends_token("https://huggingface.co/api/models/x", "https://huggingface.co"));
  CHECK(sends_token("https://HuggingFace.co:443/x", "https://huggingface.co"));
  CHECK_FALSE(sends_token("https://cdn-lfs.hf.co/x", "https://huggingface.co"));
  CHECK_FALSE(sends_token("https://huggingface.co@evil.example/x", "https://huggingface.co"));
  CHECK_FALSE(sends_token("http://huggingface.co/x", "https://huggingface.co"));
  // Not an http(s) URL: no origin, never the token (before, two non-URLs had equal empty origins).
  CHECK_FALSE(sends_token("ftp://mirror/x", "file:///srv/hub"));
}

TEST_CASE("Hub responses: a body past its cap is refused whole", "[hub][hub-response]") {
  std::string body;
  CHECK(append_body(body, "12345", 8));
  CHECK_FALSE(append_body(body, "6789", 8));
  CHECK(body == "12345");
  CHECK(append_body(body, "678", 8));
  CHECK(body == "12345678");
}

TEST_CASE("Hub responses: a listing naming a file outside the repo is refused", "[hub][hub-response]") {
  const std::string ok = std::string(R"({"sha": ")") + kSha + R"(", "siblings": [{"rfilename": "a/model.gguf", "size": 3},
     {"rfilename": "b.safetensors", "size": 1, "lfs": {"size": 70}}, {"size": 5}, {"rfilename": 7}]})";
  const auto l = parse_listing(ok, "u");
  CHECK(l.sha == kSha);
  CHECK(l.files == std::vector<RemoteFile>{{"a/model.gguf", 3}, {"b.safetensors", 70}});
  // A quantization tag picks any GGUF of the listing, sub-folders included, and each file
  // becomes header-cache/<sha>/headers/<path>: "../" would have been written outside it.
  for (const char* bad : {"../../../../tmp/x-Q4_K_M.gguf", "/etc/x.gguf", "a//b.gguf", "a/./b.gguf", "a/.."}) {
    const std::string text = std::string(R"({"sha": ")") + kSha + R"(", "siblings": [{"rfilename": ")" + bad + R"("}]})";
    CHECK(code_of([&] { (void)parse_listing(text, "u"); }) == "hub.bad_listing");
  }
  CHECK(code_of([&] { (void)parse_listing(R"({"sha": "main", "siblings": []})", "u"); }) == "hub.bad_listing");
  CHECK(code_of([&] { (void)parse_listing("[1", "u"); }) == "hub.bad_listing");
}

TEST_CASE("Hub responses: a typed revision is a path under refs/, never outside it", "[hub][hub-response]") {
  CHECK(parse_repo_ref("org/name@refs/pr/1")->revision == "refs/pr/1");
  CHECK(parse_repo_ref("hf://org/name@refs%2Fpr%2F1/a.gguf")->revision == "refs/pr/1");
  for (const char* bad : {"org/name@../../x", "hf://org/name@..%2F..%2Fx", "hf://org/name@a%00b",
                          "https://huggingface.co/org/name/tree/..%2F..", "org/name@a//b"})
    CHECK_FALSE(parse_repo_ref(bad));
}

TEST_CASE("Hub responses: the header cache's manifest round-trips, and a wrong one is refetched", "[hub][hub-response]") {
  const Manifest m{"model.safetensors.index.json", true, false, {{"model-00001-of-00002.safetensors", 5000}}, true};
  CHECK(parse_manifest(manifest_text(m, "org/name", kSha)) == m);
  // Wrong types (before: nlohmann's type_error, "internal error" exit 1) and unsafe paths.
  for (const char* bad : {R"({"format_version": 1, "entry": 5, "index": false, "gguf": false, "config": false, "weights": []})",
                          R"({"format_version": "1", "entry": "", "index": false, "gguf": false, "config": false, "weights": []})",
                          R"({"format_version": 1, "entry": "", "index": false, "gguf": false, "config": false,
                              "weights": [{"path": "../x", "size": 1}]})",
                          R"({"format_version": 1, "entry": "", "index": true, "gguf": false, "config": false, "weights": []})",
                          "not json"})
    CHECK_FALSE(parse_manifest(bad));
}

TEST_CASE("Hub responses: a cached header's reads past its end, offsets near 2^64 included", "[hub][hub-response]") {
  const std::string bytes = "0123456789";
  PrefixSource cached("m", 100, bytes, false), fetching("m", 100, bytes, true);
  char buf[8];
  cached.read_at(2, buf, 4);
  CHECK(std::string(buf, 4) == "2345");
  CHECK(code_of([&] { cached.read_at(8, buf, 4); }) == "hub.header_cache");
  bool need = false;
  try {
    fetching.read_at(8, buf, 4);
  } catch (const NeedBytes& n) {
    need = n.end == 12;
  }
  CHECK(need);
  // offset + n wrapped to 6 before: inside both bounds, a read far outside the bytes.
  CHECK(code_of([&] { cached.read_at(std::numeric_limits<uint64_t>::max() - 1, buf, 8); }) == "io.short_read");
}

TEST_CASE("Hub responses: a weight file's header by Range, from a server that ignores Range or cuts bodies", "[hub][hub-response]") {
  const std::string file = safetensors_file();
  std::vector<std::pair<uint64_t, uint64_t>> asked;
  auto serve = [&](int mode) {
    return [&, mode](uint64_t first, uint64_t last) {
      asked.emplace_back(first, last);
      HttpResponse r;
      r.status = mode == 1 ? 200 : 206;
      r.body = mode == 1 ? file : file.substr(first, last - first + 1);
      if (mode == 2) r.body.pop_back();
      return r;
    };
  };
  // The whole file is shorter than the first range: one request, the file's bytes.
  CHECK(read_header_prefix("m", file.size(), false, serve(0)) == file);
  CHECK(asked == std::vector<std::pair<uint64_t, uint64_t>>{{0, file.size() - 1}});
  asked.clear();
  CHECK(read_header_prefix("m", file.size(), false, serve(1)) == file);
  CHECK(code_of([&] { (void)read_header_prefix("m", file.size(), false, serve(2)); }) == "hub.short_read");
  // A size larger than the bytes the server has: a short body before the file's end.
  CHECK(code_of([&] { (void)read_header_prefix("m", file.size() + 10, false, serve(0)); }) == "hub.short_read");
}
