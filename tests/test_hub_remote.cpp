// A model by its Hub id before any download: nunchaku against tests/hub/hub_server.hpp, a
// local server that answers as the Hub does (model info, resolve URLs with 302s to a file
// store on another host name, Range, the Hub's X-Error-Code errors). The expectations are
// independent of the client: parameter counts from the shapes written here or from opening
// the same files on disk, request and byte counts from the server's side.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "hub/http.hpp"
#include "tests/helpers.hpp"
#include "tests/hub/hub_server.hpp"
#include "tests/hub_fixtures.hpp"

using namespace nunchaku;
using nunchaku::test::TempDir;
using nunchaku::testhub::HubServer;
using nunchaku::testhub::Repo;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Without libcurl every remote read is an error by design: these cases report skipped.
#define SKIP_WITHOUT_CURL()                                         \
  if (!hub::built_with_curl()) {                                     \
    WARN("skipped: nunchaku was built without libcurl (no Hub reads)"); \
    return;                                                          \
  }

Repo repo(const std::string& id, const std::string& dir) { return {id, dir, testhub::hub_repo_sha(id)}; }

// The client's environment for one test: the server as HF_ENDPOINT, empty caches.
struct Client {
  TempDir tmp;
  test::HubEnvGuard env;
  explicit Client(const HubServer& s) {
    env.set("HF_ENDPOINT", s.endpoint());
    env.set("HF_HOME", tmp.file("hf"));
    env.set("XDG_CACHE_HOME", tmp.file("xdg"));
    env.set("HF_HUB_DOWNLOAD_TIMEOUT", "5");
  }
};

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += char((v >> (8 * i)) & 0xff);
}
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += char((v >> (8 * i)) & 0xff);
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

// A GGUF v3 whose metadata (a 200000-string token list) runs past the first 1 MiB range,
// with one F32 tensor of 4 elements.
std::string big_header_gguf(const std::string& path) {
  std::string s = "GGUF";
  put_u32(s, 3);
  put_u64(s, 1);  // tensors
  put_u64(s, 2);  // key-values
  put_str(s, "general.architecture");
  put_u32(s, 8);
  put_str(s, "llama");
  put_str(s, "tokenizer.ggml.tokens");
  put_u32(s, 9);
  put_u32(s, 8);
  put_u64(s, 200000);
  for (int i = 0; i < 200000; ++i) put_str(s, "token" + std::to_string(i));
  put_str(s, "blk.0.attn_norm.weight");
  put_u32(s, 1);
  put_u64(s, 4);
  put_u32(s, 0);  // F32
  put_u64(s, 0);
  while (s.size() % 32) s += '\0';
  s += std::string(16, '\0');
  test::write_file(path, s);
  return path;
}

}  // namespace

