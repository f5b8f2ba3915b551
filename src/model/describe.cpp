// describe_model: choose where the spec comes from, group every tensor into a module with
// the architecture table (or the numeric-path fallback), and check the checkpoint against
// the shapes the spec implies. Disagreements are warnings, not errors: a checkpoint that
// does not match its config is still worth inspecting.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "model/arch/record.hpp"
#include "model/arch_table.hpp"
#include "model/json_file.hpp"
#include "model/model.hpp"
#include "model/storage.hpp"
#include "core/units.hpp"
#include "core/text.hpp"

namespace nunchaku {

using nlohmann::json;

nlohmann::json ModelSpec::to_json() const {
  // Unknown or not applicable is null (docs/json.md), not "" or 0.
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto positive = [](int64_t v) { return v > 0 ? json(v) : json(nullptr); };
  json attention = json::array();
  for (AttnKind k : layer_attn) attention.push_back(attn_kind_name(k));
  return json{{"architecture", architecture},
              {"hf_class", text(hf_class)},
              {"source", source},
              {"hidden_size", hidden_size},
              {"num_layers", num_layers},
              {"num_heads", num_heads},
              {"num_kv_heads", num_kv_heads},
              {"head_dim", head_dim},
              {"intermediate_size", intermediate_size},
              {"vocab_size", vocab_size},
              {"max_context", positive(max_context)},
              {"tie_word_embeddings", tie_word_embeddings},
              {"dtype", text(dtype)},
              {"rope_theta", rope_theta},
              {"rope_scaling", rope_scaling},
              {"norm_eps", norm_eps},
              {"num_experts", num_experts},
              {"num_experts_per_tok", num_experts_per_tok},
              {"sliding_window", positive(sliding_window)},
              {"layer_windows", layer_windows},
              {"layer_kv_heads", layer_kv_heads},
              {"kv_lora_rank", positive(kv_lora_rank)},
              {"qk_rope_head_dim", positive(qk_rope_head_dim)},
              {"layer_attention", attention},
              {"recurrent_state_elements", positive(recurrent_state_elems)},
              {"num_shared_experts", num_shared_experts},
              {"wrapper", text(wrapper)},
              {"num_image_tokens", positive(image_tokens)},
              {"image_tokens_at_most", image_tokens_at_most},
              {"num_mtp_layers", mtp_layers},
              {"quant_method", text(quant_method)},
              {"guessed", guessed}};
}

std::string_view module_kind_name(ModuleKind k) {
  switch (k) {
    case ModuleKind::Embedding: return "embedding";
    case ModuleKind::Layer: return "layer";
    case ModuleKind::FinalNorm: return "final_norm";
    case ModuleKind::Head: return "head";
    case ModuleKind::Other: return "other";
  }
  return "other";
}

namespace {

constexpr size_t kMaxWarnings = 50;

// Where each tensor goes.
struct Slot {
  std::string module;
  ModuleKind kind = ModuleKind::Other;
  int64_t layer = -1;
  std::string rest;   // name relative to the module ("self_attn.q_proj.weight")
  int global = -1;    // index into entry.globals for table-matched global modules
  std::string component;  // record component ("vision_tower", ...), "" = the language model
};

// The record components of this checkpoint's wrapper and text family, plus the generic
// multimodal prefixes for families without a record (their vision layers are never decoder
// layers).
struct Parts {
  std::vector<ArchComponent> list;
  // The slot of a tensor inside a component, if it is in one.
  bool place(std::string_view n, Slot& s) const {
    for (const auto& c : list)
      if (n.starts_with(c.prefix)) {
        s = {std::string(c.prefix.substr(0, c.prefix.size() - 1)), ModuleKind::Other, -1,
             std::string(n.substr(c.prefix.size())), -1, std::string(c.name)};
        return true;
      }
    return false;
  }
};

constexpr ArchComponent kGenericParts[] = {
    {"model.vision_tower.", "vision_tower"}, {"vision_tower.", "vision_tower"}, {"model.visual.", "vision_tower"},
    {"visual.", "vision_tower"},             {"model.vision_model.", "vision_tower"}, {"vision_model.", "vision_tower"},
    {"vision_encoder.", "vision_tower"},     {"model.multi_modal_projector.", "projector"},
    {"multi_modal_projector.", "projector"}, {"mm_projector.", "projector"}, {"model.mm_projector.", "projector"},
    {"audio_tower.", "audio"},               {"model.audio_tower.", "audio"}};

Parts parts_for(const std::optional<ModelSpec>& spec) {
  Parts p;
  if (!spec) return p;
  const ArchRecord* wrap = spec->wrapper.empty() ? nullptr : wrapper_record_for(spec->wrapper);
  const ArchRecord* text = find_record(spec->architecture);
  for (const ArchRecord* r : {wrap, text})
    if (r) p.list.insert(p.list.end(), r->components.begin(), r->components.end());
  if (!wrap && !text) p.list.assign(std::begin(kGenericParts), std::end(kGenericParts));
  return p;
}

struct Grouping {
  const ArchEntry* entry = nullptr;  // nullptr = fallback
  std::string root;
  std::vector<Slot> slots;           // parallel to ck.tensors
  size_t others = 0;
};

Grouping group_with(const Checkpoint& ck, const ArchEntry& e, std::string_view root, const Parts& parts) {
  Grouping g{&e, std::string(root), {}, 0};
  const std::string stack = g.root + std::string(e.layers);
  const std::string outside = outside_prefix(root);
  g.slots.reserve(ck.tensors.size());
  for (const auto& t : ck.tensors) {
    Slot s;
    std::string_view n = t.name;
    if (parts.place(n, s)) {
      g.slots.push_back(std::move(s));
      continue;
    }
    if (n.starts_with(stack)) {
      size_t i = stack.size(), j = i;
      int64_t v = 0;
      while (j < n.size() && j - i < 9 && n[j] >= '0' && n[j] <= '9') v = v * 10 + (n[j++] - '0');
      if (j > i && j < n.size() && n[j] == '.') {
        s = {std::string(n.substr(0, j)), ModuleKind::Layer, v, std::string(n.substr(j + 1))};
      }
    }
    if (s.kind != ModuleKind::Layer) {
      for (size_t k = 0; k < e.globals.size(); ++k) {
        const auto& gm = e.globals[k];
        std::string name = (gm.under_root ? g.root : outside) + std::string(gm.name);
        if (n.size() > name.size() && n.starts_with(name) && n[name.size()] == '.') {
          s = {name, gm.kind, -1, std::string(n.substr(name.size() + 1)), static_cast<int>(k)};
          break;
        }
      }
    }
    if (s.module.empty()) {
      s.module = module_of(n);
      ++g.others;
    }
    g.slots.push_back(std::move(s));
  }
  return g;
}

Grouping group_fallback(const Checkpoint& ck, const Parts& parts) {
  Grouping g;
  g.slots.reserve(ck.tensors.size());
  for (const auto& t : ck.tensors) {
    Slot s;
    if (parts.place(t.name, s)) {
      // a component of the record: placed, not an unknown tensor
    } else if (auto lp = layer_path(t.name)) {
      const size_t at = lp->module.size() + 1;
      s = {std::move(lp->module), ModuleKind::Layer, lp->index, t.name.substr(at)};
    } else {
      s.module = module_of(t.name);
      s.kind = guess_global_kind(s.module);
      if (s.kind == ModuleKind::Other) ++g.others;
    }
    g.slots.push_back(std::move(s));
  }
  return g;
}

// How many tensors group_fallback leaves unplaced, without building its slots.
size_t fallback_others(const Checkpoint& ck, const Parts& parts) {
  size_t others = 0;
  for (const auto& t : ck.tensors) {
    Slot s;
    if (!parts.place(t.name, s) && !layer_path(t.name) && guess_global_kind(module_of(t.name)) == ModuleKind::Other)
      ++others;
  }
  return others;
}

// The table entry (and root) of the spec's family that leaves the fewest tensors
// unplaced; the fallback when that does no better (unknown family, wrapped checkpoints).
Grouping choose_grouping(const Checkpoint& ck, const std::string& family, const Parts& parts) {
  std::optional<Grouping> table;
  for (const auto& e : arch_table()) {
    if (e.family != family) continue;
    for (auto root : e.roots) {
      Grouping g = group_with(ck, e, root, parts);
      if (g.others == ck.tensors.size()) continue;
      if (!table || g.others < table->others) table = std::move(g);
    }
  }
  if (table && (table->others == 0 || table->others <= fallback_others(ck, parts))) return std::move(*table);
  return group_fallback(ck, parts);
}

int kind_rank(ModuleKind k) {
  switch (k) {
    case ModuleKind::Embedding: return 0;
    case ModuleKind::Layer: return 1;
    case ModuleKind::FinalNorm: return 2;
    case ModuleKind::Head: return 3;
    case ModuleKind::Other: return 4;
  }
  return 4;
}

// Collects warnings, merging the same finding across layers ("... (in 32 layers)").
class Findings {
 public:
  void add(const std::string& key, const std::string& where) {
    auto [it, fresh] = index_.try_emplace(key, items_.size());
    if (fresh) items_.push_back({key, where, 0});
    ++items_[it->second].count;
  }
  void flush(std::vector<std::string>& out) const {
    for (const auto& i : items_) {
      if (out.size() >= kMaxWarnings) {
        out.push_back(fmt::format("... and {} more findings", items_.size() - (&i - items_.data())));
        return;
      }
      out.push_back(i.count > 1 ? fmt::format("{} (in {} layers, first {})", i.key, i.count, i.where) : i.key);
    }
  }

