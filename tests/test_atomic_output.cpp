// AtomicOutput, the one output writer (plan --output, run --output): the target appears
// whole on commit; a failure first leaves the old file as it was and no temporary behind;
// temporaries have fresh random names opened O_EXCL|O_NOFOLLOW; the replaced file's mode
// is kept; a symlink target is resolved once; a recorded input is never a target.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "core/error.hpp"
#include "io/atomic_output.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
namespace fs = std::filesystem;

namespace {
size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST_CASE("atomic output: commit replaces the file, an abandoned write leaves it untouched", "[units]") {
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
  CHECK(entries(dir.path) == 1);  // no temporary left

  {
    AtomicOutput out(path);
    CHECK(fs::path(out.temp_path()).parent_path() == dir.path);  // beside the target: rename is atomic
    std::fputs("new contents\n", out.file());
    CHECK(test::read_text(path) == "old contents\n");  // nothing visible before commit
    out.commit();
  }
  CHECK(test::read_text(path) == "new contents\n");
  CHECK(entries(dir.path) == 1);

  write_file_atomically(path, "third\n");
  CHECK(test::read_text(path) == "third\n");
}

TEST_CASE("atomic output: random temporaries, the replaced file's mode, a symlink resolved once", "[units]") {
  test::TempDir dir;
  const std::string path = dir.file("out.json");
  test::write_file(path, std::string("x"));
  ::chmod(path.c_str(), 0640);
  AtomicOutput a(path), b(path);
  CHECK(a.temp_path() != b.temp_path());  // two writers never share a temporary
  a.commit();
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  b.commit();  // the second writer's whole file replaces the first's
  CHECK(test::read_text(path).empty());

  // A target that is a symlink is resolved once (issue 41): the file it points to is
  // replaced whole, the link stays. The temporary is never opened through a link.
  const std::string pointed = dir.file("pointed"), link = dir.file("link.json");
  test::write_file(pointed, std::string("old"));
  fs::create_symlink(pointed, link);
  write_file_atomically(link, "new");
  CHECK(fs::is_symlink(link));
  CHECK(test::read_text(pointed) == "new");
}

TEST_CASE("atomic output: a recorded input (by device and inode) is refused, exit 2", "[units]") {
  test::TempDir dir;
  const std::string in = dir.file("weights.bin");
  test::write_file(in, std::string("weights"));
  fs::create_hard_link(in, dir.file("alias.bin"));
  fs::create_symlink(in, dir.file("link.bin"));
  note_input_path(dir.path.string());  // a directory: every file in it
  for (const char* name : {"weights.bin", "alias.bin", "link.bin"}) {
    try {
      write_file_atomically(dir.file(name), "oops");
      FAIL("no error for " << name);
    } catch (const Error& e) {
      CHECK(e.code() == "io.output_is_input");
      CHECK(e.exit_code() == 2);
    }
  }
  CHECK(test::read_text(in) == "weights");
  write_file_atomically(dir.file("new.json"), "ok");  // not an input
  clear_noted_inputs();
  CHECK(test::read_text(dir.file("new.json")) == "ok");
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
