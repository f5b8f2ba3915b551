// One record per architecture family: the only place a family is described. Every command
// reads it: config.cpp (class defaults, layer pattern), describe (components, grouping),
// estimate/plan (KV or state per layer kind, what each runtime loads), convert (names,
// classes) and the engine (whether it runs the family). A record is one file under
// src/model/arch/; plain data plus two optional hooks, no DSL.
//
// Text families describe a language model (llama, gemma3, deepseek_v3, ...). Wrapper
// families (llava, mistral3, qwen2_vl, gemma3's and llama4's ForConditionalGeneration)
// describe a multimodal checkpoint: where its language model sits and which other
// components it holds; the language model itself is then described by its text record.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/arch_table.hpp"
#include "model/config_fields.hpp"
#include "model/model.hpp"

namespace nunchaku {

struct BlockRecipe;  // model/recipe.hpp

// A part of a checkpoint that is not the language model's decoder stack. Tensors whose name
// starts with `prefix` form one module of kind Other with Module::component = `name`.
struct ArchComponent {
  std::string_view prefix;  // "model.vision_tower."
  std::string_view name;    // "vision_tower", "projector", "audio"
};

// A checkpoint-name prefix and the transformers 5 module path it loads into (the
// conversion mapping transformers applies on load); the first matching rule wins.
struct Rename {
  std::string_view from;
  std::string_view to;
};

// A tensor-name part that identifies a family when nothing else names it (infer.cpp).
struct NameMark {
  std::string_view part;    // "c_attn.", "q_norm."
  bool gguf_only = false;   // counts only in a GGUF-named checkpoint
};

// ArchRecord::llamacpp_drops_window for the families convert_hf_to_gguf writes as arch llama.
inline constexpr std::string_view kNoWindowInLlama = "convert_hf_to_gguf writes it as arch llama, which has none";

struct ArchRecord {
  std::string_view family;                  // canonical name, also the tensor table's key
  bool wrapper = false;                     // a multimodal wrapper (see above)
  std::span<const std::string_view> names;  // HF model_types, lower-cased class stems, GGUF archs
  std::string_view hf_class;                // the transformers class convert writes ("" none)
  // Wrappers: the text family when the config has no text_config model_type (qwen2_vl's
  // flat config), where the language model's tensors sit, and the other components.
  std::string_view text_family;
  std::span<const ArchComponent> components;
  std::span<const Rename> to_transformers;  // wrappers: older Hub names -> transformers 5 modules
  // Name parts transformers 5 loads under another module, anywhere in a name (its
  // conversion_mapping.py: mixtral's ".block_sparse_moe." becomes ".mlp.", the experts fused
  // into mlp.experts); applied after the wrapper's prefix renames.
  std::span<const Rename> transformers_parts;

  // Engine and converter facts.
  bool engine_runs = false;     // `run` supports the family
  bool permutes_qk = false;     // convert_hf_to_gguf permutes q/k rows (LlamaModel.permute)
  bool hf_rotary_module = false;  // transformers builds model.rotary_emb (an empty module in device maps)
  bool rope = true;             // rotary positions (gpt2, bert and t5 have none)
  bool ties_by_default = false; // the config class's tie_word_embeddings default
  bool diffusion = false;       // a diffusers transformer/UNet: no vocabulary, no KV cache

  // config.json: after the generic keys are read into `s` (text_config first), the family's
  // transformers class defaults for absent keys and its layer pattern. `f` reads the
  // language model's config (text_config, falling back to the top level).
  void (*hf_config)(const ConfigFields& f, ModelSpec& s) = nullptr;
  // GGUF metadata: llama.cpp's per-architecture defaults (llama-model.cpp load_hparams) for
  // what the file leaves out, e.g. the sliding-window pattern. `key(k)` = "<arch>.<k>".
  void (*gguf)(const ConfigFields& f, const std::string& arch, ModelSpec& s) = nullptr;
  // The block recipe the engine interprets (model/recipe.hpp): what this family's layer
  // computes beyond the generic llama block, filled in after recipe_for's generic part.
  // A family without it is not run by the engine.
  void (*recipe)(const ModelSpec& s, BlockRecipe& r) = nullptr;
  // The per-layer tensor table rows (model/arch_table.hpp; pieces in tensor_rules.hpp): names
  // both ways, shapes as symbols of the spec, engine roles; one row per naming, HF first.
  // None: tensors are grouped by the generic layer-path rule and checked by count only.
  std::span<const ArchEntry> tensors;

