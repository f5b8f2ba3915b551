// The engine seam: weights bound by role from the architecture table, the streamed weight
// provider (bounded pool, read ahead, errors), and the run state the engine allocates
// against engine_memory(), the accounting estimate and plan use.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include <elf.h>
#include <pthread.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/thread_memory.hpp"
#include "engine/engine.hpp"
#include "memory/engine_memory.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "model/arch_table.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

const Device kDisk{Device::Kind::Disk, 0};

// Full-prompt logits then greedy tokens of a few prompts, through forward() directly.
struct Outputs {
  std::vector<float> logits;
  std::vector<std::vector<int32_t>> tokens;
};
Outputs outputs_of(Transformer& tf) {
  Outputs o;
  const std::vector<std::vector<int32_t>> prompts = {{1, 15, 27, 3, 9}, {1, 100, 7}, {1}};
  SeqChunk ch{0, 0, prompts[0], true};
  auto l = tf.forward({&ch, 1});
  o.logits.assign(l.begin(), l.end());
  for (const auto& p : prompts) o.tokens.push_back(test::greedy(tf, p, 12));
  return o;
}

EngineOptions small_opts() {
  EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 8;
  return o;
}

}  // namespace

TEST_CASE("seam: every tensor the engine uses gets its role from the architecture table", "[engine][seam]") {
  for (const char* rel : {"engine/llama-small", "engine/llama-small-gguf/llama-small-q8_0.gguf", "engine/qwen3",
                          "engine/qwen2-f32.gguf", "engine/llama-tied"}) {
    INFO(rel);
    Checkpoint ck = open_checkpoint(test::testdata(rel));
    ModelLayout layout = describe_model(ck);
    std::map<Role, int> count;
    for (const Module& m : layout.modules) {
      REQUIRE(m.roles.size() == m.tensors.size());
      for (Role r : m.roles) count[r]++;
    }
    const int L = int(layout.spec->num_layers);
    for (Role r : {Role::Q, Role::K, Role::V, Role::O, Role::Gate, Role::Up, Role::Down, Role::AttnNorm, Role::FfnNorm})
      CHECK(count[r] == L);
    CHECK(count[Role::Embed] == 1);
    CHECK(count[Role::FinalNorm] == 1);
    CHECK(count[Role::Head] <= 1);
    // GGUF names come from the GGUF entries of the table, HF names from the HF ones.
    CHECK((layout.naming == Naming::GGUF) == std::string(rel).ends_with(".gguf"));
  }
  // Hand-picked names: the role follows the table's rule, not a guess.
  Module layer{.name = "model.layers.3", .kind = ModuleKind::Layer, .layer = 3};
  CHECK(tensor_role("qwen2", layer, "model.layers.3.self_attn.k_proj.bias") == Role::KBias);
  CHECK(tensor_role("llama", layer, "model.layers.3.mlp.down_proj.weight") == Role::Down);
  CHECK(tensor_role("llama", layer, "model.layers.3.self_attn.rotary_emb.inv_freq") == Role::None);
  CHECK(tensor_role("llama", layer, "model.layers.30.mlp.down_proj.weight") == Role::None);
  Module blk{.name = "blk.0", .kind = ModuleKind::Layer, .layer = 0};
  CHECK(tensor_role("qwen3", blk, "blk.0.attn_k_norm.weight") == Role::KNorm);
}

TEST_CASE("seam: streamed weights give the resident engine's logits bit for bit", "[engine][seam]") {
  for (const char* rel : {"engine/llama-small-gguf/llama-small-q8_0.gguf", "engine/llama-small-bf16",
                          "engine/qwen2-f32.gguf", "engine/llama-tied"}) {
    INFO(rel);
    auto resident = test::load_engine_model(test::testdata(rel), small_opts());
    Outputs want = outputs_of(*resident.tf);
    for (bool direct : {false, true}) {
      StreamOptions so;
      so.direct_io = direct;
      auto streamed = test::load_engine_model(test::testdata(rel), small_opts(), kDisk, so);
      const auto& wp = streamed.tf->weights();
      // Everything streams (embedding, layers, norm, head), through the pool.
      for (size_t m = 0; m < wp.modules(); ++m) CHECK(wp.streamed(m));
      Outputs got = outputs_of(*streamed.tf);
      CHECK(got.logits == want.logits);  // exact: same kernels over the same bytes
      CHECK(got.tokens == want.tokens);
    }
  }
}

