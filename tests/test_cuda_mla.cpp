// Multi-head latent attention (DeepSeek-V2/V3) on CUDA: its ops (the low-rank norms over a
// row's first values, the per-head products that absorb q into the latent and expand the
// output, q's rotated part and the latent row into the compressed cache, attention over the
// latent) op by op against the CPU backend, then the fixtures on cuda:0 (the experts on the CPU
// part beside it) against transformers' goldens and llama.cpp's ids as the CPU engine is checked
// (tests/test_engine_deepseek.cpp), with the latent cache in device memory as engine_memory
// charges it. Needs a CUDA device or the emulator build (nunchaku_cuda_emu_tests); without
// either the cases report skipped.
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

// An MLA model's shape: hidden 256, `heads`, the latent's rank and rotated part, q's unrotated
// part and v per head, q's low rank (0: q_proj); 2 layers, ffn 512, vocab 321.
ModelSpec mla_spec(int64_t heads, int64_t rank, int64_t rope, int64_t nope, int64_t v, int64_t q_rank) {
  ModelSpec s = spec_with_dims({256, heads, heads, 0, 512, 321, 2}, 64);
  s.kv_lora_rank = rank;
  s.qk_rope_head_dim = rope;
  s.qk_nope_head_dim = nope;
  s.v_head_dim = v;
  s.q_lora_rank = q_rank;
  return s;
}

// Per-head views of one stored tensor, as Transformer::bind_mla makes them: HF's kv_b_proj
// [heads * (nope + v), rank] gives W_k,h input-major (head h's nope rows) and W_v,h (its next v
// rows); llama.cpp's k_b [heads * rank, nope] and v_b [heads * v, rank] give rows per head.
// `order` permutes the heads (a layout that is not one strided run).
std::vector<WeightMatrix> head_views(const WeightMatrix& m, int64_t rows, int64_t cols, int64_t first, int64_t per_head,
                                     bool input_major, const std::vector<int64_t>& order) {
  std::vector<WeightMatrix> out;
  for (int64_t h : order) {
    WeightMatrix w = m;
    w.rows = rows, w.cols = cols, w.input_major = input_major;
    w.data = m.data + size_t(h * per_head + first) * m.row_bytes;
    out.push_back(w);
  }
  return out;
}

struct Step {
  std::vector<int32_t> slot;
  std::vector<int64_t> pos;
};

