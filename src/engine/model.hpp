// The decoder-only transformer over a WeightProvider and a Backend, one block recipe
// (model/recipe.hpp: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, phi3 and the MoE
// families mixtral, qwen2_moe, qwen3_moe, olmoe, gpt_oss, deepseek, llama4) interpreted
// op by op:
//
//   Transformer(layout, provider, backend)   forward(): for each module in order
//     provider.prefetch(next ones); views = provider.acquire(m)
//     backend ops on backend-owned buffers, weights bound by role (the arch table's)
//     provider.release(m)
//
// Weights are bound by role (ModelLayout's Module::roles from src/model's architecture
// table), never by name. The backend owns the run state, sized by engine_memory() (the
// function estimate and plan use for a nunchaku run) and allocated once in the
// constructor; forward() allocates nothing. Provider and backend must outlive the model.
// Thread-safety: one forward() at a time.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/weights.hpp"
#include "memory/engine_memory.hpp"
#include "model/model.hpp"
#include "model/recipe.hpp"

namespace nunchaku::engine {

struct EngineOptions {
  int max_batch = 1;          // KV slots: sequences held at once
  int64_t max_context = 0;    // positions per slot; 0 = min(spec.max_context, 4096) (2048 if unknown)
  int64_t max_tokens = 0;     // tokens one forward() may carry; 0 = max(256, max_batch)
  int64_t logit_rows = 0;     // logit rows one forward() may return; 0 = max_batch
  DType kv_dtype = DType::F32;  // F32 or F16
  std::optional<RopeStyle> rope_style;  // override the style deduced from the naming
  int prefetch_depth = kStreamSlots - 1;  // modules the provider is asked to bring in ahead of use
  bool fast_math = false;     // CPU: K-quant matmuls over 8-bit activations (kernels_q8.hpp), not exact
};

// One sequence's piece of a forward pass: tokens at positions [start, start + n) of
// cache slot `slot`, whose positions [0, start) must already be in the cache (start may be
// below what the slot holds: a new sequence in a reused slot starts at 0 and overwrites).
struct SeqChunk {
  int slot = 0;
  int64_t start = 0;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // a logits row for every token instead of the last one only
};

// The EngineConfig (for engine_memory) that these options and this backend give.
EngineConfig engine_config(const EngineOptions& opts, const Backend& backend, const WeightProvider& weights);

class Transformer {
 public:
  // Throws Error engine.* (unsupported architecture or dtype, missing tensor, bad shape,
  // weights in memory the backend cannot read) and engine.out_of_memory (exit 3).
  Transformer(const ModelLayout& layout, WeightProvider& weights, Backend& backend, const EngineOptions& opts = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // Runs the chunks (prefill pieces and single-token decode steps mixed) as one batch:
  // every weight matrix is read once for all their tokens. Returns logits, row-major
  // [rows][vocab()]: per chunk in order, one row (last token) or one per token.
  // Throws Error engine.bad_batch / engine.bad_token / engine.context_full on misuse.
  std::span<const float> forward(std::span<const SeqChunk> chunks);

  int64_t vocab() const { return dims_.vocab; }
  int64_t hidden() const { return dims_.hidden; }
  int64_t layers() const { return dims_.layers; }
  int max_batch() const { return cfg_.max_batch; }
  int64_t max_context() const { return cfg_.max_context; }
  int64_t max_tokens() const { return cfg_.max_tokens; }
  int64_t logit_rows() const { return cfg_.logit_rows; }
  RopeStyle rope_style() const { return rope_style_; }
  const BlockRecipe& recipe() const { return recipe_; }
  const Backend& backend() const { return backend_; }
  const WeightProvider& weights() const { return weights_; }
  // What the run state takes, as allocated (backend buffers + per-slot bookkeeping) and as
  // engine_memory() predicts it; tests check they are equal.
  uint64_t state_bytes() const;
  const EngineMemory& predicted() const { return memory_; }
  std::string describe() const;  // one line: arch, dims, weight dtype, rope, weights, backend

 private:
  using Slots = std::array<int16_t, kRoleCount>;  // role -> index among the module's tensors, -1 absent
  // A matrix of the layer: its tensor's index among the module's and its first row there
  // (q, k, v of a fused qkv and gate, up of a fused gate_up are row ranges of one tensor).
  struct Part {
    WeightMatrix w;  // data bound at acquire
    int16_t at = -1;
    int64_t row0 = 0;         // first stored row (WeightMatrix::stored_rows) in the tensor
    int16_t scales_at = -1;   // split-scale MXFP4: the scales tensor (cols / 32 bytes per row)
  };
  // A MoE layer's router, routed experts (3 parts each: gate, up, down; rows of a stacked
  // tensor or one tensor per expert) and optional shared expert.
  struct Moe {
    Part router, sh_gate, sh_up, sh_down;
    std::vector<Part> experts;     // [experts x 3]
    std::vector<MoeExpert> bound;  // [experts]: pointers into `experts`
    bool shared = false;
    bool shared_on_layer = false;  // MoeFfn::shared_on_layer: the shared expert in the layer's (GPU) memory
    std::vector<Piece> want;             // streamed experts: the pieces of a round (bind)
    std::vector<const uint8_t*> where;   // and where the provider put them
  };
  // MLA's matrices (recipe mla, model_mla.cpp): q is Layer::q, or qa -> its norm -> qb; kva
  // the latent row; per head, q's unrotated part absorbed into the latent (k_up[h]: nope ->
  // rank) and the latent attention output expanded (v_up[h]: rank -> v), views into kv_b (HF,
  // k_up input-major) or k_b / v_b (llama.cpp's converter), at byte offsets of their tensors.
  struct Mla {
    Part qa, qb, kva;
    int16_t kb_at = -1, vb_at = -1;
    std::vector<WeightMatrix> k_up, v_up;
    std::vector<size_t> k_off, v_off;
  };
  struct Layer {
    size_t module = 0;
    Slots at{};
    Part q, k, v, o, gate, up, down;
    int64_t window = 0;
    int rope = 0;  // rotary table, -1 none (NoPE)
    bool chunked = false;  // window is a chunk (LayerRecipe::chunked)
    std::optional<Moe> moe;  // the MLP is a mixture of experts
    std::optional<Mla> mla;  // multi-head latent attention
  };
  struct Bound {  // a module outside the stack with the one matrix or vector it holds
    size_t module = SIZE_MAX;
    int16_t at = -1;
    WeightMatrix w;
  };
  void bind(const ModelLayout& layout);
  void check_layer_ops() const;  // the recipe's layer ops the backend must support (throws)
  void compute_rope(const ModelLayout& layout);
  int64_t panel_cols() const;  // EngineConfig::panel_cols of the bound weights
  int64_t validate(std::span<const SeqChunk> chunks);
  void bind_layer(Layer& L, std::span<const TensorView> info, const std::string& module);
  // model_moe.cpp: the experts of a layer with a router (dims_.experts, expert_inter set).
  void bind_moe(Layer& L, std::span<const TensorView> info, std::span<const Role> roles, const std::string& module);
  // gpt-oss's experts (recipe clamped_swiglu): gate|up mixed and down, input-major floats or
  // split-scale MXFP4, with their biases; Llama 4's (Role::ExpGateUpIn): gate|up halves and
  // down, input-major floats, no biases.
  void bind_mixed_experts(Moe& m, const Layer& L, std::span<const TensorView> info, const std::string& module);
  // The routed experts as row ranges of their tensors (one per expert, stacked, or gate|up fused).
  void bind_expert_rows(Moe& m, std::span<const TensorView> info, std::span<const Role> roles, const std::string& module);
  void moe_dims(const ModelLayout& layout, size_t module);  // dims_ expert_inter, inter (shared)
  void run_moe(Layer& L, std::span<const TensorView> w);   // XN -> Tmp
  void run_layer(Layer& L, int64_t l);
  void run_attention(Layer& L, int64_t l, std::span<const TensorView> w);
  // model_mla.cpp: a layer's MLA matrices (bind) and its attention, XN -> Tmp (o projected).
  void bind_mla(Layer& L, std::span<const TensorView> info, const std::string& module);
  void run_mla(Layer& L, int64_t l, std::span<const TensorView> w);
  Norm norm_of(std::span<const TensorView> w, const Layer& L, Role r) const;
  std::span<const TensorView> acquire(size_t step);
  void embed_here(int64_t T);

  ModelSpec spec_;
  BlockRecipe recipe_;
  WeightProvider& weights_;
  Backend& backend_;
  EngineOptions opts_;
  EngineConfig cfg_;
  EngineMemory memory_;
  EngineDims dims_;
  int64_t dense_inter_ = 0;  // rows of a dense layer's gate (dims_.inter may be a shared expert's, wider)
  RopeStyle rope_style_ = RopeStyle::NeoX;
  float eps_ = 1e-5f;
  Bound embed_, final_norm_, head_;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_, inv_freq_local_;  // [rot/2] per rotary table, scaling applied
  std::vector<size_t> order_;    // modules in the order one forward acquires them
  std::vector<int64_t> slot_len_;  // [max_batch] positions written per slot
  std::vector<int32_t> tok_id_, tok_slot_;  // host copies of the batch, handed to the backend
  std::vector<int64_t> tok_pos_, sel_rows_;
  // Embedding gathered on the host (embed_here): rows as fp32, up to max_tokens x hidden (not
  // in state_bytes(): it exists only when the embedding stays in host memory of a GPU run).
  bool embed_on_host_ = false;
  std::vector<float> host_x_;
};

}  // namespace nunchaku::engine