TEST_CASE("seam: the pool holds at most its slots, each the largest module's read layout", "[engine][seam]") {
  const std::string path = test::testdata("engine/llama-small-gguf/llama-small-f32.gguf");
  Checkpoint ck = open_checkpoint(path);
  ModelLayout layout = describe_model(ck);
  uint64_t largest = 0, total = 0;
  for (const Module& m : layout.modules) {
    uint64_t b = 0;
    for (size_t t : m.tensors) b += ck.tensors[t].nbytes;
    largest = std::max(largest, b);
    total += b;
  }
  const int live_before = testing::live_allocations();
  StreamOptions so;
  so.slots = 2;  // the default, said explicitly: the test is about the bound
  {
    auto m = test::load_engine_model(path, small_opts(), kDisk, so);
    const auto& wp = m.tf->weights();
    CHECK(wp.pool_slots() == 2);
    CHECK(wp.pool_bytes() == 2 * wp.slot_bytes());
    // A slot is the largest module plus page alignment of its runs (a few pages at most).
    CHECK(wp.slot_bytes() >= largest);
    CHECK(wp.slot_bytes() <= largest + 8 * 4096);
    CHECK(wp.pool_bytes() < total);  // the point: less memory than the weights
    Outputs a = outputs_of(*m.tf);
    auto resident = test::load_engine_model(path, small_opts());
    CHECK(a.tokens == outputs_of(*resident.tf).tokens);
  }
  CHECK(testing::live_allocations() == live_before);  // pool and everything else released
}

TEST_CASE("seam: the provider's description counts modules and slots in the singular when there is one",
          "[engine][seam][plural]") {
  const std::string path = test::testdata("engine/llama-small-gguf/llama-small-f32.gguf");
  test::EngineModel m;
  m.ck = open_checkpoint(path);
  m.layout = describe_model(m.ck);
  LoadOptions lo;
  lo.placement = place_all(m.layout, Device{Device::Kind::Cpu, 0});
  lo.placement.modules[m.layout.modules.back().name] = kDisk;  // one module streamed, the rest resident
  m.load = load_checkpoint(m.ck, m.layout, lo);
  StreamOptions so;
  so.slots = 1;
  m.engine = make_engine(m.ck, m.layout, m.load.store, {small_opts(), 0, so, Device{Device::Kind::Cpu, 0}});
  const std::string want = fmt::format("streamed 1 of {} modules through 1 slot of ", m.layout.modules.size());
  CHECK_THAT(m.engine.model->weights().describe(), Catch::StartsWith(want));
  CHECK_THAT(m.engine.model->describe(), Catch::Contains(want));
}

TEST_CASE("seam: a slow reader still gives the same tokens", "[engine][seam]") {
  const std::string path = test::testdata("engine/llama-small-gguf/llama-small-q4_0.gguf");
  auto resident = test::load_engine_model(path, small_opts());
  Outputs want = outputs_of(*resident.tf);
  StreamOptions so;
  so.reader_threads = 1;
  so.chunk_bytes = 4096;  // many small reads, each delayed
  so.before_read = [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); };
  auto slow = test::load_engine_model(path, small_opts(), kDisk, so);
  CHECK(outputs_of(*slow.tf).tokens == want.tokens);
}

TEST_CASE("seam: a file truncated while streaming is load.short_read naming tensor and offset", "[engine][seam]") {
  test::TempDir dir;
  const std::string path = dir.file("model.gguf");
  std::filesystem::copy_file(test::testdata("engine/llama-small-gguf/llama-small-f32.gguf"), path);
  const int live_before = testing::live_allocations();
  {
    StreamOptions so;
    so.direct_io = false;
    auto m = test::load_engine_model(path, small_opts(), kDisk, so);
    const uint64_t size = std::filesystem::file_size(path);
    REQUIRE(::truncate(path.c_str(), off_t(size / 2)) == 0);
    std::vector<int32_t> prompt = {1, 2, 3};
    try {
      test::greedy(*m.tf, prompt, 4);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == "load.short_read");
      CHECK(e.exit_code() == 2);
      CHECK(e.context().file == path);
      CHECK(!e.context().tensor.empty());
      REQUIRE(e.context().offset.has_value());
      CHECK(*e.context().offset <= size / 2);
    }
  }
  CHECK(testing::live_allocations() == live_before);
}

