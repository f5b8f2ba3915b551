// The list of records and the layer patterns several of them share.
#include <algorithm>
#include <cctype>

#include "model/arch/record.hpp"
#include "model/arch/attention_support.hpp"

namespace nunchaku {

namespace arch {
// One per file under src/model/arch/ (text families, then wrappers).
extern const ArchRecord kLlama, kMistral, kMixtral, kQwen2, kQwen2Moe, kQwen3, kQwen3Moe, kGemma, kGemma2, kGemma3,
    kPhi3, kGpt2, kDeepseek, kGptOss, kLlama4, kOlmo2, kOlmoe, kJamba, kT5, kBert, kFlux;
extern const ArchRecord kLlavaWrap, kMistral3Wrap, kGemma3Wrap, kQwen2VlWrap, kLlama4Wrap;
}  // namespace arch

namespace {

const ArchRecord* const kRecords[] = {
    &arch::kLlama,  &arch::kMistral, &arch::kMixtral, &arch::kQwen2,  &arch::kQwen2Moe,   &arch::kQwen3,
    &arch::kQwen3Moe, &arch::kGemma, &arch::kGemma2,  &arch::kGemma3, &arch::kPhi3,       &arch::kGpt2,
    &arch::kDeepseek, &arch::kGptOss, &arch::kLlama4, &arch::kOlmo2,  &arch::kOlmoe,      &arch::kJamba,
    &arch::kT5,     &arch::kBert,    &arch::kFlux,    &arch::kLlavaWrap, &arch::kMistral3Wrap, &arch::kGemma3Wrap,
    &arch::kQwen2VlWrap, &arch::kLlama4Wrap};

std::string stem(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view suffix : {"forcausallm", "lmheadmodel", "forconditionalgeneration", "forsequenceclassification",
                                  "formaskedlm", "model"})
    if (n.size() > suffix.size() && n.ends_with(suffix)) {
      n.resize(n.size() - suffix.size());
      break;
    }
  return n;
}

const ArchRecord* lookup(std::string_view name, bool wrapper) {
  if (name.empty()) return nullptr;
  const std::string n = stem(name);
  for (const ArchRecord* r : kRecords)
    if (r->wrapper == wrapper && std::find(r->names.begin(), r->names.end(), n) != r->names.end()) return r;
  return nullptr;
}

void set_layer(ModelSpec& s, size_t i, AttnKind k, int64_t window) {
  s.layer_attn[i] = k;
  s.layer_windows[i] = (k == AttnKind::Sliding || k == AttnKind::Chunked) ? window : 0;
}

bool sized(ModelSpec& s) {
  if (s.num_layers <= 0) return false;
  s.layer_attn.assign(static_cast<size_t>(s.num_layers), AttnKind::Full);
  s.layer_windows.assign(static_cast<size_t>(s.num_layers), 0);
  return true;
}

}  // namespace

const ArchRecord* find_record(std::string_view family) {
  for (const ArchRecord* r : kRecords)
    if (!r->wrapper && r->family == family) return r;
  return nullptr;
}
const ArchRecord* text_record_for(std::string_view name) { return lookup(name, false); }
const ArchRecord* wrapper_record_for(std::string_view name) { return lookup(name, true); }
std::span<const ArchRecord* const> all_records() { return kRecords; }

std::string transformers_name(const ModelSpec& spec, std::string_view name) {
  const ArchRecord* w = spec.wrapper.empty() ? nullptr : wrapper_record_for(spec.wrapper);
  std::string out(name);
  if (w)
    for (const Rename& r : w->to_transformers)
      if (name.starts_with(r.from)) {
        out = std::string(r.to) + std::string(name.substr(r.from.size()));
        break;
      }
  if (const ArchRecord* t = find_record(spec.architecture))
    for (const Rename& r : t->transformers_parts)
      if (size_t at = out.find(r.from); at != std::string::npos) out.replace(at, r.from.size(), r.to);
  return out;
}

void pattern_every_nth_full(ModelSpec& s, int64_t n) {
  if (!sized(s)) return;
  for (size_t i = 0; i < s.layer_attn.size(); ++i)
    set_layer(s, i, n > 0 && (static_cast<int64_t>(i) + 1) % n == 0 ? AttnKind::Full : AttnKind::Sliding, s.sliding_window);
}

void pattern_alternate(ModelSpec& s) {
  if (!sized(s)) return;
  for (size_t i = 0; i < s.layer_attn.size(); ++i) set_layer(s, i, i % 2 == 0 ? AttnKind::Sliding : AttnKind::Full, s.sliding_window);
}

