// Exports of a plan for accelerate, llama.cpp, vLLM and DeepSpeed (formulas in docs/plan.md).
#include "memory/plan_export.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "memory/multinode.hpp"
#include "model/arch/record.hpp"

namespace nunchaku {
namespace {

nlohmann::json device_value(const Device& d) {
  if (d.kind == Device::Kind::Cuda) return d.index;
  return d.kind == Device::Kind::Cpu ? "cpu" : "disk";
}

}  // namespace

nlohmann::json accelerate_device_map(const DevicePlan& p, const Estimate& e, const ModelLayout& layout) {
  // Keys are modules as transformers 5 builds them: a multimodal checkpoint saved under the
  // older names ("language_model.model.layers.3", "vision_tower") maps its in-memory modules
  // ("model.language_model.layers.3", "model.vision_tower"), by the wrapper record's renames.
  auto key = [&](const std::string& module) {
    if (!layout.spec) return module;
    std::string k = transformers_name(*layout.spec, module + ".");
    k.pop_back();
    return k;
  };
  nlohmann::json j = nlohmann::json::object();
  std::optional<Device> first_layer;
  for (size_t i = 0; i < e.modules.size() && i < p.module_device.size(); ++i) {
    j[key(e.modules[i].name)] = device_value(p.module_device[i]);
    if (e.modules[i].kind == ModuleKind::Layer && !first_layer) first_layer = p.module_device[i];
  }
  // A head tied to the embedding is not a tensor of the file, but from_pretrained needs it mapped.
  for (const auto& t : layout.tied) {
    const std::string alias = t.substr(0, t.find('=')), target = t.substr(t.find('=') + 1);
    const std::string alias_mod = key(alias.substr(0, alias.rfind('.'))), target_mod = key(target.substr(0, target.rfind('.')));
    if (!j.contains(alias_mod) && j.contains(target_mod)) j[alias_mod] = j[target_mod];
  }
  if (has_hf_rotary_module(layout) && first_layer && !j.contains("model.rotary_emb")) j["model.rotary_emb"] = device_value(*first_layer);
  // Routed experts apart from their layer: the layer's other parts and its experts module
  // (transformers 5 fuses a layer's experts into one) as keys of their own.
  for (size_t i = 0; i < e.modules.size() && i < p.expert_device.size(); ++i) {
    const ModuleCost& m = e.modules[i];
    if (m.expert_module.empty() || p.expert_device[i] == p.module_device[i]) continue;
    j.erase(key(m.name));
    for (const auto& k : m.sibling_modules) j[key(k)] = device_value(p.module_device[i]);
    j[key(m.expert_module)] = device_value(p.expert_device[i]);
  }
  return j;
}

nlohmann::json accelerate_device_map(const AccelerateMap& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, d] : m) j[k] = device_value(d);
  return j;
}

int64_t export_context(const ModelSpec& spec, int64_t context, Runtime r, std::vector<std::string>& notes) {
  if (spec.max_context <= 0 || context <= spec.max_context) return context;
  if (r == Runtime::Vllm)
    notes.push_back(fmt::format("--max-model-len clamped from {} to the model's max_position_embeddings {}: vLLM refuses a "
                                "longer one unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (and rope scaling) is set; planned at {}",
                                context, spec.max_context, spec.max_context));
  else
    notes.push_back(fmt::format("-c clamped from {} to the model's maximum {} (n_ctx_train): longer contexts are "
                                "positions the model was never trained on; planned at {}",
                                context, spec.max_context, spec.max_context));
  return spec.max_context;
}