 private:
  struct Item {
    std::string key, where;
    size_t count;
  };
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Compares a tensor's shape with a rule's; dims the spec does not know (0) are not checked.
void check_shape(const TensorInfo& t, const TensorRule& r, const ModelSpec& spec, const std::string& shown,
                 const std::string& where, Findings& f) {
  auto want = eval_shape(r.shape, spec);
  if (!want) return;
  bool ok = want->size() == t.shape.size();
  for (size_t i = 0; ok && i < want->size(); ++i)
    if ((*want)[i] != 0 && (*want)[i] != t.shape[i]) ok = false;
  if (!ok) {
    std::vector<std::string> w;
    for (int64_t d : *want) w.push_back(d ? std::to_string(d) : "?");
    f.add(fmt::format("{}: shape {} but {} implies [{}] ({})", shown, shape_str(t.shape), spec.source,
                      fmt::join(w, ", "), r.shape),
          where);
  }
}

void check_against_table(const Checkpoint& ck, const Grouping& g, const ModelSpec& spec,
                         const std::vector<Module>& modules, Findings& f) {
  const ArchEntry& e = *g.entry;
  const std::string stack = g.root + std::string(e.layers);
  std::vector<bool> seen_global(e.globals.size(), false);

  for (const auto& m : modules) {
    if (m.kind == ModuleKind::Layer) {
      // Per slot, the alternative that matches the most of this layer's tensors.
      std::vector<size_t> chosen(e.layer.size(), 0);
      for (size_t s = 0; s < e.layer.size(); ++s) {
        size_t best = 0;
        for (size_t a = 0; a < e.layer[s].alternatives.size(); ++a) {
          size_t hits = 0;
          for (size_t ti : m.tensors)
            for (const auto& r : e.layer[s].alternatives[a]) hits += match_rule(r.name, g.slots[ti].rest);
          if (hits > best) best = hits, chosen[s] = a;
        }
      }
      const std::string generic = stack + "N.";
      for (size_t ti : m.tensors) {
        const auto& rest = g.slots[ti].rest;
        const TensorRule* rule = nullptr;
        for (size_t s = 0; s < e.layer.size() && !rule; ++s)
          for (const auto& r : e.layer[s].alternatives[chosen[s]])
            if (match_rule(r.name, rest)) { rule = &r; break; }
        if (!rule) f.add(fmt::format("{}{}: not expected in a {} layer", generic, rest, spec.architecture), m.name);
        else check_shape(ck.tensors[ti], *rule, spec, generic + rest, m.name, f);
      }
      for (size_t s = 0; s < e.layer.size(); ++s)
        for (const auto& r : e.layer[s].alternatives[chosen[s]]) {
          if (r.optional) continue;
          std::set<int64_t> experts;
          bool found = false;
          for (size_t ti : m.tensors) {
            int64_t x = -1;
            if (match_rule(r.name, g.slots[ti].rest, &x)) found = true, experts.insert(x);
          }
          if (!found) f.add(fmt::format("{}{}: missing", generic, r.name), m.name);
          else if (r.name.find('#') != std::string_view::npos && spec.num_experts > 0 &&
                   experts.size() != static_cast<size_t>(spec.num_experts))
            f.add(fmt::format("{}{}: {} experts, {} says {}", generic, r.name, experts.size(), spec.source,
                              spec.num_experts), m.name);
        }
    } else if (!m.component.empty()) {
      // a record component (vision tower, projector, ...): not checked against the text table
    } else if (g.slots[m.tensors.front()].global >= 0) {
      const auto& gm = e.globals[static_cast<size_t>(g.slots[m.tensors.front()].global)];
      seen_global[static_cast<size_t>(g.slots[m.tensors.front()].global)] = true;
      for (size_t ti : m.tensors) {
        const auto& rest = g.slots[ti].rest;
        auto it = std::find_if(gm.tensors.begin(), gm.tensors.end(),
                               [&](const TensorRule& r) { return match_rule(r.name, rest); });
        if (it == gm.tensors.end()) f.add(fmt::format("{}: not expected in {}", ck.tensors[ti].name, m.name), m.name);
        else check_shape(ck.tensors[ti], *it, spec, ck.tensors[ti].name, m.name, f);
      }
    } else {
      f.add(fmt::format("{}: not part of a {} checkpoint", m.name, spec.architecture), m.name);
    }
  }
  for (size_t k = 0; k < e.globals.size(); ++k) {
    const auto& gm = e.globals[k];
    std::string name = (gm.under_root ? g.root : outside_prefix(g.root)) + std::string(gm.name);
    if (seen_global[k]) continue;
    if (gm.kind == ModuleKind::Head && !spec.tie_word_embeddings)
      f.add(fmt::format("{}: missing although tie_word_embeddings is false", name), name);
    else if (!gm.optional)
      f.add(fmt::format("{}: missing ({})", name, module_kind_name(gm.kind)), name);
  }
}

// ---- the one model validation ---------------------------------------------------------
// Every subcommand builds its model through describe_model, so this is where a spec
// that cannot describe the checkpoint is refused (exit 2 naming the file and the field
// as the file spells it) and where suspicious-but-legal values become warnings. Specs
// inferred from shapes alone are not judged here (they are guesses, reported as such).
class SpecCheck {
 public:
  SpecCheck(const Checkpoint& ck, const ModelSpec& spec, const json* config, std::string file,
            std::vector<std::string>& warnings)
      : ck_(ck), s_(spec), config_(config), file_(std::move(file)), warnings_(warnings) {
    gguf_ = spec.source == "gguf";
    if (gguf_) arch_ = ck.metadata.value("general.architecture", std::string());
  }

