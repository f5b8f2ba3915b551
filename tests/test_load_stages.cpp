// The loader's stages one by one (io/load_stages.hpp), on hand-made checkpoints whose
// layout is computed here by hand: where plan_units puts each tensor, how cut_chunks cuts
// and which sink lands each chunk, and the shared read path (read_range, ChunkReaders)
// against plain preads of a file written here.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <mutex>
#include <numeric>

#include "core/error.hpp"
#include "io/chunk_readers.hpp"
#include "io/load_stages.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::load;

namespace {

TensorInfo tensor(const std::string& name, DType dt, uint32_t file, uint64_t off, uint64_t nbytes) {
  TensorInfo t;
  t.name = name;
  t.dtype = dt;
  t.file = file;
  t.offset = off;
  t.nbytes = nbytes;
  t.shape = {int64_t(nbytes)};
  return t;
}

// Two files; module "a" = tensors 0..3 (file 0), module "b" = tensor 4 (file 0) and 5 (file 1);
// tensor 6 is in no module.
Checkpoint hand_checkpoint() {
  Checkpoint ck;
  ck.path = "hand";
  ck.files = {{"f0", 1 << 20}, {"f1", 1 << 20}};
  ck.tensors = {tensor("a.x", DType::BF16, 0, 100, 50),      // run 1
                tensor("a.y", DType::BF16, 0, 200, 10),      // run 1 (gap 50 <= 4096)
                tensor("a.z", DType::F32, 0, 10000, 16),     // run 2 (gap > 4096), or converted
                tensor("a.q", DType::Q8_0, 0, 20000, 34),    // never converted
                tensor("b.x", DType::F16, 0, 30000, 8),
                tensor("b.y", DType::F16, 1, 40, 8),
                tensor("stray", DType::F32, 1, 64, 4)};
  return ck;
}

ModelLayout hand_layout() {
  ModelLayout l;
  l.modules = {Module{.name = "a", .tensors = {0, 1, 2, 3}}, Module{.name = "b", .tensors = {4, 5}}};
  return l;
}

Placement place(Device a, Device b) {
  Placement p;
  p.modules = {{"a", a}, {"b", b}};
  return p;
}

const Device kCpu{Device::Kind::Cpu, 0};

}  // namespace

TEST_CASE("load stages: tensors in no module become '(ungrouped)' on the cpu", "[load][stages]") {
  const Checkpoint ck = hand_checkpoint();
  const Placed p = complete_placement(ck, hand_layout(), place(kCpu, kCpu));
  REQUIRE(p.layout.modules.size() == 3);
  CHECK(p.layout.modules[2].name == "(ungrouped)");
  CHECK(p.layout.modules[2].tensors == std::vector<size_t>{6});
  CHECK(p.placement.device_of("(ungrouped)") == kCpu);
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].find("1 tensors in no module") != std::string::npos);
  Placement missing;
  missing.modules = {{"a", kCpu}};
  CHECK_THROWS_AS(complete_placement(ck, hand_layout(), missing), Error);
}

