// deepseek: DeepSeek-V2/V2-Lite/V3/R1 and Kimi K2 (DeepseekV2/V3ForCausalLM, GGUF "deepseek2").
// Multi-head latent attention: the cache vLLM, SGLang and llama.cpp keep is the compressed
// latent, kv_lora_rank + qk_rope_head_dim per position per layer (transformers keeps the
// expanded K and V instead: the estimator's transformers model says so); the engine keeps the
// latent too (docs/engine.md). Routed experts with shared experts after first_k_dense_replace
// dense layers; num_nextn_predict_layers MTP layers are stored after the stack and loaded by
// no runtime unless speculative decoding asks.
// Checked against transformers 5.25's models/deepseek_v2|v3/modeling_*.py and llama.cpp's
// src/llama-model.cpp (deepseek2) and conversion/deepseek.py.
#include <cmath>

#include <fmt/format.h>

#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"deepseek_v2", "deepseek_v3", "deepseekv2", "deepseekv3", "deepseek2", "kimi_k2"};
void hf(const ConfigFields& f, ModelSpec& s) {
  const bool v3 = f.string({"model_type"}).value_or("") != "deepseek_v2";
  if (v3)
    apply_defaults(f, s, {.hidden = 7168, .intermediate = 18432, .layers = 61, .heads = 128, .kv_heads = 128,
                          .vocab = 129280, .context = 4096, .rope_theta = 10000, .norm_eps = 1e-6, .experts = 256,
                          .experts_per_tok = 8});
  else
    apply_defaults(f, s, {.hidden = 5120, .intermediate = 12288, .layers = 60, .heads = 128, .kv_heads = 128,
                          .vocab = 102400, .context = 2048, .rope_theta = 10000, .norm_eps = 1e-6, .experts = 160,
                          .experts_per_tok = 6});
  if (s.kv_lora_rank == 0) s.kv_lora_rank = 512;
  if (s.qk_rope_head_dim == 0) s.qk_rope_head_dim = 64;
  // Attention heads are qk_nope + qk_rope wide (192); values v_head_dim (128). transformers 5
  // writes head_dim = qk_rope_head_dim (its rotary table's width), so it is not read here.
  s.qk_nope_head_dim = f.integer({"qk_nope_head_dim"}).value_or(128);
  s.v_head_dim = f.integer({"v_head_dim"}).value_or(128);
  s.head_dim = s.qk_nope_head_dim + s.qk_rope_head_dim;
  s.q_lora_rank = f.has({"q_lora_rank"}) ? f.integer({"q_lora_rank"}).value_or(0) : 1536;  // null: q_proj
  s.num_shared_experts = f.integer({"n_shared_experts"}).value_or(v3 ? 1 : 2);
  s.moe_intermediate_size = f.integer({"moe_intermediate_size"}).value_or(v3 ? 2048 : 1407);
  s.shared_expert_intermediate_size = s.moe_intermediate_size * s.num_shared_experts;
  s.mtp_layers = f.integer({"num_nextn_predict_layers"}, kMaxConfigLayers).value_or(0);
  // V2 rotates interleaved pairs always (complex multiplication), V3 unless rope_interleave is false.
  s.rope_interleaved = !v3 || f.boolean({"rope_interleave"}).value_or(true);
  // Routing: V3 sigmoid scores, groups ranked by their two best biased scores; V2 softmax,
  // groups (topk_method group_limited_greedy) by their best score.
  s.moe_sigmoid = v3;
  const bool grouped = v3 || f.string({"topk_method"}).value_or("greedy") == "group_limited_greedy";
  s.moe_groups = grouped ? f.integer({"n_group"}).value_or(v3 ? 8 : 1) : 0;
  s.moe_groups_used = grouped ? f.integer({"topk_group"}).value_or(v3 ? 4 : 1) : 0;
  s.routed_scaling = f.number({"routed_scaling_factor"}).value_or(v3 ? 2.5 : 1.0);
  pattern_all(s, AttnKind::Mla, 0);
}
// llama.cpp's deepseek2 keys (llama-model.cpp load_hparams): key_length_mla / value_length_mla
// are the per-head q/k and v widths (key_length / value_length the latent's); files written
// before them hold the per-head widths in key_length / value_length.
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  auto integer = [&](const char* k) { return f.integer({arch + "." + k}); };
  s.num_shared_experts = integer("expert_shared_count").value_or(0);
  s.mtp_layers = f.integer({arch + ".nextn_predict_layers"}, kMaxConfigLayers).value_or(0);
  s.q_lora_rank = integer("attention.q_lora_rank").value_or(0);
  if (auto k = integer("attention.key_length_mla")) s.head_dim = *k;
  s.qk_nope_head_dim = s.head_dim > s.qk_rope_head_dim ? s.head_dim - s.qk_rope_head_dim : 0;
  s.v_head_dim = integer("attention.value_length_mla").value_or(integer("attention.value_length").value_or(0));
  s.moe_intermediate_size = integer("expert_feed_forward_length").value_or(0);
  // The leading dense layers' MLP is feed_forward_length wide (the generic reader takes the experts').
  if (integer("leading_dense_block_count").value_or(0) > 0)
    s.intermediate_size = integer("feed_forward_length").value_or(s.intermediate_size);
  s.shared_expert_intermediate_size = s.moe_intermediate_size * s.num_shared_experts;
  s.rope_interleaved = true;  // llama.cpp rotates deepseek2 with LLAMA_ROPE_TYPE_NORM
  // yarn: convert_hf_to_gguf writes 0.1 x mscale_all_dim as yarn_log_multiplier; llama.cpp
  // (llama-context.cpp, src/models/deepseek2.cpp) takes mscale = mscale_all_dim for it, so the
  // rope's attention factor is 1 and the softmax scale carries mscale(factor, mscale_all_dim)^2.
  if (auto mul = f.number({arch + ".rope.scaling.yarn_log_multiplier"}); mul && s.rope_scaling.is_object())
    s.rope_scaling["mscale"] = s.rope_scaling["mscale_all_dim"] = *mul / 0.1;
  s.moe_sigmoid = integer("expert_gating_func").value_or(1) == 2;  // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
  s.routed_scaling = f.number({arch + ".expert_weights_scale"}).value_or(1.0);
  // llama.cpp limits the choice to groups when the file has more than one (llama-graph.cpp build_moe_ffn)
  if (const int64_t g = integer("expert_group_count").value_or(0); g > 1) {
    s.moe_groups = g;
    s.moe_groups_used = integer("expert_group_used_count").value_or(g);
  }
  if (s.kv_lora_rank > 0 && s.layer_attn.empty()) pattern_all(s, AttnKind::Mla, 0);
}
void recipe(const ModelSpec& s, BlockRecipe& r) {
  recipe_moe(s, r);
  r.mla = true;
  r.rope_dims = s.qk_rope_head_dim;
  r.routing = s.moe_sigmoid ? Routing::SigmoidTopk : Routing::SoftmaxTopk;
  r.route_groups = s.moe_groups;
  r.route_groups_used = s.moe_groups_used;
  // A group's score: transformers' V3 and llama.cpp (any gating) sum its two best, V2 its best.
  r.route_group_top2 = s.moe_sigmoid || s.source == "gguf";
  r.routed_scale = s.routed_scaling > 0 ? float(s.routed_scaling) : 1.0f;
  r.exp_probs_bias = s.moe_sigmoid;
  // transformers' DeepseekV2 router never renormalizes (norm_topk_prob is not read); llama.cpp
  // follows the file's expert_weights_norm.
  if (!s.moe_sigmoid && s.source != "gguf") r.norm_topk = false;
  // Softmax scale 1/sqrt(qk_head_dim), times yarn's mscale(factor, mscale_all_dim) squared
  // (transformers' yarn_apply_mscale): the rotated and unrotated dims alike.
  double scale = s.head_dim > 0 ? 1.0 / std::sqrt(double(s.head_dim)) : 0.0;
  const nlohmann::json& rs = s.rope_scaling;
  if (rs.is_object() && rs.value("mscale_all_dim", 0.0) != 0.0 && rs.value("factor", 0.0) > 0) {
    const double m = yarn_mscale(rs.value("factor", 0.0), rs.value("mscale_all_dim", 0.0));
    scale *= m * m;
  }
  r.attn_scale = float(scale);
  if (!r.unsupported.empty()) return;
  if (s.kv_lora_rank <= 0 || s.qk_rope_head_dim <= 0 || s.qk_rope_head_dim % 2 || s.qk_nope_head_dim <= 0 || s.v_head_dim <= 0)
    r.unsupported = fmt::format("multi-head latent attention with kv_lora_rank {}, qk_rope_head_dim {}, qk_nope_head_dim {}, "
                                "v_head_dim {} cannot be run", s.kv_lora_rank, s.qk_rope_head_dim, s.qk_nope_head_dim, s.v_head_dim);
  else if (s.moe_groups > 0 && (s.moe_groups > 64 || s.num_experts % s.moe_groups || s.moe_groups_used <= 0 ||
                                s.moe_groups_used > s.moe_groups ||
                                s.moe_groups_used * (s.num_experts / s.moe_groups) < s.num_experts_per_tok))
    r.unsupported = fmt::format("group-limited routing of {} experts in {} groups, {} used, {} per token cannot be run",
                                s.num_experts, s.moe_groups, s.moe_groups_used, s.num_experts_per_tok);
}
constexpr ArchEntry kTensors[] = {
    {"deepseek", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kDeepseekHF},
    {"deepseek", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kDeepseekGGUF},
};
}  // namespace
extern const ArchRecord kDeepseek{.family = "deepseek", .names = kNames, .hf_class = "DeepseekV3ForCausalLM",
                                  .hf_rotary_module = true, .hf_config = hf, .gguf = gguf, .recipe = recipe,
                                  .tensors = kTensors, .gguf_arch = "deepseek2", .norm_topk_hf = true};
}  // namespace nunchaku::arch