  void run(const TensorInfo* embed, int64_t layers_present) {
    const bool known = is_known_family(s_.architecture);
    if (known && s_.num_layers > 0 && s_.hidden_size == 0) fail("hidden_size", "embedding_length", "is 0");
    if (s_.num_heads > 0) kv_heads();
    if (s_.head_dim > 0 && s_.num_heads > 0 && s_.hidden_size > 0 && s_.head_dim % 2 != 0 && s_.rope_theta > 0)
      warn("head_dim", "attention.key_length", fmt::format("is {}, odd; rotary embeddings pair dimensions", s_.head_dim));
    rope(known);
    if (s_.norm_eps < 0)
      fail("rms_norm_eps", "attention.layer_norm_rms_epsilon", fmt::format("is {}, negative", s_.norm_eps));
    if (s_.norm_eps > 0.1)
      warn("rms_norm_eps", "attention.layer_norm_rms_epsilon", fmt::format("is {}, unusually large", s_.norm_eps));
    if (stated_zero("max_position_embeddings", "context_length"))
      fail("max_position_embeddings", "context_length", "is 0");
    if (stated_zero("sliding_window", "attention.sliding_window"))
      warn("sliding_window", "attention.sliding_window", "is 0 (read as no sliding window)");
    if (s_.num_experts_per_tok > 0 && s_.num_experts > 0 && s_.num_experts_per_tok > s_.num_experts)
      fail("num_experts_per_tok", "expert_used_count",
           fmt::format("is {}, more than the {}", s_.num_experts_per_tok, plural(uint64_t(s_.num_experts), "expert")));
    if (s_.num_layers > 0 && layers_present > s_.num_layers + extra_layers())
      fail("num_hidden_layers", "block_count",
           fmt::format("is {} but the checkpoint holds {}", s_.num_layers, plural(uint64_t(layers_present), "layer")));
    if (embed && embed->shape.size() == 2) embedding(*embed, known);
  }

