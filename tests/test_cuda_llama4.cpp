// Llama 4's text model on CUDA: its four ops of its own (chunked attention, the query
// temperature of the NoPE layers, weightless q/k RMS norms, layers without rotary positions) op
// by op against the CPU backend, then the fixtures on cuda:0 (the experts on the CPU part beside
// it, as make_engine builds every MoE model's GPU run) against transformers' goldens as the CPU
// engine is checked (tests/test_engine_llama4.cpp). Needs a CUDA device or the emulator build
// (nunchaku_cuda_emu_tests); without either the cases report skipped.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tests/test_cuda_helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using namespace nunchaku::test;
using nlohmann::json;

namespace {

constexpr int64_t kChunk = 8;

// The op table's Llama 4 rows for a `kv` cache and rotary `style`: layer 0 global and NoPE
// (no rotation, the temperature), layer 1 chunked (chunks of 8 in a ring of 8 + 32 - 1 = 39
// positions) with rotation and unit q/k norms; four steps: a 30-token prefill in slot 1
// (crossing three chunk boundaries), 16 more (past the ring: its indices wrap), slot 1's next
// token beside slot 0's first five, then slot 0's 5..11 (starting mid-chunk, crossing one)
// beside slot 1's next.
void op_table_llama4(DType kv, RopeStyle style, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Row> table;
  ModelSpec spec = Rig::rig_spec({256, 4, 2, 64, 512, 321, 2}, {0, kChunk});
  Rig r(spec, {.max_batch = 4, .max_context = 64, .max_tokens = 32, .logit_rows = 8, .kv_dtype = kv, .threads = 2}, style);
  REQUIRE(r.mem.kv_positions == std::vector<int64_t>{64, kChunk + 32 - 1});
  const std::string ty = fmt::format("kv {} {}", dtype_name(kv), style == RopeStyle::NeoX ? "neox" : "inter");
  struct Step {
    std::vector<int32_t> slot;
    std::vector<int64_t> pos;
  };
  std::vector<Step> steps(4);
  for (int64_t p = 0; p < 30; ++p) steps[0].slot.push_back(1), steps[0].pos.push_back(p);
  for (int64_t p = 30; p < 46; ++p) steps[1].slot.push_back(1), steps[1].pos.push_back(p);
  steps[2] = {{1, 0, 0, 0, 0, 0}, {46, 0, 1, 2, 3, 4}};
  for (int64_t p = 5; p < 12; ++p) steps[3].slot.push_back(0), steps[3].pos.push_back(p);
  steps[3].slot.push_back(1), steps[3].pos.push_back(47);
  const Norm unit{{nullptr, DType::F32, r.d.head_dim}, NormKind::Rms, {}};
  for (size_t s = 0; s < steps.size(); ++s) {
    const int64_t T = int64_t(steps[s].slot.size());
    set_batch(r, steps[s].slot, steps[s].pos);
    // Unit norms on their own: per head of q, over the whole of k.
    r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng, 3.0f));
    r.write(Buf::K, randn(size_t(T * r.d.kv_dim()), rng, 3.0f));
    row(table, r, fmt::format("unit_norm per head step {}", s), ty, Buf::Q, T, kElementwise,
        [&](Backend& b, bool) { b.norm(Buf::Q, Buf::Q, unit); });
    row(table, r, fmt::format("unit_norm row step {}", s), ty, Buf::K, T, kElementwise, [&](Backend& b, bool) {
      b.norm(Buf::K, Buf::K, {{nullptr, DType::F32, r.d.kv_dim()}, NormKind::Rms, {}});
    });
    // Layer 0: no rotation, K and V cached as they are.
    r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng));
    r.write(Buf::K, randn(size_t(T * r.d.kv_dim()), rng));
    r.write(Buf::V, randn(size_t(T * r.d.kv_dim()), rng));
    row(table, r, fmt::format("no_rope L0 step {}", s), ty, Buf::K, T, kElementwise,
        [&](Backend& b, bool) { b.rope_and_cache(0, {}, {}, -1); });
    CHECK(nmse(r, Buf::Q, T) <= kElementwise);
    for (float scale : {0.0f, 0.3f}) {
      Attention a{0, scale, 0, {}};
      a.temp_floor = 4, a.temp_scale = 0.5f;  // positions 3.. scaled by up to ln(13) / 2 + 1
      row(table, r, fmt::format("attention_temperature L0 step {}", s), fmt::format("{} floor 4 x0.5 scale {}", ty, scale),
          Buf::Att, T, kSums, [&](Backend& b, bool) { b.attention(0, a); });
    }
    // Layer 1: unit q/k norms then rotation, fused; chunked attention (with and without the
    // temperature).
    r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng, 2.0f));
    r.write(Buf::K, randn(size_t(T * r.d.kv_dim()), rng, 2.0f));
    r.write(Buf::V, randn(size_t(T * r.d.kv_dim()), rng));
    row(table, r, fmt::format("rope_and_cache unit L1 step {}", s), ty, Buf::K, T, kElementwise,
        [&](Backend& b, bool) { b.rope_and_cache(1, unit, unit, 0); });
    CHECK(nmse(r, Buf::Q, T) <= kElementwise);
    for (int64_t floor : {0, 4}) {
      Attention a{kChunk, 0.3f, 0, {}};
      a.chunked = true;
      a.temp_floor = floor, a.temp_scale = 0.5f;
      row(table, r, fmt::format("chunked_attention L1 step {}", s), fmt::format("{} chunk {} floor {}", ty, kChunk, floor),
          Buf::Att, T, kSums, [&](Backend& b, bool) { b.attention(1, a); });
    }
  }
  print(table);
}

}  // namespace