  // GGUF: the general.architecture llama.cpp's convert_hf_to_gguf writes for the family
  // ("llama" for llama, mistral and mixtral); "" = llama.cpp has no such architecture.
  std::string_view gguf_arch;
  // A GGUF of `gguf_arch` that holds experts is this family instead (llama -> mixtral).
  std::string_view gguf_with_experts;
  // Why llama.cpp runs the family without the sliding window its config names ("" = it keeps
  // it): the converter writes none (mistral, mixtral: arch llama) or llama.cpp turns it off
  // (phi3). A what-if with --runtime llama.cpp on the Hugging Face checkpoint drops it too.
  std::string_view llamacpp_drops_window;
  // llama.cpp's graph keeps the last layer's residual as an output of its own (gpt-oss:
  // res->t_h_nextn before the output norm, src/models/openai-moe.cpp): alive beside the logits.
  bool llamacpp_keeps_residual = false;
  // MoE routers: whether the chosen top-k weights are renormalized when the config (HF:
  // norm_topk_prob, the class default) or the GGUF (expert_weights_norm, llama.cpp's graph
  // for the architecture) does not say. Mixtral always renormalizes.
  bool norm_topk_hf = false;
  bool norm_topk_gguf = false;
  // config.json as convert writes it beside a GGUF: whether the class reads `head_dim`
  // (qwen2, mixtral and phi3 compute it from hidden / heads), or the family's own writer.
  bool hf_head_dim_key = true;
  void (*write_hf_config)(const ModelSpec& s, nlohmann::ordered_json& c) = nullptr;
  // A checkpoint without config.json or GGUF architecture: the tensor-name parts that make
  // this family the guess (any one of them), tried in `guess_rank` order (1 first; 0 never).
  std::span<const NameMark> marks;
  int guess_rank = 0;
};

// Registry lookups (registry.cpp). Names are matched lower-cased; class names lose their
// head suffix first ("Gemma3ForConditionalGeneration" -> "gemma3").
const ArchRecord* find_record(std::string_view family);
const ArchRecord* text_record_for(std::string_view model_type_or_class);
const ArchRecord* wrapper_record_for(std::string_view model_type_or_class);
std::span<const ArchRecord* const> all_records();

// The transformers 5 module path of checkpoint tensor `name` (what accelerate's device_map
// keys must use): the wrapper's renames, then the text family's part renames.
std::string transformers_name(const ModelSpec& spec, std::string_view name);

// Layer patterns shared by several records. n = s.num_layers; windows from s.sliding_window.
void pattern_every_nth_full(ModelSpec& s, int64_t n);     // layer i full iff (i + 1) % n == 0 (gemma3: 6)
void pattern_alternate(ModelSpec& s);                     // even layers sliding, odd full (gemma2, gpt-oss)
void pattern_all(ModelSpec& s, AttnKind k, int64_t window);  // every layer the same
// config layer_types ("full_attention", "sliding_attention", "chunked_attention",
// "linear_attention", "mamba"): true when the config has it (and it was applied).
bool pattern_from_layer_types(const ConfigFields& f, ModelSpec& s, int64_t window);
// Qwen2/Qwen3 (and their MoE/VL variants): sliding only with use_sliding_window, on layers
// >= max_window_layers, as transformers' Qwen2Config builds layer_types.
void pattern_qwen(const ConfigFields& f, ModelSpec& s);

// A config class's defaults for the keys a sparse Hub config leaves out (0 = none / derived).
struct ClassDefaults {
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, context = 0;
  double rope_theta = 0, norm_eps = 0;
  int64_t experts = 0, experts_per_tok = 0;
  int64_t sliding_window = 0;  // applied only when the key is absent (null means none)
};
void apply_defaults(const ConfigFields& f, ModelSpec& s, const ClassDefaults& d);

// Routed-expert tensors (counted top_k / experts in active parameters): HF ".experts." and
// GGUF "_exps" names, never shared experts.
bool is_routed_expert(std::string_view tensor_name);

}  // namespace nunchaku