TEST_CASE("seam: the engine allocates exactly what engine_memory() predicts", "[engine][seam]") {
  struct Case {
    int batch;
    int64_t context, tokens;
    DType kv;
    bool streamed;
  };
  const Case cases[] = {{1, 64, 0, DType::F32, false}, {4, 100, 32, DType::F16, false}, {3, 37, 5, DType::F32, true},
                        {8, 128, 300, DType::F16, true}};
  const std::string path = test::testdata("engine/llama-small-gguf/llama-small-q8_0.gguf");
  for (const Case& c : cases) {
    INFO("batch " << c.batch << " context " << c.context << " streamed " << c.streamed);
    EngineOptions o;
    o.max_batch = c.batch;
    o.max_context = c.context;
    o.max_tokens = c.tokens;
    o.kv_dtype = c.kv;
    auto m = test::load_engine_model(path, o, c.streamed ? kDisk : Device{Device::Kind::Cpu, 0},
                                     c.streamed ? std::optional<StreamOptions>(StreamOptions{}) : std::nullopt, 2);
    // The prediction from the spec and the options alone, as estimate computes it.
    EngineConfig cfg;
    cfg.max_batch = c.batch;
    cfg.max_context = c.context;
    cfg.max_tokens = c.tokens;
    cfg.kv_dtype = c.kv;
    cfg.threads = 2;
    if (c.streamed) {
      cfg.stream_slots = kStreamSlots;
      uint64_t largest = 0;
      for (const Module& mod : m.layout.modules) largest = std::max(largest, plan_module_reads(m.ck, mod).bytes);
      cfg.stream_slot_bytes = largest;
    }
    cfg.panel_cols = 64;  // by hand: every matrix is Q8_0, the widest (down) has ffn = 64 columns
    const EngineMemory want = engine_memory(*m.layout.spec, cfg);
    CHECK(m.tf->state_bytes() + m.tf->weights().pool_bytes() == want.allocated());
    // What the kernels keep per thread besides: the worker's TLS, and with a pass of 16 or
    // more tokens (every case but 5 tokens) each thread's f32 panel of 32 rows x 64 columns.
    CHECK(m.tf->predicted().thread_buffers == want.thread_buffers);
    CHECK(panel_cols_of(m.ck, m.layout) == 64);  // from the checkpoint's roles, as run --batch-size auto sizes it
    CHECK(want.thread_buffers == static_tls_bytes() + (c.tokens == 5 ? 0 : 2 * 32 * 64 * 4));
    CHECK(want.total() == want.allocated() + want.thread_buffers);
    CHECK(m.tf->weights().pool_bytes() == want.stream_pool);
    CHECK(want.kv_cache == uint64_t(2 * 2 * c.batch * c.context * 16 * (c.kv == DType::F16 ? 2 : 4)));
  }
}

TEST_CASE("seam: plan charges the stream pool the engine allocates (slots page-aligned, not tensor bytes)",
          "[engine][seam]") {
  for (const char* rel : {"engine/llama-small-gguf/llama-small-f32.gguf", "engine/llama-small-gguf/llama-small-q8_0.gguf",
                          "engine/llama-small"}) {
    INFO(rel);
    auto m = test::load_engine_model(test::testdata(rel), small_opts(), kDisk, StreamOptions{});
    const DevicePlan p = test::all_on_disk_plan(m);
    uint64_t largest_tensor_bytes = 0;  // of a module
    for (const Module& mod : m.layout.modules) {
      uint64_t b = 0;
      for (size_t t : mod.tensors) b += m.ck.tensors[t].nbytes;
      largest_tensor_bytes = std::max(largest_tensor_bytes, b);
    }
    CHECK(p.devices.at(0).device.kind == Device::Kind::Cpu);
    CHECK(p.devices.at(0).staging == m.tf->weights().pool_bytes());
    CHECK(m.tf->weights().slot_bytes() > largest_tensor_bytes);  // the gap the tensor bytes left
  }
}

