// Issue 41's ten defects, each reproduced through the built binary (or the library where
// the case needs a hook): outputs that are devices, FIFOs or symlinks; reader threads the
// system refuses; tensor names that are not UTF-8 in JSON; stdout write errors; a FIFO as
// the checkpoint; a checkpoint rewritten in place during run; the other fatal signals;
// convert's staging name; ulimit -v in budgets; and the messages. Device nodes are made in
// a temp dir with mknod, which needs root: those cases skip with a message otherwise.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "convert/output.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/host_memory.hpp"
#include "core/interrupt.hpp"
#include "core/text.hpp"
#include "io/atomic_output.hpp"
#include "io/chunk_readers.hpp"
#include "io/weight_store.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/pty.hpp"
#include "tests/unix_child.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModel = "run/llama-spm";

bool is_root() { return ::geteuid() == 0; }

// The bytes a reader on `fifo` gets until the writer closes it (it opens the FIFO without
// blocking, so a writer that never comes ends the wait at `timeout_s` with "").
struct FifoReader {
  std::string got;
  std::thread t;
  explicit FifoReader(const std::string& fifo, double timeout_s = 60) {
    t = std::thread([this, fifo, timeout_s] {
      const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
      if (fd < 0) return;
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
      bool writer_seen = false;
      char buf[4096];
      while (std::chrono::steady_clock::now() < end) {
        pollfd p{fd, POLLIN, 0};
        ::poll(&p, 1, 20);
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) got.append(buf, size_t(n)), writer_seen = true;
        else if (n == 0 && writer_seen) break;  // the writer closed it
        else if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // no writer yet
      }
      ::close(fd);
    });
  }
  std::string wait() {
    t.join();
    return got;
  }
};

// A shell command line through /bin/sh (redirections such as >/dev/full, >&-, pipes); the exit code.
int shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string bin() { return std::string("'") + NUNCHAKU_BINARY + "'"; }

mode_t file_type(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

}  // namespace

// ---- 1. -o never replaces a node that is not a regular file ---------------------------------

