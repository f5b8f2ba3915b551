#include "memory/estimate.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <span>
#include <stdexcept>
#include <unordered_map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "memory/engine_memory.hpp"
#include "memory/estimate_detail.hpp"
#include "memory/fsdp.hpp"
#include "memory/multinode.hpp"
#include "memory/quant.hpp"
#include "memory/workload_defaults.hpp"
#include "model/arch/attention_support.hpp"
#include "model/arch/record.hpp"
#include "model/recipe.hpp"
#include "model/storage.hpp"
#include "core/units.hpp"

namespace nunchaku {

using namespace estimate_detail;

namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr int64_t kMaxTokens = 1LL << 31;
constexpr int64_t kMaxBatch = 1LL << 24;
constexpr int64_t kMaxImages = 1 << 16;

void require(bool ok, const char* code, const std::string& msg, const std::string& hint = "") {
  if (!ok) throw Error(code, msg, {.hint = hint});
}

// Whether runtime `r` holds a checkpoint's non-language-model components (vision tower,
// projector, audio encoder) in memory: transformers, vLLM and DeepSpeed build the whole
// model; llama.cpp keeps them in a separate --mmproj file, loaded for images only; nunchaku's
// `run` loads the language model alone (text prompts; keep_language_model).
bool loads_component(Runtime r, int64_t images) {
  return r != Runtime::Nunchaku && (r != Runtime::LlamaCpp || images > 0);
}

// One note per component: what it costs in this runtime, and what images add.
void note_components(Estimate& e, const std::vector<Module>& mods, const Workload& w) {
  const ModelSpec& s = e.spec;
  const bool loaded = loads_component(e.runtime, w.images);
  bool any = false;
  for (const auto& m : mods) {
    if (m.component != "vision_tower" && m.component != "projector" && m.component != "audio") continue;
    any = true;
    e.notes.push_back(fmt::format(
        "{} ({}): {} parameters {}; no KV cache", m.name, m.component, format_count(m.parameters),
        loaded                           ? "charged as weights"
        : e.runtime == Runtime::Nunchaku ? "not charged: nunchaku's engine runs the language model alone, on text"
                                         : "not charged: llama.cpp loads them from its --mmproj file, for images only"));
  }
  if (any && w.images == 0 && s.image_tokens > 0)
    e.notes.push_back(fmt::format("each image takes {}{} context tokens: --images N charges them", s.image_tokens_at_most ? "at most " : "",
                                  s.image_tokens));
  if (w.images > 0)
    e.notes.push_back(fmt::format("{} per sequence: {} x {} tokens in the context ({} of text){}", plural(uint64_t(w.images), "image"), w.images,
                                  w.image_tokens, w.context - w.images * w.image_tokens,
                                  w.image_tokens == s.image_tokens && s.image_tokens_at_most
                                      ? " -- the largest an image takes; --image-tokens sets the count of smaller images"
                                      : ""));
  if (w.images > 0 && s.wrapper.empty())
    e.guessed.push_back("vision encoder: not in this checkpoint (llama.cpp's --mmproj file), its weights not charged");
  if (w.images > 0 && e.runtime == Runtime::Nunchaku)
    e.notes.push_back("nunchaku's engine runs text only: `run` does not take images; the figures are what it would take");
}

// --nodes N: only runtimes that span machines take it (multinode.hpp says which and how).
void check_nodes(const Workload& w, Runtime r) {
  if (w.nodes == 1) return;
  require(w.target == Target::Cuda, "usage.nodes", fmt::format("--nodes {} with --device cpu: the estimate is of one process in "
                                                               "host memory", w.nodes),
          "leave --nodes out, or estimate the GPUs of each node (--device cuda)");
  require(r == Runtime::DeepSpeed || r == Runtime::Fsdp || r == Runtime::Vllm, "usage.nodes",
          fmt::format("--nodes {}: --runtime {} runs on one machine", w.nodes, runtime_name(r)),
          w.mode == Mode::Infer ? "multi-node inference: --runtime vllm (tensor parallel within a node, pipeline parallel across nodes)"
                                : "multi-node training: --runtime deepspeed (--zero 0..3) or --runtime fsdp");
}

ModelSpec resolve_spec(const ModelLayout& layout, const std::vector<Module>& mods) {
  require(layout.spec.has_value(), "estimate.no_spec", "cannot tell the model's dimensions (no config.json, no GGUF metadata, shapes not recognised)",
          "put the model's config.json beside the weights");
  ModelSpec s = *layout.spec;
  if (s.num_layers == 0)
    for (const auto& m : mods) s.num_layers += m.kind == ModuleKind::Layer;
  if (s.num_kv_heads == 0) s.num_kv_heads = s.num_heads;
  if (s.head_dim == 0 && s.num_heads > 0) s.head_dim = s.hidden_size / s.num_heads;
  require(s.hidden_size > 0 && s.num_layers > 0 && s.num_heads > 0 && s.head_dim > 0 && s.vocab_size > 0,
          "estimate.incomplete_spec",
          fmt::format("model spec lacks dimensions (hidden {}, layers {}, heads {}, vocab {})", s.hidden_size,
                      s.num_layers, s.num_heads, s.vocab_size),
          "put the model's config.json beside the weights");
  return s;
}

// --images N: each image's tokens join every sequence's context (once: a resolved workload
// is resolved again by the fix search). The tokens per image are --image-tokens, else the
// wrapper's count; a checkpoint without a vision tower needs --image-tokens (a GGUF's
// vision encoder is llama.cpp's separate --mmproj file).
void add_image_tokens(Workload& w, const ModelSpec& s) {
  if (w.images_in_context) return;
  require(w.images >= 0 && w.images <= kMaxImages, "usage.images", fmt::format("--images {} is out of range 0..{}", w.images, kMaxImages));
  require(w.image_tokens >= 0 && w.image_tokens <= kMaxTokens, "usage.image_tokens",
          fmt::format("--image-tokens {} is out of range 1..{}", w.image_tokens, kMaxTokens));
  if (w.images == 0) return;
  if (w.image_tokens == 0) {
    require(!s.wrapper.empty(), "usage.images",
            fmt::format("--images: this '{}' checkpoint holds no vision tower", s.architecture),
            "a multimodal checkpoint takes --images; for a GGUF with a separate mmproj file give --image-tokens T");
    require(s.image_tokens > 0, "usage.image_tokens",
            fmt::format("--images: the tokens per image of '{}' are not known", s.wrapper), "give --image-tokens T");
    w.image_tokens = s.image_tokens;
  }
  require(w.images * w.image_tokens <= kMaxTokens - w.context, "usage.images",
          fmt::format("--images {} x {} tokens with --context {} is beyond {} tokens", w.images, w.image_tokens, w.context, kMaxTokens));
  w.context += w.images * w.image_tokens;
  w.images_in_context = true;
}

Workload resolve_workload(const Workload& in, const ModelSpec& s, const Checkpoint& ck, bool* defaulted) {
  Workload w = in;
  *defaulted = false;
  if (w.context == 0) {
    w.context = default_context(s.max_context);
    *defaulted = true;
  }
  add_image_tokens(w, s);
  require(w.batch >= 1 && w.batch <= kMaxBatch, "usage.batch", fmt::format("--batch {} is out of range 1..{}", w.batch, kMaxBatch));
  require(w.context >= 1 && w.context <= kMaxTokens, "usage.context", fmt::format("--context {} is out of range 1..{}", w.context, kMaxTokens));
  if (w.prefill_chunk == 0 || w.prefill_chunk > w.context) w.prefill_chunk = w.context;
  require(w.prefill_chunk >= 1, "usage.prefill_chunk", "--prefill-chunk must be positive");
  require(w.gpus >= 1 && w.gpus <= 65536, "usage.gpus", fmt::format("--gpus {} is out of range 1..65536", w.gpus));
  require(w.zero >= 0 && w.zero <= 3, "usage.zero", fmt::format("--zero {} is not a ZeRO stage (0..3)", w.zero));
  const bool training = w.mode != Mode::Infer;
  require(training || w.zero == 0, "usage.zero_needs_training", "--zero applies to training modes", "add --mode train, lora or qlora");
  const bool fsdp = w.runtime == Runtime::Fsdp;  // offloads without ZeRO (fsdp.cpp checks which)
  require(w.offload == Offload::None || w.zero >= 1 || fsdp, "estimate.offload_needs_zero",
          "--offload needs ZeRO (DeepSpeed offloads only partitioned states)", "add --zero 2 (optimizer) or --zero 3 (params)");
  require(w.offload != Offload::Params || w.zero == 3 || fsdp, "estimate.offload_needs_zero",
          "--offload params needs ZeRO-3", "add --zero 3");
  require(w.offload == Offload::None || w.target == Target::Cuda, "usage.offload_cpu",
          "--offload moves model states from the GPUs to host memory; with --device cpu they are in host memory already",
          "leave --offload out (ZeRO partitions the states over the processes)");
  require(w.lora_rank >= 1 && w.lora_rank <= 65536, "usage.lora_rank", "--lora-rank must be in 1..65536");
  require(w.nodes >= 1 && w.nodes <= 4096, "usage.nodes", fmt::format("--nodes {} is out of range 1..4096", w.nodes));
  if (!w.runtime)
    w.runtime = !training ? Runtime::Nunchaku : w.zero > 0 || w.nodes > 1 ? Runtime::DeepSpeed : Runtime::Transformers;
  const Runtime r = *w.runtime;
  check_nodes(w, r);
  check_fsdp_workload(w, r);
  // nunchaku feeds prompts in passes of the engine's max_tokens, which --prefill-chunk sets
  // (run's flag of the same name): not clamped to the context, at least the batch.
  if (r == Runtime::Nunchaku && !training) w.prefill_chunk = engine_max_tokens(in.prefill_chunk, w.batch);
  // llama.cpp: --prefill-chunk is its logical batch n_batch (-b), default 2048 (llama-cli,
  // llama-server); the context bounds it there (runtime_llamacpp.cpp).
  if (r == Runtime::LlamaCpp && !training) w.prefill_chunk = in.prefill_chunk > 0 ? in.prefill_chunk : kLlamaCppBatch;
  require(w.ubatch >= 0 && w.ubatch <= kMaxTokens, "usage.ubatch", fmt::format("--ubatch {} is out of range 1..{}", w.ubatch, kMaxTokens));
  require(w.steps >= 0, "usage.steps", fmt::format("--steps {} is negative", w.steps));
  require(w.steps == 0 || training, "usage.steps", "--steps is for training (the optimizer's first step or the steady state)",
          "add --mode train, lora or qlora");
  require(!training || r == Runtime::Transformers || r == Runtime::DeepSpeed || r == Runtime::Fsdp, "usage.runtime_mode",
          fmt::format("--runtime {} does not train", runtime_name(r)), "use --runtime transformers, deepspeed or fsdp for --mode train/lora/qlora");
  require(training || r != Runtime::DeepSpeed, "usage.runtime_mode", "--runtime deepspeed is modelled for training only",
          "add --mode train, lora or qlora, or pick an inference runtime");
  require(w.zero == 0 || r == Runtime::DeepSpeed, "usage.zero_needs_deepspeed", "--zero is DeepSpeed's", "add --runtime deepspeed");
  if (w.flash_attention) w.attention = Attention::Flash;
  // transformers refuses SDPA for some architectures (their _supports_sdpa = False: softcapping,
  // attention sinks); it runs them eager by default.
  const bool no_sdpa = r == Runtime::Transformers && transformers_refuses_sdpa(s.architecture);
  require(!(no_sdpa && w.attention == Attention::Sdpa), "usage.attention",
          fmt::format("--attention sdpa: transformers refuses SDPA for {} (its _supports_sdpa is False: the attention uses "
                      "logit softcapping or sinks that SDPA cannot apply)", s.architecture),
          "use --attention eager (transformers' default for it), or another runtime");
  if (w.attention == Attention::Default)
    w.attention = r == Runtime::Transformers ? (no_sdpa ? Attention::Eager : Attention::Sdpa) : Attention::Flash;
  if (w.threads <= 0 && r == Runtime::Nunchaku) w.threads = std::max(1u, std::thread::hardware_concurrency());
  if (w.mode == Mode::QLoRA && w.quant.scheme == QuantScheme::None) w.quant.scheme = QuantScheme::NF4;
  const bool lora = w.mode == Mode::LoRA || w.mode == Mode::QLoRA;
  require(lora || w.lora_targets.empty(), "usage.lora_targets", "--lora-targets applies to --mode lora and qlora",
          "add --mode lora or qlora, or leave --lora-targets out");
  for (const auto& tg : w.lora_targets) {
    const bool found = tg == "all-linear" || std::any_of(ck.tensors.begin(), ck.tensors.end(), [&](const TensorInfo& t) {
                         return t.name.find("." + tg + ".") != std::string::npos;
                       });
    require(found, "usage.lora_targets", fmt::format("--lora-targets: no module named '{}' in this model", tg),
            "name modules as they appear in tensor names (q_proj, v_proj, ...), or all-linear");
  }
  if (lora && w.lora_targets.empty()) {
    // PEFT's per-architecture defaults (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
    auto has = [&](std::string_view part) {
      return std::any_of(ck.tensors.begin(), ck.tensors.end(), [&](const TensorInfo& t) { return t.name.find(part) != std::string::npos; });
    };
    if (has(".q_proj.")) w.lora_targets = {"q_proj", "v_proj"};
    else if (has(".qkv_proj.")) w.lora_targets = {"qkv_proj"};
    else if (has(".c_attn.")) w.lora_targets = {"c_attn"};
    else if (has(".query_key_value.")) w.lora_targets = {"query_key_value"};
    else if (has(".attn_q.")) w.lora_targets = {"attn_q", "attn_v"};
    else w.lora_targets = {"all-linear"};
  }
  for (const auto& [name, _] : w.overheads) {
    auto names = overhead_names();
    require(std::find(names.begin(), names.end(), name) != names.end(), "usage.overhead",
            fmt::format("--overhead: unknown name '{}'", name), fmt::format("one of: {}", fmt::join(names, ", ")));
  }
  return w;
}

bool is_lora_target(const TensorInfo& t, const std::vector<std::string>& targets) {
  for (const auto& tg : targets) {
    if (tg == "all-linear") return true;
    if (t.name.find("." + tg + ".") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

uint64_t Estimate::component(std::string_view name) const {
  for (const auto& c : gpu)
    if (c.name == name) return c.bytes;
  return 0;
}

std::vector<std::string> overhead_names() {
  return {"cuda_context", "cublas_workspace", "allocator_slack", "cuda_graphs", "cpu_runtime", "glibc_heap", "python_runtime",
          "torch_loader", "torch_exit"};
}

uint64_t kv_layer_bytes(const ModelSpec& s, int64_t layer, int64_t tokens, int64_t batch, DType kv, const KvCells& cells) {
  AttnKind kind = s.attn_kind(layer);
  int64_t window = 0;
  if (layer >= 0 && layer < static_cast<int64_t>(s.layer_windows.size())) window = s.layer_windows[static_cast<size_t>(layer)];
  else if (s.layer_windows.empty() && s.layer_attn.empty()) window = s.sliding_window;
  // Specs built by hand (or by older readers) may state windows without kinds.
  if (window > 0 && (kind == AttnKind::Full || kind == AttnKind::Mla) && s.layer_attn.empty()) kind = AttnKind::Sliding;
  const uint64_t e = elem_bytes(kv);
  // One cached token's row of n values: whole blocks for block-quantized types (q8_0: 34 B
  // per 32 values, q4_0: 18 per 32), as llama.cpp's ggml_row_size sizes its cache rows.
  const auto& ti = dtype_info(kv);
  auto row = [&](uint64_t n) { return mul({(n + ti.block_elems - 1) / ti.block_elems, ti.block_bytes}); };
  if (kind == AttnKind::None) return 0;
  if (kind == AttnKind::Recurrent)  // a constant state per sequence, whatever the context
    return mul({static_cast<uint64_t>(std::max<int64_t>(s.recurrent_state_elems, 0)), static_cast<uint64_t>(batch),
                cells.state_dtype ? elem_bytes(*cells.state_dtype) : e});
  uint64_t held = static_cast<uint64_t>(tokens);
  if ((kind == AttnKind::Sliding || kind == AttnKind::Chunked) && window > 0 && !cells.full_windows) {
    uint64_t w = static_cast<uint64_t>(window) + static_cast<uint64_t>(std::max<int64_t>(cells.window_extra, 0));
    if (cells.window_pad > 1) w = (w + cells.window_pad - 1) / cells.window_pad * cells.window_pad;
    held = std::min(held, w);
  }
  if (kind == AttnKind::Mla && s.kv_lora_rank > 0 && !cells.mla_expanded)
    return mul({row(static_cast<uint64_t>(s.kv_lora_rank + s.qk_rope_head_dim)), held, static_cast<uint64_t>(batch)});
  int64_t kvh = s.num_kv_heads > 0 ? s.num_kv_heads : s.num_heads;
  if (!s.layer_kv_heads.empty() && layer >= 0 && layer < static_cast<int64_t>(s.layer_kv_heads.size()))
    kvh = s.layer_kv_heads[static_cast<size_t>(layer)];
  const int64_t hd = s.head_dim > 0 ? s.head_dim : (s.num_heads > 0 ? s.hidden_size / s.num_heads : 0);
  if (kind == AttnKind::Mla && cells.mla_expanded) {
    // transformers' DeepSeek attention caches the expanded K (heads × qk head dim) and V
    // (heads × v_head_dim, taken as qk head dim minus the rope part).
    const uint64_t v = static_cast<uint64_t>(std::max<int64_t>(hd - s.qk_rope_head_dim, 0));
    return mul({add(row(mul({static_cast<uint64_t>(kvh), static_cast<uint64_t>(hd)})), row(mul({static_cast<uint64_t>(kvh), v}))), held,
                static_cast<uint64_t>(batch)});
  }
  return mul({2, row(mul({static_cast<uint64_t>(kvh), static_cast<uint64_t>(hd)})), held, static_cast<uint64_t>(batch)});
}

uint64_t kv_cache_bytes(const ModelSpec& s, int64_t tokens, int64_t batch, DType kv) {
  uint64_t total = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) total = add(total, kv_layer_bytes(s, l, tokens, batch, kv));
  return total;
}

uint64_t kv_cache_bytes_per_token(const ModelSpec& s, DType kv) {
  uint64_t total = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const AttnKind k = s.attn_kind(l);
    if (k == AttnKind::Recurrent || k == AttnKind::None) continue;
    ModelSpec one = s;  // as if the layer held every token
    one.layer_windows.clear();
    one.sliding_window = 0;
    if (!one.layer_attn.empty()) one.layer_attn[static_cast<size_t>(l)] = k == AttnKind::Mla ? AttnKind::Mla : AttnKind::Full;
    total = add(total, kv_layer_bytes(one, l, 1, 1, kv));
  }
  return total;
}

namespace {

// Tensor k of layer m is a routed expert: by the tensor table's role, by name where the
// family has no table entry for it. gpt-oss's per-expert biases and MXFP4 scales count with
// their experts (a token reads its experts' rows), though a stream slot holds them whole.
bool is_routed(const Module& m, size_t k, std::string_view name) {
  const Role r = k < m.roles.size() ? m.roles[k] : Role::None;
  const bool expert_data = r == Role::ExpGateUpBias || r == Role::ExpDownBias || r == Role::ExpGateUpScales ||
                           r == Role::ExpDownScales || r == Role::ExpGateBias || r == Role::ExpUpBias;
  return is_expert_role(r) || expert_data || (r == Role::None && is_routed_expert(name));
}

// Device-map keys for every tensor of layer `m` outside `experts`: the shortest prefix of each
// tensor's name below the layer that is not an ancestor of the experts module.
std::vector<std::string> sibling_modules(const Checkpoint& ck, const Module& m, const std::string& experts) {
  std::vector<std::string> out;
  const std::string base = m.name + ".";
  for (size_t ti : m.tensors) {
    if (ti >= ck.tensors.size()) continue;
    const std::string& n = ck.tensors[ti].name;
    if (n.rfind(base, 0) != 0 || n.rfind(experts + ".", 0) == 0) continue;
    size_t end = base.size();
    std::string key;
    do {
      end = n.find('.', end + 1);
      key = n.substr(0, end);
    } while (end != std::string::npos && experts.rfind(key + ".", 0) == 0);
    if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

EstimateBasis estimate_basis(const Checkpoint& ck, const ModelLayout& layout) {
  EstimateBasis b;
  b.stored = dominant_dtype(ck);
  b.tied_embeddings = std::none_of(layout.modules.begin(), layout.modules.end(),
                                   [](const Module& m) { return m.kind == ModuleKind::Head && !m.tensors.empty(); });
  std::vector<std::string_view> aliased;  // tensors that alias another ("a" of "a=b")
  for (const auto& p : layout.tied) aliased.push_back(std::string_view(p).substr(0, p.find('=')));
  // Logical parameters per tensor: the layout's (the config's bits), else counted here.
  std::vector<uint64_t> counted;
  if (layout.logical.size() != ck.tensors.size()) counted = logical_parameters(ck, 4);
  const std::vector<uint64_t>& logical = counted.empty() ? layout.logical : counted;
  std::unordered_map<std::string_view, uint64_t> leaf;  // leaf module prefix → parameters
  b.modules.resize(layout.modules.size());
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Module& m = layout.modules[mi];
    EstimateBasis::Part& part = b.modules[mi];
    if (m.component == "mtp") continue;  // charged by no runtime (estimate says so)
    leaf.clear();
    for (size_t k = 0; k < m.tensors.size(); ++k) {
      const size_t ti = m.tensors[k];
      if (ti >= ck.tensors.size()) continue;
      const TensorInfo& t = ck.tensors[ti];
      if (std::find(aliased.begin(), aliased.end(), t.name) != aliased.end()) continue;
      const bool routed = m.kind == ModuleKind::Layer && is_routed(m, k, t.name);
      part.tensors.push_back({ti, logical[ti], quant_role(m, k, t), routed});
      part.parameters += logical[ti];
      part.stored_bytes = add(part.stored_bytes, t.nbytes);
      if (routed) part.stored_expert_bytes = add(part.stored_expert_bytes, t.nbytes);
      if (m.kind == ModuleKind::Layer && k < m.roles.size() && is_expert_part_role(m.roles[k]))
        part.stored_moe_bytes = add(part.stored_moe_bytes, t.nbytes);
      uint64_t& in_leaf = leaf[std::string_view(t.name).substr(0, t.name.rfind('.'))];
      in_leaf += logical[ti];
      part.largest_leaf = std::max(part.largest_leaf, in_leaf);
      if (auto at = t.name.find(".experts."); routed && at != std::string::npos && part.expert_module.empty())
        part.expert_module = t.name.substr(0, at + 8);
    }
    if (!part.expert_module.empty()) part.sibling_modules = sibling_modules(ck, m, part.expert_module);
    part.stream_bytes = stream_slot_bytes(ck, m);
    part.stream_piece_bytes = stream_piece_bytes(ck, m);
  }
  return b;
}

namespace {

// llama.cpp's own flags given with another runtime: said, not silently dropped.
void note_llamacpp_flags(Estimate& e, const Workload& w) {
  if (e.runtime == Runtime::LlamaCpp) return;
  std::vector<std::string> own;
  if (w.ubatch > 0) own.push_back("--ubatch");
  if (w.swa_full) own.push_back("--swa-full");
  if (w.repack == false) own.push_back("--no-repack");
  if (own.empty()) return;
  e.notes.push_back(fmt::format("{} {} llama.cpp's (--runtime llama.cpp): {} has no such setting, and this estimate ignores {}",
                                fmt::join(own, ", "), own.size() == 1 ? "is" : "are", runtime_name(e.runtime),
                                own.size() == 1 ? "it" : "them"));
}

// nunchaku on a GPU: the CUDA backend runs no experts, so a CPU part runs every layer's router
// and routed experts from host memory, mapped from the file (KTransformers' split;
// engine/backend_split.hpp moe_part; is_expert_part_role). The GPU is charged the rest, shared
// experts included (it runs them meanwhile).
void moe_to_host(Estimate& e, const EstimateBasis& basis, const std::vector<Module>& mods) {
  uint64_t host = 0;
  for (ModuleCost& mc : e.modules) {
    const auto at = std::find_if(mods.begin(), mods.end(), [&](const Module& m) { return m.name == mc.name; });
    if (at == mods.end()) continue;
    const EstimateBasis::Part& part = basis.modules[size_t(at - mods.begin())];
    if (part.stored_moe_bytes == 0 || part.stored_bytes == 0) continue;
    // As stored, or in the proportion a --dtype / --quant keeps of the module.
    const uint64_t moe = mc.weight_bytes == part.stored_bytes
                             ? part.stored_moe_bytes
                             : uint64_t((unsigned __int128)mc.weight_bytes * part.stored_moe_bytes / part.stored_bytes);
    mc.weight_bytes -= std::min(mc.weight_bytes, moe);
    mc.cpu_moe_bytes = moe;
    mc.cpu_moe_expert_bytes = std::min(moe, mc.expert_bytes);
    mc.expert_bytes = 0;
    host = add(host, moe);
  }
  if (host == 0) return;
  e.host.push_back({"moe_weights", host, "every layer's router and routed experts: a CPU part runs them from host memory, "
                                         "mapped from the file; the GPU runs attention and the shared experts"});
  e.notes.push_back(fmt::format("nunchaku on a GPU runs each layer's router and routed experts on the CPU ({} in host memory, "
                                "moe_weights) and the rest, shared experts included, on the GPU, as KTransformers splits a MoE",
                                format_bytes(host)));
}

// Weight bytes one decoded token reads: every weight, routed experts at top_k / experts.
uint64_t weights_read_per_token(const std::vector<ModuleCost>& modules, const ModelSpec& s) {
  uint64_t weights = 0, experts = 0;
  for (const auto& mc : modules) weights = add(weights, mc.weight_bytes), experts = add(experts, mc.expert_bytes);
  if (s.num_experts > 0 && s.num_experts_per_tok > 0 && s.num_experts_per_tok <= s.num_experts)
    return weights - experts +
           static_cast<uint64_t>(static_cast<unsigned __int128>(experts) * uint64_t(s.num_experts_per_tok) / uint64_t(s.num_experts));
  return weights;
}

// The GPU's `weights` line: Σ of the modules' weight bytes, split as the workload splits them.
void add_weights_line(Estimate& e, const Workload& w, bool training, uint64_t e_w) {
  uint64_t weights = 0;
  for (const auto& mc : e.modules) weights = add(weights, mc.weight_bytes);
  const uint64_t n = w.ranks();
  const std::string wdesc = w.quant.scheme != QuantScheme::None
                                ? fmt::format("index tensors under {} (embeddings/norms/head as the scheme keeps them)", w.quant.label())
                                : w.dtype ? fmt::format("Σ numel × {} B ({})", e_w, dtype_name(e.weight_dtype))
                                          : "Σ tensor bytes from the index (as stored)";
  if (training && w.zero == 3) {
    // ZeRO-3 partitions parameters; the gathered largest layer is a separate line.
    e.gpu.push_back({"weights", w.offload == Offload::Params ? 0 : weights / n,
                     w.offload == Offload::Params ? "offloaded to CPU (ZeRO-3 offload_param)" : fmt::format("({}) / {} (ZeRO-3)", wdesc, ranks_text(w))});
  } else if (!training && n > 1) {
    e.gpu.push_back({"weights", weights / n, fmt::format("({}) / {} GPUs (model split evenly)", wdesc, n)});
  } else {
    e.gpu.push_back({"weights", weights, wdesc});
  }
}

}  // namespace

Estimate estimate(const Checkpoint& ck, const ModelLayout& layout, const Workload& win) {
  return estimate(ck, layout, win, estimate_basis(ck, layout));
}

Estimate estimate(const Checkpoint& ck, const ModelLayout& layout, const Workload& win, const EstimateBasis& basis) {
  if (!layout.spec) return estimate_weights_only(ck, layout, win);  // any module tree: weights + overheads
  if (const ArchRecord* r = find_record(layout.spec->architecture); r && r->diffusion) {
    // A diffusion transformer: weights and the runtime's fixed costs, the rest named as guessed.
    Estimate e = estimate_weights_only(ck, layout, win);
    e.spec = *layout.spec;
    e.guessed = layout.spec->guessed;
    return e;
  }
  Estimate e;
  e.modules.clear();
  const std::vector<Module>& mods = layout.modules;
  e.spec = resolve_spec(layout, mods);
  const ModelSpec& s = e.spec;
  e.workload = resolve_workload(win, s, ck, &e.context_defaulted);
  const Workload& w = e.workload;
  const bool training = w.mode != Mode::Infer;
  const bool lora = w.mode == Mode::LoRA || w.mode == Mode::QLoRA;

  const DType stored = basis.stored;
  // Quantized Hub stores (FP8 with scales, MXFP4, GPTQ/AWQ, bitsandbytes) compute and cache
  // in the 16-bit dtype the config names (bf16 when it names none), not in the store's type.
  const bool fp8 = stored == DType::F8_E4M3 || stored == DType::F8_E5M2 || stored == DType::F8_E4M3FNUZ ||
                   stored == DType::F8_E5M2FNUZ;
  const bool packed_store = !s.quant_method.empty() || fp8;
  DType config_float = dtype_from_torch(s.dtype).value_or(DType::BF16);
  if (dtype_info(config_float).kind != DTypeKind::Float || elem_bytes(config_float) < 2) config_float = DType::BF16;
  e.weight_dtype = w.dtype.value_or(stored);
  // vLLM's dtype "auto" serves fp32 checkpoints in bf16 (vllm/config/model.py, _resolve_auto_dtype:
  // float32 is downcast to the platform's preferred dtype, bf16 on CUDA GPUs that have it).
  if (!w.dtype && *w.runtime == Runtime::Vllm && stored == DType::F32) e.weight_dtype = DType::BF16;
  // Activations: --dtype, else the stored float type; quantized GGUF computes in F32 (ggml),
  // fp32 checkpoints in F32.
  e.compute_dtype = packed_store && !w.dtype ? config_float
                    : dtype_info(e.weight_dtype).kind == DTypeKind::Float ? e.weight_dtype
                                                                          : DType::F32;
  e.runtime = *w.runtime;
  e.target = w.target;
  note_llamacpp_flags(e, w);
  e.kv_dtype = w.kv_dtype.value_or(ck.format == Format::GGUF || e.runtime == Runtime::LlamaCpp ? DType::F16 : e.compute_dtype);
  if (dtype_info(e.kv_dtype).kind == DTypeKind::Quantized) e.kv_dtype = w.kv_dtype.value_or(DType::F16);
  if (e.runtime == Runtime::Nunchaku) {
    e.kv_dtype = w.kv_dtype.value_or(engine_kv_default(&s));  // run's --kv-dtype default
    require(e.kv_dtype == DType::F32 || e.kv_dtype == DType::F16, "usage.kv_dtype",
            fmt::format("nunchaku's KV cache is f32 or f16, not {}", dtype_name(e.kv_dtype)), "--kv-dtype f16");
    // What `run` would refuse, said here so a "fits" is not read as "runs".
    const std::string why = recipe_for(s).unsupported;
    if (!why.empty() && !training)
      e.notes.push_back(fmt::format("nunchaku's engine does not run this model yet ({}): `run` refuses it; the figures "
                                    "are what it would take",
                                    why));
  }
  e.mixed_precision = training && elem_bytes(e.compute_dtype) < 4;

  QuantContext qc;
  qc.num_layers = s.num_layers;
  qc.gqa = s.num_kv_heads > 0 ? s.num_heads / s.num_kv_heads : 1;
  qc.num_experts = s.num_experts;
  // llama.cpp's LLM_TYPE_70B for quantizing: a "llama" GGUF of 80 layers with grouped KV heads
  // (llama-quant.cpp; mistral and mixtral convert to "llama" too, as the record says).
  const ArchRecord* rec = find_record(s.architecture);
  qc.is_70b = s.num_layers == 80 && s.num_heads != s.num_kv_heads && rec && rec->gguf_arch == "llama";
  qc.tied_embeddings = basis.tied_embeddings;

  std::vector<TrainTensor> trainable;
  const uint64_t e_w = elem_bytes(e.weight_dtype);
  if (basis.modules.size() != mods.size()) throw std::logic_error("estimate(): basis built for another layout");
  for (size_t mi = 0; mi < mods.size(); ++mi) {
    const Module& m = mods[mi];
    if (m.component == "mtp") {  // multi-token-prediction layers: loaded by no runtime by default
      e.notes.push_back(fmt::format("{}: {} parameters of multi-token-prediction layers not charged (no runtime loads them "
                                    "unless speculative decoding asks)", m.name, format_count(m.parameters)));
      continue;
    }
    const EstimateBasis::Part& part = basis.modules[mi];
    ModuleCost mc{m.name, m.kind, m.layer, 0, 0, 0, 0, 0};
    mc.parameters = part.parameters;
    if (!m.component.empty() && !loads_component(*w.runtime, w.images)) {  // in memory of no device
      mc.loaded = false;
      e.parameters += mc.parameters;
      e.modules.push_back(std::move(mc));
      continue;
    }
    e.largest_layer_parameters = std::max(e.largest_layer_parameters, part.largest_leaf);
    // Inference on the weights as stored: the basis's sums (the fix searches re-estimate often).
    const bool as_stored = !w.dtype && w.quant.scheme == QuantScheme::None && w.mode == Mode::Infer;
    if (as_stored) mc.weight_bytes = part.stored_bytes, mc.expert_bytes = part.stored_expert_bytes;
    for (const EstimateBasis::Tensor& bt : as_stored ? std::span<const EstimateBasis::Tensor>() : std::span(part.tensors)) {
      const TensorInfo& t = ck.tensors[bt.index];
      const uint64_t numel = bt.logical;
      const bool convert = w.dtype.has_value() && is_weight_like(t.dtype);
      const uint64_t kept = convert ? mul({numel, e_w}) : t.nbytes;
      const uint64_t tb = w.quant.scheme == QuantScheme::None ? kept : quantized_tensor(w.quant, t, bt.role, m.layer, qc, kept).bytes;
      mc.weight_bytes = add(mc.weight_bytes, tb);
      if (bt.routed) mc.expert_bytes = add(mc.expert_bytes, tb);
      if (w.mode == Mode::Infer) continue;
      const uint64_t in = t.shape.empty() ? 1 : static_cast<uint64_t>(std::max<int64_t>(t.shape.back(), 1));
      const bool weight = is_weight_like(t.dtype) || (numel > 0 && numel != t.numel());  // packed stores are weights
      if (w.mode == Mode::Train && weight) {
        trainable.push_back({mi, numel / in, in, numel, false, t.shape.empty() ? 1 : uint64_t(std::max<int64_t>(t.shape.front(), 1))});
      } else if (lora && bt.role == TensorRole::Linear && is_lora_target(t, w.lora_targets)) {
        const uint64_t out = numel / in, r = static_cast<uint64_t>(w.lora_rank);
        trainable.push_back({mi, r, in, r * in, true, r});      // lora_A: (r, in)
        trainable.push_back({mi, out, r, out * r, true, out});  // lora_B: (out, r)
      }
    }
    mc.expert_module = part.expert_module;
    mc.sibling_modules = part.sibling_modules;
    if (m.kind == ModuleKind::Layer && m.layer >= 0 && m.component.empty() && !training)  // training keeps no KV cache
      mc.kv_bytes = kv_layer_bytes(s, m.layer, w.context, w.batch, e.kv_dtype);
    mc.stream_bytes = part.stream_bytes;
    mc.stream_piece_bytes = part.stream_piece_bytes;
    e.parameters += mc.parameters;
    e.modules.push_back(std::move(mc));
  }
  e.kv_bytes_per_token = kv_cache_bytes_per_token(s, e.kv_dtype);
  e.active_parameters = layout.num_active_parameters > 0 && layout.num_active_parameters <= e.parameters ? layout.num_active_parameters
                                                                                                           : e.parameters;
  e.guessed = s.guessed;
  note_components(e, mods, w);

  e.weight_bytes_per_token = weights_read_per_token(e.modules, s);
  if (e.runtime == Runtime::Nunchaku && w.target == Target::Cuda && !training && !w.no_gpu_placement)
    moe_to_host(e, basis, mods);  // the GPU's weights less the mixtures of experts
  add_weights_line(e, w, training, e_w);
  const uint64_t slack = training ? add_training_terms(e, trainable) : add_runtime_inference(e, ck);
  if (!training && e.runtime == Runtime::Vllm && w.nodes > 1) split_vllm_pipeline(e);
  add_overheads(e, slack);
  add_torch_fused_experts(e, ck);
  add_torch_load_peak(e, ck);
  if (training) adjust_training_peak(e);
  add_torch_exit_peak(e);
  for (const auto& c : e.gpu) e.per_gpu_total = add(e.per_gpu_total, c.bytes);
  for (const auto& c : e.host) e.host_total = add(e.host_total, c.bytes);
  add_cross_node_traffic(e);
  if (e.context_defaulted)
    e.notes.push_back(fmt::format("context defaulted to {} tokens = min(model max {}, {}){}",
                                  w.context - (w.images_in_context ? w.images * w.image_tokens : 0), s.max_context, kDefaultContextCap,
                                  w.images_in_context ? ", before the images" : ""));
  if (s.max_context > 0 && w.context > s.max_context)
    e.notes.push_back(fmt::format("warning: --context {} is above the model's maximum ({} positions): the model was not trained "
                                  "that long{}", w.context, s.max_context,
                                  e.runtime == Runtime::Vllm ? ", and vLLM refuses a longer --max-model-len" : ""));
  return e;
}

Verdict verdict(const Estimate& e, uint64_t vram) {
  Verdict v;
  v.vram = vram;
  v.budget = e.usable_fraction >= 1.0
                 ? vram
                 : std::min(vram, add(static_cast<uint64_t>(static_cast<long double>(vram) * e.usable_fraction), e.outside_budget));
  v.fits = e.per_gpu_total <= v.budget;
  v.margin = v.fits ? v.budget - e.per_gpu_total : e.per_gpu_total - v.budget;
  const std::string of = v.budget == vram ? "" : fmt::format(" (of the {} {} uses)", format_bytes(v.budget), runtime_name(e.runtime));
  v.text = v.fits ? fmt::format("fits, {} headroom{}", format_bytes(v.margin), of) : fmt::format("OOM by {}{}", format_bytes(v.margin), of);
  if (const std::string why = rank_breakdown(e); !why.empty()) v.text += "; " + why;
  // A fit that rests on guessed terms (no record for the family, a part not modelled) is
  // not a verdict to rely on: say so in the verdict itself.
  if (v.fits && !e.guessed.empty())
    v.text += fmt::format(" (unconfirmed: {} guessed, see the 'guessed' lines)", plural(e.guessed.size(), "term"));
  return v;
}

std::vector<Runtime> runtimes_for(Mode m) {
  if (m == Mode::Infer) return {Runtime::Nunchaku, Runtime::Transformers, Runtime::Vllm, Runtime::LlamaCpp};
  return {Runtime::Transformers, Runtime::DeepSpeed, Runtime::Fsdp};
}

}  // namespace nunchaku
