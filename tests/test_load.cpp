// `load` on the CPU path: every fixture and real file lands byte-exactly (compared with
// a plain pread of the file range, not with the loader's own reads), placements, plan
// files, conversion, --verify, and the fault paths (allocation failure via the test
// hook, a shard truncated or removed after indexing, cancellation).
#include <catch2/catch.hpp>

#include <atomic>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "cuda/loader.hpp"
#include "format/open.hpp"
#include "io/convert.hpp"
#include "io/loader.hpp"
#include "io/placement.hpp"
#include "model/model.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> pread_range(const std::string& path, uint64_t off, uint64_t n) {
  std::vector<uint8_t> out(n);
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, out.data() + done, n - done, static_cast<off_t>(off + done));
    REQUIRE(r > 0);
    done += static_cast<uint64_t>(r);
  }
  ::close(fd);
  return out;
}

LoadOptions cpu_options(const ModelLayout& layout) {
  LoadOptions o;
  o.placement = place_all(layout, Device{Device::Kind::Cpu, 0});
  return o;
}

// Every tensor's bytes where the store says they are == the file bytes.
void check_byte_exact(const Checkpoint& ck, const LoadResult& r) {
  REQUIRE(r.store.tensors().size() == ck.tensors.size());
  for (const auto& v : r.store.tensors()) {
    const TensorInfo& t = ck.tensors[v.tensor];
    INFO(ck.path << ": " << t.name);
    CHECK(v.name == t.name);
    CHECK(v.shape == t.shape);
    REQUIRE(v.nbytes == t.nbytes);
    auto expect = pread_range(ck.files[t.file].path, t.offset, t.nbytes);
    if (t.nbytes > 0) CHECK(std::memcmp(v.data, expect.data(), t.nbytes) == 0);  // memcmp(nullptr, .., 0) is UB
  }
}

// threads > 0: private copies read by that many threads (the pread path); 0: the default,
// populated read-only mappings for CPU modules.
LoadResult load_cpu(const std::string& path, int threads = 0, bool direct = false) {
  Checkpoint ck = open_checkpoint(path);
  ModelLayout layout = describe_model(ck);
  LoadOptions o = cpu_options(layout);
  o.reader_threads = threads;
  o.direct_io = direct;
  o.map_host = threads == 0;
  o.verify = true;
  LoadResult r = load_checkpoint(ck, layout, o);
  check_byte_exact(ck, r);
  CHECK(r.report.verified_tensors == ck.tensors.size());
  if (threads > 0) CHECK(r.report.mapped_modules == 0);
  CHECK(r.report.bytes_per_device.count(Device{Device::Kind::Cpu, 0}) == (ck.total_bytes() > 0 || !ck.tensors.empty()));
  return r;
}

template <class F>
Error catch_error(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no nunchaku::Error thrown");
  return Error("none", "none");
}

}  // namespace

TEST_CASE("load: every fixture in testdata/models lands byte-exactly on the CPU", "[load]") {
  int n = 0;
  for (const auto& d : fs::directory_iterator(test::testdata("models"))) {
    if (!d.is_directory()) continue;
    bool has_weights = false;  // config-only fixtures (e.g. llama3-8b-config) are for estimate
    for (const auto& f : fs::directory_iterator(d.path())) has_weights |= f.path().filename() != "config.json";
    if (!has_weights) continue;
    // llama-pt holds two checkpoints; load each file.
    std::vector<std::string> paths;
    if (d.path().filename() == "llama-pt") {
      for (const auto& f : fs::directory_iterator(d.path()))
        if (f.path().extension() == ".pt") paths.push_back(f.path().string());
    } else {
      paths.push_back(d.path().string());
    }
    for (const auto& p : paths) {
      INFO(p);
      load_cpu(p, 1);
      load_cpu(p, 3, /*direct=*/true);
      ++n;
    }
  }
  CHECK(n >= 10);
}