TEST_CASE("hardening 1: -o to a FIFO (directly or through a symlink) is written in place, the FIFO stays", "[hardening][unix]") {
  test::TempDir dir;
  const std::string fifo = dir.file("out.fifo"), link = dir.file("link.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_symlink(fifo, link);
  for (const std::string& target : {fifo, link}) {
    INFO(target);
    FifoReader reader(fifo);
    auto r = test::run_cli({"plan", test::testdata(kModel), "--format", "accelerate", "-o", target});
    const std::string got = reader.wait();
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(file_type(fifo) == S_IFIFO);  // not renamed over
    CHECK(file_type(link) == S_IFLNK);
    REQUIRE(!got.empty());
    CHECK(json::parse(got).is_object());  // the whole device map, streamed
  }
  CHECK(test::others_in(dir.path, {"out.fifo", "link.json"}).empty());  // no temporary made
}

TEST_CASE("hardening 1: -o to a character device is written in place (run -o on a null device made by mknod)", "[hardening][unix]") {
  if (!is_root()) {
    WARN("skipped: mknod of a character device needs root");
    return;
  }
  test::TempDir dir;
  const std::string null = dir.file("null");
  REQUIRE(::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
  auto r = test::run_cli({"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-o", null, "-q"}, "hi\n");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  struct stat st {};
  REQUIRE(::lstat(null.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(st.st_rdev == makedev(1, 3));
  auto p = test::run_cli({"plan", test::testdata(kModel), "--format", "json", "-o", null});
  CHECK(p.exit_code == 0);
  CHECK(file_type(null) == S_IFCHR);
  CHECK(test::others_in(dir.path, {"null"}).empty());
  // A block device is refused, never written.
  const std::string blk = dir.file("blk");
  REQUIRE(::mknod(blk.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0);
  auto b = test::run_cli({"plan", test::testdata(kModel), "--format", "json", "-o", blk});
  CHECK(b.exit_code == 2);
  CHECK_THAT(b.err, Catch::Contains("not a regular file"));
  CHECK(file_type(blk) == S_IFBLK);
}

TEST_CASE("hardening 1: -o through a link to /proc/self/fd/1 writes the pipe, and the link stays a link", "[hardening][unix]") {
  test::TempDir dir;
  const std::string link = dir.file("link.json"), out = dir.file("piped");
  fs::create_symlink("/proc/self/fd/1", link);
  const int rc = shell(bin() + " plan '" + test::testdata(kModel) + "' --format accelerate -o '" + link + "' 2>/dev/null | cat > '" +
                       out + "'");
  CHECK(rc == 0);
  CHECK(file_type(link) == S_IFLNK);
  const std::string got = test::read_text(out);
  CHECK_THAT(got, Catch::Contains("\"lm_head\""));  // the device map came through the pipe
}

TEST_CASE("hardening 1: a symlink at -o is resolved once: its target is written, a dangling one creates it", "[hardening][unix]") {
  test::TempDir dir;
  fs::create_directory(dir.path / "real");
  const std::string target = dir.file("real/map.json"), link = dir.file("map.json");
  test::write_file(target, std::string("old"));
  fs::create_symlink("real/map.json", link);  // relative: resolved from the link's directory
  auto r = test::run_cli({"plan", test::testdata(kModel), "--format", "accelerate", "-o", link});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(file_type(link) == S_IFLNK);
  CHECK(json::parse(test::read_text(target)).is_object());
  CHECK(test::others_in(dir.path / "real", {"map.json"}).empty());

  const std::string dangling = dir.file("new.json");
  fs::create_symlink(dir.file("real/created.json"), dangling);
  CHECK(test::run_cli({"plan", test::testdata(kModel), "--format", "accelerate", "-o", dangling}).exit_code == 0);
  CHECK(file_type(dangling) == S_IFLNK);
  CHECK(file_type(dir.file("real/created.json")) == S_IFREG);

  // A link to an input is still an input.
  fs::create_symlink(fs::absolute(test::testdata(kModel + "/config.json")), dir.file("cfg.json"));
  CHECK(test::run_cli({"plan", test::testdata(kModel), "--format", "json", "-o", dir.file("cfg.json")}).exit_code == 2);
  // A loop is a clear error.
  fs::create_symlink(dir.file("loop2"), dir.file("loop1"));
  fs::create_symlink(dir.file("loop1"), dir.file("loop2"));
  auto l = test::run_cli({"plan", test::testdata(kModel), "--format", "json", "-o", dir.file("loop1")});
  CHECK(l.exit_code == 2);
  CHECK_THAT(l.err, Catch::Contains("Too many levels of symbolic links"));
}

TEST_CASE("hardening 1: -o - is standard output, streamed", "[hardening][unix]") {
  auto r = test::run_cli({"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-o", "-", "-q"}, "hi\n");
  CHECK(r.exit_code == 0);
  REQUIRE(test::jsonl(r.out).size() == 1);
  auto p = test::run_cli({"plan", test::testdata(kModel), "--format", "accelerate", "-o", "-"});
  CHECK(p.exit_code == 0);
  CHECK(json::parse(p.out).is_object());  // the map alone: no table after it
  CHECK(!fs::exists("-"));
}

TEST_CASE("hardening 1: a non-regular file that appears at a new name is never renamed over", "[hardening][units]") {
  test::TempDir dir;
  const std::string path = dir.file("out.json");
  AtomicOutput out(path);
  std::fputs("x", out.file());
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);  // appeared while writing
  CHECK_THROWS_AS(out.commit(), Error);
  CHECK(file_type(path) == S_IFIFO);
  CHECK(test::others_in(dir.path, {"out.json"}).empty());  // the temporary is removed
}

// ---- 2. reader threads the system refuses -----------------------------------------------------

namespace {
struct CountingTarget final : ReadTarget {
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
  std::atomic<int> done_jobs{0};
  Buffer buffer(const ReadJob& j) override { return {buf.data() + (j.off % 4096), Slack::None, nullptr}; }
  void done(const ReadJob&, const Buffer&, uint64_t, double, std::exception_ptr) override { ++done_jobs; }
  std::string tensor_at(const ReadJob&, uint64_t) const override { return "t"; }
};
}  // namespace

TEST_CASE("hardening 2: reader threads the system refuses: fewer with a warning, none is an error, never abort", "[hardening][units]") {
  test::TempDir dir;
  test::write_file(dir.file("f"), std::string(8192, 'x'));
  ReadFile file(dir.file("f"), false);
  CountingTarget target;
  ChunkReaders::fail_thread_starts_after_for_test(1);
  {
    ChunkReaders readers(target, 4);
    CHECK(readers.threads() == 1);
    CHECK_THAT(readers.warning(), Catch::Contains("1 of 4"));
    readers.push(std::vector<ReadJob>{{&file, 0, 4096, 0}, {&file, 4096, 4096, 1}});
    for (int i = 0; i < 1000 && target.done_jobs < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(target.done_jobs == 2);  // the one reader took both
  }
  ChunkReaders::fail_thread_starts_after_for_test(0);
  try {
    ChunkReaders none(target, 4);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "io.threads");
    CHECK(e.exit_code() == 1);
  }
  ChunkReaders::fail_thread_starts_after_for_test(-1);
}

TEST_CASE("hardening 2: load --copy --threads 4 under ulimit -u: no abort (exit 134)", "[hardening][unix]") {
  // RLIMIT_NPROC binds an unprivileged user only: as root the child becomes nobody first.
  test::TempDir dir;
  ::chmod(dir.path.c_str(), 0777);
  test::ChildLimits lim{.processes = 1, .user = is_root() ? uid_t(65534) : uid_t(0)};
  // In the sanitizer build LeakSanitizer starts a thread of its own at exit, which this limit
  // refuses ("LeakSanitizer has encountered a fatal error", abort): that is the tool's limit,
  // not ours, so the child runs without the leak check (every other test keeps it).
  test::ScopedEnv no_lsan("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1");
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, {"--direct-io"}}) {
    std::vector<std::string> args = {"load", test::testdata(kModel), "--copy", "--threads", "4", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    test::Child c = test::spawn(args, "/dev/null", dir.file("out"), dir.file("err"), lim);
    const int code = test::wait_exit(c.pid);
    const std::string err = test::read_text(dir.file("err"));
    INFO(err);
    if (code == 126) {
      test::skip_case("cannot run nunchaku as user nobody here (no root, or a checkout nobody cannot reach)");
      return;
    }
    CHECK(code != 134);
    CHECK_THAT(err, !Catch::Contains("terminate called"));
    CHECK((code == 0 || code == 1));
    if (code == 1) CHECK_THAT(err, Catch::Contains("thread"));
  }
}

// ---- 3. tensor names that are not UTF-8 in every JSON document --------------------------------

namespace {
// tests/hostile/gguf_control.gguf (a well-formed tiny llama) with "output.weight" renamed to
// "outpu\xff.weight": the head is then tied to the embedding and the model stays valid.
std::string gguf_with_invalid_name(const test::TempDir& dir) {
  std::string bytes = test::read_text(std::string(NUNCHAKU_SOURCE_DIR) + "/tests/hostile/gguf_control.gguf");
  const size_t at = bytes.find("output.weight");
  REQUIRE(at != std::string::npos);
  bytes[at + 5] = '\xff';
  const std::string path = dir.file("model.gguf");
  test::write_file(path, bytes);
  return path;
}
const std::string kReplaced = "outpu\xEF\xBF\xBD.weight";  // U+FFFD for the 0xFF byte
}  // namespace

TEST_CASE("hardening 3: a GGUF tensor name that is not UTF-8 gives valid JSON in inspect, estimate, plan, load", "[hardening][unix]") {
  test::TempDir dir;
  const std::string model = gguf_with_invalid_name(dir);
  const std::vector<std::vector<std::string>> commands = {{"inspect", model, "--json"},
                                                          {"inspect", model, "--json", "--tensors"},
                                                          {"estimate", model, "--json"},
                                                          {"plan", model, "--json"},
                                                          {"load", model, "--json", "--device", "cpu"}};
  for (const auto& args : commands) {
    auto r = test::run_cli(args);
    INFO(args[0] << " " << args.back() << ": " << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.err, !Catch::Contains("internal error"));
    json j;
    REQUIRE_NOTHROW(j = json::parse(r.out));
  }
  auto t = test::run_cli({"inspect", model, "--json", "--tensors"});
  CHECK_THAT(t.out, Catch::Contains(kReplaced));
  // An accelerate map of a GGUF is refused (accelerate cannot load one by GGUF names), as a usage error.
  auto a = test::run_cli({"plan", model, "--format", "accelerate"});
  CHECK(a.exit_code == 2);
  CHECK_THAT(a.err, Catch::Contains("is a GGUF file") && !Catch::Contains("internal error"));
}

TEST_CASE("hardening 3: convert of a GGUF with a name that is not UTF-8 is not an internal error", "[hardening][unix]") {
  test::TempDir dir;
  const std::string model = gguf_with_invalid_name(dir);
  for (const char* to : {"safetensors", "gguf"}) {
    const std::string out = dir.file(std::string("out-") + to + (std::string(to) == "gguf" ? ".gguf" : ""));
    auto r = test::run_cli({"convert", model, out, "--format", to, "--json"});
    INFO(to << ": " << r.err);
    CHECK((r.exit_code == 0 || r.exit_code == 2));
    CHECK_THAT(r.err, !Catch::Contains("internal error"));
    if (r.exit_code == 0) CHECK_NOTHROW(json::parse(r.out));
  }
}

TEST_CASE("hardening 3: dump_json writes any bytes as valid JSON that parses back to utf8_replace_invalid", "[hardening][units]") {
  // Property over every short byte string of a hostile alphabet (invalid leads, truncated
  // sequences, surrogates, overlongs, controls), as keys and as values.
  const std::vector<std::string> alphabet = {"a", "\xff", "\xc0", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x01",
                                             "\"", "\\", "\xe2\x82\xac", "\xf0\x9f\x98", "\x7f"};
  size_t cases = 0;
  for (const auto& a : alphabet)
    for (const auto& b : alphabet)
      for (const auto& c : alphabet) {
        const std::string name = a + b + c;
        const json doc = {{"tensors", {{{"name", name}}}}, {"device_map", {{name, "cpu"}}}};
        json back;
        REQUIRE_NOTHROW(back = json::parse(dump_json(doc, 2)));
        CHECK(back["tensors"][0]["name"] == utf8_replace_invalid(name));
        CHECK(back["device_map"].contains(utf8_replace_invalid(name)));
        CHECK(json::parse(dump_json(doc, -1, true)) == back);  // ensure_ascii too
        ++cases;
      }
  CHECK(cases == 12 * 12 * 12);
  // Two keys that become one name are an error, not a silent loss.
  try {
    (void)dump_json(json{{"a\xff", 1}, {"a\xfe", 2}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "json.name_collision");
    CHECK(e.exit_code() == 2);
  }
}

// ---- 4. stdout write errors -------------------------------------------------------------------

TEST_CASE("hardening 4: a full stdout is exit 1 with the OS message for every command, --help and --version too", "[hardening][unix]") {
  const std::string m = "'" + test::testdata(kModel) + "'";
  const std::vector<std::string> commands = {"--version", "--version --json", "--help", "help plan", "inspect " + m,
                                             "inspect " + m + " --json", "estimate " + m, "plan " + m,
                                             "plan " + m + " --format accelerate", "load " + m + " --device cpu",
                                             "tokenize " + m + " hi"};
  test::TempDir dir;
  for (const auto& c : commands) {
    INFO(c);
    const int rc = shell(bin() + " " + c + " >/dev/full 2>'" + dir.file("err") + "'");
    const std::string err = test::read_text(dir.file("err"));
    INFO(err);
    CHECK(rc == 1);
    CHECK_THAT(err, Catch::Contains("No space left on device"));
    CHECK_THAT(err, !Catch::Contains("internal error"));
  }
}

TEST_CASE("hardening 4 and 10: a closed stdout is exit 2 naming stdout, as run says", "[hardening][unix]") {
  const std::string m = "'" + test::testdata(kModel) + "'";
  test::TempDir dir;
  for (const std::string& c : std::vector<std::string>{"inspect " + m, "inspect " + m + " --json --tensors", "--version", "plan " + m}) {
    INFO(c);
    const int rc = shell(bin() + " " + c + " >&- 2>'" + dir.file("err") + "'");
    const std::string err = test::read_text(dir.file("err"));
    INFO(err);
    CHECK(rc == 2);
    CHECK_THAT(err, Catch::Contains("stdout") && Catch::Contains("Bad file descriptor"));
    CHECK_THAT(err, !Catch::Contains("internal error"));
  }
}

TEST_CASE("hardening 4 and 10: an output larger than stdio's buffer keeps the OS's reason (closed stdout, full disk)",
          "[hardening][unix]") {
  // Qwen3-30B-A3B's tensor list as JSON is megabytes: the write that fails is inside the
  // command's own fwrite, not main's final flush, whose errno said "Input/output error" (exit 1
  // for a closed stdout). The small-output cases above pass through the final flush.
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("m"));
  test::write_arch_fixture(test::testdata("arch/qwen3-30b-a3b"), dir.file("m"));
  const std::string cmd = bin() + " inspect '" + dir.file("m") + "' --json --tensors";
  CHECK(shell(cmd + " >&- 2>'" + dir.file("err") + "'") == 2);
  CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("stdout") && Catch::Contains("Bad file descriptor"));
  CHECK(shell(cmd + " >/dev/full 2>'" + dir.file("err") + "'") == 1);
  CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("stdout") && Catch::Contains("No space left on device"));
}

// ---- 5. a FIFO as the checkpoint --------------------------------------------------------------

TEST_CASE("hardening 5: a FIFO given as the checkpoint is refused at once, never waited on", "[hardening][unix]") {
  test::TempDir dir;
  for (const char* name : {"m.gguf", "m.safetensors", "m.bin"}) {
    const std::string fifo = dir.file(name);
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    for (const char* cmd : {"inspect", "estimate", "load"}) {
      INFO(cmd << " " << name);
      const auto t0 = std::chrono::steady_clock::now();
      test::Child c = test::spawn({cmd, fifo}, "/dev/null", dir.file("out"), dir.file("err"));
      CHECK(test::wait_exit(c.pid, 20) == 2);
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
      CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("not a regular file"));
    }
  }
}