void pattern_all(ModelSpec& s, AttnKind k, int64_t window) {
  if (!sized(s)) return;
  for (size_t i = 0; i < s.layer_attn.size(); ++i) set_layer(s, i, k, window);
}

bool pattern_from_layer_types(const ConfigFields& f, ModelSpec& s, int64_t window) {
  const nlohmann::json* lt = f.find({"layer_types"});
  if (!lt || s.num_layers <= 0) return false;
  const size_t n = static_cast<size_t>(s.num_layers);
  if (!lt->is_array() || lt->size() != n) f.bad("layer_types", *lt, fmt::format("must be a list of {} layer types", n));
  sized(s);
  for (size_t i = 0; i < n; ++i) {
    const auto& v = (*lt)[i];
    if (!v.is_string()) f.bad("layer_types", *lt, "must hold strings");
    const std::string& t = v.get_ref<const std::string&>();
    AttnKind k = AttnKind::Full;
    if (t == "sliding_attention") k = AttnKind::Sliding;
    else if (t == "chunked_attention") k = AttnKind::Chunked;
    else if (t == "linear_attention" || t == "mamba" || t == "mamba2" || t == "recurrent") k = AttnKind::Recurrent;
    else if (t != "full_attention" && t != "attention") f.bad("layer_types", v, "is not a known layer type");
    // A sliding layer without a window (window disabled) attends to everything.
    if ((k == AttnKind::Sliding || k == AttnKind::Chunked) && window <= 0) k = AttnKind::Full;
    set_layer(s, i, k, window);
  }
  return true;
}

void pattern_qwen(const ConfigFields& f, ModelSpec& s) {
  const bool enabled = f.boolean({"use_sliding_window"}).value_or(false);
  if (!enabled) s.sliding_window = 0;
  if (pattern_from_layer_types(f, s, s.sliding_window) || s.sliding_window <= 0) return;
  const int64_t first = f.integer({"max_window_layers"}, kMaxConfigLayers).value_or(s.num_layers);
  if (!sized(s)) return;
  for (size_t i = 0; i < s.layer_attn.size(); ++i)
    set_layer(s, i, static_cast<int64_t>(i) >= first ? AttnKind::Sliding : AttnKind::Full, s.sliding_window);
}

void apply_defaults(const ConfigFields& f, ModelSpec& s, const ClassDefaults& d) {
  auto fill = [](int64_t& v, int64_t def) {
    if (v == 0) v = def;
  };
  fill(s.hidden_size, d.hidden);
  fill(s.intermediate_size, d.intermediate);
  fill(s.num_layers, d.layers);
  fill(s.num_heads, d.heads);
  fill(s.num_kv_heads, d.kv_heads);
  fill(s.head_dim, d.head_dim);
  fill(s.vocab_size, d.vocab);
  fill(s.max_context, d.context);
  fill(s.num_experts, d.experts);
  fill(s.num_experts_per_tok, d.experts_per_tok);
  if (s.rope_theta == 0) s.rope_theta = d.rope_theta;
  if (s.norm_eps == 0) s.norm_eps = d.norm_eps;
  if (d.sliding_window > 0 && !f.has({"sliding_window"})) s.sliding_window = d.sliding_window;
}

bool is_routed_expert(std::string_view n) {
  if (n.find("shared") != std::string_view::npos || n.find("shexp") != std::string_view::npos) return false;
  return n.find(".experts.") != std::string_view::npos || n.find("_exps.") != std::string_view::npos ||
         n.find(".experts_") != std::string_view::npos;
}

std::string_view attn_kind_name(AttnKind k) {
  switch (k) {
    case AttnKind::Full: return "full";
    case AttnKind::Sliding: return "sliding";
    case AttnKind::Chunked: return "chunked";
    case AttnKind::Mla: return "mla";
    case AttnKind::Recurrent: return "recurrent";
    case AttnKind::None: return "none";
  }
  return "full";
}

AttnKind ModelSpec::attn_kind(int64_t layer) const {
  if (layer >= 0 && layer < static_cast<int64_t>(layer_attn.size())) return layer_attn[static_cast<size_t>(layer)];
  return kv_lora_rank > 0 ? AttnKind::Mla : AttnKind::Full;
}

bool transformers_refuses_sdpa(std::string_view model_type) {
  for (std::string_view a : {"gemma2", "vaultgemma", "t5gemma", "gpt_oss", "granite_swa", "granitemoe_swa",
                             "deepseek_v4", "mimo_v2_flash"})
    if (model_type == a) return true;
  return false;
}

}  // namespace nunchaku
