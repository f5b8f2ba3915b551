// What the checkpoint is as a model: hyper-parameters (ModelSpec) and the
// tensors grouped into modules (embedding, layer i, final norm, head) that
// inspect, estimate, plan and load all work in. Built from config.json beside
// the weights, from GGUF metadata, or inferred from tensor shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/checkpoint.hpp"

namespace nunchaku {

// What a decoder layer keeps per sequence: a KV cache over every position (Full), over the
// last `window` positions (Sliding) or the current chunk of `window` positions (Chunked, as
// Llama 4's local layers), a compressed latent (Mla: kv_lora_rank + qk_rope_head_dim per
// position), a constant recurrent state (linear attention / SSM layers of hybrids), or
// nothing (encoder layers).
enum class AttnKind : uint8_t { Full, Sliding, Chunked, Mla, Recurrent, None };
std::string_view attn_kind_name(AttnKind k);  // "full", "sliding", "chunked", "mla", "recurrent", "none"

struct ModelSpec {
  std::string architecture;      // canonical family: "llama", "mistral", "qwen2", "qwen3", "gemma",
                                 // "gemma2", "phi3", "gpt2", "mixtral", or the raw name if unknown
  std::string hf_class;          // e.g. "LlamaForCausalLM" ("" for GGUF)
  std::string source;            // "config.json", "gguf", or "inferred"
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;       // the largest over layers when they differ (see layer_kv_heads)
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_context = 0;       // max_position_embeddings / n_ctx / context_length
  bool tie_word_embeddings = false;
  std::string dtype;             // torch_dtype from config ("bfloat16"), "" if unknown
  double rope_theta = 0;
  nlohmann::json rope_scaling;   // null when absent
  double norm_eps = 0;
  int64_t num_experts = 0;       // MoE: routed experts (0 = dense)
  int64_t num_experts_per_tok = 0;
  // MoE: a routed expert's intermediate size (HF moe_intermediate_size, GGUF
  // expert_feed_forward_length; mixtral/olmoe: intermediate_size) and the shared expert's
  // (qwen2_moe shared_expert_intermediate_size); 0 = none.
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool moe_norm_topk = false;    // top-k routing weights renormalized to sum 1 (norm_topk_prob)
  int64_t sliding_window = 0;    // 0 = none
  // Per-layer attention window (empty = all layers full attention; else size num_layers,
  // 0 = full attention for that layer), e.g. gemma2 alternates.
  std::vector<int64_t> layer_windows;
  // Per-layer KV heads when they differ between layers (GGUF head_count_kv arrays; empty =
  // every layer has num_kv_heads). Size num_layers; 0 = that layer has no attention cache.
  std::vector<int64_t> layer_kv_heads;
  // MLA (DeepSeek-V2/3, MiniCPM3): cache holds kv_lora_rank + qk_rope_head_dim per token per layer.
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  // The rest of MLA (what the engine reads): the query's low rank (0 = q_proj directly) and
  // the per-head widths of the unrotated q/k part and of v.
  int64_t q_lora_rank = 0, qk_nope_head_dim = 0, v_head_dim = 0;
  bool rope_interleaved = false;  // rotary pairs (2i, 2i+1) as the weights hold them (DeepSeek)
  // DeepSeek routing: scores by softmax or sigmoid ("sigmoid": V3, with a score-correction
  // bias for the choice), the choice limited to the best moe_groups_used of moe_groups equal
  // groups of experts (0 = no limit), the chosen weights times routed_scaling (0 = 1).
  bool moe_sigmoid = false;
  int64_t moe_groups = 0, moe_groups_used = 0;
  double routed_scaling = 0;
  // What the engine's block recipe (model/recipe.hpp) reads beyond the dimensions; 0 / ""
  // = absent. hidden_act: "silu", "gelu_pytorch_tanh", ... (hidden_activation for gemma).
  std::string hidden_act;
  double attn_logit_softcap = 0;     // gemma2: scores = cap * tanh(scores / cap)
  double final_logit_softcap = 0;    // gemma2: logits likewise
  double query_pre_attn_scalar = 0;  // gemma2/3: attention scale = 1/sqrt(this)
  double rope_local_theta = 0;       // gemma3: rope base of the sliding-window layers
  double partial_rotary_factor = 0;  // phi-4-mini: rotary on this fraction of head_dim
  double swiglu_alpha = 0, swiglu_limit = 0;  // gpt-oss experts' clamped SwiGLU (1.702, 7.0)
  // Per decoder layer (size num_layers), from the family's record: config layer_types, the
  // family's pattern (gemma3 5 sliding : 1 full, llama4 3 chunked : 1 full, jamba 1 attention
  // in 8, ...) or llama.cpp's per-architecture defaults. Empty = every layer Full (Mla when
  // kv_lora_rank > 0). layer_windows holds the window or chunk size of Sliding/Chunked layers.
  std::vector<AttnKind> layer_attn;
  int64_t recurrent_state_elems = 0;  // per Recurrent layer per sequence (conv + SSM state)
  // Llama 4: per layer (size num_layers, or empty: every layer rotates) 1 where the layer has no
  // rotary positions (no_rope_layers[i] == 0); q/k RMS norms without weights on the rotary
  // layers (use_qk_norm); the NoPE layers' query temperature (attn_temperature_tuning:
  // floor_scale, attn_scale; floor 0 = off). See BlockRecipe.
  std::vector<uint8_t> layer_nope;
  bool qk_norm_unit = false;
  int64_t attn_temp_floor = 0;
  double attn_temp_scale = 0;
  int64_t num_shared_experts = 0;
  // Multimodal wrapper family ("llava", "gemma3", "mistral3", "qwen2_vl", "llama4"); "" for a
  // plain language model. `architecture` is then the language model's family.
  std::string wrapper;
  // Context tokens one image takes (the wrapper's rule), 0 unknown. A fixed count (gemma3,
  // llava), or where the count follows the image's size (mistral3, qwen2_vl, llama4) the
  // largest the processor makes, with image_tokens_at_most set.
  int64_t image_tokens = 0;
  bool image_tokens_at_most = false;
  int64_t mtp_layers = 0;        // multi-token-prediction layers stored after the stack (not loaded)
  std::string quant_method;      // config quantization_config.quant_method ("fp8", "mxfp4", ...)
  // Terms taken from generic rules rather than the family's record (unknown families, a
  // pattern the config does not state): named in estimate's text and JSON.
  std::vector<std::string> guessed;