// ---- 6. a checkpoint rewritten in place while it is mapped ------------------------------------

TEST_CASE("hardening 6: a mapped file rewritten in place is io.changed_in_place, one replaced by rename is not", "[hardening][units]") {
  test::TempDir dir;
  const std::string path = dir.file("w.bin");
  test::write_file(path, std::string(8192, 'a'));
  const timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};  // an mtime long ago: any rewrite moves it
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
  File f = File::open_read_only(path);
  void* p = map_read_only(f, 0, 8192, false);
  CHECK_NOTHROW(check_mapped_reads());
  // Replaced by rename: the mapping keeps the old inode, unchanged.
  test::write_file(dir.file("new.bin"), std::string(8192, 'b'));
  fs::rename(dir.file("new.bin"), path);
  CHECK_NOTHROW(check_mapped_reads());
  unmap_read_only(p, 8192);

  ::utimensat(AT_FDCWD, path.c_str(), old_times, 0);
  File g = File::open_read_only(path);
  void* q = map_read_only(g, 0, 8192, false);
  {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);  // in place, same size
    out.seekp(100);
    out.write("zzzz", 4);
  }
  try {
    check_mapped_reads();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "io.changed_in_place");
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == path);
  }
  unmap_read_only(q, 8192);
  CHECK_NOTHROW(check_mapped_reads());  // unmapped: no longer watched
}

