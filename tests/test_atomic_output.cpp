// AtomicOutput (plan --output, run --output): the target appears whole on commit, and a
// run that fails first leaves the old file as it was and no temporary behind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <stdexcept>

#include "core/error.hpp"
#include "io/atomic_output.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;


TEST_CASE("atomic output: commit replaces the file; an abandoned write leaves it untouched", "[units]") {
  test::TempDir dir;
  const std::string path = dir.file("out.jsonl");
  test::write_file(path, std::string("old contents\n"));

  try {
    AtomicOutput out(path);
    std::fputs("half a result", out.file());
    throw std::runtime_error("a request failed the run");
  } catch (const std::runtime_error&) {
  }
  CHECK(test::read_text(path) == "old contents\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp-nunchaku"));

  {
    AtomicOutput out(path);
    std::fputs("new contents\n", out.file());
    CHECK(test::read_text(path) == "old contents\n");  // nothing visible before commit
    out.commit();
  }
  CHECK(test::read_text(path) == "new contents\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp-nunchaku"));

  write_file_atomically(path, "third\n");
  CHECK(test::read_text(path) == "third\n");
}

TEST_CASE("atomic output: an unwritable place is io.write naming the file", "[units]") {
  test::TempDir dir;
  const std::string path = dir.file("no-such-dir/out.json");
  try {
    write_file_atomically(path, "x");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "io.write");
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}