 private:
  void kv_heads() {
    auto check = [&](int64_t kv, const std::string& where) {
      if (kv == 0 && s_.layer_kv_heads.empty())
        fail("num_key_value_heads", "attention.head_count_kv", "is 0" + where);
      if (kv > 0 && s_.num_heads % kv != 0)
        fail("num_key_value_heads", "attention.head_count_kv",
             fmt::format("is {}{}, which does not divide the {} attention heads", kv, where, s_.num_heads));
    };
    if (s_.layer_kv_heads.empty()) check(s_.num_kv_heads, "");
    for (size_t l = 0; l < s_.layer_kv_heads.size(); ++l) check(s_.layer_kv_heads[l], fmt::format(" for layer {}", l));
  }

  void rope(bool known) {
    const ArchRecord* rec = find_record(s_.architecture);
    if (known && (!rec || rec->rope) && s_.rope_theta <= 0)
      fail("rope_theta", "rope.freq_base", fmt::format("is {}; rotary embeddings need a positive base", s_.rope_theta));
    if (s_.rope_scaling.is_object()) {
      auto f = s_.rope_scaling.find("factor");
      if (f != s_.rope_scaling.end()) {
        if (!f->is_number() || !(f->get<double>() > 0))
          fail("rope_scaling.factor", "rope.scaling.factor", "must be a positive number (found " + f->dump() + ")");
        if (f->get<double>() < 1)
          warn("rope_scaling.factor", "rope.scaling.factor", fmt::format("is {}, below 1", f->get<double>()));
      }
    }
    if (gguf_) {
      auto it = ck_.metadata.find(arch_ + ".rope.dimension_count");
      if (it != ck_.metadata.end() && it->is_number_integer() && s_.head_dim > 0 &&
          s_.kv_lora_rank == 0 && (it->get<int64_t>() > s_.head_dim || it->get<int64_t>() <= 0))
        fail("", "rope.dimension_count",
             fmt::format("is {}; it must be in 1..head_dim ({})", it->get<int64_t>(), s_.head_dim));
    }
  }