TEST_CASE("hardening 6: run fails with exit 2 naming the file when its weights are rewritten in place", "[hardening][unix]") {
  test::TempDir dir;
  const fs::path model = dir.path / "model";
  fs::copy(test::testdata(kModel), model);
  const std::string weights = (model / "model.safetensors").string();
  const timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, weights.c_str(), old_times, 0) == 0);
  const std::string in = dir.file("in.jsonl"), out = dir.file("out.jsonl");
  test::write_file(in, test::long_input(50));
  test::Child c = test::spawn({"run", model.string(), "--raw", "--batch-size", "1", "-i", in, "-o", out, "-q"}, "/dev/null",
                              dir.file("stdout"), dir.file("err"));
  REQUIRE(test::wait_for_first_result(dir.path));
  {
    const std::string bytes = test::read_text(weights);  // the same bytes, written over themselves
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
  }
  const int code = test::wait_exit(c.pid);
  const std::string err = test::read_text(dir.file("err"));
  INFO(err);
  CHECK(code == 2);
  CHECK_THAT(err, Catch::Contains("model.safetensors") && Catch::Contains("changed while it was in use"));
  CHECK(test::jsonl(test::read_text(out)).size() < 50);  // finished results kept, the rest not computed
}

// ---- 7. the other fatal signals -----------------------------------------------------------------

