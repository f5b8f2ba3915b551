// A model by its Hub id from the local HF cache (src/hub, no network): the reference forms
// users type and paste, the cache layout huggingface_hub writes (refs/, snapshots/ with
// links into blobs/), which files make the model, and the errors for a cache that lacks
// them. Caches are built here by huggingface_hub's documented rules; the one
// huggingface_hub wrote itself is testdata/hf-cache (scripts/make_hub_cache_fixture.py).
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/open.hpp"
#include "hub/repo_files.hpp"
#include "hub/repo_ref.hpp"
#include "hub/resolve.hpp"
#include "tests/helpers.hpp"
#include "tests/hub_fixtures.hpp"

using namespace nunchaku;
using namespace nunchaku::hub;
using nunchaku::test::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSha = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kSha2 = "89abcdef0123456789abcdef0123456789abcdef";

HubEnv offline_env(const std::string& cache) {
  HubEnv e;
  e.hub_cache = cache;
  e.header_cache = cache + "/../nunchaku-headers";
  e.offline = true;
  return e;
}

std::string code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code() + ": " + e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Hub references: the forms users type and paste", "[hub]") {
  auto r = parse_repo_ref("meta-llama/Llama-3.1-8B");
  REQUIRE(r);
  CHECK(r->id == "meta-llama/Llama-3.1-8B");
  CHECK(r->revision == "main");
  CHECK_FALSE(r->revision_given);

  r = parse_repo_ref("org/name@refs/pr/1:Q4_K_M");
  REQUIRE(r);
  CHECK(r->revision == "refs/pr/1");
  CHECK(r->quant == "Q4_K_M");
  CHECK(r->display() == "org/name@refs/pr/1:Q4_K_M");

  r = parse_repo_ref("hf://org/name@refs%2Fpr%2F2/sub/model-Q8_0.gguf");
  REQUIRE(r);
  CHECK(r->revision == "refs/pr/2");
  CHECK(r->file == "sub/model-Q8_0.gguf");

  r = parse_repo_ref("https://huggingface.co/org/name/blob/v1.0/model.safetensors?download=true");
  REQUIRE(r);
  CHECK(r->revision == "v1.0");
  CHECK(r->file == "model.safetensors");
  r = parse_repo_ref("https://huggingface.co/org/name/tree/main");
  REQUIRE(r);
  CHECK(r->file.empty());
  r = parse_repo_ref("http://127.0.0.1:5000/org/name/resolve/abc/x.gguf", "http://127.0.0.1:5000");
  REQUIRE(r);
  CHECK(r->file == "x.gguf");

  // Not Hub ids: paths and malformed names fall through to "no such file".
  for (const char* s : {"model/", "./org/name", "/abs/path", "org/name/extra", "org/-bad", "org/a--b", "org/name@", "org",
                        "org/name:Q4 K", "hf://org/name/../x", "https://huggingface.co/datasets"})
    CHECK_FALSE(parse_repo_ref(s));
  CHECK(repo_folder_name("org/name") == "models--org--name");
  CHECK(is_commit_sha(kSha));
  CHECK_FALSE(is_commit_sha("main"));
}