TEST_CASE("load: real files in shared/testfiles land byte-exactly", "[load]") {
  NUNCHAKU_REQUIRE_SHARED();
  std::vector<std::string> paths = {test::shared_testfile("gguf/stories260K.gguf"),
                                    test::shared_testfile("safetensors/minicpm3")};
  for (const char* dir : {"safetensors", "safetensors/samples", "pytorch"})
    for (const auto& f : fs::directory_iterator(test::shared_testfile(dir)))
      if (f.is_regular_file() && f.path().extension() != ".md") paths.push_back(f.path().string());
  int loaded = 0;
  for (const auto& p : paths) {
    INFO(p);
    std::optional<Checkpoint> ck;
    try {
      ck = open_checkpoint(p);
    } catch (const Error&) {
      continue;  // hostile or unsupported files are the readers' tests; load only what indexes
    }
    load_cpu(p);
    ++loaded;
  }
  CHECK(loaded >= 30);
}

TEST_CASE("load: stories260K has 48 F32 tensors on the CPU", "[load]") {
  NUNCHAKU_REQUIRE_SHARED();
  auto r = load_cpu(test::shared_testfile("gguf/stories260K.gguf"));
  CHECK(r.report.mapped_modules == r.store.modules().size());  // one file, no conversion: all mapped
  CHECK(r.report.tensors == 48);
  const TensorView* emb = r.store.find("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->dtype == DType::F32);
  CHECK(emb->shape == std::vector<int64_t>{512, 64});  // vocab 512, dim 64 (README)
  CHECK(emb->nbytes == 512 * 64 * 4);
}

TEST_CASE("load: disk modules are mmap views of the file, cpu modules copies", "[load]") {
  Checkpoint ck = open_checkpoint(test::testdata("models/llama-sharded"));
  ModelLayout layout = describe_model(ck);
  REQUIRE(layout.modules.size() >= 3);
  LoadOptions o;
  o.placement = place_all(layout, Device{Device::Kind::Cpu, 0});
  o.placement.modules[layout.modules[1].name] = Device{Device::Kind::Disk, 0};
  o.staging_bytes = 4096;  // many chunks
  o.verify = true;
  LoadResult r = load_checkpoint(ck, layout, o);
  check_byte_exact(ck, r);
  CHECK(r.report.disk_tensors == layout.modules[1].tensors.size());
  CHECK(r.store.modules()[1].memory == MemoryKind::FileMap);
  CHECK(r.store.modules()[1].bytes == 0);
  CHECK(r.report.bytes_per_device.at(Device{Device::Kind::Disk, 0}) == layout.modules[1].bytes);
  CHECK(r.report.total_bytes == ck.total_bytes() - layout.modules[1].bytes);
}

TEST_CASE("load: --dtype fp16 converts BF16 and F32 tensors, element by element", "[load]") {
  for (const char* fx : {"models/qwen3", "models/llama"}) {  // BF16, F32 (transformers)
    Checkpoint ck = open_checkpoint(test::testdata(fx));
    ModelLayout layout = describe_model(ck);
    LoadOptions o = cpu_options(layout);
    o.dtype = DType::F16;
    o.staging_bytes = 4096;  // chunk edges inside tensors
    o.staging_buffers = 2;
    o.verify = true;
    LoadResult r = load_checkpoint(ck, layout, o);
    CHECK(r.report.converted_tensors > 0);
    CHECK(r.report.verified_tensors == ck.tensors.size());
    for (const auto& v : r.store.tensors()) {
      const TensorInfo& t = ck.tensors[v.tensor];
      INFO(t.name);
      if (t.dtype != DType::BF16 && t.dtype != DType::F32) {
        CHECK(!v.converted());
        continue;
      }
      REQUIRE(v.dtype == DType::F16);
      const uint64_t n = t.numel();
      CHECK(v.nbytes == n * 2);
      auto raw = pread_range(ck.files[t.file].path, t.offset, t.nbytes);
      for (uint64_t i = 0; i < n; i += 97) {  // sample; the twin itself is tested on hand values
        uint16_t got;
        std::memcpy(&got, static_cast<const uint8_t*>(v.data) + 2 * i, 2);
        uint16_t want;
        if (t.dtype == DType::BF16) {
          uint16_t b;
          std::memcpy(&b, raw.data() + 2 * i, 2);
          want = bf16_to_f16(b);
        } else {
          uint32_t f;
          std::memcpy(&f, raw.data() + 4 * i, 4);
          want = f32_to_f16(f);
        }
        REQUIRE(got == want);
      }
    }
  }
}

TEST_CASE("plan file: parse and check against the layout", "[load]") {
  Checkpoint ck = open_checkpoint(test::testdata("models/llama"));
  ModelLayout layout = describe_model(ck);
  nlohmann::json plan = {{"modules", nlohmann::json::object()}, {"reserves", {{"cuda:0", 123}}}};
  for (size_t i = 0; i < layout.modules.size(); ++i)
    plan["modules"][layout.modules[i].name] = i == 0 ? "cuda:1" : i % 2 ? "cpu" : "disk";
  Placement p = parse_plan(plan.dump(), "plan.json");
  CHECK_NOTHROW(check_placement(p, layout));
  CHECK(p.device_of(layout.modules[0].name) == Device{Device::Kind::Cuda, 1});
  CHECK(p.device_of(layout.modules[1].name).str() == "cpu");

  CHECK(catch_error([] { parse_plan("{\"modules\": ", "p"); }).code() == "plan.json");
  CHECK(catch_error([] { parse_plan("{\"devices\": {}}", "p"); }).code() == "plan.schema");
  CHECK(catch_error([] { parse_plan("{\"modules\": {\"a\": 3}}", "p"); }).code() == "plan.schema");
  CHECK(catch_error([] { parse_plan("{\"modules\": {\"a\": \"tpu:0\"}}", "p"); }).code() == "plan.device");
  CHECK(catch_error([] { parse_plan("{\"modules\": {\"a\": \"cuda:x\"}}", "p"); }).code() == "plan.device");
  auto missing = p;
  missing.modules.erase(layout.modules.back().name);
  CHECK(catch_error([&] { check_placement(missing, layout); }).code() == "plan.missing_module");
  auto extra = p;
  extra.modules["model.layers.99"] = Device{};
  CHECK(catch_error([&] { check_placement(extra, layout); }).code() == "plan.unknown_module");
}

TEST_CASE("load: a failed allocation is exit 3 naming the module, with nothing left allocated", "[load]") {
  Checkpoint ck = open_checkpoint(test::testdata("models/llama"));
  ModelLayout layout = describe_model(ck);
  const int live0 = testing::live_allocations();
  testing::fail_nth_allocation(3);
  LoadOptions copy = cpu_options(layout);
  copy.map_host = false;  // mapped modules allocate nothing
  Error e = catch_error([&] { load_checkpoint(ck, layout, copy); });
  testing::fail_nth_allocation(0);
  CHECK(e.code() == "load.out_of_memory");
  CHECK(e.exit_code() == 3);
  const std::string msg = e.what();
  CHECK(msg.find("module '" + layout.modules[2].name + "'") != std::string::npos);
  CHECK(msg.find("bytes") != std::string::npos);
  CHECK(msg.find("free") != std::string::npos);
  CHECK(msg.find("nunchaku plan") != std::string::npos);
  CHECK(testing::live_allocations() == live0);
}

TEST_CASE("load: a shard truncated after indexing is exit 2 naming tensor and offset", "[load]") {
  test::TempDir tmp;
  const fs::path src = test::testdata("models/llama-sharded");
  for (const auto& f : fs::directory_iterator(src)) fs::copy_file(f.path(), tmp.path / f.path().filename());
  Checkpoint ck = open_checkpoint(tmp.path.string());
  ModelLayout layout = describe_model(ck);
  REQUIRE(ck.files.size() == 5);
  const std::string shard = ck.files[2].path;
  const uint64_t cut = ck.files[2].bytes / 2;
  fs::resize_file(shard, cut);
  const int live0 = testing::live_allocations();
  Error e = catch_error([&] { load_checkpoint(ck, layout, cpu_options(layout)); });
  CHECK(e.code() == "load.short_read");
  CHECK(e.exit_code() == 2);
  CHECK(e.context().file == shard);
  REQUIRE(e.context().offset);
  CHECK(*e.context().offset == cut);
  // the tensor named is the one whose bytes straddle the cut
  const TensorInfo* t = ck.find(e.context().tensor);
  REQUIRE(t);
  CHECK(ck.files[t->file].path == shard);
  CHECK(t->offset <= cut);
  CHECK(t->offset + t->nbytes > cut);
  CHECK(testing::live_allocations() == live0);

  // Through the staging path too (conversion).
  LoadOptions o = cpu_options(layout);
  o.dtype = DType::BF16;
  Error e2 = catch_error([&] { load_checkpoint(ck, layout, o); });
  CHECK(e2.code() == "load.short_read");
  CHECK(e2.exit_code() == 2);
  CHECK(!e2.context().tensor.empty());
}

TEST_CASE("load: a shard removed after indexing is exit 2 naming the file and a tensor", "[load]") {
  test::TempDir tmp;
  for (const auto& f : fs::directory_iterator(test::testdata("models/llama-sharded")))
    fs::copy_file(f.path(), tmp.path / f.path().filename());
  Checkpoint ck = open_checkpoint(tmp.path.string());
  ModelLayout layout = describe_model(ck);
  fs::remove(ck.files[1].path);
  Error e = catch_error([&] { load_checkpoint(ck, layout, cpu_options(layout)); });
  CHECK(e.code() == "io.open");
  CHECK(e.exit_code() == 2);
  CHECK(e.context().file == ck.files[1].path);
  CHECK(!e.context().tensor.empty());
}

TEST_CASE("load: cancellation stops with load.interrupted and releases memory", "[load]") {
  Checkpoint ck = open_checkpoint(test::testdata("models/llama"));
  ModelLayout layout = describe_model(ck);
  std::atomic<bool> cancel{true};
  LoadOptions o = cpu_options(layout);
  o.cancel = &cancel;
  const int live0 = testing::live_allocations();
  Error e = catch_error([&] { load_checkpoint(ck, layout, o); });
  CHECK(e.code() == "load.interrupted");
  CHECK(e.exit_code() == 130);
  CHECK(testing::live_allocations() == live0);
}

TEST_CASE("load: CUDA placement without CUDA is a clear exit 2", "[load]") {
  std::string why;
  if (cuda::loader_available(&why)) {
    WARN("skipped: a CUDA device is present");
    return;
  }
  Checkpoint ck = open_checkpoint(test::testdata("models/llama"));
  ModelLayout layout = describe_model(ck);
  LoadOptions o;
  o.placement = place_all(layout, Device{Device::Kind::Cuda, 0});
  Error e = catch_error([&] { load_checkpoint(ck, layout, o); });
  CHECK(e.code() == "load.no_cuda");
  CHECK(e.exit_code() == 2);
}

TEST_CASE("load: the checkpoint is never written", "[load]") {
  test::TempDir tmp;
  const std::string f = tmp.file("model.safetensors");
  fs::copy_file(test::testdata("models/llama/model.safetensors"), f);
  ::chmod(f.c_str(), 0444);
  struct stat before {}, after {};
  ::stat(f.c_str(), &before);
  auto bytes0 = pread_range(f, 0, static_cast<uint64_t>(before.st_size));
  load_cpu(f);
  ::stat(f.c_str(), &after);
  CHECK(after.st_mtim.tv_sec == before.st_mtim.tv_sec);
  CHECK(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  CHECK(pread_range(f, 0, static_cast<uint64_t>(after.st_size)) == bytes0);
}

TEST_CASE("checksum64: sensitive to every byte, chunk-foldable", "[load]") {
  std::vector<uint8_t> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7);
  const uint64_t h = checksum64(a.data(), a.size());
  for (size_t i : {0u, 31u, 32u, 999u}) {
    auto b = a;
    b[i] ^= 1;
    CHECK(checksum64(b.data(), b.size()) != h);
  }
  CHECK(checksum64(a.data(), 999) != h);
  CHECK(checksum64(a.data() + 500, 500, checksum64(a.data(), 500)) ==
        checksum64(a.data() + 500, 500, checksum64(a.data(), 500)));
}

TEST_CASE("cli load: --device cpu --verify --json, plan file, and errors", "[load]") {
  const std::string fx = test::testdata("models/llama-sharded");
  auto r = test::run_cli({"load", fx, "--device", "cpu", "--verify", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  Checkpoint ck = open_checkpoint(fx);
  CHECK(j["num_tensors"] == ck.tensors.size());
  CHECK(j["num_verified_tensors"] == ck.tensors.size());
  CHECK(j["device_bytes"]["cpu"] == ck.total_bytes());
  CHECK(r.err.empty());  // no progress bar on a pipe

  ModelLayout layout = describe_model(ck);
  test::TempDir tmp;
  nlohmann::json plan = {{"modules", nlohmann::json::object()}};
  for (const auto& m : layout.modules) plan["modules"][m.name] = m.kind == ModuleKind::Layer ? "disk" : "cpu";
  test::write_file(tmp.file("plan.json"), plan.dump());
  auto r2 = test::run_cli({"load", fx, "--plan", tmp.file("plan.json")});
  INFO(r2.err);
  CHECK(r2.exit_code == 0);
  CHECK(r2.out.find("disk") != std::string::npos);

  test::write_file(tmp.file("bad.json"), std::string("{\"modules\": {\"nope\": \"cpu\"}}"));
  auto r3 = test::run_cli({"load", fx, "--plan", tmp.file("bad.json")});
  CHECK(r3.exit_code == 2);
  CHECK(r3.err.find("nope") != std::string::npos);

  auto r4 = test::run_cli({"load", fx, "--device", "cpu", "--dtype", "int8"});
  CHECK(r4.exit_code == 2);
  auto r5 = test::run_cli({"load", fx, "--device", "cpu", "--staging-size", "12XB"});
  CHECK(r5.exit_code == 2);
  auto r6 = test::run_cli({"load", fx, "--device", "cpu", "--dtype", "bf16", "--staging-size", "4K"});
  CHECK(r6.exit_code == 0);
  CHECK(r6.out.find("converted") != std::string::npos);
}

TEST_CASE("load: a module whose tensors are spread over the file is copied, not mapped with what lies between",
          "[load]") {
  // A writer that puts every layer's norms after all the matrices (make_bench_gguf.py did):
  // a mapping of a layer's range would hold every later layer's bytes too. Layer 0's norms
  // go last here; layer 1 stays contiguous and is mapped.
  test::TempDir d;
  const nlohmann::json c = test::read_json(test::testdata("models/llama/config.json"));
  test::write_file((d.path / "config.json").string(), c.dump(2));
  std::vector<std::pair<std::string, std::vector<int64_t>>> ts = test::llama_tensors(c), last;
  std::erase_if(ts, [&](const auto& t) {
    const bool norm0 = t.first.starts_with("model.layers.0.") && t.first.ends_with("layernorm.weight");
    if (norm0) last.push_back(t);
    return norm0;
  });
  REQUIRE(last.size() == 2);
  ts.insert(ts.end(), last.begin(), last.end());
  nlohmann::json hdr = nlohmann::json::object();
  uint64_t off = 0, layer0 = 0;
  for (const auto& [name, shape] : ts) {
    uint64_t n = 4;
    for (int64_t x : shape) n *= uint64_t(x);
    hdr[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    if (name.starts_with("model.layers.0.")) layer0 += n;
    off += n;
  }
  test::write_sparse_safetensors((d.path / "model.safetensors").string(), hdr, off);
  Checkpoint ck = open_checkpoint(d.path.string());
  ModelLayout layout = describe_model(ck);
  LoadOptions o;
  o.placement = place_all(layout, Device{Device::Kind::Cpu, 0});
  LoadResult r = load_checkpoint(ck, layout, o);
  check_byte_exact(ck, r);
  size_t l0 = SIZE_MAX, l1 = SIZE_MAX;
  for (size_t i = 0; i < layout.modules.size(); ++i) {
    if (layout.modules[i].name == "model.layers.0") l0 = i;
    if (layout.modules[i].name == "model.layers.1") l1 = i;
  }
  REQUIRE(l0 != SIZE_MAX);
  REQUIRE(l1 != SIZE_MAX);
  CHECK(r.store.modules()[l0].memory != MemoryKind::FileMap);
  CHECK(r.store.modules()[l0].bytes < layer0 + 4 * 4096);  // its own tensors (and alignment), not the file's rest
  CHECK(r.store.modules()[l1].memory == MemoryKind::FileMap);
  // Host memory: the checkpoint once, within page rounding per module.
  CHECK(r.report.host_peak_bytes <= ck.total_bytes() + layout.modules.size() * 2 * 4096 + r.report.staging_bytes);
}