TEST_CASE("cuda llama4 ops: chunked attention, temperature, unit norms and NoPE, f32 cache, interleaved (against the CPU)",
          "[cuda][ops][llama4]") {
  if (!have_gpu()) return;
  op_table_llama4(DType::F32, RopeStyle::Interleaved, 41);
}

TEST_CASE("cuda llama4 ops: chunked attention, temperature, unit norms and NoPE, f16 cache, NeoX (against the CPU)",
          "[cuda][ops][llama4]") {
  if (!have_gpu()) return;
  op_table_llama4(DType::F16, RopeStyle::NeoX, 42);
}

// The chunk's first position, not the window's: a backend that attended over the last 8
// positions instead would give another answer for every token past the first chunk (the CPU's
// two answers differ), so the table above checks the chunks themselves.
TEST_CASE("cuda llama4 ops: chunks and windows of 8 give different attention (the table's check can fail)",
          "[cuda][ops][llama4]") {
  if (!have_gpu()) return;
  std::mt19937 rng(43);
  Rig r(Rig::rig_spec({256, 4, 2, 64, 512, 321, 2}, {0, kChunk}),
        {.max_batch = 4, .max_context = 64, .max_tokens = 32, .logit_rows = 8, .threads = 2}, RopeStyle::NeoX);
  std::vector<int32_t> slot(20, 0);
  std::vector<int64_t> pos(20);
  for (int64_t p = 0; p < 20; ++p) pos[size_t(p)] = p;
  set_batch(r, slot, pos);
  r.write(Buf::Q, randn(size_t(20 * r.d.q_dim()), rng));
  r.write(Buf::K, randn(size_t(20 * r.d.kv_dim()), rng));
  r.write(Buf::V, randn(size_t(20 * r.d.kv_dim()), rng));
  r.gpu->store_kv(1);
  Attention chunked{kChunk, 0, 0, {}};
  chunked.chunked = true;
  r.gpu->attention(1, chunked);
  const std::vector<float> c = r.gpu->read(Buf::Att, 20);
  r.gpu->attention(1, {kChunk, 0, 0, {}});
  const std::vector<float> w = r.gpu->read(Buf::Att, 20);
  const size_t per = size_t(r.d.q_dim());
  for (size_t t = 0; t < 20; ++t) {
    INFO("position " << t);
    const bool same = std::equal(c.begin() + long(t * per), c.begin() + long((t + 1) * per), w.begin() + long(t * per));
    CHECK(same == (t < size_t(kChunk) || t % size_t(kChunk) == size_t(kChunk) - 1));  // the window is the chunk
  }
}

namespace {

// `path` on cuda:0 with its experts on the CPU part: the split make_engine builds;
// `streamed_layer` >= 0: that layer in host memory, streamed to the GPU each pass.
void load(GpuModel& m, const std::string& path, int64_t max_tokens, int streamed_layer = -1) {
  load_on_gpu(m, path, test::golden_options(max_tokens), true, streamed_layer);
  INFO(m.engine.model->describe());
  if (streamed_layer >= 0) CHECK(m.engine.model->describe().find("streamed to cuda:0") != std::string::npos);
  CHECK(m.engine.backend->describe().find("cuda:0") != std::string::npos);
  CHECK(m.engine.backend->describe().find("experts of every layer") != std::string::npos);
}

}  // namespace

TEST_CASE("cuda llama4: chunked, NoPE and MoE layers on cuda:0 match transformers (32 greedy ids, logits 1e-4)",
          "[cuda][moe][llama4]") {
  if (!have_gpu()) return;
  const json g = json::parse(std::ifstream(testdata("engine/llama4.json")));
  // Passes of 16 tokens (chunk boundaries inside a pass) and 11 (passes that start mid-chunk;
  // the chunked layers' 18-position rings wrap), as the CPU engine's test; the second with the
  // NoPE MoE layer 3 streamed to the GPU each pass.
  for (int64_t tokens : {16, 11}) {
    INFO(tokens << " tokens a pass");
    GpuModel m;
    load(m, testdata("engine/llama4"), tokens, tokens == 11 ? 3 : -1);
    check_against_golden(*m.engine.model, g.at("llama4"));  // the run state as predicted, too
  }
}

TEST_CASE("cuda llama4: the GGUF twin on cuda:0 matches transformers and llama.cpp's greedy ids", "[cuda][moe][llama4][gguf]") {
  if (!have_gpu()) return;
  const json doc = json::parse(std::ifstream(testdata("engine/llama4-gguf.json")));
  const json& g = doc.at("llama4");
  const std::string path = testdata("engine/llama4-gguf/" + g.at("file").get<std::string>());
  const json& t = g.at("transformers");
  GpuModel m;
  load(m, path, 16);
  check_against_golden(*m.engine.model, {{"prompt", g.at("prompt")}, {"ids", t.at("ids")},
                                         {"prompt_logits", t.at("prompt_logits")}, {"final_logits", t.at("final_logits")}});
  GpuModel fresh;
  load(fresh, path, 16);
  CHECK(greedy(*fresh.engine.model, g.at("prompt").get<std::vector<int32_t>>(), 32) ==
        g.at("ids").get<std::vector<int32_t>>());  // llama.cpp's
}