  // Families we run and size exactly must match their tensors; for others (whose layout
  // we only guess) a mismatch is reported and inspection goes on.
  void embedding(const TensorInfo& embed, bool known) {
    const int64_t rows = embed.shape[0], cols = embed.shape[1];
    auto report = [&](const std::string& hf, const std::string& gg, const std::string& what) {
      if (known) fail(hf, gg, what);
      warn(hf, gg, what);
    };
    if (s_.hidden_size > 0 && cols != s_.hidden_size)
      report("hidden_size", "embedding_length",
             fmt::format("is {} but the embedding '{}' has {} columns", s_.hidden_size, embed.name, cols));
    if (s_.vocab_size > rows)
      report("vocab_size", "vocab_size",
             fmt::format("is {} but the embedding '{}' has only {} rows", s_.vocab_size, embed.name, rows));
  }

  // Multi-token-prediction layers stored after the decoder stack (DeepSeek-V3: 61 + 1).
  int64_t extra_layers() const {
    const json* where = gguf_ ? &ck_.metadata : config_;
    if (!where || !where->is_object()) return 0;
    auto it = where->find(gguf_ ? arch_ + ".nextn_predict_layers" : "num_nextn_predict_layers");
    return it != where->end() && it->is_number_unsigned() ? std::min<int64_t>(it->get<int64_t>(), 1 << 16) : 0;
  }