TEST_CASE("hardening 7: SIGHUP, SIGUSR1, SIGALRM keep the finished results and leave no temporary", "[hardening][unix]") {
  for (int sig : {SIGHUP, SIGUSR1, SIGALRM}) {
    INFO("signal " << sig);
    test::TempDir dir;
    const std::string in = dir.file("in.jsonl"), out = dir.file("out.jsonl");
    test::write_file(in, test::long_input(300));
    test::Child c = test::spawn({"run", test::testdata(kModel), "--raw", "--batch-size", "2", "-i", in, "-o", out, "-q"},
                                "/dev/null", dir.file("stdout"), dir.file("err"));
    REQUIRE(test::wait_for_first_result(dir.path));
    REQUIRE(test::wait_catches(c.pid, sig));
    ::kill(c.pid, sig);
    CHECK(test::wait_exit(c.pid) == 128 + sig);
    const std::string err = test::read_text(dir.file("err"));
    INFO(err);
    CHECK_THAT(err, Catch::Contains(sig == SIGHUP ? "SIGHUP" : sig == SIGUSR1 ? "SIGUSR1" : "SIGALRM"));
    const auto results = test::jsonl(test::read_text(out));
    CHECK(!results.empty());
    CHECK(results.size() < 300);
    CHECK(test::others_in(dir.path, {"in.jsonl", "out.jsonl", "stdout", "err"}).empty());
  }
}

