// The layer as a recipe: what one decoder block of a family computes, beyond its dimensions
// (which norm, which activation, which extra norms and caps, which rotary table per layer,
// how wide each layer's attention window is). The engine's Transformer interprets it op by
// op (engine/model.cpp run_layer), and engine_memory() sizes the run state from it, so the
// estimate of a nunchaku run and the run itself read one description.
//
// recipe_for() builds the generic part from ModelSpec fields (config.json / GGUF metadata)
// and hands the rest to the family's record (ArchRecord::recipe), the one place a family's
// block is described.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.hpp"

namespace nunchaku {

// y = x / rms(x) * w (Rms); * (1 + w) (RmsOnePlus: Gemma's stored weights, HF naming; GGUF
// files hold 1 + w already); (x - mean) / std * w + b (Layer).
enum class NormKind : uint8_t { Rms, RmsOnePlus, Layer };
// gate = act(gate) * up: SiLU (llama, phi3) or GELU with the tanh approximation (gemma).
enum class Activation : uint8_t { Silu, GeluTanh };
// How a router's logits become the experts' weights: softmax over all experts, then the
// top k (renormalized when norm_topk: mixtral, qwen*_moe, olmoe, DeepSeek-V2), or the top k
// logits first and a softmax over those k (gpt-oss), or sigmoid scores, the top k of the
// scores plus a correction bias, weights the chosen scores (DeepSeek-V3; renormalized when
// norm_topk). DeepSeek limits the choice to groups of experts and scales the weights
// (BlockRecipe::route_groups, routed_scale). Llama 4's router (the top k logits, sigmoid of
// each) is SigmoidTopk without bias or renormalization.
enum class Routing : uint8_t { SoftmaxTopk, TopkSoftmax, SigmoidTopk };

// One rotary table (engine/rope.cpp makes its inverse frequencies).
struct RopeRecipe {
  double theta = 10000.0;
  nlohmann::json scaling;  // null, or {"rope_type"|"type": linear | llama3 | longrope | yarn, ...}
  int64_t dims = 0;        // rotated values at the start of each head (even, <= head_dim)
  float mscale = 1;        // cos and sin times this (longrope's and yarn's attention factor)
};

struct LayerRecipe {
  int64_t window = 0;  // attention window in positions (0 = full attention)
  int rope = 0;        // index into BlockRecipe::ropes
  // `window` is a chunk (Llama 4's chunked layers): position p attends to the positions of its
  // own chunk up to itself, [p - p mod window, p]; the cache is sized as a sliding window's.
  bool chunked = false;
  bool nope = false;   // no rotary positions (Llama 4's NoPE layers, no_rope_layers[i] == 0)
};

struct BlockRecipe {
  NormKind norm = NormKind::Rms;          // every norm: block, final, and q/k per head
  Activation act = Activation::Silu;
  bool post_attn_norm = false;            // norm of the attention output before the residual add
  bool post_ffn_norm = false;             // norm of the MLP output before the residual add
  bool qk_norm = false;                   // per-head norms of q and k before rope (required)
  bool fused_qkv = false;                 // q|k|v stacked in one matrix (rows), phi3
  bool fused_gate_up = false;             // gate|up stacked in one matrix (rows), phi3
  float attn_scale = 0;                   // scores = attn_scale * q.k (query_pre_attn_scalar^-1/2 or head_dim^-1/2)
  float attn_softcap = 0;                 // scores = cap * tanh(scores / cap); 0 = none
  float final_softcap = 0;                // logits likewise
  float embed_scale = 1;                  // X = embedding row * embed_scale
  bool tied_head = false;                 // the head is the embedding unless the file has one
  bool qk_norm_full = false;              // q/k norms over all of q and k, not per head (olmoe)
  // Llama 4: q and k RMS-normed per head without weights on the rotary layers (use_qk_norm; after
  // the rotation in transformers, the same values before it: a rotation keeps each head's norm),
  // and on the NoPE layers q times log(floor((pos + 1) / attn_temp_floor) + 1) * attn_temp_scale
  // + 1 (attn_temperature_tuning; attn_temp_floor 0 = off).
  bool qk_norm_unit = false;
  int64_t attn_temp_floor = 0;
  float attn_temp_scale = 0;
  // Mixture of experts (layers with a router): softmax over the router logits, the top
  // `top_k` experts, their weights renormalized to sum 1 when `norm_topk`; a shared expert
  // (qwen2_moe) is added times sigmoid(its gate . x). Experts use `act`.
  int64_t experts = 0, top_k = 0;
  bool norm_topk = false;
  Routing routing = Routing::SoftmaxTopk;
  bool router_bias = false;               // router logits = W_r . x + b (gpt-oss; required)
  bool expert_input_weighted = false;     // the routed experts' input is x times the weight, not
                                          // their output (Llama 4: expert(w * x) summed)
  // gpt-oss: attention sinks (one learned logit per head joins each softmax's denominator;
  // required), and experts with gate|up interleaved in one matrix (gate at even outputs, up
  // at odd), a bias after each product, and the clamped SwiGLU instead of `act`:
  // g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha * g).
  bool attn_sinks = false;
  bool clamped_swiglu = false;
  float swiglu_alpha = 0, swiglu_limit = 0;
  // DeepSeek: the experts chosen among the best `route_groups_used` of `route_groups` equal
  // groups (0 = no groups), the weights times `routed_scale`; `exp_probs_bias`: the
  // score-correction bias SigmoidTopk ranks by (required: e_score_correction_bias).
  int64_t route_groups = 0, route_groups_used = 0;
  bool route_group_top2 = false;          // a group ranked by its two best scores summed (else its best)
  float routed_scale = 1;
  bool exp_probs_bias = false;
  // Multi-head latent attention (DeepSeek-V2/V3): q directly or through its low rank, one
  // latent row per position [kv_lora_rank normed | qk_rope_head_dim rotated] is the cache, q's
  // unrotated part is absorbed into it per head (k_b) and the attention output expanded (v_b).
  bool mla = false;
  int64_t rope_dims = 0;                  // rotated values per head when the family fixes them (MLA)
  bool act_fixed = false;                 // the family's activation whatever hidden_act says (gemma)
  bool sliding_rope = false;              // sliding layers rotate with rope_local_theta (gemma3)
  nlohmann::json rope_scaling_default;    // the config class's rope scaling when the config has none (gpt-oss)
  std::vector<RopeRecipe> ropes;          // [0] full-attention layers; [1] gemma3's sliding layers
  std::vector<LayerRecipe> layers;        // one per layer
  std::string unsupported;                // why the engine cannot run this family ("" = it can)
};

// Pieces the family records (src/model/arch/<family>.cpp, ArchRecord::recipe) share.
void recipe_llama(const ModelSpec& s, BlockRecipe& r);  // the generic block as it is
void recipe_moe(const ModelSpec& s, BlockRecipe& r);    // routed experts: softmax, top-k, norm_topk
// Gemma: (1 + w) RMSNorm (stored as 1 + w in GGUF), embedding times sqrt(hidden), GELU-tanh
// whatever hidden_act says, and post-attention / post-FFN norms from Gemma 2 on.
void recipe_gemma(const ModelSpec& s, BlockRecipe& r, bool post_norms);

// Never throws: a family the engine does not run gets a llama-like recipe (so estimates of it
// still size a KV cache per layer) with `unsupported` set.
BlockRecipe recipe_for(const ModelSpec& spec);

// KV positions per sequence slot that layer `l`'s cache holds: max_context, or for a sliding
// layer a ring of window + max_tokens - 1 slots (position p at p mod ring). One forward pass
// writes up to max_tokens positions before any of them attends, and its first token still
// needs the window - 1 positions before it.
int64_t kv_positions(const LayerRecipe& l, int64_t max_context, int64_t max_tokens);

// The families the engine runs (records with a recipe), "llama, mistral, ..." in the
// registry's order: what an "unsupported architecture" error offers instead.
std::string engine_families();

std::string_view norm_kind_name(NormKind k);     // "rms", "rms(1+w)", "layer"
std::string_view activation_name(Activation a);  // "silu", "gelu-tanh"
// The experts' activation as describe() names it: activation_name, or "clamped-swiglu".
std::string_view expert_activation_name(const BlockRecipe& r);
// yarn's attention factor (transformers' _compute_yarn_parameters): attention_factor when
// given, else 0.1 * ln(factor) + 1 (the mscale / mscale_all_dim ratio when both are set).
double yarn_attention_factor(const nlohmann::json& scaling, int64_t max_context);
// yarn's mscale: 0.1 * m * ln(factor) + 1 (1 when factor <= 1), transformers' yarn_get_mscale.
double yarn_mscale(double factor, double m);

}  // namespace nunchaku
