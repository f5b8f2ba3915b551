// Routed experts streamed at expert granularity: a MoE layer left on disk is read as its
// slot (attention, norms, router, shared expert) plus the pieces of the experts a batch routes
// to. Checked against the resident engine (itself checked against transformers and llama.cpp
// in test_engine_moe.cpp): the same logits bit for bit, the reads counted by routing (top_k
// distinct experts per token and layer), and the pool charged by plan as allocated.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "format/open.hpp"
#include "io/module_reads.hpp"
#include "memory/engine_memory.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

const Device kDisk{Device::Kind::Disk, 0};


// All-position logits of one prompt, then 12 greedy tokens.
struct Run {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
};
Run run_of(Transformer& tf) {
  const std::vector<int32_t> prompt = {1, 15, 27, 3, 9, 41, 7};
  SeqChunk ch{0, 0, prompt, true};
  auto l = tf.forward({&ch, 1});
  return {std::vector<float>(l.begin(), l.end()), test::greedy(tf, prompt, 12)};
}

const StreamedProvider& provider(const test::EngineModel& m) {
  const auto* p = dynamic_cast<const StreamedProvider*>(&m.tf->weights());
  REQUIRE(p != nullptr);
  return *p;
}

int64_t moe_layers(const ModelLayout& layout) {
  int64_t n = 0;
  for (const Module& mod : layout.modules)
    n += std::any_of(mod.roles.begin(), mod.roles.end(), [](Role r) { return is_expert_role(r); });
  return n;
}

const char* const kFixtures[] = {"engine/mixtral", "engine/qwen2_moe", "engine/qwen3_moe", "engine/olmoe",
                                 "engine/moe-gguf/qwen3_moe.gguf", "engine/moe-gguf/qwen2_moe.gguf"};

}  // namespace