  // The field was written in the file with the value 0 (as opposed to absent).
  bool stated_zero(const std::string& hf_key, const std::string& gguf_key) const {
    const json* where = gguf_ ? &ck_.metadata : config_;
    if (!where || !where->is_object()) return false;
    auto it = where->find(gguf_ ? arch_ + "." + gguf_key : hf_key);
    if (!gguf_ && it == where->end()) {  // multimodal wrappers nest the language model
      auto tc = where->find("text_config");
      if (tc != where->end() && tc->is_object()) {
        auto in = tc->find(hf_key);
        return in != tc->end() && in->is_number() && in->get<double>() == 0;
      }
    }
    return it != where->end() && it->is_number() && it->get<double>() == 0;
  }

  std::string field(const std::string& hf_key, const std::string& gguf_key) const {
    return gguf_ ? arch_ + "." + gguf_key : hf_key;
  }

  [[noreturn]] void fail(const std::string& hf_key, const std::string& gguf_key, const std::string& what) const {
    // The file is named by the context; a GGUF says where in it the field lives.
    const std::string where = gguf_ ? "GGUF metadata: " : "";
    throw Error("model.bad_spec", fmt::format("{}field '{}' {}", where, field(hf_key, gguf_key), what),
                {.file = file_, .hint = "the checkpoint's metadata disagrees with itself or with its tensors"});
  }

  void warn(const std::string& hf_key, const std::string& gguf_key, const std::string& what) {
    warnings_.push_back(fmt::format("{}: field '{}' {}", gguf_ ? "GGUF metadata" : "config.json",
                                    field(hf_key, gguf_key), what));
  }