TEST_CASE("seam: --prefill-chunk sizes the engine's passes, and estimate charges what the engine allocates",
          "[engine][seam]") {
  const std::string path = test::testdata("engine/llama-small");
  struct Case {
    int64_t chunk;
    int batch;
    int64_t want_tokens;  // by hand: the chunk, at least the batch; 0 = max(256, batch)
  };
  for (const Case c : {Case{0, 2, 256}, Case{32, 2, 32}, Case{3, 8, 8}, Case{1000, 1, 1000}}) {
    INFO("chunk " << c.chunk << " batch " << c.batch);
    CHECK(engine_max_tokens(c.chunk, c.batch) == c.want_tokens);
    EngineOptions o;
    o.max_batch = c.batch;
    o.max_context = 64;
    o.max_tokens = engine_max_tokens(c.chunk, c.batch);  // what run passes
    auto m = test::load_engine_model(path, o, Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
    Workload w;
    w.batch = c.batch;
    w.context = 64;
    w.prefill_chunk = c.chunk;
    w.threads = 2;
    w.kv_dtype = DType::F32;
    w.target = Target::Cpu;
    const Estimate e = estimate(m.ck, m.layout, w);
    CHECK(e.workload.prefill_chunk == c.want_tokens);
    const uint64_t predicted =
        e.component("kv_cache") + e.component("activations") + e.component("logits") + e.component("scratch");
    CHECK(m.tf->state_bytes() == predicted);
  }
}

TEST_CASE("seam: the GEMM panel's width from the checkpoint equals the engine's from its bound weights", "[engine][seam]") {
  // llama-small: hidden 32, ffn 64; f32 and 16-bit weights need no panel (read in place), Q4_0 the widest input (down: 64).
  for (const auto& [rel, want] : {std::pair<const char*, int64_t>{"engine/llama-small", 0}, {"engine/llama-small-bf16", 0},
                                  {"engine/llama-small-gguf/llama-small-q4_0.gguf", 64}}) {
    INFO(rel);
    auto m = test::load_engine_model(test::testdata(rel), small_opts(), Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
    CHECK(m.tf->predicted().config.panel_cols == want);
    CHECK(panel_cols_of(m.ck, m.layout) == want);
  }
}

TEST_CASE("seam: engine_memory by hand, and saturating instead of wrapping", "[engine][seam]") {
  Checkpoint ck = open_checkpoint(test::testdata("engine/llama-small"));
  const ModelSpec spec = *describe_model(ck).spec;  // hidden 32, heads 4/2 x 8, ffn 64, vocab 128, 2 layers
  EngineConfig c;
  c.max_batch = 1;
  c.max_context = 64;
  c.threads = 2;
  const EngineMemory m = engine_memory(spec, c);
  CHECK(m.config.max_tokens == 256);  // run's defaults, resolved
  CHECK(m.config.logit_rows == 1);
  // Per token: x, xn, tmp 3x32 + q, att 2x32 + k, v 2x16 + gate, up 2x64 = 320 floats; token
  // tables twice (4 + 8 + 4 B); one logit row's index and one slot's length (8 B each).
  CHECK(m.activations == 256 * 1280 + 256 * 32 + 8 + 8);
  CHECK(m.kv_cache == 2 * 2 * 1 * 64 * 16 * 4);          // layers x (k, v) x slots x positions x kv_dim x f32
  CHECK(m.logits == 1 * (32 + 128) * 4);                  // selected row + its logits
  CHECK(m.scratch == 2 * 64 * 4 + kVecSlots * 64 * 4);    // scores per thread + widened vectors (widest: ffn 64)
  CHECK(m.allocated() == 335888 + 16384 + 640 + 1280);
  CHECK(m.thread_buffers == static_tls_bytes());         // one worker besides the caller; f32 weights: no panel
  c.panel_cols = 64;
  CHECK(engine_memory(spec, c).thread_buffers == static_tls_bytes() + 2 * 32 * 64 * 4);
  c.max_tokens = 15;  // no pass reaches the blocked GEMM: no panel
  CHECK(engine_memory(spec, c).thread_buffers == static_tls_bytes());
  c.max_tokens = 0;
  c.threads = 1;
  c.panel_cols = 0;
  CHECK(engine_memory(spec, c).thread_buffers == 0);  // the caller's TLS is the process's own
  c.threads = 2;
  c.cuda = true;
  CHECK(engine_memory(spec, c).thread_buffers == 0);  // no CPU kernels
  c.cuda = false;
  c.max_batch = 1 << 30;
  c.max_context = int64_t(1) << 40;
  const EngineMemory huge = engine_memory(spec, c);
  CHECK(huge.kv_cache == UINT64_MAX);
  CHECK(huge.total() == UINT64_MAX);
}

namespace {

// The PT_TLS segment's memory size in this executable, read from its ELF file (another
// reader than the dynamic linker's program headers static_tls_bytes() sums).
uint64_t exe_tls_from_elf() {
  std::FILE* f = std::fopen("/proc/self/exe", "rb");
  REQUIRE(f != nullptr);
  Elf64_Ehdr eh{};
  uint64_t memsz = 0;
  if (std::fread(&eh, sizeof eh, 1, f) == 1 && eh.e_ident[EI_CLASS] == ELFCLASS64)
    for (int i = 0; i < eh.e_phnum; ++i) {
      Elf64_Phdr ph{};
      if (std::fseek(f, long(eh.e_phoff + uint64_t(i) * eh.e_phentsize), SEEK_SET) != 0 || std::fread(&ph, sizeof ph, 1, f) != 1) break;
      if (ph.p_type == PT_TLS) memsz = ph.p_memsz;
    }
  std::fclose(f);
  return memsz;
}

uint64_t resident_bytes() {
  long size = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  REQUIRE(std::fscanf(f, "%ld %ld", &size, &resident) == 2);
  std::fclose(f);
  return uint64_t(resident) * uint64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("seam: each CPU worker thread costs its static TLS, resident from its start (thread_buffers)", "[engine][seam]") {
  const uint64_t tls = static_tls_bytes(), exe = exe_tls_from_elf();
  INFO("static TLS " << tls << " B, the executable's PT_TLS " << exe << " B");
  CHECK(exe > 0);                  // the kernels' thread_local GEMM accumulators (engine/kernels_simd.hpp)
  CHECK(tls >= exe);
  CHECK(tls - exe < 64 * 1024);    // the shared libraries' thread_locals (libc, libstdc++) are small
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped: AddressSanitizer maps its own per-thread state");
  return;
#else
  // Threads with a 24 MiB stack: glibc's stack cache only holds the default 8 MiB stacks of
  // earlier threads, so each maps a fresh stack with its TLS block at the top. They wait
  // until all have started, so the growth is N threads' worth.
  constexpr int kThreads = 8;
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, 24u << 20) == 0);
  std::atomic<int> started{0}, go{0};
  struct Ctx { std::atomic<int>* started; std::atomic<int>* go; } ctx{&started, &go};
  auto body = [](void* p) -> void* {
    auto* c = static_cast<Ctx*>(p);
    c->started->fetch_add(1);
    while (c->go->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return nullptr;
  };
  const uint64_t before = resident_bytes();
  std::vector<pthread_t> ids(kThreads);
  for (auto& id : ids) REQUIRE(pthread_create(&id, &attr, body, &ctx) == 0);
  while (started.load() < kThreads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const uint64_t after = resident_bytes();
  go.store(1);
  for (auto& id : ids) pthread_join(id, nullptr);
  pthread_attr_destroy(&attr);
  const uint64_t per_thread = (after - std::min(after, before)) / kThreads;
  INFO("resident growth per thread " << per_thread << " B");
  CHECK(per_thread + 4096 >= tls);        // the whole block is touched (zero-filled) at start
  CHECK(per_thread <= tls + 64 * 1024);   // plus a few pages of stack and glibc's thread descriptor
#endif
}
