// The decoder-only transformer (llama, mistral, qwen2, qwen3) over a WeightStore.
//
// Weights: views into the WeightStore (host memory or file mappings) in their stored
// dtype; the store must outlive the Transformer. Only norm weights and biases (vectors)
// are copied to fp32. HF names (model.layers.N.self_attn.q_proj.weight) and llama.cpp
// GGUF names (blk.N.attn_q.weight) are both recognised.
// Run state (activations for max_tokens tokens, logits for logit_rows rows, the KV cache
// for max_batch slots x max_context positions) is allocated once in the constructor;
// forward() allocates nothing.
// Thread-safety: one forward() at a time; the kernels use the backend's threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/kernels.hpp"
#include "io/weight_store.hpp"
#include "model/model.hpp"

namespace nunchaku::engine {

// How rotary embedding pairs dimensions within a head.
//   NeoX ("rotate half"): (i, i + d/2). HF llama/mistral/qwen weights, GGUF qwen2/qwen3.
//   Interleaved: (2i, 2i+1). GGUF arch llama: convert_hf_to_gguf permutes the Q/K rows
//   so llama.cpp's LLAMA_ROPE_TYPE_NORM applies; llama2.c exports are natively so.
enum class RopeStyle { NeoX, Interleaved };

struct EngineOptions {
  int max_batch = 1;          // KV slots: sequences held at once
  int64_t max_context = 0;    // positions per slot; 0 = min(spec.max_context, 4096) (2048 if unknown)
  int64_t max_tokens = 0;     // tokens one forward() may carry; 0 = max(256, max_batch)
  int64_t logit_rows = 0;     // logit rows one forward() may return; 0 = max_batch
  DType kv_dtype = DType::F32;  // F32 or F16
  int threads = 0;            // 0 = all hardware threads
  std::optional<RopeStyle> rope_style;  // override the style deduced from the weights
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

class Transformer {
 public:
  // Throws Error engine.* (unsupported architecture or dtype, missing tensor, bad shape,
  // tensor not in host memory).
  Transformer(const ModelSpec& spec, const WeightStore& weights, const EngineOptions& opts = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // Runs the chunks (prefill pieces and single-token decode steps mixed) as one batch:
  // every weight matrix is read once for all their tokens. Returns logits, row-major
  // [rows][vocab()]: per chunk in order, one row (last token) or one per token.
  // Throws Error engine.bad_batch / engine.bad_token / engine.context_full on misuse.
  std::span<const float> forward(std::span<const SeqChunk> chunks);

  int64_t vocab() const { return vocab_; }
  int64_t hidden() const { return hidden_; }
  int64_t layers() const { return int64_t(layers_.size()); }
  int max_batch() const { return opts_.max_batch; }
  int64_t max_context() const { return opts_.max_context; }
  int64_t max_tokens() const { return opts_.max_tokens; }
  int64_t logit_rows() const { return opts_.logit_rows; }
  RopeStyle rope_style() const { return rope_style_; }
  const Backend& backend() const { return *backend_; }
  uint64_t state_bytes() const;  // activations + KV cache + logits, as allocated
  std::string describe() const;  // one line: arch, dims, weight dtype, rope, backend

 private:
  struct Layer {
    WeightMatrix q, k, v, o, gate, up, down;
    std::vector<float> attn_norm, ffn_norm, q_bias, k_bias, v_bias, q_norm, k_norm;
    int64_t window = 0;
  };
  void rope_row(float* v, int64_t heads, int64_t pos) const;

  ModelSpec spec_;
  EngineOptions opts_;
  std::unique_ptr<Backend> backend_;
  RopeStyle rope_style_ = RopeStyle::NeoX;
  int64_t hidden_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, inter_ = 0, vocab_ = 0;
  float eps_ = 1e-5f;
  WeightMatrix embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;  // [head_dim/2], scaling applied

  // Run state (allocated once).
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, sel_, logits_;
  std::vector<int32_t> tok_slot_;
  std::vector<int64_t> tok_pos_;
  std::vector<int32_t> tok_id_;
  std::vector<int64_t> slot_len_;  // [max_batch] positions written per slot
  std::unique_ptr<uint8_t[]> kv_;  // [layers][2 (k,v)][max_batch][max_context][kv_dim]
  size_t kv_layer_bytes_ = 0;      // one of k or v for one layer
};

}  // namespace nunchaku::engine