// The op table's MLA rows for `spec`, a `kv` cache and rotary `style`, over three steps: a
// 20-token prefill in slot 1 beside 3 in slot 0 (23 tokens: the products on cuBLAS), then a
// decode token in each, then 3 more in slot 0 (GEMV). Per step: the low-rank norms, q absorbed
// per head (HF's input-major kv_b_proj in bf16, llama.cpp's k_b in q8_0 when nope is whole
// blocks, f32 otherwise; heads in order, reversed, and permuted), q's rotated part and the
// latent into the cache, attention over it, the output expanded per head (kv_b_proj's v rows,
// v_b).
void op_table_mla(const ModelSpec& spec, DType kv, RopeStyle style, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Row> table;
  Rig r(spec, {.max_batch = 4, .max_context = 64, .max_tokens = 32, .logit_rows = 8, .kv_dtype = kv, .threads = 2}, style,
        spec.qk_rope_head_dim);
  const EngineDims& d = r.d;
  REQUIRE((d.kv_heads == 1 && d.head_dim == d.mla_rank + d.mla_rope));
  // The compressed cache: the latent rows alone, on both.
  CHECK(r.mem.kv_cache == uint64_t(2 * 4 * 64 * d.head_dim) * (kv == DType::F16 ? 2 : 4));
  const int64_t H = d.heads, rank = d.mla_rank, nope = d.mla_nope, v = d.mla_v, qk = nope + d.mla_rope, hd = d.head_dim;
  const std::string ty = fmt::format("kv {} {} heads {} rank {}", dtype_name(kv), style == RopeStyle::NeoX ? "neox" : "inter",
                                     H, rank);
  TwinMatrix kvb(DType::BF16, H * (nope + v), rank, rng);
  const DType kb_type = nope % 32 == 0 ? DType::Q8_0 : DType::F32, vb_type = rank % 32 == 0 ? DType::Q8_0 : DType::F32;
  TwinMatrix kb(kb_type, H * rank, nope, rng), vb(vb_type, H * v, rank, rng);
  TwinVec qa_norm(DType::F32, std::max<int64_t>(1, d.q_rank), rng), kv_norm(DType::BF16, rank, rng);
  std::vector<int64_t> in_order(static_cast<size_t>(H)), reversed, permuted;
  for (int64_t h = 0; h < H; ++h) in_order[size_t(h)] = h;
  reversed.assign(in_order.rbegin(), in_order.rend());
  permuted = in_order;
  if (H > 2) std::swap(permuted[1], permuted[2]);  // not one stride apart
  struct Heads {
    std::string name;
    const TwinMatrix* m;
    int64_t rows, cols, first, per_head;
    bool input_major;
    std::vector<int64_t> order;
  };
  const std::vector<Heads> absorb = {
      {"k_up kv_b_proj bf16 input-major", &kvb, rank, nope, 0, nope + v, true, in_order},
      {"k_up kv_b_proj bf16 input-major reversed", &kvb, rank, nope, 0, nope + v, true, reversed},
      {fmt::format("k_up k_b {}", dtype_name(kb_type)), &kb, rank, nope, 0, rank, false, in_order},
      {fmt::format("k_up k_b {} permuted", dtype_name(kb_type)), &kb, rank, nope, 0, rank, false, permuted}};
  const std::vector<Heads> expand = {
      {"v_up kv_b_proj bf16", &kvb, v, rank, nope, nope + v, false, in_order},
      {fmt::format("v_up v_b {} reversed", dtype_name(vb_type)), &vb, v, rank, 0, v, false, reversed},
      {fmt::format("v_up v_b {} permuted", dtype_name(vb_type)), &vb, v, rank, 0, v, false, permuted}};
  auto views = [&](const Heads& x, bool g) {
    return head_views(g ? x.m->gpu : x.m->cpu, x.rows, x.cols, x.first, x.per_head, x.input_major, x.order);
  };
  std::vector<Step> steps(3);
  for (int64_t p = 0; p < 20; ++p) steps[0].slot.push_back(1), steps[0].pos.push_back(p);
  for (int64_t p = 0; p < 3; ++p) steps[0].slot.push_back(0), steps[0].pos.push_back(p);
  steps[1] = {{1, 0}, {20, 3}};
  steps[2] = {{0, 0, 0}, {4, 5, 6}};
  for (size_t s = 0; s < steps.size(); ++s) {
    const int64_t T = int64_t(steps[s].slot.size());
    set_batch(r, steps[s].slot, steps[s].pos);
    // The low-rank norms: q's over Lat's first q_rank values, the latent's over K's first rank.
    if (d.q_rank > 0) {
      r.write(Buf::Lat, randn(size_t(T * buf_width(d, Buf::Lat)), rng, 2.0f));
      row(table, r, fmt::format("norm span {} step {}", d.q_rank, s), ty, Buf::Lat, T, kElementwise, [&](Backend& b, bool g) {
        Norm n{g ? qa_norm.gpu : qa_norm.cpu};
        n.span = d.q_rank;
        b.norm(Buf::Lat, Buf::Lat, n);
      });
    }
    r.write(Buf::K, randn(size_t(T * d.kv_dim()), rng, 2.0f));
    row(table, r, fmt::format("norm span {} step {}", rank, s), ty, Buf::K, T, kElementwise, [&](Backend& b, bool g) {
      Norm n{g ? kv_norm.gpu : kv_norm.cpu};
      n.span = rank;
      b.norm(Buf::K, Buf::K, n);
    });
    // q absorbed into the latent per head: Q[h][0, rank) from QH[h][0, nope).
    r.write(Buf::QH, randn(size_t(T * buf_width(d, Buf::QH)), rng));
    for (const Heads& x : absorb) {
      r.write(Buf::Q, randn(size_t(T * d.q_dim()), rng));
      row(table, r, fmt::format("matmul_heads T={} step {}", T, s), x.name, Buf::Q, T, kSums,
          [&](Backend& b, bool g) { b.matmul_heads(views(x, g), Buf::QH, qk, Buf::Q, hd); });
    }
    r.write(Buf::Q, randn(size_t(T * d.q_dim()), rng));  // the same absorbed q on both: this row's error is the op's own
    row(table, r, fmt::format("mla_rope_cache step {}", s), ty, Buf::Q, T, kElementwise,
        [&](Backend& b, bool) { b.mla_rope_cache(1); });
    CHECK(nmse(r, Buf::K, T) <= kElementwise);
    r.write(Buf::Att, randn(size_t(T * d.q_dim()), rng));  // the values past each head's rank stay as they were
    row(table, r, fmt::format("attention (latent) step {}", s), ty, Buf::Att, T, kSums,
        [&](Backend& b, bool) { b.attention(1, {0, 0.3f, 0, {}}); });
    for (const Heads& x : expand) {
      r.write(Buf::Lat, randn(size_t(T * buf_width(d, Buf::Lat)), rng));
      row(table, r, fmt::format("matmul_heads T={} step {}", T, s), x.name, Buf::Lat, T, kSums,
          [&](Backend& b, bool g) { b.matmul_heads(views(x, g), Buf::Att, hd, Buf::Lat, v); });
    }
  }
  print(table);
}

}  // namespace