namespace {

// Routed experts kept off the GPUs, in llama.cpp's terms: --cpu-moe (all), --n-cpu-moe N (the
// first N layers' experts: exact when the plan's CPU experts are every expert layer below N),
// else -ot with the layers named (llama.cpp applies the first pattern that matches a tensor).
// Its own --fit is turned off so it does not move tensors of the plan.
void moe_args(const DevicePlan& p, const Estimate& e, LlamaCppArgs& a) {
  const std::vector<int64_t> cpu = cpu_expert_layers(p, e);
  if (cpu.empty()) return;
  std::vector<int64_t> expert_layers;
  for (const auto& m : e.modules)
    if (m.kind == ModuleKind::Layer && m.expert_bytes > 0) expert_layers.push_back(m.layer);
  std::sort(expert_layers.begin(), expert_layers.end());
  const int64_t n = cpu.back() + 1;
  const size_t below = static_cast<size_t>(std::count_if(expert_layers.begin(), expert_layers.end(), [&](int64_t l) { return l < n; }));
  if (cpu.size() == expert_layers.size()) {
    a.command += " --cpu-moe";
    a.cpu_moe_layers = -1;
  } else if (below == cpu.size()) {
    a.command += fmt::format(" --n-cpu-moe {}", n);
    a.cpu_moe_layers = static_cast<int>(n);
  } else {
    a.command += fmt::format(" -ot \"blk\\.({})\\.ffn_(up|down|gate)_(ch|)exps=CPU\"", fmt::join(cpu, "|"));
  }
  a.command += " -fit off";
  a.notes.push_back("-fit off keeps llama.cpp's own fitting from moving tensors of this plan");
}

}  // namespace

LlamaCppArgs llama_cpp_args(const DevicePlan& p, const Estimate& e) {
  LlamaCppArgs a;
  size_t layers = 0;
  bool head_on_gpu = false, all_layers_on_gpu = true;
  std::vector<size_t> per_gpu;
  for (size_t i = 0; i < e.modules.size() && i < p.module_device.size(); ++i) {
    const auto& d = p.module_device[i];
    const bool gpu = d.kind == Device::Kind::Cuda;
    if (e.modules[i].kind == ModuleKind::Layer) {
      layers++;
      if (gpu) {
        if (per_gpu.size() <= static_cast<size_t>(d.index)) per_gpu.resize(static_cast<size_t>(d.index) + 1, 0);
        per_gpu[static_cast<size_t>(d.index)]++;
      } else {
        all_layers_on_gpu = false;
      }
    }
    if (e.modules[i].kind == ModuleKind::Head && gpu) head_on_gpu = true;
  }
  size_t gpu_layers = 0;
  for (size_t n : per_gpu) gpu_layers += n;
  a.n_gpu_layers = static_cast<int>(gpu_layers + (all_layers_on_gpu && layers > 0 && head_on_gpu ? 1 : 0));
  a.command = fmt::format("-ngl {}", a.n_gpu_layers);
  if (per_gpu.size() > 1) {
    a.tensor_split = per_gpu;
    a.command += fmt::format(" --tensor-split {}", fmt::join(per_gpu, ","));
  }
  a.notes.push_back("llama.cpp puts the last -ngl layers on the GPUs and keeps token embeddings in host memory; "
                    "the plan counted the embedding where it placed it, so llama.cpp needs no more VRAM than planned");
  const int64_t ctx = export_context(e.spec, e.workload.context, Runtime::LlamaCpp, a.notes);
  // llama.cpp's -c is the cache of all -np slots together.
  if (ctx > 0) a.command += fmt::format(" -c {}", ctx * std::max<int64_t>(1, e.workload.batch));
  if (e.workload.batch > 1) a.command += fmt::format(" -np {}", e.workload.batch);
  moe_args(p, e, a);
  return a;
}

std::string format_ranges(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (j > i ? fmt::format("{}-{}", v[i], v[j]) : fmt::format("{}", v[i]));
    i = j + 1;
  }
  return out;
}

std::optional<ExpertOffload> vllm_expert_offload(const Estimate& e, int tp, int pp, uint64_t short_by) {
  std::vector<uint64_t> per_layer(static_cast<size_t>(std::max<int64_t>(e.spec.num_layers, 0)), 0);
  for (const auto& m : e.modules)
    if (m.kind == ModuleKind::Layer && m.layer >= 0 && static_cast<size_t>(m.layer) < per_layer.size())
      per_layer[static_cast<size_t>(m.layer)] += m.expert_bytes / static_cast<uint64_t>(std::max(tp, 1));
  ExpertOffload x;
  size_t first = 0;
  for (int64_t count : vllm_pp_partition(e.spec.num_layers, pp)) {  // each stage walks its own layers
    uint64_t moved = 0;
    for (size_t l = first; l < first + static_cast<size_t>(count) && moved < short_by; ++l) {
      if (per_layer[l] == 0) continue;  // a dense layer: no parameter matches
      moved += per_layer[l];
      if (first == 0) x.layers.push_back(static_cast<int64_t>(l));
    }
    if (moved < short_by) return std::nullopt;
    x.bytes = std::max(x.bytes, moved);
    first += static_cast<size_t>(count);
  }
  return x;
}