TEST_CASE("Hub weights: which files of a repo make the model", "[hub]") {
  RepoRef ref{"org/name"};
  auto w = choose_weights({"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "original/consolidated.00.pth"},
                          ref, "x");
  CHECK(w.entry == "model.safetensors.index.json");
  CHECK(w.index);
  w = choose_weights({"pytorch_model.bin", "training_args.bin", "model.safetensors"}, ref, "x");
  CHECK(w.entry == "model.safetensors");
  const std::vector<std::string> ggufs = {"model-Q4_K_M.gguf", "model-Q4_K_S.gguf", "mmproj-F16.gguf",
                                          "Q8_0/model-Q8_0-00001-of-00002.gguf", "Q8_0/model-Q8_0-00002-of-00002.gguf"};
  CHECK_THAT(code_of([&] { choose_weights(ggufs, ref, "x"); }), Catch::StartsWith("hub.ambiguous_gguf"));
  ref.quant = "Q4_K_M";
  CHECK(choose_weights(ggufs, ref, "x").entry == "model-Q4_K_M.gguf");
  ref.quant = "q8_0";  // case-insensitive, a split set opens from its first part
  w = choose_weights(ggufs, ref, "x");
  CHECK(w.entry == "Q8_0/model-Q8_0-00001-of-00002.gguf");
  CHECK(w.files.size() == 2);
  ref.quant = "Q4_K";  // a prefix of two tags matches neither
  CHECK_THAT(code_of([&] { choose_weights(ggufs, ref, "x"); }), Catch::StartsWith("hub.quant_not_found"));
  ref.quant.clear();
  ref.file = "model-Q4_K_S.gguf";
  CHECK(choose_weights(ggufs, ref, "x").entry == "model-Q4_K_S.gguf");
  CHECK_THAT(code_of([&] { choose_weights({"README.md", "config.json"}, RepoRef{"org/name"}, "x"); }),
             Catch::StartsWith("hub.no_weights"));
  CHECK(download_command(RepoRef{"org/name", "v1", true}, {"a b.json", "model.safetensors"}) ==
        "hf download org/name --revision v1 --include 'a b.json' --include model.safetensors");
}

TEST_CASE("Hub cache: org/name resolves to its snapshot as huggingface_hub lays it out", "[hub]") {
  TempDir tmp;
  const std::string cache = tmp.file("hub");
  const std::string snap = test::put_in_hf_cache(cache, "org/llama", kSha, test::testdata("models/llama-sharded"), {"main", "v1"});
  test::put_in_hf_cache(cache, "org/llama", kSha2, test::testdata("models/llama"), {"other"});
  const HubEnv env = offline_env(cache);

  auto r = resolve_model("org/llama", "", {}, env);
  CHECK(r.path == snap);
  CHECK(r.stats.requests == 0);
  // The same checkpoint as the folder the snapshot was made from (read through the links).
  const Checkpoint via_cache = open_checkpoint(r.path), direct = open_checkpoint(test::testdata("models/llama-sharded"));
  CHECK(via_cache.total_parameters() == direct.total_parameters());
  CHECK(via_cache.files.size() == 5);
  CHECK(resolve_model("org/llama@v1", "", {}, env).path == snap);
  CHECK(resolve_model(std::string("org/llama@") + kSha2, "", {}, env).path ==
        fs::path(cache) / "models--org--llama" / "snapshots" / kSha2);
  CHECK(resolve_model("hf://org/llama@other", "", {.data = true}, env).path.find(kSha2) != std::string::npos);
  CHECK(resolve_model("https://huggingface.co/org/llama/tree/main", "", {}, env).path == snap);
  // A path that exists is never taken for an id, and neither is a malformed one.
  CHECK(resolve_model(test::testdata("models/llama"), "", {}, env).path == test::testdata("models/llama"));
  CHECK(resolve_model("no/such/path", "", {}, env).path == "no/such/path");
}

TEST_CASE("Hub cache: misses and incomplete snapshots name what is missing", "[hub]") {
  TempDir tmp;
  const std::string cache = tmp.file("hub");
  const std::string snap = test::put_in_hf_cache(cache, "org/llama", kSha, test::testdata("models/llama-sharded"));
  const HubEnv env = offline_env(cache);

  const std::string miss = code_of([&] { resolve_model("org/absent", "", {}, env); });
  CHECK_THAT(miss, Catch::StartsWith("hub.not_cached"));
  CHECK_THAT(miss, Catch::Contains("not in the local cache: " + cache + "/models--org--absent"));
  CHECK_THAT(code_of([&] { resolve_model("org/llama@v9", "", {}, env); }),
             Catch::Contains("not in the local cache: " + cache + "/models--org--llama/refs/v9"));

  // An interrupted download: the link of shard 3 leads nowhere.
  const fs::path link = fs::path(snap) / "model-00003-of-00005.safetensors";
  fs::remove(fs::path(snap) / fs::read_symlink(link));
  const std::string inc = code_of([&] { resolve_model("org/llama", "", {.data = true}, env); });
  CHECK_THAT(inc, Catch::StartsWith("hub.incomplete"));
  CHECK_THAT(inc, Catch::Contains("lacks 1 file: model-00003-of-00005.safetensors"));
  CHECK_THAT(inc, Catch::Contains("hf download org/llama --include model-00003-of-00005.safetensors"));
  // Offline, headers only: still incomplete (the Hub is not asked).
  CHECK_THAT(code_of([&] { resolve_model("org/llama", "", {}, env); }), Catch::StartsWith("hub.incomplete"));
  // run needs the tokenizer too.
  const std::string snap2 = test::put_in_hf_cache(cache, "org/spm", kSha, test::testdata("models/llama"));
  CHECK_THAT(code_of([&] { resolve_model("org/spm", "", {.data = true, .tokenizer = true}, env); }),
             Catch::Contains("lacks 1 file: tokenizer.json"));
  CHECK(resolve_model("org/spm", "", {.data = true}, env).path == snap2);
}

TEST_CASE("Hub cache: a GGUF repo by quantization tag or --file", "[hub]") {
  TempDir tmp, repo;
  fs::copy_file(test::testdata("models/llama-gguf/model.gguf"), repo.file("stories-Q8_0.gguf"));
  fs::copy_file(test::testdata("models/llama-gguf/model.gguf"), repo.file("stories-F32.gguf"));
  fs::create_directories(repo.path / "split");
  for (const auto& e : fs::directory_iterator(test::testdata("models/llama-gguf-split")))
    if (e.path().extension() == ".gguf") fs::copy_file(e.path(), repo.path / "split" / e.path().filename());
  const std::string cache = tmp.file("hub");
  const std::string snap = test::put_in_hf_cache(cache, "org/gguf", kSha, repo.path.string());
  const HubEnv env = offline_env(cache);
  CHECK(resolve_model("org/gguf:Q8_0", "", {.data = true}, env).path == snap + "/stories-Q8_0.gguf");
  CHECK(resolve_model("org/gguf", "stories-F32.gguf", {}, env).path == snap + "/stories-F32.gguf");
  CHECK_THAT(code_of([&] { resolve_model("org/gguf", "", {}, env); }), Catch::StartsWith("hub.ambiguous_gguf"));
  CHECK_THAT(code_of([&] { resolve_model("org/gguf:Q8_0", "stories-F32.gguf", {}, env); }), Catch::StartsWith("usage.file"));
  // A split GGUF opens whole from its first part in the snapshot (parts found beside it).
  std::string first;
  for (const auto& e : fs::directory_iterator(fs::path(snap) / "split"))
    if (e.path().filename().string().find("-00001-of-") != std::string::npos) first = "split/" + e.path().filename().string();
  REQUIRE_FALSE(first.empty());
  const auto r = resolve_model("org/gguf", first, {.data = true}, env);
  CHECK(open_checkpoint(r.path).total_parameters() ==
        open_checkpoint(test::testdata("models/llama-gguf-split") + "/" + fs::path(first).filename().string()).total_parameters());
}

TEST_CASE("Hub cache: every subcommand takes a Hub id (offline, exit 2 on a miss)", "[hub][cli]") {
  TempDir tmp;
  const std::string cache = tmp.file("hub");
  test::put_in_hf_cache(cache, "org/llama", kSha, test::testdata("models/llama-sharded"));
  test::put_in_hf_cache(cache, "org/spm", kSha, test::testdata("run/llama-spm"));
  test::HubEnvGuard guard;
  guard.set("HF_HUB_CACHE", cache);
  guard.set("HF_HUB_OFFLINE", "1");
  guard.set("XDG_CACHE_HOME", tmp.file("xdg"));
  guard.set("HF_ENDPOINT", "http://127.0.0.1:9");  // never asked

  auto by_id = test::run_cli({"estimate", "org/llama", "--json"});
  auto by_path = test::run_cli({"estimate", test::testdata("models/llama-sharded"), "--json"});
  REQUIRE(by_id.exit_code == 0);
  CHECK(json::parse(by_id.out)["num_parameters"] == json::parse(by_path.out)["num_parameters"]);
  CHECK(test::run_cli({"inspect", "org/llama", "--verify"}).exit_code == 0);
  CHECK(test::run_cli({"plan", "hf://org/llama", "--vram", "1G"}).exit_code == 0);
  CHECK(test::run_cli({"load", "org/llama"}).exit_code == 0);
  const auto run_id = test::run_cli({"run", "org/spm", "--raw", "--max-tokens", "8", "-q"}, "Once upon a time\n");
  const auto run_path = test::run_cli({"run", test::testdata("run/llama-spm"), "--raw", "--max-tokens", "8", "-q"}, "Once upon a time\n");
  REQUIRE(run_id.exit_code == 0);
  CHECK(json::parse(run_id.out)["text"] == json::parse(run_path.out)["text"]);
  CHECK(test::run_cli({"tokenize", "org/spm", "Once upon a time"}).out ==
        test::run_cli({"tokenize", test::testdata("run/llama-spm"), "Once upon a time"}).out);

  const auto miss = test::run_cli({"estimate", "org/absent"});
  CHECK(miss.exit_code == 2);
  CHECK_THAT(miss.err, Catch::Contains("not in the local cache: " + cache + "/models--org--absent"));
  CHECK_THAT(miss.err, Catch::Contains("HF_HUB_OFFLINE"));
  const auto incomplete = test::run_cli({"run", "org/llama"});  // no tokenizer.json in the snapshot
  CHECK(incomplete.exit_code == 2);
  CHECK_THAT(incomplete.err, Catch::Contains("hf download org/llama --include tokenizer.json"));
  CHECK(test::run_cli({"estimate", test::testdata("models/llama"), "--file", "x.gguf"}).exit_code == 2);
}

TEST_CASE("Hub cache: the cache huggingface_hub's snapshot_download wrote, offline", "[hub][cli]") {
  // testdata/hf-cache: written by scripts/check_hub_server.py --write-fixture (snapshot_download
  // of testdata/run/llama-spm served by tests/hub/hub_server.hpp), committed with its links.
  const std::string cache = test::testdata("hf-cache");
  REQUIRE(fs::is_symlink(fs::path(cache) / "models--nunchaku-test--llama-spm" / "snapshots" /
                         "068912269ac6e2c7094f808b494fcba04c64b8dc" / "model.safetensors"));
  TempDir tmp;
  test::HubEnvGuard guard;
  guard.set("HF_HOME", tmp.file("hf"));
  guard.set("HF_HUB_CACHE", cache);
  guard.set("HF_HUB_OFFLINE", "1");
  guard.set("XDG_CACHE_HOME", tmp.file("xdg"));
  const auto by_id = test::run_cli({"run", "nunchaku-test/llama-spm", "--raw", "--max-tokens", "8", "-q"}, "Once upon a time\n");
  const auto by_path = test::run_cli({"run", test::testdata("run/llama-spm"), "--raw", "--max-tokens", "8", "-q"}, "Once upon a time\n");
  INFO(by_id.err);
  REQUIRE(by_id.exit_code == 0);
  CHECK(json::parse(by_id.out)["text"] == json::parse(by_path.out)["text"]);
  CHECK(test::run_cli({"estimate", "nunchaku-test/llama-spm@068912269ac6e2c7094f808b494fcba04c64b8dc", "--json"}).exit_code == 0);
  // HF_HOME/hub is the default cache when HF_HUB_CACHE is not set.
  guard.unset("HF_HUB_CACHE");
  fs::create_directories(tmp.file("hf"));
  fs::create_directory_symlink(cache, tmp.file("hf") + "/hub");
  CHECK(test::run_cli({"inspect", "nunchaku-test/llama-spm"}).exit_code == 0);
}