  AttnKind attn_kind(int64_t layer) const;  // Full/Mla when layer_attn is empty or out of range

  nlohmann::json to_json() const;
};

enum class ModuleKind { Embedding, Layer, FinalNorm, Head, Other };
std::string_view module_kind_name(ModuleKind k);  // "embedding", "layer", "final_norm", "head", "other"

// What a tensor is to the forward pass. The engine binds weights by role, never by name:
// this table is the one list of tensor names in the project.
enum class Role : uint8_t {
  None,  // not used by the engine (buffers, parts of architectures it does not run)
  Embed, FinalNorm, Head, RopeFreqs,
  AttnNorm, Q, K, V, O, QBias, KBias, VBias, OBias, QNorm, KNorm,
  FfnNorm, Gate, Up, Down, GateBias, UpBias, DownBias,
  PostAttnNorm, PostFfnNorm,  // gemma2/3: norms of the attention and MLP outputs
  QKV, GateUp,                // phi3: q|k|v and gate|up as one matrix each
  // Mixture of experts: the router [E, H]; routed experts as one tensor per expert (HF
  // experts.N.*, old GGUF ffn_*.N) or stacked [E, rows, cols] (GGUF ffn_*_exps), gate|up
  // fused per layer [E, 2I, H] (transformers 5 in memory); the shared expert and its
  // sigmoid gate [1, H] (qwen2_moe).
  Router, ExpGate, ExpUp, ExpDown, ExpGateUp, ShGate, ShUp, ShDown, ShExpGate,
  // gpt-oss: attention sinks [heads]; the router's bias [E]; gate and up of each expert
  // interleaved in one stacked tensor (gate at even outputs, up at odd), stored input-major
  // [E, H, 2I] (x @ W) in bf16/fp32 files or as MXFP4 blocks [E, 2I, H/32, 16] (U8, output-
  // major; its down likewise [E, H, I/32, 16]) with E8M0 scales [E, rows, cols/32] beside
  // them; per-expert biases [E, 2I] and [E, H].
  Sinks, RouterBias, ExpGateUpMixed, ExpGateUpBias, ExpDownBias, ExpGateUpScales, ExpDownScales,
  // Phi-3 longrope in GGUF: the long and short per-frequency factors [rotary dims / 2]
  // (convert_hf_to_gguf writes config.json's long_factor / short_factor as tensors).
  RopeFactorsLong, RopeFactorsShort,
  // gpt-oss in GGUF: gate and up of the experts apart (ffn_gate_exps / ffn_up_exps, ggml's
  // MXFP4 blocks or floats), each with its own bias [E, I].
  ExpGateBias, ExpUpBias,
  // MLA (DeepSeek-V2/V3): q's low-rank path (q_a_proj [QL, H], q_a_layernorm [QL], q_b_proj
  // [heads * (nope + rope), QL]; without it Role::Q), kv_a_proj_with_mqa [rank + rope, H] and
  // kv_a_layernorm [rank]; kv_b_proj [heads * (nope + v), rank] (HF), or as llama.cpp's
  // converter splits it: k_b [heads, rank, nope] (transposed) and v_b [heads, v, rank].
  QA, QANorm, QB, KVA, KVANorm, KVB, KB, VB,
  // DeepSeek-V3's router score-correction bias [E] (e_score_correction_bias, GGUF exp_probs_b):
  // added to the scores for the choice of experts only, never to their weights.
  ExpProbsBias,
  // Llama 4 (transformers' Llama4TextExperts): gate|up of each expert in one stacked tensor
  // stored input-major [E, H, 2I] (x @ W), gate the first I outputs and up the rest; its down
  // is input-major too ([E, I, H], Role::ExpDown).
  ExpGateUpIn,
};
constexpr size_t kRoleCount = size_t(Role::ExpGateUpIn) + 1;
// A routed expert's gate, up, down or fused gate|up (what a token reads only when routed there).
constexpr bool is_expert_role(Role r) {
  return r == Role::ExpGate || r == Role::ExpUp || r == Role::ExpDown || r == Role::ExpGateUp || r == Role::ExpGateUpMixed ||
         r == Role::ExpGateUpIn;
}
// What the experts' CPU part reads when a GPU runs the rest of the layer (KTransformers'
// split): the routed experts, the router and its biases, the experts' biases and MXFP4
// scales, and the shared expert's sigmoid gate (a vector); a run whose experts run on the CPU
// beside a GPU keeps them in host memory (Placement::moe_on_host). The shared expert's
// matrices stay with the layer: the GPU runs them while the CPU runs the routed experts.
constexpr bool is_expert_part_role(Role r) {
  switch (r) {
    case Role::Router: case Role::RouterBias: case Role::ExpProbsBias: case Role::ExpGateUpBias:
    case Role::ExpDownBias: case Role::ExpGateBias: case Role::ExpUpBias: case Role::ExpGateUpScales:
    case Role::ExpDownScales: case Role::ShExpGate:
      return true;
    default:
      return is_expert_role(r);
  }
}
struct Module {
  std::string name;              // prefix as the framework names it: "model.layers.3", "blk.3", "lm_head"
  ModuleKind kind = ModuleKind::Other;
  int64_t layer = -1;            // layer index for kind == Layer
  std::vector<size_t> tensors;   // indices into Checkpoint::tensors
  uint64_t bytes = 0;
  uint64_t parameters = 0;       // logical: quantized stores counted by the values they hold
  // Part of the model this module belongs to: "" for the language model, else the record's
  // component name ("vision_tower", "projector", "audio", "mtp", "encoder"). Only language-model
  // layers are decoder layers with a KV cache.
  std::string component;
  std::vector<Role> roles;       // parallel to tensors: what each is to the engine (arch table)
};

// How the tensors are named: Hugging Face (transformers) or GGUF (llama.cpp). GGUF llama
// files also store Q/K rows permuted for interleaved RoPE (convert_hf_to_gguf).
enum class Naming { HF, GGUF };

struct ModelLayout {
  std::optional<ModelSpec> spec;  // nullopt when nothing could be determined
  std::vector<Module> modules;    // embedding first, layers in order, then norm, head, other
  Naming naming = Naming::HF;     // of the architecture-table entry the roles came from
  // Names of tensors that share storage with another (tied weights), "a=b" pairs.
  std::vector<std::string> tied;
  // Findings where the checkpoint disagrees with its spec or the architecture's tensor
  // table (missing/unexpected tensors, shapes the config does not imply, layer count).
  std::vector<std::string> warnings;
  uint64_t num_parameters = 0;         // logical parameters of the modules a runtime loads (no MTP)
  uint64_t num_active_parameters = 0;  // per token: routed experts counted top_k / experts
  uint64_t num_stored_elements = 0;    // Σ numel as stored (packed bytes, scales included)
  // Per checkpoint tensor (parallel to Checkpoint::tensors): its logical parameters, quantized
  // stores counted by the values they hold (logical_parameters with the config's bits).
  std::vector<uint64_t> logical;
};

// A module of kind Embedding that is the token table (not GPT-2's wpe / position_embd).
bool is_token_embedding(std::string_view module);

// config.json (HF) → ModelSpec. Throws Error("config.*") on malformed JSON.
ModelSpec spec_from_hf_config(const nlohmann::json& config);
// GGUF metadata (Checkpoint::metadata of a GGUF) → ModelSpec; nullopt without general.architecture.
std::optional<ModelSpec> spec_from_gguf(const nlohmann::json& metadata);
// Infer dims from tensor shapes when there is no config (best effort).
std::optional<ModelSpec> spec_from_tensors(const Checkpoint& ck);

// The whole step: pick the best source for the spec, then group tensors into modules
// with the per-architecture tensor table (unknown architectures: by numeric path component).
ModelLayout describe_model(const Checkpoint& ck);

}  // namespace nunchaku