namespace {

// GiB with six decimals, rounded down, trailing zeros dropped ("21.375"): vLLM takes
// int(GiB * 2^30) bytes, which is then at most 1074 bytes short of `bytes` (less than the last
// parameter of a layer's experts, so the walk still takes that layer whole and no more).
std::string gib_floor(uint64_t bytes) {
  const uint64_t micro = static_cast<uint64_t>((static_cast<unsigned __int128>(bytes) * 1000000) >> 30);
  std::string s = fmt::format("{}.{:06d}", micro / 1000000, micro % 1000000);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

void vllm_offload(const Estimate& e, uint64_t short_by, VllmArgs& v) {
  if (short_by == 0) return;
  const bool moe = std::any_of(e.modules.begin(), e.modules.end(), [](const ModuleCost& m) { return m.expert_bytes > 0; });
  const std::optional<ExpertOffload> x = moe ? vllm_expert_offload(e, v.tensor_parallel, v.pipeline_parallel, short_by) : std::nullopt;
  if (!x) {
    v.cpu_offload_gb = std::ceil(static_cast<double>(short_by) / double(1ull << 30) * 10) / 10;
    v.cpu_offload_bytes = static_cast<uint64_t>(v.cpu_offload_gb * double(1ull << 30));
    v.command += fmt::format(" --cpu-offload-gb {:.1f}", v.cpu_offload_gb);
    if (moe)
      v.notes.push_back(fmt::format("the routed experts of every layer are less than the {} per GPU to offload: no "
                                    "--cpu-offload-params experts; vLLM then moves parameters in declaration order from "
                                    "the first layer, attention included",
                                    format_bytes(short_by)));
    return;
  }
  v.experts_only = true;
  v.expert_layers = x->layers;
  v.cpu_offload_bytes = x->bytes;
  const std::string gb = gib_floor(x->bytes);
  v.cpu_offload_gb = std::stod(gb);
  v.command += fmt::format(" --cpu-offload-gb {} --cpu-offload-params experts", gb);
  v.notes.push_back(fmt::format(
      "--cpu-offload-params experts: vLLM moves only parameters with an `experts` name segment (the routed experts; "
      "shared experts and the router stay), layer by layer from the first, until --cpu-offload-gb is reached: the experts "
      "of layers {}{} ({} per GPU) stay in pinned host memory and the GPU reads the routed ones over PCIe at every step "
      "(llama.cpp's --n-cpu-moe computes them on the CPU instead)",
      format_ranges(x->layers), v.pipeline_parallel > 1 ? " on the first stage (each stage its own first layers')" : "",
      format_bytes(x->bytes)));
  v.notes.push_back(fmt::format("--cpu-offload-params is in vLLM since PR #34535 (February 2026); an older vLLM refuses it: "
                                "without it, --cpu-offload-gb {} moves the first layers' parameters in declaration order, "
                                "attention first, which every token reads over PCIe",
                                gb));
}

VllmArgs vllm_args(const Estimate& e, const std::vector<uint64_t>& vram, const std::vector<uint64_t>& device_total) {
  VllmArgs v;
  const int n = std::max<int>(1, static_cast<int>(vram.size()));
  const int64_t heads = e.spec.num_heads;
  if (heads > 0 && heads % n != 0) {
    v.pipeline_parallel = n;
    v.notes.push_back(fmt::format("{} attention heads do not divide over {} GPUs: pipeline parallel instead of tensor parallel", heads, n));
  } else {
    v.tensor_parallel = n;
  }
  v.max_model_len = export_context(e.spec, e.workload.context, Runtime::Vllm, v.notes);
  uint64_t weights = 0, kv = 0, over = 0;
  for (const auto& m : e.modules) weights += m.weight_bytes, kv += m.kv_bytes;
  for (const auto& c : e.gpu)
    if (c.overhead) over += c.bytes;
  const uint64_t vram_min = vram.empty() ? 0 : *std::min_element(vram.begin(), vram.end());
  const uint64_t budget = vram.empty() ? 0 : verdict(e, vram_min).budget;  // as estimate's verdict
  const uint64_t need = weights / n + kv / n + e.activation_bytes + e.logits_bytes + over;
  const uint64_t short_by = need > budget ? need - budget : 0;
  if (!device_total.empty() && device_total.front() > 0) {
    // vLLM's share excludes what its worker made before measuring (CUDA context, cuBLAS).
    const uint64_t share = vram_min > e.outside_budget ? vram_min - e.outside_budget : 0;
    v.gpu_memory_utilization = std::min(0.99, std::floor(double(share) / double(device_total.front()) * 100) / 100);
  } else {
    v.notes.push_back(fmt::format("device size unknown here: --gpu-memory-utilization {:.2f} (vLLM's default) assumes the --vram "
                                  "budget is the whole card",
                                  v.gpu_memory_utilization));
  }
  // The profile run's size depends on the GPU in vLLM (EngineArgs.get_batch_defaults): pin
  // the one the estimate charged.
  v.command = fmt::format("--tensor-parallel-size {} --pipeline-parallel-size {} --max-model-len {} --gpu-memory-utilization {:.2f} "
                          "--max-num-batched-tokens {} --max-num-seqs {}",
                          v.tensor_parallel, v.pipeline_parallel, v.max_model_len, v.gpu_memory_utilization, kVllmMaxNumBatchedTokens,
                          kVllmMaxNumSeqs);
  vllm_offload(e, short_by, v);
  v.notes.push_back(fmt::format("vLLM must hold KV for at least one {}-token sequence: planned {} of KV per GPU for batch {}",
                                v.max_model_len, format_bytes(kv / n), e.workload.batch));
  return v;
}

nlohmann::json deepspeed_config(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram) {
  if (w.mode == Mode::Infer)
    throw Error("usage.format", "--format deepspeed is for training: add --mode train, lora or qlora");
  const std::pair<int, Offload> order[] = {{0, Offload::None}, {1, Offload::None},      {2, Offload::None},    {2, Offload::Optimizer},
                                           {3, Offload::None}, {3, Offload::Optimizer}, {3, Offload::Params}};
  nlohmann::json out;
  for (const auto& [z, off] : order) {
    Workload t = w;
    t.runtime = Runtime::DeepSpeed;
    t.zero = z;
    t.offload = off;
    if (w.zero > z || (w.zero == z && w.offload != Offload::None && off == Offload::None)) continue;  // not below what was asked
    Estimate e = estimate(ck, layout, t);
    nlohmann::json zero = {{"stage", z}};
    if (off != Offload::None) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (off == Offload::Params) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
    // train_batch_size = micro-batch × accumulation × every rank of every node (DeepSpeed asserts it).
    nlohmann::json cfg = {{"train_batch_size", t.batch * int64_t(t.ranks())},
                          {"train_micro_batch_size_per_gpu", t.batch},
                          {"gradient_accumulation_steps", 1},
                          {"zero_optimization", zero}};
    if (e.compute_dtype == DType::BF16) cfg["bf16"] = {{"enabled", true}};
    if (e.compute_dtype == DType::F16) cfg["fp16"] = {{"enabled", true}};
    out = {{"config", cfg}, {"fits", e.per_gpu_total <= vram}, {"per_gpu_total", e.per_gpu_total}, {"host_total", e.host_total},
           {"zero", z}, {"offload", offload_name(off)}, {"why", rank_breakdown(e)}};
    if (e.per_gpu_total <= vram) break;
  }
  return out;
}

}  // namespace nunchaku