  const Checkpoint& ck_;
  const ModelSpec& s_;
  const json* config_;
  std::string file_;
  std::vector<std::string>& warnings_;
  bool gguf_ = false;
  std::string arch_;
};

// quantization_config's packed width (GPTQ/AWQ "bits", compressed-tensors "num_bits"), 4 unstated.
int quant_bits(const std::optional<json>& config) {
  if (!config || !config->is_object()) return 4;
  auto q = config->find("quantization_config");
  if (q == config->end() || !q->is_object()) return 4;
  for (const char* k : {"bits", "w_bit"})
    if (auto b = q->find(k); b != q->end() && b->is_number_integer() && b->get<int64_t>() > 0 && b->get<int64_t>() <= 32)
      return static_cast<int>(b->get<int64_t>());
  return 4;
}

// Layers past the decoder stack that a record names as multi-token-prediction layers
// (DeepSeek-V3's layer 61) become the "mtp" component: loaded by no runtime by default.
void mark_mtp(const ModelSpec& spec, std::vector<Module>& modules) {
  if (spec.mtp_layers <= 0 || spec.num_layers <= 0) return;
  for (auto& m : modules)
    if (m.kind == ModuleKind::Layer && m.component.empty() && m.layer >= spec.num_layers)
      m.kind = ModuleKind::Other, m.component = "mtp";
}

// Parameter totals of the layout: what a runtime loads (no MTP) and what one token uses
// (routed experts counted top_k / experts).
void count_parameters(const Checkpoint& ck, const std::vector<uint64_t>& logical, ModelLayout& out) {
  uint64_t routed = 0;
  for (const auto& m : out.modules) {
    if (m.component == "mtp") continue;
    out.num_parameters += m.parameters;
    for (size_t ti : m.tensors)
      if (is_routed_expert(ck.tensors[ti].name)) routed += logical[ti];
  }
  for (const auto& t : ck.tensors) out.num_stored_elements += t.numel();
  const int64_t e = out.spec ? out.spec->num_experts : 0, k = out.spec ? out.spec->num_experts_per_tok : 0;
  out.num_active_parameters = out.num_parameters;
  if (e > 0 && k > 0 && k <= e)
    out.num_active_parameters = out.num_parameters - routed +
                                static_cast<uint64_t>(static_cast<unsigned __int128>(routed) * uint64_t(k) / uint64_t(e));
}

}  // namespace

bool is_token_embedding(std::string_view module) {
  size_t dot = module.rfind('.');
  std::string_view last = dot == std::string_view::npos ? module : module.substr(dot + 1);
  return last != "wpe" && last != "position_embd";
}

ModelLayout describe_model(const Checkpoint& ck) {
  ModelLayout out;
  const bool gguf_arch = ck.metadata.is_object() && ck.metadata.contains("general.architecture");
  const std::string first_file = ck.files.empty() ? ck.path : ck.files.front().path;
  std::optional<json> config;
  try {
    // A GGUF describes itself; a config.json that happens to sit beside it may be another model's.
    if (gguf_arch && ck.format == Format::GGUF) {
      out.spec = spec_from_gguf(ck.metadata);
    } else if (!ck.config_path.empty()) {
      config = read_json_file(ck.config_path);
      try {
        out.spec = spec_from_hf_config(*config);
      } catch (const Error& e) {
        throw e.with_defaults({.file = ck.config_path});
      }
    } else if (gguf_arch) {
      out.spec = spec_from_gguf(ck.metadata);
    } else {
      out.spec = spec_from_tensors(ck);
    }
  } catch (const Error& e) {
    throw e.with_defaults({.file = first_file});
  }

  const Parts parts = parts_for(out.spec);
  Grouping g = out.spec ? choose_grouping(ck, out.spec->architecture, parts) : group_fallback(ck, parts);
  out.logical = logical_parameters(ck, quant_bits(config));
  const std::vector<uint64_t>& logical = out.logical;

  // Modules in the order a loader walks them: embeddings, layers (per stack, by index),
  // final norm, head, then anything else in file order.
  // Within a kind, globals keep the table's order (wte before wpe; file order is alphabetical).
  std::unordered_map<std::string, size_t> by_name;
  std::unordered_map<std::string, size_t> stack_order;  // "model.layers" → first appearance
  std::vector<int64_t> secondary;
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    const Slot& s = g.slots[i];
    auto [it, fresh] = by_name.try_emplace(s.module, out.modules.size());
    if (fresh) {
      out.modules.push_back(Module{s.module, s.kind, s.layer, {}, 0, 0, s.component});
      secondary.push_back(s.kind == ModuleKind::Layer ? s.layer
                          : s.global >= 0             ? s.global
                          : s.kind == ModuleKind::Embedding && !is_token_embedding(s.module) ? 1
                                                                                             : 0);
      if (s.kind == ModuleKind::Layer) {
        std::string stack = s.module.substr(0, s.module.rfind('.'));
        stack_order.try_emplace(stack, stack_order.size());
      }
    }
    Module& m = out.modules[it->second];
    m.tensors.push_back(i);
    m.bytes += ck.tensors[i].nbytes;
    m.parameters += logical[i];
  }
  auto key = [&](const Module& m, size_t pos) {
    size_t stack = m.kind == ModuleKind::Layer ? stack_order[m.name.substr(0, m.name.rfind('.'))] : 0;
    return std::tuple(kind_rank(m.kind), stack, secondary[pos], pos);
  };
  std::vector<std::pair<std::tuple<int, size_t, int64_t, size_t>, Module>> keyed;
  for (size_t i = 0; i < out.modules.size(); ++i) keyed.emplace_back(key(out.modules[i], i), std::move(out.modules[i]));
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.modules.clear();
  for (auto& [k, m] : keyed) out.modules.push_back(std::move(m));
  if (out.spec) mark_mtp(*out.spec, out.modules);