TEST_CASE("load stages: plan_units lays runs congruent to the file mod 4096, converted tensors 256-aligned",
          "[load][stages]") {
  const Checkpoint ck = hand_checkpoint();
  const Placed placed = complete_placement(ck, hand_layout(), place(kCpu, Device{Device::Kind::Disk, 0}));

  SECTION("no conversion: two runs, then a third for the quantized tensor") {
    const UnitPlan p = plan_units(ck, placed, std::nullopt, /*map_host=*/false);
    // Module a: run [100, 210) at 100; run [10000, 10016) at 210 + (9790 & 4095) = 1808;
    // run [20000, 20034) at 1824 + ((20000 - 1824) & 4095) = 1824 + 1792 = 3616. Size 3650.
    CHECK(p.slot_of[0].off == 100);
    CHECK(p.slot_of[1].off == 200);
    CHECK(p.slot_of[2].off == 1808);
    CHECK(p.slot_of[3].off == 3616);
    CHECK(p.module_bytes[0] == 3650);
    CHECK(p.module_bytes[1] == 0);  // disk: nothing allocated
    CHECK(p.host_module_bytes == 3650 + 68);  // + (ungrouped): its F32 tensor at file offset 64, 4 bytes
    CHECK(p.converted_tensors == 0);
    for (const Unit& u : p.units) CHECK(u.dst_off % kIoPage == u.off % kIoPage);
    REQUIRE(p.units.size() == 4);  // 3 runs of a, the ungrouped tensor; none for the disk module
    for (size_t i = 1; i < p.units.size(); ++i)
      CHECK(std::pair(p.units[i - 1].file, p.units[i - 1].off) < std::pair(p.units[i].file, p.units[i].off));
  }
  SECTION("--dtype fp16: BF16 and F32 tensors converted into 256-aligned slots, Q8_0 kept") {
    const UnitPlan p = plan_units(ck, placed, DType::F16, false);
    // Only a.q stays plain: run [20000, 20034) at 20000 & 4095 = 3616, cursor 3650. Then the
    // converted ones in module order: a.x at 3840 (50 -> 50 bytes), a.y at 4096 (10 -> 10),
    // a.z at 4352 (16 F32 -> 8 F16).
    CHECK(p.slot_of[3].off == 3616);
    CHECK(p.slot_of[0].off == 3840);
    CHECK(p.slot_of[0].dtype == DType::F16);
    CHECK(p.slot_of[1].off == 4096);
    CHECK(p.slot_of[2].off == 4352);
    CHECK(p.slot_of[2].nbytes == 8);
    CHECK(p.module_bytes[0] == 4360);
    CHECK(p.converted_tensors == 4);  // a.x, a.y, a.z and the ungrouped F32
  }
  SECTION("mapped: one page-aligned range over a module in one file; a second file prevents it") {
    const Placed both = complete_placement(ck, hand_layout(), place(kCpu, kCpu));
    // As written, a's 110 bytes are spread over [100, 20034): mapping would take 20 KB of
    // the file with them (more than its bytes + 256 per tensor + 2 pages), so a is copied.
    const UnitPlan spread = plan_units(ck, both, std::nullopt, /*map_host=*/true);
    CHECK_FALSE(spread.mapped[0].on);
    CHECK(spread.module_bytes[0] == 3650);  // the copy plan of the section above
    Checkpoint close = ck;
    close.tensors[2].offset = 300;  // a.z
    close.tensors[3].offset = 400;  // a.q: a is [100, 434), 110 bytes of tensors
    const UnitPlan p = plan_units(close, both, std::nullopt, /*map_host=*/true);
    REQUIRE(p.mapped[0].on);
    CHECK(p.mapped[0].off == 0);
    CHECK(p.mapped[0].len == 434);
    CHECK(p.module_bytes[0] == 0);
    CHECK_FALSE(p.mapped[1].on);  // b spans two files: copied
    CHECK(p.module_bytes[1] > 0);
    const UnitPlan conv = plan_units(close, both, DType::F16, true);
    CHECK_FALSE(conv.mapped[0].on);  // a has tensors to convert
  }
}

TEST_CASE("load stages: cut_chunks cuts at the staging size and names each chunk's sink", "[load][stages]") {
  Checkpoint ck = hand_checkpoint();
  ck.tensors[0].nbytes = 10 * 1024;  // a.x: run [100, 10340)
  ck.tensors[1].offset = 5000;
  const Placed placed = complete_placement(ck, hand_layout(), place(kCpu, Device{Device::Kind::Cuda, 1}));
  const UnitPlan p = plan_units(ck, placed, DType::F16, false);
  const std::vector<Chunk> chunks = cut_chunks(p, 4096);
  uint64_t bytes = 0;
  for (const Unit& u : p.units) bytes += u.len;
  uint64_t cut = 0;
  for (const Chunk& c : chunks) {
    const Unit& u = p.units[c.unit];
    CHECK(c.len <= 4096);
    CHECK(c.off >= u.off);
    CHECK(c.off + c.len <= u.off + u.len);
    CHECK((c.off - u.off) % 4096 == 0);
    cut += c.len;
    const Device dev = p.module_dev[u.module];
    if (dev.kind == Device::Kind::Cuda) CHECK(c.sink == SinkKind::Cuda);
    else CHECK(c.sink == (u.convert ? SinkKind::CpuConvert : SinkKind::Host));
    CHECK(c.staged() == (c.sink != SinkKind::Host));
  }
  CHECK(cut == bytes);
  // a.x is converted (BF16): 10240 bytes -> chunks of 4096, 4096, 2048.
  std::vector<uint64_t> ax;
  for (const Chunk& c : chunks)
    if (p.units[c.unit].tensors == std::vector<size_t>{0}) ax.push_back(c.len);
  CHECK(ax == std::vector<uint64_t>{4096, 4096, 2048});
}

namespace {

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 131 + (i >> 9));
  return v;
}

struct AlignedBuf {
  uint8_t* p;
  explicit AlignedBuf(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, n))) { std::memset(p, 0xEE, n); }
  ~AlignedBuf() { std::free(p); }
};

}  // namespace

