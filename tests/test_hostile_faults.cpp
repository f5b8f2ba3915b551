// Faults from the environment, not the input bytes: a weight file that shrinks while it
// is mapped (SIGBUS, turned into exit 2 by io/file's guard), and threads the OS refuses
// to start (a smaller pool, never a hang).
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <new>
#include <vector>
#include <filesystem>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc.hpp"
#include "core/error.hpp"
#include "engine/generate.hpp"
#include "engine/thread_pool.hpp"
#include "core/file.hpp"
#include "format/open.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
namespace fs = std::filesystem;

namespace {

// Maps `path` whole, read-only and shared, as the loader maps disk layers.
const uint8_t* map_file(const File& f) {
  void* p = ::mmap(nullptr, f.size(), PROT_READ, MAP_SHARED, f.fd(), 0);
  REQUIRE(p != MAP_FAILED);
  return static_cast<const uint8_t*>(p);
}

void shrink(const std::string& path, uint64_t bytes) { REQUIRE(::truncate(path.c_str(), off_t(bytes)) == 0); }

}  // namespace

TEST_CASE("mapped reads: a file that shrinks gives a recorded fault, not SIGBUS", "[hostile][faults]") {
  test::TempDir dir;
  const std::string path = dir.file("w.bin");
  test::write_file(path, std::vector<uint8_t>(1 << 20, 0x5A));
  File f = File::open_read_only(path);  // installs the guard
  const uint8_t* p = map_file(f);
  REQUIRE(p[100'000] == 0x5A);
  REQUIRE_FALSE(take_mapped_read_fault().has_value());
  shrink(path, 8192);
  CHECK(p[100] == 0x5A);                 // still in the file
  // Read on a worker thread, as the engine's kernels do: zeros instead of a crash.
  int seen = -1;
  std::thread([&] { seen = p[300'000]; }).join();
  CHECK(seen == 0);
  CHECK(p[900'000] == 0);                // the rest of the mapping was zero-filled with it
  auto fault = take_mapped_read_fault();
  REQUIRE(fault.has_value());
  CHECK(fault->file == fs::canonical(path).string());
  CHECK(fault->offset == 300'000u);
  CHECK_FALSE(take_mapped_read_fault().has_value());  // taken once
  ::munmap(const_cast<uint8_t*>(p), f.size());

  // check_mapped_reads turns the next one into exit 2 naming file and offset.
  test::write_file(path, std::vector<uint8_t>(1 << 16, 1));
  File g = File::open_read_only(path);
  const uint8_t* q = map_file(g);
  shrink(path, 0);
  CHECK(q[4096 * 3 + 5] == 0);
  try {
    check_mapped_reads();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "io.mapped_read");
    CHECK(e.exit_code() == 2);
    CHECK(e.context().offset == uint64_t(4096 * 3 + 5));
    CHECK(std::string(e.what()).find("w.bin") != std::string::npos);
  }
  ::munmap(const_cast<uint8_t*>(q), g.size());
}

TEST_CASE("mapped reads: generate() stops with exit 2 when the weights shrink under it", "[hostile][faults]") {
  test::TempDir dir;
  fs::copy(test::testdata("run/llama-spm"), dir.path, fs::copy_options::recursive);
  std::string weights;
  for (const auto& e : fs::directory_iterator(dir.path))
    if (e.path().extension() == ".safetensors") weights = e.path().string();
  REQUIRE(!weights.empty());
  // Disk placement: every weight stays a file mapping, read during forward().
  auto m = test::load_engine_model(dir.path.string(), {}, Device{Device::Kind::Disk, 0});
  const Checkpoint ck = open_checkpoint(weights);
  shrink(weights, 4096);
  engine::GenerationRequest rq;
  rq.prompt = {1, 2, 3, 4};
  rq.max_tokens = 4;
  try {
    engine::generate(*m.tf, {&rq, 1});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "io.mapped_read");
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == fs::canonical(weights).string());
    CHECK(e.context().offset >= 4096u);
    // The tensor named is the one whose bytes hold that offset (from the header as it was).
    const uint64_t off = e.context().offset.value_or(0);
    std::string holder;
    for (const auto& t : ck.tensors)
      if (off >= t.offset && off < t.offset + t.nbytes) holder = t.name;
    CHECK(!holder.empty());
    CHECK(e.context().tensor == holder);
  }
}

TEST_CASE("thread pool: refused thread starts give a smaller pool and a warning", "[hostile][faults]") {
  engine::ThreadPool::fail_thread_starts_after_for_test(2);
  engine::ThreadPool pool(8);
  engine::ThreadPool::fail_thread_starts_after_for_test(-1);
  CHECK(pool.size() == 3);  // the caller and the two that started
  CHECK(pool.warning().find("started 3 of 8 threads") != std::string::npos);
  // Every task still runs, on the threads there are.
  std::vector<std::atomic<int>> hits(1000);
  std::atomic<int> bad_thread{0};  // Catch2's CHECK is not thread-safe: checked after the run
  pool.run(1000, [&](int64_t task, int thread) {
    if (thread >= 3) bad_thread++;
    hits[size_t(task)]++;
  });
  CHECK(bad_thread.load() == 0);
  for (auto& h : hits) CHECK(h.load() == 1);

  // No thread at all beyond the caller.
  engine::ThreadPool::fail_thread_starts_after_for_test(0);
  engine::ThreadPool alone(4);
  engine::ThreadPool::fail_thread_starts_after_for_test(-1);
  CHECK(alone.size() == 1);
  int64_t sum = 0;
  alone.run(100, [&](int64_t task, int) { sum += task; });
  CHECK(sum == 4950);
}

TEST_CASE("thread pool: asking for far more threads than the hardware has is capped", "[hostile][faults]") {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  engine::ThreadPool pool(hw * engine::ThreadPool::kMaxPerCore + 50);
  CHECK(pool.size() == hw * engine::ThreadPool::kMaxPerCore);
  CHECK_FALSE(pool.warning().empty());
}

TEST_CASE("a refused allocation records the size wanted (main's exit-3 message names it)", "[hostile][oom]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped: ASan's allocator aborts on a 1 EiB request and replaces the program's operator new");
  return;
#endif
  volatile size_t huge_v = size_t(1) << 60;  // 1 EiB: no machine grants it
  const size_t huge = huge_v;
  bool thrown = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    thrown = true;
  }
  REQUIRE(thrown);
#if !defined(__SANITIZE_ADDRESS__)
  CHECK(nunchaku::failed_allocation_bytes() == huge);
#endif
  // Ordinary allocations still work and are freed by the matching delete.
  auto v = std::make_unique<std::vector<int>>(1000, 7);
  CHECK(v->at(999) == 7);
}