TEST_CASE("cuda mla ops: 4 heads, rank 64 + rope 16, q low rank, f32 latent cache, interleaved (against the CPU)",
          "[cuda][ops][mla]") {
  if (!have_gpu()) return;
  op_table_mla(mla_spec(4, 64, 16, 32, 32, 48), DType::F32, RopeStyle::Interleaved, 51);
}

TEST_CASE("cuda mla ops: 4 heads, rank 64 + rope 16, q low rank, f16 latent cache, NeoX (against the CPU)", "[cuda][ops][mla]") {
  if (!have_gpu()) return;
  op_table_mla(mla_spec(4, 64, 16, 32, 32, 48), DType::F16, RopeStyle::NeoX, 52);
}

// DeepSeek-V3's latent row (512 + 64 = 576 values, past the 256 of the narrow attention kernel).
TEST_CASE("cuda mla ops: 2 heads, DeepSeek-V3's rank 512 + rope 64, q_proj, f16 latent cache (against the CPU)",
          "[cuda][ops][mla]") {
  if (!have_gpu()) return;
  op_table_mla(mla_spec(2, 512, 64, 32, 32, 0), DType::F16, RopeStyle::Interleaved, 53);
}

namespace {

// `streamed_layer` >= 0: that layer in host memory, streamed to the GPU each pass.
void load(GpuModel& m, const std::string& path, int streamed_layer = -1) {
  load_on_gpu(m, path, test::golden_options(), true, streamed_layer);
  INFO(m.engine.model->describe());
  CHECK(m.engine.backend->describe().find("cuda:0") != std::string::npos);
  CHECK(m.engine.backend->describe().find("experts of every layer") != std::string::npos);
  // The latent cache (rank + rope per position, no V) on the GPU, as engine_memory charges it.
  const EngineDims d = engine_dims(*m.layout.spec);
  CHECK(m.engine.model->predicted().kv_cache == uint64_t(d.layers * 2 * 64 * (d.mla_rank + d.mla_rope) * 4));
}

void check_hf(const char* name, int streamed_layer = -1) {
  const json g = json::parse(std::ifstream(testdata("engine/deepseek.json")));
  GpuModel m;
  load(m, testdata(std::string("engine/") + name), streamed_layer);
  if (streamed_layer >= 0) CHECK(m.engine.model->describe().find("streamed to cuda:0") != std::string::npos);
  check_against_golden(*m.engine.model, g.at(name));  // the run state as predicted, too
}

void check_gguf(const char* name) {
  const json doc = json::parse(std::ifstream(testdata("engine/deepseek-gguf.json")));
  const json& ref = doc.at(name);
  const std::string path = testdata(std::string("engine/deepseek-gguf/") + name + ".gguf");
  GpuModel m;
  load(m, path);
  const auto prompt = ref.at("prompt").get<std::vector<int32_t>>();
  SeqChunk ch{0, 0, prompt, false};
  auto out = m.engine.model->forward({&ch, 1});
  CHECK(rel_error(out.data(), ref.at("transformers_last_prompt_logits")) < 1e-4);
  CHECK(rel_error(out.data(), ref.at("last_prompt_logits")) < 3e-3);  // llama.cpp's exp/SiLU approximations
  CHECK(greedy(*m.engine.model, prompt, int(ref.at("ids").size())) == ref.at("ids").get<std::vector<int32_t>>());
  CHECK(m.engine.model->state_bytes() == m.engine.model->predicted().allocated());
}

}  // namespace

// One case per model, so each stays short on the emulator.
TEST_CASE("cuda mla: deepseek_v3 (q low rank, yarn, sigmoid groups) on cuda:0 matches transformers", "[cuda][moe][deepseek]") {
  if (!have_gpu()) return;
  check_hf("deepseek_v3");
}

TEST_CASE("cuda mla: deepseek_v3_neox (rotate-half rope) on cuda:0 matches transformers", "[cuda][moe][deepseek]") {
  if (!have_gpu()) return;
  check_hf("deepseek_v3_neox");
}

TEST_CASE("cuda mla: deepseek_v2 (q_proj, softmax groups) on cuda:0 matches transformers", "[cuda][moe][deepseek]") {
  if (!have_gpu()) return;
  check_hf("deepseek_v2");
}

TEST_CASE("cuda mla: deepseek_v2_lite with layer 1 streamed to cuda:0 matches transformers", "[cuda][moe][deepseek]") {
  if (!have_gpu()) return;
  check_hf("deepseek_v2_lite", 1);
}

TEST_CASE("cuda mla: the GGUF twins (attn_k_b / attn_v_b) on cuda:0 give llama.cpp's greedy ids", "[cuda][moe][deepseek][gguf]") {
  if (!have_gpu()) return;
  for (const char* name : {"deepseek_v3", "deepseek_v2_lite", "deepseek_v2_lite_yarn"}) {
    INFO(name);
    check_gguf(name);
  }
}