  // Embedding and head tensors, for tie detection and filling gaps in the spec.
  const TensorInfo* embed = nullptr;
  bool has_head = false;
  for (const auto& m : out.modules) {
    if (m.kind == ModuleKind::Embedding && !embed && is_token_embedding(m.name)) embed = &ck.tensors[m.tensors.front()];
    if (m.kind == ModuleKind::Head) has_head = true;
  }

  if (out.spec && !ck.tensors.empty()) {
    ModelSpec& spec = *out.spec;
    // Whether the head is tied is a fact of the file when its source does not say.
    bool tie_stated = config && (config->contains("tie_word_embeddings") ||
                                 (config->contains("text_config") && (*config)["text_config"].is_object() &&
                                  (*config)["text_config"].contains("tie_word_embeddings")));
    if (spec.source == "gguf" || (!tie_stated && !is_known_family(spec.architecture)))
      spec.tie_word_embeddings = embed && !has_head;
    if (spec.vocab_size == 0 && embed && embed->shape.size() == 2) spec.vocab_size = embed->shape[0];

    Findings f;
    if (g.entry) check_against_table(ck, g, spec, out.modules, f);
    f.flush(out.warnings);
    int64_t layers = 0;
    for (const auto& m : out.modules)
      if (m.kind == ModuleKind::Layer && m.component.empty()) layers = std::max(layers, m.layer + 1);
    if (spec.source != "inferred")
      SpecCheck(ck, spec, config ? &*config : nullptr, spec.source == "gguf" ? first_file : ck.config_path,
                out.warnings)
          .run(embed, layers);
    if (spec.num_layers > 0 && layers != spec.num_layers)
      out.warnings.push_back(fmt::format("{} says {}, the checkpoint holds {}", spec.source,
                                         plural(uint64_t(spec.num_layers), "layer"), layers));
    if (spec.source == "inferred" && spec.num_heads == 0)
      out.warnings.push_back(
          "heads unknown: without config.json the head size cannot be read from these tensor shapes "
          "(no q_norm or rotary buffer); put config.json beside the weights");
  }

  // Tied weights: a missing head reusing the embedding, and tensors sharing a PyTorch storage.
  if (out.spec && out.spec->tie_word_embeddings && embed && !has_head) {
    std::string head;
    if (g.entry) {
      for (const auto& gm : g.entry->globals)
        if (gm.kind == ModuleKind::Head) head = (gm.under_root ? g.root : outside_prefix(g.root)) + std::string(gm.name) + ".weight";
    } else {
      head = embed->name.starts_with("token_embd") ? "output.weight" : "lm_head.weight";
    }
    out.tied.push_back(head + "=" + embed->name);
  }
  // Tied means the same bytes seen the same way: one storage, same element offset, dtype,
  // shape and strides. Disjoint or overlapping slices of one storage (a fused qkv split
  // into views, say) share a buffer but are different parameters.
  std::map<std::string, size_t> view_first;
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    const auto& t = ck.tensors[i];
    if (t.storage.empty()) continue;
    std::string key = fmt::format("{}@{}:{}:{}:{}", t.storage, t.storage_offset, dtype_name(t.dtype),
                                  fmt::join(t.shape, ","), fmt::join(t.strides, ","));
    auto [it, fresh] = view_first.try_emplace(std::move(key), i);
    if (!fresh) out.tied.push_back(t.name + "=" + ck.tensors[it->second].name);
  }
  assign_roles(ck, out);
  count_parameters(ck, logical, out);
  return out;
}

}  // namespace nunchaku