TEST_CASE("hardening 7: a write past ulimit -f (SIGXFSZ not ignored) is exit 1, the old file and no temporary left", "[hardening][unix]") {
  test::TempDir dir;
  const std::string in = dir.file("in.jsonl"), out = dir.file("out.jsonl");
  test::write_file(in, test::long_input(100));
  test::write_file(out, std::string("old\n"));
  test::Child c = test::spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "8", "-i", in, "-o", out, "-q"}, "/dev/null",
                              dir.file("stdout"), dir.file("err"), test::ChildLimits{.file_size = 4096, .file_size_signal = true});
  CHECK(test::wait_exit(c.pid) == 1);
  CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("File too large"));
  CHECK(test::read_text(out) == "old\n");
  CHECK(test::others_in(dir.path, {"in.jsonl", "out.jsonl", "stdout", "err"}).empty());
}

// ---- 8. convert's staging never touches what it did not create ---------------------------------

TEST_CASE("hardening 8: convert's staging name is fresh and a planted directory is never removed", "[hardening][units]") {
  test::TempDir dir;
  const std::string out = dir.file("out");
  // The name older versions used (".NAME.tmp-nunchaku-PID"), planted with a file in it.
  const fs::path planted = dir.path / (".out.tmp-nunchaku-" + std::to_string(::getpid()));
  fs::create_directory(planted);
  test::write_file((planted / "precious").string(), std::string("keep"));
  std::string staging;
  {
    convert::StagedOutput staged(out, true);
    staging = staged.staging();
    CHECK(staging != planted.string());
    CHECK(fs::is_directory(staging));
  }  // not committed: removes its own staging directory only
  CHECK(!fs::exists(staging));
  CHECK(test::read_text((planted / "precious").string()) == "keep");
  {
    convert::StagedOutput a(out, false), b(out, false);
    CHECK(a.staging() != b.staging());  // each created its own
  }
  CHECK(test::others_in(dir.path, {planted.filename().string()}).empty());
}

// ---- 9. ulimit -v and cgroup limits in the host budget -----------------------------------------

TEST_CASE("hardening 9: the host budget is at most what RLIMIT_AS leaves", "[hardening][units]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped: an ASan build reserves more address space than a limit leaves room for");
  return;
#endif
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_AS, &saved) == 0);
  const auto vm = parse_kb_field(test::read_text("/proc/self/status"), "VmSize:");
  REQUIRE(vm);
  const uint64_t room = uint64_t(512) << 20;
  if (saved.rlim_cur != RLIM_INFINITY && saved.rlim_cur < *vm + room) {
    WARN("skipped: the address-space limit is already tighter than this test sets");
    return;
  }
  struct rlimit tight = saved;
  tight.rlim_cur = *vm + room;
  REQUIRE(::setrlimit(RLIMIT_AS, &tight) == 0);
  const HostMemory hm = host_memory_available();
  const uint64_t cpu = free_bytes_on(Device{Device::Kind::Cpu, 0});
  ::setrlimit(RLIMIT_AS, &saved);
  CHECK(hm.bytes <= room);
  CHECK(hm.bytes > room / 2);  // VmSize barely moved meanwhile
  CHECK(hm.limited_by == "ulimit -v");
  CHECK(cpu <= room);
}

