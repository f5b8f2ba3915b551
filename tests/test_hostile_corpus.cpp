// The committed hostile corpus (tests/hostile/, written by scripts/make_hostile.py with
// the rule each input breaks): indexing and describing raise exactly that error code, and
// every subcommand (inspect, estimate, plan, load, run) answers with one escaped line on
// stderr and exit 2: no crash, no hang, nothing written.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/open.hpp"
#include "format/verify.hpp"
#include "model/model.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
namespace fs = std::filesystem;

namespace {

std::string corpus(const std::string& rel) { return std::string(NUNCHAKU_SOURCE_DIR) + "/tests/hostile/" + rel; }

const nlohmann::json& manifest() {
  static const nlohmann::json m = test::read_json(corpus("manifest.json"));
  return m;
}

// The error code of indexing + describing `path`, "" when both succeed.
std::string describe_code(const std::string& path, Error* out = nullptr) {
  try {
    Checkpoint ck = open_checkpoint(path);
    (void)describe_model(ck);
  } catch (const Error& e) {
    if (out) *out = e;
    return e.code();
  }
  return "";
}

bool one_clean_line(const std::string& err) {
  return err.rfind("nunchaku: error: ", 0) == 0 && err.find('\n') == err.size() - 1 &&
         err.find('\x1b') == std::string::npos && err.find('\r') == std::string::npos &&
         err.find('\x07') == std::string::npos;
}

}  // namespace

TEST_CASE("hostile corpus: indexing and describing raise the rule each input breaks", "[hostile]") {
  REQUIRE(manifest().size() >= 50);
  for (const auto& e : manifest()) {
    const std::string path = corpus(e["path"]);
    INFO(e["path"].get<std::string>() << ": " << e["why"].get<std::string>());
    Error err("none", "");
    CHECK(describe_code(path, &err) == e["code"].get<std::string>());
    if (!e["code"].get<std::string>().empty()) {
      CHECK(err.exit_code() == 2);
      CHECK_FALSE(err.context().file.empty());  // names the file at fault
      CHECK(std::string(err.what()).find('\n') == std::string::npos);
    }
    if (e.contains("verify_code")) {
      try {
        verify_checkpoint(open_checkpoint(path));
        FAIL("verify passed");
      } catch (const Error& v) {
        CHECK(v.code() == e["verify_code"].get<std::string>());
      }
    }
  }
  CHECK_FALSE(fs::exists("/tmp/nunchaku-pwned"));
}

namespace {

// The manifest entries of one third (part 0, 1 or 2) through `commands` (those that read
// the model: exit 2, one clean line).
void every_entry_through(const std::vector<std::vector<std::string>>& commands, size_t part) {
  const auto& all = manifest();
  REQUIRE(all.size() >= 3);
  for (size_t i = all.size() * part / 3; i < all.size() * (part + 1) / 3; ++i) {
    const auto& e = all[i];
    const std::string path = corpus(e["path"]);
    INFO(e["path"].get<std::string>() << ": " << e["why"].get<std::string>());
    if (e["exit"] == 0) {
      auto r = test::run_cli({"inspect", path});
      CHECK(r.exit_code == 0);
      if (e.contains("verify_code")) {
        auto v = test::run_cli({"inspect", "--verify", path});
        CHECK(v.exit_code == 2);
        CHECK(one_clean_line(v.err));
      }
      continue;
    }
    for (auto args : commands) {
      for (auto& a : args)
        if (a == "PATH") a = path;
      INFO(args[0]);
      auto r = test::run_cli(args, "hi\n");
      CHECK(r.exit_code == 2);
      CHECK(one_clean_line(r.err));
      CHECK(r.out.find('\x1b') == std::string::npos);
    }
  }
  CHECK_FALSE(fs::exists("/tmp/nunchaku-pwned"));
}

}  // namespace

// Six cases (two command sets, each over a third of the corpus), so each stays well under
// 30 s in the sanitizer build on a busy machine (whole, they were 37 and 39 s there; halves
// reached 31 s with another build running).
const std::vector<std::vector<std::string>> kReaders = {{"inspect", "PATH"}, {"inspect", "--tensors", "PATH"}, {"estimate", "PATH"}};
const std::vector<std::vector<std::string>> kLoaders = {{"plan", "PATH", "--vram", "1G"}, {"load", "PATH"}, {"run", "PATH", "--max-tokens", "1"}};

TEST_CASE("hostile corpus: inspect and estimate exit 2 with one escaped line, first third", "[hostile][cli]") { every_entry_through(kReaders, 0); }
TEST_CASE("hostile corpus: inspect and estimate exit 2 with one escaped line, second third", "[hostile][cli]") { every_entry_through(kReaders, 1); }
TEST_CASE("hostile corpus: inspect and estimate exit 2 with one escaped line, last third", "[hostile][cli]") { every_entry_through(kReaders, 2); }
TEST_CASE("hostile corpus: plan, load and run exit 2 with one escaped line, first third", "[hostile][cli]") { every_entry_through(kLoaders, 0); }
TEST_CASE("hostile corpus: plan, load and run exit 2 with one escaped line, second third", "[hostile][cli]") { every_entry_through(kLoaders, 1); }
TEST_CASE("hostile corpus: plan, load and run exit 2 with one escaped line, last third", "[hostile][cli]") { every_entry_through(kLoaders, 2); }