TEST_CASE("read_range: exact bytes in place, page slack only when allowed, short reads named", "[load][stages]") {
  test::TempDir dir;
  const std::string path = dir.file("data.bin");
  const auto bytes = pattern(5 * 4096 + 100);
  test::write_file(path, bytes);
  const TensorAt name = [](uint64_t at) { return "t@" + std::to_string(at); };
  const bool direct = GENERATE(false, true);
  INFO("direct " << direct);
  ReadFile f(path, direct);
  AlignedBuf buf(8 * 4096);
  {
    SECTION("Slack::None from an unaligned offset touches nothing around the range") {
      uint8_t* dst = buf.p + 4096 + 300;  // congruent to off = 300 + 4096
      CHECK(read_range(f, 4096 + 300, 9000, dst, Slack::None, name) == 9000);
      CHECK(std::memcmp(dst, bytes.data() + 4096 + 300, 9000) == 0);
      CHECK(dst[-1] == 0xEE);
      CHECK(dst[9000] == 0xEE);
    }
    SECTION("Slack::None from an aligned offset with a tail") {
      CHECK(read_range(f, 4096, 2 * 4096 + 7, buf.p, Slack::None, name) == 2 * 4096 + 7);
      CHECK(std::memcmp(buf.p, bytes.data() + 4096, 2 * 4096 + 7) == 0);
      CHECK(buf.p[2 * 4096 + 7] == 0xEE);
    }
    SECTION("Slack::Pages: the bytes land at dst whatever the path") {
      uint8_t* dst = buf.p + 300;
      const uint64_t got = read_range(f, 4096 + 300, 9000, dst, Slack::Pages, name);
      CHECK(std::memcmp(dst, bytes.data() + 4096 + 300, 9000) == 0);
      if (f.direct_fd >= 0) CHECK(got == 3 * 4096);  // [4096, 16384): the aligned superset
      else CHECK(got == 9000);
    }
    SECTION("past the end of the file: load.short_read naming the tensor where the data ended") {
      try {
        read_range(f, 4 * 4096, 4096 + 200, buf.p, direct ? Slack::Pages : Slack::None, name);
        FAIL("no error");
      } catch (const Error& e) {
        CHECK(e.code() == "load.short_read");
        CHECK(e.context().offset == bytes.size());
        CHECK(e.context().tensor == "t@" + std::to_string(bytes.size()));
      }
    }
  }
}

namespace {

// Records what the readers did; job tag 3 fails in buffer().
struct RecordingTarget final : ReadTarget {
  std::vector<uint8_t> out;
  std::mutex mu;
  std::vector<size_t> landed, failed;
  uint64_t bytes = 0;
  explicit RecordingTarget(size_t n) : out(n + 2 * 4096, 0) {}
  Buffer buffer(const ReadJob& j) override {
    if (j.tag == 3) throw Error("test.refused", "buffer refused");
    return {out.data() + j.off, Slack::None, nullptr};
  }
  void done(const ReadJob& j, const Buffer&, uint64_t n, double, std::exception_ptr err) override {
    std::lock_guard lk(mu);
    (err ? failed : landed).push_back(j.tag);
    bytes += n;
  }
  std::string tensor_at(const ReadJob&, uint64_t) const override { return "t"; }
};

}  // namespace

TEST_CASE("ChunkReaders: every job lands or reports its error, in push order per thread", "[load][stages]") {
  test::TempDir dir;
  const std::string path = dir.file("data.bin");
  const auto bytes = pattern(64 * 1024);
  test::write_file(path, bytes);
  ReadFile f(path, false);
  for (int threads : {1, 3}) {
    RecordingTarget t(bytes.size());
    {
      ChunkReaders r(t, threads);
      std::vector<ReadJob> jobs;
      for (size_t i = 0; i < 16; ++i) jobs.push_back({&f, i * 4096, 4096, i});
      r.push(jobs);
      for (int spin = 0; spin < 2000; ++spin) {
        {
          std::lock_guard lk(t.mu);
          if (t.landed.size() + t.failed.size() == 16) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }  // stop + join
    CHECK(t.failed == std::vector<size_t>{3});
    CHECK(t.landed.size() == 15);
    CHECK(t.bytes == 15 * 4096);
    if (threads == 1) {
      std::vector<size_t> expect(16);
      std::iota(expect.begin(), expect.end(), 0);
      expect.erase(expect.begin() + 3);
      CHECK(t.landed == expect);
    }
    CHECK(std::memcmp(t.out.data(), bytes.data(), 3 * 4096) == 0);
    CHECK(std::memcmp(t.out.data() + 4 * 4096, bytes.data() + 4 * 4096, 12 * 4096) == 0);
  }
}