TEST_CASE("hardening 9: cgroup and /proc texts parse as the kernel writes them", "[hardening][units]") {
  CHECK(!parse_cgroup_limit("max\n"));
  CHECK(parse_cgroup_limit("1073741824\n") == uint64_t(1) << 30);
  CHECK(!parse_cgroup_limit("9223372036854771712\n"));  // cgroup v1's "no limit"
  CHECK(!parse_cgroup_limit(""));
  CHECK(left_under(1000, 300) == 700);
  CHECK(left_under(1000, 3000) == 0);
  CHECK(parse_kb_field("Name:\tx\nVmPeak:\t  2000 kB\nVmSize:\t  1500 kB\n", "VmSize:") == 1500u * 1024);
  CHECK(parse_kb_field("MemTotal: 10 kB\nMemAvailable:   4 kB\n", "MemAvailable:") == 4096u);
  CHECK(!parse_kb_field("MemTotal: 10 kB\n", "MemAvailable:"));
}

TEST_CASE("hardening 9: run --batch-size auto sizes for what ulimit -v leaves, and says so", "[hardening][unix]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped: an ASan build reserves more address space than the limit");
  return;
#endif
  test::TempDir dir;
  test::write_file(dir.file("in"), std::string("hi\n"));
  test::Child c = test::spawn({"run", test::testdata(kModel), "--raw", "--batch-size", "auto", "--max-tokens", "2"}, dir.file("in"),
                              dir.file("out"), dir.file("err"), rlim_t(4) << 30);
  const int code = test::wait_exit(c.pid, 120);
  const std::string err = test::read_text(dir.file("err"));
  INFO(err);
  CHECK(code == 0);
  CHECK_THAT(err, Catch::Contains("batch size auto: ") && Catch::Contains("limited by ulimit -v"));
  CHECK(test::jsonl(test::read_text(dir.file("out"))).size() == 1);
}

// ---- 10. messages -------------------------------------------------------------------------------

TEST_CASE("hardening 10: a symlink loop and an unreadable directory say so", "[hardening][unix]") {
  test::TempDir dir;
  fs::create_symlink(dir.file("b"), dir.file("a"));
  fs::create_symlink(dir.file("a"), dir.file("b"));
  auto r = test::run_cli({"inspect", dir.file("a")});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("Too many levels of symbolic links"));

  const fs::path locked = dir.path / "locked";
  fs::copy(test::testdata(kModel), locked);
  ::chmod(locked.c_str(), 0);
  ::chmod(dir.path.c_str(), 0755);
  // Root reads any directory: the check runs as nobody then.
  test::Child c = test::spawn({"inspect", locked.string()}, "/dev/null", "/dev/null", dir.file("err"),
                              test::ChildLimits{.user = is_root() ? uid_t(65534) : uid_t(0)});
  const int code = test::wait_exit(c.pid);
  ::chmod(locked.c_str(), 0755);
  if (code == 126) {
    test::skip_case("cannot run nunchaku as user nobody here (no root, or a checkout nobody cannot reach)");
    return;
  }
  const std::string err = test::read_text(dir.file("err"));
  INFO(err);
  CHECK(code == 2);
  CHECK_THAT(err, Catch::Contains("Permission denied"));
  CHECK_THAT(err, !Catch::Contains("no checkpoint files"));
}

TEST_CASE("hardening 10: a request that is not JSON says where, without nlohmann's exception prefix", "[hardening][unix]") {
  auto r = test::run_cli({"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-q"}, "{\"prompt\": oops}\n");
  CHECK(r.exit_code == 0);
  const auto out = test::jsonl(r.out);
  REQUIRE(out.size() == 1);
  const std::string msg = out[0]["error"]["message"];
  CHECK_THAT(msg, Catch::Contains("line 1") && Catch::Contains("parse error"));
  CHECK_THAT(msg, !Catch::Contains("[json.exception"));
}

TEST_CASE("hardening 10: counts of one read as one", "[hardening][unix]") {
  test::TempDir dir;
  // One KV claimed, but the header is too short for it: "1 metadata entry cannot fit".
  std::string bytes = std::string("GGUF") + std::string("\x03\0\0\0", 4) + std::string(8, '\0') + std::string("\x01", 1) +
                      std::string(7, '\0');
  test::write_file(dir.file("one.gguf"), bytes);
  auto r = test::run_cli({"inspect", dir.file("one.gguf")});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("1 metadata entry cannot fit"));
}
