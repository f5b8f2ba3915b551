// FSDP's per-rank model states (fsdp.hpp; formulas in docs/estimate.md, "FSDP").
#include "memory/fsdp.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "memory/multinode.hpp"

namespace nunchaku {

using estimate_detail::add;
using estimate_detail::mul;

std::string_view fsdp_strategy_name(FsdpStrategy s) { return s == FsdpStrategy::Hybrid ? "hybrid" : "full"; }

FsdpStrategy parse_fsdp_strategy(std::string_view s) {
  if (s == "full" || s == "full_shard" || s == "FULL_SHARD") return FsdpStrategy::Full;
  if (s == "hybrid" || s == "hybrid_shard" || s == "HYBRID_SHARD") return FsdpStrategy::Hybrid;
  throw Error("usage.fsdp_strategy", fmt::format("--fsdp-strategy: unknown strategy '{}'", s),
              {.hint = "full (shard over every rank of every node) or hybrid (shard within a node, replicate across nodes)"});
}

uint64_t fsdp_shard_ranks(const Workload& w) {
  return w.fsdp == FsdpStrategy::Hybrid ? uint64_t(std::max(1, w.gpus)) : w.ranks();
}

uint64_t fsdp_local_numel(uint64_t numel, uint64_t dim0, uint64_t shard_ranks) {
  if (numel == 0) return 0;
  if (dim0 == 0 || numel % dim0 != 0) dim0 = numel;  // no usable shape: one flat dimension
  const uint64_t s = std::max<uint64_t>(1, shard_ranks);
  return mul({(dim0 + s - 1) / s, numel / dim0});
}

void check_fsdp_workload(const Workload& w, Runtime r) {
  if (r != Runtime::Fsdp) {
    if (w.fsdp != FsdpStrategy::Full)
      throw Error("usage.fsdp_strategy", "--fsdp-strategy is FSDP's sharding", {.hint = "add --runtime fsdp"});
    return;
  }
  if (w.mode == Mode::Infer)
    throw Error("usage.runtime_mode", "--runtime fsdp is modelled for training only",
                {.hint = "add --mode train, lora or qlora, or pick an inference runtime"});
  if (w.target != Target::Cuda)
    throw Error("usage.device", "--runtime fsdp with --device cpu: FSDP is modelled on CUDA GPUs (NCCL ranks)",
                {.hint = "leave --device out, or --runtime transformers for one CPU process"});
  if (w.offload == Offload::Optimizer)
    throw Error("usage.offload", "--offload optimizer: FSDP's CPU offload (CPUOffloadPolicy) moves the parameters, their "
                                 "gradients and so the optimizer states and step together",
                {.hint = "--offload params (FSDP's CPU offload), or --runtime deepspeed --zero 2 --offload optimizer"});
  if (w.fsdp == FsdpStrategy::Hybrid && w.gpus < 2)
    throw Error("usage.fsdp_strategy", "--fsdp-strategy hybrid shards within a node: it needs --gpus 2 or more per node",
                {.hint = "--fsdp-strategy full, or more GPUs per node"});
}

std::string fsdp_layout_text(const Workload& w) {
  if (w.fsdp == FsdpStrategy::Hybrid)
    return fmt::format("FSDP hybrid shard ({} of a node, replicated over {})", plural(uint64_t(std::max(1, w.gpus)), "GPU"),
                       plural(uint64_t(std::max(1, w.nodes)), "node"));
  return fmt::format("FSDP full shard over {}", ranks_text(w));
}

std::vector<FsdpUnit> fsdp_units(const Estimate& e) {
  const uint64_t el = estimate_detail::elem_bytes(e.compute_dtype);
  const bool full = e.workload.mode == Mode::Train;
  const bool head = std::any_of(e.modules.begin(), e.modules.end(), [](const ModuleCost& m) { return m.kind == ModuleKind::Head; });
  std::vector<FsdpUnit> units;
  FsdpUnit embed{"embedding"}, tail{head ? "norm + head" : "norm + tied embedding/head"}, root{"root"};
  for (const auto& m : e.modules) {
    // Gathered in the compute dtype (MixedPrecisionPolicy.param_dtype); frozen weights (LoRA's
    // base) as they are stored; their gradients only for what trains.
    const uint64_t g = add(full ? 0 : m.weight_bytes, mul({full ? m.parameters : m.trainable_parameters, el}));
    const uint64_t gr = mul({m.trainable_parameters, el});
    FsdpUnit* u = nullptr;
    if (m.kind == ModuleKind::Layer) u = &units.emplace_back(FsdpUnit{m.name});
    else if (m.kind == ModuleKind::Embedding) u = head ? &embed : &tail;
    else if (m.kind == ModuleKind::FinalNorm || m.kind == ModuleKind::Head) u = &tail;
    else u = &root;
    u->parameters = add(u->parameters, m.parameters);
    u->gathered_bytes = add(u->gathered_bytes, g);
    u->grad_bytes = add(u->grad_bytes, gr);
  }
  for (FsdpUnit* u : {&embed, &tail, &root})
    if (u->parameters > 0) units.push_back(*u);
  return units;
}

namespace {

// The fsdp_unsharded line, the all-gathered units at their peak (docs/estimate.md, "FSDP";
// the phases as torch's FSDPMemTracker files FSDP2's tensors, scripts/measure_fsdp_peak.py).
// A layer's post-backward holds its unsharded parameters and gradients, the next unit's
// all-gather buffer (prefetched, not yet copied out: the embedding, or the tied tail, before
// layer 0) and the previous layer's reduce-scatter input (one kept for overlap). Backward's
// start holds the tail (norm + head, not resharded after forward: its parameters and its
// forward all-gather buffer) and its gradients; backward's end the embedding's parameters and
// gradients beside layer 0's reduce-scatter input. The root's leftovers stay gathered.
Component unsharded_units(const Estimate& e) {
  FsdpUnit layer{"-"}, embed, tail, root;
  for (const auto& u : fsdp_units(e)) {
    if (u.name == "root") root = u;
    else if (u.name == "embedding") embed = u;
    else if (u.name.rfind("norm + ", 0) == 0) tail = u;
    else {
      if (u.gathered_bytes > layer.gathered_bytes) layer.name = u.name, layer.gathered_bytes = u.gathered_bytes;
      layer.grad_bytes = std::max(layer.grad_bytes, u.grad_bytes);
    }
  }
  const bool tied = tail.name == "norm + tied embedding/head";
  const FsdpUnit& first = tied ? tail : embed;  // gathered last in backward, for the embedding
  const uint64_t U = layer.gathered_bytes, Ug = layer.grad_bytes;
  const uint64_t mid = add(add(U, mul({2, Ug})), std::max(U, first.gathered_bytes));
  const uint64_t start = add(mul({2, tail.gathered_bytes}), tail.grad_bytes);
  const uint64_t end = add(add(first.gathered_bytes, first.grad_bytes), Ug);
  const uint64_t peak = std::max({mid, start, end});
  std::string phase;
  if (peak == mid)
    phase = fmt::format("a layer's post-backward: its parameters {0} + its gradients {1} + the next unit's all-gather buffer "
                        "{2} + the previous layer's reduce-scatter input {1}",
                        format_bytes(U), format_bytes(Ug), format_bytes(std::max(U, first.gathered_bytes)));
  else if (peak == start)
    phase = fmt::format("backward's start: the tail (norm + head) {0}, its forward all-gather buffer {0} and its gradients {1}",
                        format_bytes(tail.gathered_bytes), format_bytes(tail.grad_bytes));
  else
    phase = fmt::format("backward's end: the embedding {} + its gradients {} + layer 0's reduce-scatter input {}",
                        format_bytes(first.gathered_bytes), format_bytes(first.grad_bytes), format_bytes(Ug));
  const uint64_t R = add(root.gathered_bytes, root.grad_bytes);
  return {"fsdp_unsharded", add(peak, R),
          fmt::format("all-gathered units in {} at their peak, {} (largest layer {}){}", dtype_name(e.compute_dtype), phase, layer.name,
                      R > 0 ? fmt::format(" + the root's leftovers {} (kept gathered)", format_bytes(R)) : "")};
}

}  // namespace

void add_fsdp_model_states(Estimate& e, const std::vector<estimate_detail::TrainTensor>& trainable,
                           const std::vector<uint64_t>& optimizer) {
  using estimate_detail::elem_bytes;
  const Workload& w = e.workload;
  const uint64_t S = fsdp_shard_ranks(w), el = elem_bytes(e.compute_dtype);
  const bool off = w.offload != Offload::None;
  // accelerate's fsdp2_prepare_model upcasts every trainable parameter to fp32 when
  // mixed_precision is set (MixedPrecisionPolicy casts the all-gathered copy to param_dtype);
  // the sharded gradients take the sharded parameter's dtype (_cast_and_view_sharded_grads).
  const uint64_t pb = e.mixed_precision ? 4 : el;
  uint64_t params = 0, grads = 0, opt = 0, trained_stored = 0, numel = 0, local_numel = 0;
  for (size_t i = 0; i < trainable.size(); ++i) {
    const auto& t = trainable[i];
    const uint64_t local = fsdp_local_numel(t.numel, t.dim0 > 0 ? t.dim0 : t.rows, S);
    const uint64_t b = t.adapter ? 4 : pb;  // PEFT's adapters are fp32
    params = add(params, mul({local, b}));
    grads = add(grads, mul({local, b}));
    // The optimizer's states are made like the rank's local tensor (zeros_like of the DTensor).
    const uint64_t ob = i < optimizer.size() ? optimizer[i] : 0;
    opt = add(opt, t.numel == 0 ? 0 : uint64_t((unsigned __int128)ob * local / t.numel));
    if (!t.adapter) trained_stored = add(trained_stored, mul({t.numel, elem_bytes(e.weight_dtype)}));
    numel = add(numel, t.numel);
    local_numel = add(local_numel, local);
  }
  uint64_t stored = 0;
  for (const auto& m : e.modules) stored = add(stored, m.weight_bytes);
  const uint64_t frozen = stored > trained_stored ? stored - trained_stored : 0;
  const uint64_t frozen_local = (frozen + S - 1) / S;
  const std::string over = w.fsdp == FsdpStrategy::Hybrid ? fmt::format("{} GPUs of a node", S) : ranks_text(w);
  const std::string pad = fmt::format("Σ ceil(dim0 / {}) × (numel / dim0) = {} of {} elements (dim 0 padded to a multiple of {})",
                                      S, local_numel, numel, S);
  const std::string moved = "offloaded to host memory (FSDP CPUOffloadPolicy: the sharded parameters, their gradients "
                            "and so the optimizer states and step live on the CPU)";
  for (auto& c : e.gpu)
    if (c.name == "weights") {
      const uint64_t on = add(params, frozen_local);
      c.bytes = off ? 0 : on;
      c.formula = off ? moved
                      : fmt::format("the rank's shards over {}: trainable {} × {} B{}{}", over, pad, pb,
                                    pb == 4 && el < 4 ? " (fp32: accelerate upcasts trainable parameters under mixed precision)" : "",
                                    frozen > 0 ? fmt::format(" + frozen {} / {}", format_bytes(frozen), S) : "");
    }
  if (w.mode == Mode::QLoRA)
    e.notes.push_back("FSDP + QLoRA: the 4-bit base is sharded as charged only with a float bnb_4bit_quant_storage (e.g. "
                      "bf16); with bitsandbytes' uint8 default accelerate leaves those weights out of fully_shard and every "
                      "rank holds the whole 4-bit base");
  e.heap_retained = 0;
  e.heap_retained_formula = "none (FSDP's sharded gradients)";
  e.gpu.push_back({"gradients", off ? 0 : grads,
                   off ? moved : fmt::format("sharded gradients in the parameters' dtype, {} × {} B (reduce-scattered, then cast)", pad, pb)});
  e.gpu.push_back({"master_weights", 0,
                   e.mixed_precision ? "none: the fp32 sharded parameters (the weights line) are the master copy; compute uses the "
                                       "all-gathered copy in the compute dtype"
                                     : "none (weights already fp32 or frozen)"});
  e.gpu.push_back({"optimizer_states", off ? 0 : opt,
                   off ? moved : fmt::format("{} states of the rank's shards: {} of {} elements", optimizer_name(w.optimizer), local_numel, numel)});
  e.gpu.push_back(unsharded_units(e));
  if (off) {
    const uint64_t g_node = uint64_t(std::max(1, w.gpus));
    const uint64_t rank = add(add(add(params, frozen_local), grads), opt);
    e.host.push_back({"host_model_states", mul({g_node, rank}),
                      fmt::format("{} ranks of the node × (shards {} + gradients {} + optimizer states {}) each, pinned (FSDP "
                                  "CPUOffloadPolicy)", g_node, format_bytes(add(params, frozen_local)), format_bytes(grads),
                                  format_bytes(opt))});
  }
}

nlohmann::json fsdp_json(const Estimate& e) {
  if (e.runtime != Runtime::Fsdp) return nullptr;
  const Workload& w = e.workload;
  const uint64_t S = fsdp_shard_ranks(w);
  uint64_t largest = 0;
  for (const auto& u : fsdp_units(e)) largest = std::max(largest, u.parameters);
  return {{"strategy", fsdp_strategy_name(w.fsdp)},
          {"shard_ranks", S},
          {"replicas", w.ranks() / S},
          {"cpu_offload", w.offload != Offload::None},
          {"largest_unit_num_parameters", largest}};
}

}  // namespace nunchaku