TEST_CASE("Hub remote: estimate of a sparse 16 GB 4-shard repo reads only headers", "[hub][remote]") {
  SKIP_WITHOUT_CURL();
  TempDir model;
  const uint64_t params = test::write_sparse_sharded_llama(model.path.string(), test::testdata("models/llama3-8b-config/config.json"), 4);
  uint64_t weight_bytes = 0;
  for (const auto& e : fs::directory_iterator(model.path)) weight_bytes += e.file_size();
  REQUIRE(weight_bytes > 16'000'000'000ull);
  HubServer server({repo("meta-llama/Llama-3.1-8B", model.path.string())});
  Client client(server);

  const auto t0 = std::chrono::steady_clock::now();
  const auto r = test::run_cli({"estimate", "meta-llama/Llama-3.1-8B", "--json"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["num_parameters"].get<uint64_t>() == params);
  const auto first = server.stats();
  CHECK(first.bytes_sent < 4u << 20);
  CHECK(seconds < 1.0);
  // listing + config.json + index + 4 x (302 + 206)
  CHECK(first.requests == 11);
  CHECK(first.store_requests == 4);
  CHECK(first.store_with_auth == 0);
  WARN("first estimate by id: " << first.requests << " requests, " << first.bytes_sent << " bytes, " << seconds << " s");

  server.reset_stats();
  const auto again = test::run_cli({"estimate", "meta-llama/Llama-3.1-8B", "--json"});
  REQUIRE(again.exit_code == 0);
  CHECK(again.out == r.out);
  CHECK(server.stats().requests <= 1);
  // A commit sha names files that never change: no request at all; offline: none either.
  server.reset_stats();
  const std::string pinned = "meta-llama/Llama-3.1-8B@" + testhub::hub_repo_sha("meta-llama/Llama-3.1-8B");
  nlohmann::json by_sha = nlohmann::json::parse(test::run_cli({"estimate", pinned, "--json"}).out), by_id = nlohmann::json::parse(r.out);
  CHECK(by_sha["path"] == pinned);  // each names the id as given; the rest is the same
  by_sha.erase("path"), by_id.erase("path");
  CHECK(by_sha == by_id);
  client.env.set("HF_HUB_OFFLINE", "1");
  CHECK(test::run_cli({"inspect", "meta-llama/Llama-3.1-8B", "--json"}).exit_code == 0);
  CHECK(server.stats().requests == 0);
}

TEST_CASE("Hub remote: the same checkpoint as the files on disk, every format", "[hub][remote]") {
  SKIP_WITHOUT_CURL();
  TempDir ggufs;
  big_header_gguf(ggufs.file("big-Q8_0.gguf"));
  fs::copy_file(test::testdata("models/llama-gguf/model.gguf"), ggufs.file("model-F32.gguf"));
  HubServer server({repo("org/sharded", test::testdata("models/llama-sharded")), repo("org/single", test::testdata("models/llama")),
                    repo("org/gguf", ggufs.path.string()), repo("org/split", test::testdata("models/llama-gguf-split"))});
  Client client(server);
  auto same = [&](const std::string& id, const std::string& path, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"inspect", id, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto remote = test::run_cli(args);
    INFO(id << ": " << remote.err);
    REQUIRE(remote.exit_code == 0);
    const auto local = json::parse(test::run_cli({"inspect", path, "--json"}).out), got = json::parse(remote.out);
    CHECK(got["num_parameters"] == local["num_parameters"]);
    CHECK(got["num_tensors"] == local["num_tensors"]);
    CHECK(got["weight_bytes"] == local["weight_bytes"]);
    CHECK(got["dtypes"] == local["dtypes"]);
    CHECK(got["modules"] == local["modules"]);
  };
  same("org/sharded", test::testdata("models/llama-sharded"));
  same("org/single", test::testdata("models/llama"));
  same("org/gguf:F32", ggufs.file("model-F32.gguf"));
  same("org/split", test::testdata("models/llama-gguf-split"));
  // A GGUF header past 1 MiB: ranges that double (1, 2, 4 MiB: here 3 ranges, 302 + 206 each).
  server.reset_stats();
  same("org/gguf", ggufs.file("big-Q8_0.gguf"), {"--file", "big-Q8_0.gguf"});
  const auto s = server.stats();
  CHECK(s.range_requests == 6);
  CHECK(s.bytes_sent < fs::file_size(ggufs.file("big-Q8_0.gguf")) * 2 + 100'000);
}

TEST_CASE("Hub remote: gated, private and missing repos say what to do (exit 2)", "[hub][remote]") {
  SKIP_WITHOUT_CURL();
  Repo gated = repo("org/gated", test::testdata("models/llama"));
  gated.gated = true;
  Repo priv = repo("org/private", test::testdata("models/llama"));
  priv.is_private = true;
  HubServer server({gated, priv, repo("org/empty", test::testdata("models/llama2-7b-config"))});
  Client client(server);

  auto r = test::run_cli({"estimate", "org/gated"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("gated"));
  CHECK_THAT(r.err, Catch::Contains("HF_TOKEN"));
  CHECK_THAT(r.err, Catch::Contains(server.endpoint() + "/org/gated"));
  client.env.set("HF_TOKEN", "hf_other");  // a valid token without access: 403
  r = test::run_cli({"estimate", "org/gated"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("HTTP 403"));
  CHECK_THAT(r.err, Catch::Contains("request it on " + server.endpoint() + "/org/gated"));
  client.env.set("HF_TOKEN", "hf_granted");
  server.reset_stats();
  r = test::run_cli({"estimate", "org/gated", "--json"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(server.stats().store_with_auth == 0);  // the token stayed on the Hub's host
  CHECK(test::run_cli({"inspect", "org/private"}).exit_code == 0);
  client.env.set("HF_TOKEN", "hf_nonsense");
  r = test::run_cli({"inspect", "org/private"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("refused the token"));

  client.env.unset("HF_TOKEN");
  fs::create_directories(client.tmp.file("hf"));
  test::write_file(client.tmp.file("hf") + "/token", "hf_granted\n");  // huggingface_hub's token file
  CHECK(test::run_cli({"inspect", "org/private"}).exit_code == 0);
  client.env.set("HF_TOKEN_PATH", client.tmp.file("none"));
  r = test::run_cli({"inspect", "org/private"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no repository org/private"));
  r = test::run_cli({"inspect", "org/gated@v2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no revision 'v2'"));
  r = test::run_cli({"inspect", "org/empty"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("has no weights"));
  r = test::run_cli({"inspect", "org/gguf:Q4_K_M"});
  CHECK(r.exit_code == 2);
}

TEST_CASE("Hub remote: network failures and timeouts are errors, not hangs", "[hub][remote]") {
  SKIP_WITHOUT_CURL();
  HubServer server({repo("org/single", test::testdata("models/llama"))});
  Client client(server);
  client.env.set("HF_HUB_DOWNLOAD_TIMEOUT", "1");
  server.set_stall(true);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_cli({"estimate", "org/single"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  server.set_stall(false);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("timed out"));
  CHECK_THAT(r.err, Catch::Contains("HF_HUB_DOWNLOAD_TIMEOUT"));
  CHECK(seconds < 5);
  client.env.set("HF_ENDPOINT", "http://127.0.0.1:1");  // nothing listens there
  r = test::run_cli({"estimate", "org/single"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("network failure"));
  // Through a proxy from the environment (the server answers absolute-form requests too).
  client.env.set("HF_ENDPOINT", "http://hub.invalid:" + std::to_string(server.port()));
  client.env.set("http_proxy", server.endpoint());
  server.reset_stats();
  r = test::run_cli({"inspect", "org/single", "--json"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(server.stats().proxied >= 3);
}

TEST_CASE("Hub remote: run and load by id name the missing files and the hf download line", "[hub][remote]") {
  SKIP_WITHOUT_CURL();
  HubServer server({repo("org/spm", test::testdata("run/llama-spm")), repo("org/notok", test::testdata("models/llama"))});
  Client client(server);
  auto r = test::run_cli({"run", "org/spm"}, "hi\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("hf download org/spm --include model.safetensors --include config.json --include tokenizer.json"));
  r = test::run_cli({"load", "org/spm"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("hf download org/spm --include model.safetensors --include config.json"));
  CHECK(server.stats().bytes_sent < 100'000);  // the listing, not the weights
  r = test::run_cli({"tokenize", "org/notok", "hi"});  // no fetch would help: the repo has no tokenizer
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("org/notok has no tokenizer.json"));
}
