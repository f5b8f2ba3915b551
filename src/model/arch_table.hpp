// The one declarative per-architecture tensor table: for each family and naming
// (Hugging Face or GGUF/llama.cpp), which modules exist, what they are called (as the
// framework names them, so a device_map can be written from them), and which tensors
// each holds with their shapes as symbols of the spec ("Q H" = (heads*head_dim, hidden)).
// describe_model groups and checks with it; estimate/plan/load read module names from it.
// Its rows live in the family records (ArchRecord::tensors, src/model/arch/<family>.cpp),
// composed from the shared pieces of src/model/arch/tensor_rules.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.hpp"

namespace nunchaku {

// One tensor inside a module, relative to the module prefix ("self_attn.q_proj.weight").
// '#' in the name stands for an expert index (digits). `shape` is a space-separated list of
// dimension symbols, outermost first (PyTorch order; GGUF dims are already reversed):
//   H hidden, I intermediate, 2I, V vocab, CTX max context, HD head_dim,
//   Q heads*head_dim, KV kv_heads*head_dim, QKV (heads+2*kv_heads)*head_dim, 3H, E experts;
//   MLA: NH heads, QL q_lora_rank, KVL kv_lora_rank, KVR kv_lora_rank + qk_rope_head_dim,
//   NOPE qk_nope_head_dim, VHD v_head_dim, KVB heads*(nope+v), OV heads*v;
// "*" accepts any shape (buffers whose shape the spec does not fix).
std::string_view role_name(Role r);  // "q", "attn_norm", ...

struct TensorRule {
  std::string_view name;
  std::string_view shape;
  bool optional = false;  // may be absent (biases some checkpoints carry, old buffers)
  Role role = Role::None;
};

// A set of alternative tensor groups for one part of a layer (e.g. Mixtral's experts as
// per-expert w1/w2/w3 in older files or fused gate_up_proj in transformers 5); per layer
// the alternative matching the most tensors is the one checked for missing tensors.
struct LayerSlot {
  std::span<const std::span<const TensorRule>> alternatives;
};

// A module outside the layer stack: embedding, final norm, head, expected extras.
struct GlobalModule {
  ModuleKind kind;
  std::string_view name;   // module name relative to the root ("embed_tokens"), or absolute
  bool under_root;         // false for HF lm_head, which sits beside "model."/"transformer."
  bool optional;           // head (tied weights) and extras may be absent
  std::span<const TensorRule> tensors;
};

struct ArchEntry {
  std::string_view family;                 // canonical family ("llama", ...)
  Naming naming;
  std::span<const std::string_view> roots; // alternatives: "model." for *ForCausalLM, "" for bare *Model
  std::string_view layers;                 // layer stack relative to the root: "layers.", "h.", "blk."
  std::span<const GlobalModule> globals;   // embeddings first, then final norm, head, extras
  std::span<const LayerSlot> layer;
};

// The role of checkpoint tensor `tensor_name` in module `m` of a model of `family` (by the
// entry whose root/layer prefix or global name produced the module); Role::None if none.
// *naming (when given) is set to the naming of the entry that gave the role.
Role tensor_role(std::string_view family, const Module& m, std::string_view tensor_name, Naming* naming = nullptr);
// The name the `naming` entry of `family` gives the tensor of role `r` in a module of kind
// `kind` (layer index `layer` for ModuleKind::Layer), with the entry's first root:
// (llama, GGUF, Layer 3, Q) -> "blk.3.attn_q.weight", (llama, HF, Head, Head) ->
// "lm_head.weight". nullopt when that naming has no such tensor (convert --names).
std::optional<std::string> tensor_name_for(std::string_view family, Naming naming, ModuleKind kind, int64_t layer,
                                           Role r);
// Fills Module::roles for every module of the layout and ModelLayout::naming (describe_model
// calls it).
void assign_roles(const Checkpoint& ck, ModelLayout& layout);

// Every entry (several per family: one per naming).
std::span<const ArchEntry> arch_table();
bool is_known_family(std::string_view family);

// Evaluates a shape string against the spec; a dimension the spec does not know is 0
// (callers skip it). nullopt for "*".
std::optional<std::vector<int64_t>> eval_shape(std::string_view shape, const ModelSpec& spec);

// Matches a rule name against a tensor suffix ('#' = one or more digits); the expert index
// matched (or -1) goes to *expert.
bool match_rule(std::string_view rule, std::string_view name, int64_t* expert = nullptr);

// Fallback for unknown architectures: the layer module a tensor belongs to, found by the
// first "<word>.N." component with word one of layers, h, blocks, blk, layer
// ("language_model.model.layers.7.mlp.x" → {"language_model.model.layers.7", 7}).
struct LayerPath {
  std::string module;
  int64_t index = -1;
};
std::optional<LayerPath> layer_path(std::string_view tensor_name);

// Fallback kind of a non-layer tensor from the last module-name component
// (embed_tokens/wte/token_embd → Embedding, norm/ln_f/output_norm → FinalNorm,
// lm_head/output → Head, else Other).
ModuleKind guess_global_kind(std::string_view module_name);

// Where the non-root globals (HF lm_head) of a language model under `root` sit: beside the
// stack, "language_model." for the Hub's older wrapper root "language_model.model.", else "".
std::string outside_prefix(std::string_view root);

// "model.norm.weight" → "model.norm"; a name without a dot is its own module.
std::string module_of(std::string_view tensor_name);

}  // namespace nunchaku