TEST_CASE("moe stream: experts read per expert give the resident engine's logits bit for bit", "[engine][moe][stream]") {
  for (const char* rel : kFixtures) {
    INFO(rel);
    auto resident = test::load_engine_model(test::testdata(rel), test::short_run_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
    const Run want = run_of(*resident.tf);
    // The default pool (top_k experts a round), one expert a round (prefill in many rounds),
    // and page-cache reads instead of O_DIRECT.
    for (int slots : {0, 3}) {
      for (bool direct : {true, false}) {
        INFO("piece slots " << slots << (direct ? ", O_DIRECT" : ", buffered"));
        StreamOptions so;
        so.piece_slots = slots;
        so.direct_io = direct;
        auto m = test::load_engine_model(test::testdata(rel), test::short_run_options(), kDisk, so, 2);
        const auto& wp = m.tf->weights();
        const int64_t k = m.layout.spec->num_experts_per_tok;
        CHECK(wp.piece_slots() == (slots ? slots : 3 * k));
        int64_t pieced = 0;
        for (size_t i = 0; i < wp.modules(); ++i) pieced += wp.pieces_streamed(i);
        CHECK(pieced == moe_layers(m.layout));
        CHECK(pieced > 0);
        const Run got = run_of(*m.tf);
        CHECK(got.logits == want.logits);  // exact: same kernels over the same bytes
        CHECK(got.tokens == want.tokens);
        CHECK(m.tf->state_bytes() + wp.pool_bytes() == m.tf->predicted().allocated());
        CHECK(m.tf->predicted().stream_pool == wp.pool_bytes());
      }
    }
  }
}

TEST_CASE("moe stream: a decode step reads top_k experts' gate, up and down per MoE layer, nothing more",
          "[engine][moe][stream]") {
  for (const char* rel : kFixtures) {
    INFO(rel);
    auto m = test::load_engine_model(test::testdata(rel), test::short_run_options(), kDisk, StreamOptions{}, 2);
    const std::vector<int32_t> prompt = {1, 15, 27, 3};
    SeqChunk ch{0, 0, prompt, false};
    auto l = m.tf->forward({&ch, 1});
    const StreamStats before = provider(m).stats();
    const int32_t next = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    SeqChunk step{0, int64_t(prompt.size()), std::span<const int32_t>(&next, 1), false};
    m.tf->forward({&step, 1});
    const StreamStats after = provider(m).stats();
    // One token routes to top_k distinct experts in each MoE layer: 3 pieces each, read or
    // found in the pool. Each module's slot is read once a pass.
    const uint64_t k = uint64_t(m.layout.spec->num_experts_per_tok);
    CHECK((after.pieces_read - before.pieces_read) + (after.piece_hits - before.piece_hits) ==
          3 * k * uint64_t(moe_layers(m.layout)));
    CHECK(after.modules_read - before.modules_read == m.layout.modules.size());
    // The bytes read: each module's slot once, each piece read at most its slot's bytes;
    // give or take the module read ahead for the next pass (it may finish on either side
    // of a snapshot).
    uint64_t slots = 0, ahead = 0;
    for (const Module& mod : m.layout.modules) {
      slots += stream_slot_bytes(m.ck, mod);
      ahead = std::max(ahead, stream_slot_bytes(m.ck, mod));
    }
    const uint64_t read = after.bytes_read - before.bytes_read;
    CHECK(read <= slots + ahead + (after.pieces_read - before.pieces_read) * m.tf->weights().piece_bytes());
    CHECK(read + ahead >= slots - 4096 * m.layout.modules.size());
  }
}

TEST_CASE("moe stream: the piece slot by hand, and plan charges the pool the engine allocates", "[engine][moe][stream]") {
  // qwen3_moe: hidden 32, moe_intermediate 16, fp32, top 3: a piece is 16 x 32 x 4 = 2048 B,
  // its slot one page for the bytes and one for a start anywhere in a page.
  {
    Checkpoint ck = open_checkpoint(test::testdata("engine/qwen3_moe"));
    ModelLayout layout = describe_model(ck);
    const Module& l0 = layout.modules.at(1);
    REQUIRE(l0.kind == ModuleKind::Layer);
    CHECK(stream_piece_bytes(ck, l0) == 8192);
    CHECK(stream_piece_slots(3) == 9);
    // The slot holds no expert tensor: its bytes are what the layer's other tensors read.
    Module rest = l0;
    rest.tensors.clear();
    for (size_t i : stream_slot_tensors(l0)) rest.tensors.push_back(l0.tensors[i]);
    CHECK(stream_slot_bytes(ck, l0) == plan_module_reads(ck, rest).bytes);
    CHECK(rest.tensors.size() + 3 * 8 == l0.tensors.size());  // 8 experts x gate, up, down
  }
  for (const char* rel : kFixtures) {
    INFO(rel);
    auto m = test::load_engine_model(test::testdata(rel), test::short_run_options(), kDisk, StreamOptions{}, 2);
    CHECK(test::all_on_disk_plan(m).devices.at(0).staging == m.tf->weights().pool_bytes());
  }
}

TEST_CASE("moe stream: a CPU plan short of RAM puts MoE layers on disk before dense modules", "[engine][moe][stream]") {
  // On disk a MoE layer costs a step its slot and top_k experts; a dense module (the
  // embedding, the head) all of itself. Qwen3-30B-A3B's published config, header only
  // (bf16, 48 MoE layers of 128 experts, top 8).
  test::TempDir tmp;
  test::write_arch_fixture(std::filesystem::path(test::testdata("arch")) / "qwen3-30b-a3b", tmp.path.string());
  Checkpoint ck = open_checkpoint(tmp.path.string());
  ModelLayout layout = describe_model(ck);
  Workload w;
  w.runtime = Runtime::Nunchaku;
  w.target = Target::Cpu;
  w.context = 4096;
  const Estimate e = estimate(ck, layout, w);
  PlanRequest r;
  r.allow_disk = true;
  r.cpu_ram = 1ull << 40;
  const uint64_t all = make_plan(e, r).devices.at(0).total();
  for (double keep : {0.9, 0.5, 0.1}) {
    INFO("budget " << keep << " of " << all);
    r.cpu_ram = uint64_t(double(all) * keep);
    const DevicePlan p = make_plan(e, r);
    CHECK(p.fits);
    std::vector<bool> disk(e.modules.size(), false);
    for (const auto& d : p.devices)
      if (d.device.kind == Device::Kind::Disk)
        for (size_t i : d.modules) disk[i] = true;
    size_t moe_on_disk = 0, moe = 0;
    for (size_t i = 0; i < e.modules.size(); ++i) {
      const bool pieced = e.modules[i].stream_piece_bytes > 0;
      moe += pieced;
      moe_on_disk += pieced && disk[i];
      if (disk[i] && !pieced) CHECK(moe_on_disk == moe);  // a dense module on disk: every MoE layer is
      if (e.modules[i].kind == ModuleKind::Head || e.modules[i].kind == ModuleKind::Embedding) {
        INFO(e.modules[i].name);
        CHECK_FALSE(disk[i]);  // 311 MiB each, read whole every step: kept while MoE layers can go
      }
    }
    CHECK(moe == 48);
    CHECK(moe_on_disk > 0);
  }
}

TEST_CASE("moe stream: published MoE configs' layers stream their experts as pieces (experts one tensor each or fused)",
          "[engine][moe][stream]") {
  // Header-only checkpoints with transformers 5's names (experts fused per layer:
  // mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I]). A piece is one expert's
  // gate or up half, or its down: I x H x 2 B (bf16), plus the O_DIRECT page.
  struct Case {
    const char* name;
    uint64_t piece;  // I x H x 2
  };
  for (const Case c : {Case{"qwen3-30b-a3b", 768ull * 2048 * 2}, Case{"qwen2-moe", 1408ull * 2048 * 2},
                       Case{"olmoe", 1024ull * 2048 * 2}, Case{"mixtral-8x7b", 14336ull * 4096 * 2}}) {
    INFO(c.name);
    test::TempDir tmp;
    test::write_arch_fixture(std::filesystem::path(test::testdata("arch")) / c.name, tmp.path.string());
    Checkpoint ck = open_checkpoint(tmp.path.string());
    ModelLayout layout = describe_model(ck);
    int64_t layers = 0;
    for (const Module& m : layout.modules) {
      if (m.kind != ModuleKind::Layer) continue;
      ++layers;
      INFO(m.name);
      CHECK(stream_piece_bytes(ck, m) == (c.piece + 4095) / 4096 * 4096 + 4096);
      uint64_t all = 0;
      for (size_t t : m.tensors) all += ck.tensors[t].nbytes;
      CHECK(stream_slot_bytes(ck, m) < all / 8);  // the slot: attention, norms, router, shared expert
    }
    CHECK(layers == layout.spec->num_layers);
  }
}
