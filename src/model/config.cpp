// ModelSpec from a Hugging Face config.json or from GGUF metadata. Both are untrusted
// input: every number is type- and range-checked, and nothing is allocated from a value
// before it is checked (layer counts size the per-layer vectors).
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/arch/record.hpp"
#include "model/arch_table.hpp"
#include "model/model.hpp"

namespace nunchaku {

using nlohmann::json;

namespace {

void fill_windows(ModelSpec& s, const std::vector<bool>& sliding) {
  s.layer_attn.assign(sliding.size(), AttnKind::Full);
  s.layer_windows.assign(sliding.size(), 0);
  for (size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i]) s.layer_attn[i] = AttnKind::Sliding, s.layer_windows[i] = s.sliding_window;
}

// The quantized store a config declares (quantization_config.quant_method), "" for none.
std::string quant_method(const json& config) {
  auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object()) return "";
  auto m = q->find("quant_method");
  return m != q->end() && m->is_string() ? m->get<std::string>() : "";
}

}  // namespace

ModelSpec spec_from_hf_config(const json& config) {
  if (!config.is_object())
    throw Error("config.bad_json", "config.json: the top level is not a JSON object");
  // Multimodal wrappers (LLaVA, Gemma3ForConditionalGeneration, ...) nest the language model.
  const json* text = &config;
  if (auto it = config.find("text_config"); it != config.end() && !it->is_null()) {
    if (!it->is_object())
      ConfigFields("config.bad_field", "config.json", config).bad("text_config", *it, "must be an object");
    text = &*it;
  }
  ConfigFields f("config.bad_field", "config.json", *text, text == &config ? nullptr : &config);
  ConfigFields top("config.bad_field", "config.json", config);

  ModelSpec s;
  s.source = "config.json";
  if (const json* a = top.find({"architectures"})) {
    if (!a->is_array() || (!a->empty() && !(*a)[0].is_string()))
      top.bad("architectures", *a, "must be a list of class names");
    if (!a->empty()) s.hf_class = (*a)[0].get<std::string>();
  } else if (auto cls = top.string({"_class_name"})) {  // diffusers component configs
    s.hf_class = *cls;
  }
  // The wrapper is named by the top level; the language model by text_config's model_type,
  // else the wrapper's text family (qwen2_vl's flat config), else the top level itself.
  const std::string top_type = top.string({"model_type"}).value_or("");
  const std::string text_type =
      text == &config ? top_type : ConfigFields("config.bad_field", "config.json", *text).string({"model_type"}).value_or("");
  const ArchRecord* wrap = wrapper_record_for(top_type);
  if (!wrap && top_type.empty()) wrap = wrapper_record_for(s.hf_class);
  const ArchRecord* rec = text == &config && wrap ? nullptr : text_record_for(text_type);
  if (!rec && wrap) rec = find_record(wrap->text_family);
  if (!rec && text_type.empty()) rec = text_record_for(s.hf_class);
  if (wrap) s.wrapper = std::string(wrap->family);
  s.architecture = rec ? std::string(rec->family)
                       : !text_type.empty() ? text_type : (!s.hf_class.empty() ? s.hf_class : "unknown");

  // Generic keys; 0 where absent (the record's class defaults and derivations follow).
  s.hidden_size = f.integer({"hidden_size", "n_embd", "d_model"}).value_or(0);
  s.num_layers = f.integer({"num_hidden_layers", "n_layer", "num_layers"}, kMaxConfigLayers).value_or(0);
  s.num_heads = f.integer({"num_attention_heads", "n_head"}).value_or(0);
  const std::optional<int64_t> kv_heads = f.integer({"num_key_value_heads", "n_head_kv", "num_kv_heads"});
  s.num_kv_heads = kv_heads.value_or(0);
  s.head_dim = f.integer({"head_dim"}).value_or(0);
  s.intermediate_size = f.integer({"intermediate_size", "n_inner", "ffn_dim"}).value_or(0);
  s.vocab_size = f.integer({"vocab_size"}).value_or(0);
  s.max_context = f.integer({"max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                             "seq_length"}).value_or(0);
  s.tie_word_embeddings = f.boolean({"tie_word_embeddings"}).value_or(rec && rec->ties_by_default);
  // A multimodal wrapper ties (or not) by its own config, whatever text_config says: transformers
  // 5 ties the ForConditionalGeneration model's lm_head by the top-level value (a tiny Mistral3
  // with text_config false and top-level true is saved without lm_head.weight).
  if (wrap && text != &config)
    if (auto top_tie = top.boolean({"tie_word_embeddings"})) s.tie_word_embeddings = *top_tie;
  s.dtype = f.string({"torch_dtype", "dtype"}).value_or("");
  s.norm_eps = f.number({"rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "norm_epsilon"}).value_or(0);

  // transformers 5 folds rope_theta and the scaling into "rope_parameters"; gemma3 keeps one
  // set per layer type (full_attention: rope_theta / rope_scaling here; sliding_attention:
  // rope_local_theta).
  const json* rope_params = f.find({"rope_parameters"});
  if (rope_params && !rope_params->is_object()) f.bad("rope_parameters", *rope_params, "must be an object");
  if (rope_params && rope_params->contains("full_attention")) {
    const json& local = rope_params->value("sliding_attention", json::object());
    if (!local.is_object()) f.bad("rope_parameters", *rope_params, "must hold objects per layer type");
    s.rope_local_theta = ConfigFields("config.bad_field", "config.json", local).number({"rope_theta"}).value_or(0);
    rope_params = &rope_params->at("full_attention");
    if (!rope_params->is_object()) f.bad("rope_parameters", *rope_params, "must hold objects per layer type");
  }
  if (!s.rope_local_theta) s.rope_local_theta = f.number({"rope_local_base_freq"}).value_or(0);
  s.hidden_act = f.string({"hidden_activation", "hidden_act"}).value_or("");
  s.attn_logit_softcap = f.number({"attn_logit_softcapping"}).value_or(0);
  s.final_logit_softcap = f.number({"final_logit_softcapping"}).value_or(0);
  s.query_pre_attn_scalar = f.number({"query_pre_attn_scalar"}).value_or(0);
  s.partial_rotary_factor = f.number({"partial_rotary_factor"}).value_or(0);
  if (rope_params && !s.partial_rotary_factor)
    s.partial_rotary_factor = ConfigFields("config.bad_field", "config.json", *rope_params).number({"partial_rotary_factor"}).value_or(0);
  std::optional<double> theta = f.number({"rope_theta"});
  if (!theta && rope_params) theta = ConfigFields("config.bad_field", "config.json", *rope_params).number({"rope_theta"});
  s.rope_theta = theta.value_or(0);
  if (const json* rs = f.find({"rope_scaling"})) {
    if (!rs->is_object()) f.bad("rope_scaling", *rs, "must be an object or null");
    s.rope_scaling = *rs;
  } else if (rope_params) {
    auto type = rope_params->find("rope_type");
    if (type != rope_params->end() && type->is_string() && *type != "default") s.rope_scaling = *rope_params;
  }
  // longrope (phi3) reads the pre-training context; transformers < 5 keeps it at the top level.
  if (s.rope_scaling.is_object() && !s.rope_scaling.contains("original_max_position_embeddings"))
    if (auto orig = f.integer({"original_max_position_embeddings"})) s.rope_scaling["original_max_position_embeddings"] = *orig;

  s.num_experts = f.integer({"num_local_experts", "num_experts", "n_routed_experts"}).value_or(0);
  s.num_experts_per_tok = f.integer({"num_experts_per_tok", "num_experts_per_token", "moe_top_k"}).value_or(0);
  s.kv_lora_rank = f.integer({"kv_lora_rank"}).value_or(0);
  s.qk_rope_head_dim = f.integer({"qk_rope_head_dim"}).value_or(0);
  s.sliding_window = f.integer({"sliding_window"}).value_or(0);
  s.quant_method = quant_method(config);

  if (rec && rec->hf_config) rec->hf_config(f, s);  // class defaults, layer pattern
  if (wrap && wrap->hf_config) wrap->hf_config(top, s);
  if (s.num_experts > 0) {
    // (the record's values where it set them: deepseek's class defaults and shared experts)
    s.moe_intermediate_size = f.integer({"moe_intermediate_size"}).value_or(s.moe_intermediate_size > 0 ? s.moe_intermediate_size : s.intermediate_size);
    s.shared_expert_intermediate_size = f.integer({"shared_expert_intermediate_size"}).value_or(s.shared_expert_intermediate_size);
    // The config's norm_topk_prob, else the class's (mixtral has no key: it always renormalizes).
    s.moe_norm_topk = f.boolean({"norm_topk_prob"}).value_or(rec && rec->norm_topk_hf);
  }
  if (s.num_kv_heads == 0) s.num_kv_heads = s.num_heads;
  if (kv_heads && *kv_heads == 0) s.num_kv_heads = 0;  // stated 0: refused by describe_model's checks
  if (s.head_dim == 0 && s.num_heads > 0) s.head_dim = s.hidden_size / s.num_heads;
  if (s.rope_theta == 0 && rec && rec->rope) s.rope_theta = 10000.0;
  if (s.layer_attn.empty() && s.num_layers > 0 && s.num_layers <= kMaxConfigLayers) {
    // Generic rules: layer_types when written, else a window on every layer.
    if (!pattern_from_layer_types(f, s, s.sliding_window) && s.sliding_window > 0 && !rec) pattern_all(s, AttnKind::Sliding, s.sliding_window);
  }
  if (!rec)
    s.guessed.push_back(fmt::format("family '{}' has no architecture record: dimensions from the generic config keys, "
                                    "attention {}", s.architecture, s.layer_attn.empty() ? "full on every layer" : "from layer_types"));
  return s;
}

namespace {

// llama.cpp's llama_ftype (general.file_type) → the name llama.cpp prints.
std::string ftype_name(int64_t t) {
  static const std::pair<int, const char*> kNames[] = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},     {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"},  {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"},
      {21, "Q2_K_S"}, {22, "IQ3_XS"}, {23, "IQ3_XXS"}, {24, "IQ1_S"}, {25, "IQ4_NL"},  {26, "IQ3_S"},
      {27, "IQ3_M"},  {28, "IQ2_S"},  {29, "IQ2_M"},  {30, "IQ4_XS"}, {31, "IQ1_M"},   {32, "BF16"},
      {36, "TQ1_0"},  {37, "TQ2_0"},  {38, "MXFP4_MOE"}};
  for (auto [id, name] : kNames)
    if (id == t) return name;
  return "";
}

// A per-layer GGUF value: a scalar (same for every layer) or an array of block_count
// numbers. Returns the largest value and fills `per_layer` when an array differs by layer.
int64_t per_layer_value(const ConfigFields& f, const json& md, const std::string& key, int64_t layers,
                        std::vector<int64_t>* per_layer) {
  auto it = md.find(key);
  if (it == md.end() || it->is_null()) return 0;
  if (!it->is_array()) return f.to_int(*it, key);
  if (layers > 0 && it->size() != static_cast<size_t>(layers))
    f.bad(key, *it, fmt::format("must hold one value per layer ({})", layers));
  std::vector<int64_t> vals;
  vals.reserve(it->size());
  for (const auto& v : *it) vals.push_back(f.to_int(v, key));
  if (vals.empty()) return 0;
  int64_t mx = *std::max_element(vals.begin(), vals.end());
  bool uniform = std::all_of(vals.begin(), vals.end(), [&](int64_t v) { return v == vals[0]; });
  if (per_layer && !uniform) *per_layer = std::move(vals);
  return mx;
}

}  // namespace

std::optional<ModelSpec> spec_from_gguf(const json& md) {
  if (!md.is_object()) return std::nullopt;
  auto ait = md.find("general.architecture");
  if (ait == md.end()) return std::nullopt;
  ConfigFields f("model.bad_gguf_field", "GGUF metadata", md);
  if (!ait->is_string() || ait->get<std::string>().empty())
    f.bad("general.architecture", *ait, "must be a non-empty string");
  const std::string arch = ait->get<std::string>();
  auto key = [&](std::string_view k) { return arch + "." + std::string(k); };
  auto integer = [&](std::string_view k, int64_t max = kMaxConfigDim) {
    std::string full = key(k);
    return f.integer({full}, max);
  };

  ModelSpec s;
  s.source = "gguf";
  s.hidden_size = integer("embedding_length").value_or(0);
  s.num_layers = integer("block_count", kMaxConfigLayers).value_or(0);
  s.num_heads = per_layer_value(f, md, key("attention.head_count"), s.num_layers, nullptr);
  if (md.contains(key("attention.head_count_kv")))
    s.num_kv_heads = per_layer_value(f, md, key("attention.head_count_kv"), s.num_layers, &s.layer_kv_heads);
  else
    s.num_kv_heads = s.num_heads;
  s.head_dim = integer("attention.key_length").value_or(s.num_heads > 0 ? s.hidden_size / s.num_heads : 0);
  s.intermediate_size = md.contains(key("expert_feed_forward_length"))
                            ? integer("expert_feed_forward_length").value_or(0)
                            : per_layer_value(f, md, key("feed_forward_length"), s.num_layers, nullptr);
  s.vocab_size = integer("vocab_size").value_or(0);
  if (s.vocab_size == 0) {
    // Token list: a JSON array when short, {"array": type, "length": N} when summarised.
    if (auto t = md.find("tokenizer.ggml.tokens"); t != md.end()) {
      if (t->is_array()) s.vocab_size = static_cast<int64_t>(t->size());
      else if (t->is_object() && t->contains("length")) s.vocab_size = f.to_int((*t)["length"], "tokenizer.ggml.tokens");
    }
  }
  s.max_context = integer("context_length").value_or(0);
  s.num_experts = integer("expert_count").value_or(0);
  s.num_experts_per_tok = integer("expert_used_count").value_or(0);
  s.norm_eps = f.number({key("attention.layer_norm_rms_epsilon"), key("attention.layer_norm_epsilon")}).value_or(0);

  // Mixtral is written as general.architecture "llama" with experts (the record says which).
  const ArchRecord* rec = text_record_for(arch);
  if (rec && !rec->gguf_with_experts.empty() && s.num_experts > 0) rec = find_record(rec->gguf_with_experts);
  s.architecture = rec ? std::string(rec->family) : arch;
  s.tie_word_embeddings = rec && rec->ties_by_default;  // describe_model decides from the tensors

  bool has_rope = md.contains(key("rope.dimension_count")) || md.contains(key("rope.freq_base"));
  s.rope_theta = f.number({key("rope.freq_base")}).value_or(has_rope || (rec && rec->rope) ? 10000.0 : 0.0);
  if (auto type = f.string({key("rope.scaling.type")}); type && *type != "none") {
    json rs = {{"type", *type}};
    if (auto fac = f.number({key("rope.scaling.factor")})) rs["factor"] = *fac;
    if (auto orig = integer("rope.scaling.original_context_length")) rs["original_max_position_embeddings"] = *orig;
    // yarn's correction range (convert_hf_to_gguf writes the config's beta_fast / beta_slow);
    // no truncate key: ggml floors and ceils the range, as truncate true.
    if (auto b = f.number({key("rope.scaling.yarn_beta_fast")})) rs["beta_fast"] = *b;
    if (auto b = f.number({key("rope.scaling.yarn_beta_slow")})) rs["beta_slow"] = *b;
    s.rope_scaling = rs;
  }

  s.kv_lora_rank = integer("attention.kv_lora_rank").value_or(0);
  if (s.kv_lora_rank > 0) s.qk_rope_head_dim = integer("rope.dimension_count").value_or(0);
  // The block details llama.cpp reads (llama-model.cpp's hparams of these families).
  s.attn_logit_softcap = f.number({key("attn_logit_softcapping")}).value_or(0);
  s.final_logit_softcap = f.number({key("final_logit_softcapping")}).value_or(0);
  s.rope_local_theta = f.number({key("rope.freq_base_swa")}).value_or(0);  // gemma3's default: its record
  if (auto rot = integer("rope.dimension_count"); rot && s.kv_lora_rank == 0 && s.head_dim > 0 && *rot < s.head_dim)
    s.partial_rotary_factor = double(*rot) / double(s.head_dim);

  // Layer pattern: the file's own per-layer array or period, else llama.cpp's default for the
  // architecture (the record's gguf hook), else the window on every layer.
  s.sliding_window = integer("attention.sliding_window").value_or(0);
  const std::string pk = key("attention.sliding_window_pattern");
  auto pat = md.find(pk);
  const bool sized = s.num_layers > 0 && s.num_layers <= kMaxConfigLayers;
  if (sized && s.sliding_window > 0 && pat != md.end() && pat->is_array()) {  // one bool per layer: true = sliding
    const size_t n = static_cast<size_t>(s.num_layers);
    if (pat->size() != n) f.bad(pk, *pat, fmt::format("must hold one value per layer ({})", n));
    std::vector<bool> sliding(n, false);
    for (size_t i = 0; i < n; ++i) {
      if (!(*pat)[i].is_boolean()) f.bad(pk, *pat, "must hold booleans");
      sliding[i] = (*pat)[i].get<bool>();
    }
    fill_windows(s, sliding);
  } else if (sized && s.sliding_window > 0 && pat != md.end()) {  // every Nth layer is global (gemma3: N = 6)
    pattern_every_nth_full(s, f.to_int(*pat, pk, kMaxConfigLayers));
  }
  // The record's llama.cpp defaults (a pattern only where the file stated none).
  if (sized && rec && rec->gguf) rec->gguf(f, arch, s);
  if (sized && s.sliding_window > 0 && s.layer_attn.empty()) {
    pattern_all(s, AttnKind::Sliding, s.sliding_window);
  }
  if (sized && s.kv_lora_rank > 0 && s.layer_attn.empty()) pattern_all(s, AttnKind::Mla, 0);
  if (s.num_experts > 0) {
    s.moe_intermediate_size = integer("expert_feed_forward_length").value_or(s.intermediate_size);
    s.shared_expert_intermediate_size = integer("expert_shared_feed_forward_length").value_or(s.shared_expert_intermediate_size);
    // expert_weights_norm, else llama.cpp's graph for the architecture (the record's
    // norm_topk_gguf: mixtral and qwen3moe renormalize, qwen2moe and olmoe do not).
    s.moe_norm_topk = f.boolean({key("expert_weights_norm")}).value_or(rec && rec->norm_topk_gguf);
  }
  if (!rec)
    s.guessed.push_back(fmt::format("GGUF architecture '{}' has no architecture record: generic keys, attention full on "
                                    "every layer unless a window is written", arch));

  if (auto ft = md.find("general.file_type"); ft != md.end() && ft->is_number_integer())
    s.dtype = ftype_name(ft->get<int64_t>());
  return s;
}

}  // namespace nunchaku
