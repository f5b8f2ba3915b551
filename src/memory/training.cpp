// Training terms of estimate(): gradients, master weights, optimizer states,
// LoRA adapters, ZeRO partitioning/offload (DeepSpeed's model-state estimators)
// and saved activations (Korthikanti et al. 2022). Formulas: docs/estimate.md.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/units.hpp"
#include "memory/estimate_detail.hpp"
#include "memory/fsdp.hpp"
#include "memory/multinode.hpp"
#include "model/recipe.hpp"

namespace nunchaku::estimate_detail {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;

// fp32 optimizer state bytes of one trainable tensor.
uint64_t optimizer_bytes(Optimizer o, const TrainTensor& t) {
  switch (o) {
    case Optimizer::AdamW: return mul({8, t.numel});  // exp_avg + exp_avg_sq
    case Optimizer::AdamW8bit:
      // bitsandbytes 8-bit blockwise: two uint8 states + one fp32 absmax per 256-element block
      // each; tensors under min_8bit_size (4096) keep fp32 states.
      if (t.numel < 4096) return mul({8, t.numel});
      return add(mul({2, t.numel}), mul({2, 4, (t.numel + 255) / 256}));
    case Optimizer::SGD: return 0;
    case Optimizer::SGDMomentum: return mul({4, t.numel});
    case Optimizer::Lion: return mul({4, t.numel});
    case Optimizer::Adafactor:
      // HF Adafactor (beta1=None): factored second moment, row + column vectors for matrices.
      if (t.rows > 1 && t.cols > 1) return mul({4, add(t.rows, t.cols)});
      return mul({4, t.numel});
  }
  return 0;
}

// Host memory per node, DeepSpeed's cpu_mem (deepspeed 0.19: stage_1_and_2.py
// estimate_zero2_model_states_mem_needs, stage3.py estimate_zero3_model_states_mem_needs
// with zero_init, additional_buffer_factor 1.5). `states`: fp32 master + optimizer + fp32
// gradient bytes (16 B/param for AdamW mixed precision; DeepSpeed's 16), P trainable
// parameters, L the largest layer's. ZeRO-3's offloaded states are spread over the nodes
// (DeepSpeed's gpus_factor 1/num_nodes); its other terms are per GPU of one node, except
// ZeRO-2 offload's 4 B × every rank (total_gpus in DeepSpeed's formula).
void add_host_model_states(Estimate& e, uint64_t states, uint64_t P, uint64_t L) {
  const Workload& w = e.workload;
  const uint64_t g = static_cast<uint64_t>(w.gpus), nodes = static_cast<uint64_t>(w.nodes), n = w.ranks();
  const int z = w.zero;
  auto x15 = [](uint64_t v) { return v / 2 * 3 + (v % 2) * 3 / 2; };  // floor(1.5 v)
  const std::string per_node = nodes > 1 ? fmt::format(" / {} nodes", nodes) : "";
  const std::string node_gpus = nodes > 1 ? fmt::format("{} GPUs per node", g) : fmt::format("{} GPUs", g);
  if (z == 1 || z == 2) {
    if (w.offload != Offload::None)
      e.host.push_back({"host_model_states", x15(std::max(mul({4, n, P}), states)),
                        fmt::format("max(4 × {} × P, {} B of fp32 states) × 1.5 (DeepSpeed estimate_zero2, cpu_offload{})", ranks_text(w), states,
                                    nodes > 1 ? ": its formula counts every node's GPUs" : "")});
    else
      e.host.push_back({"host_model_states", x15(mul({4, g, P})), fmt::format("P × 4 × {} × 1.5 (DeepSpeed estimate_zero2)", node_gpus)});
  } else if (z == 3) {
    if (w.offload == Offload::Params)
      e.host.push_back({"host_model_states", x15(add(mul({2, P}), states)) / nodes,
                        fmt::format("(2 B params + fp32 states) × P × 1.5{} (DeepSpeed estimate_zero3, offload params)", per_node)});
    else if (w.offload == Offload::Optimizer)
      e.host.push_back({"host_model_states", x15(states) / nodes,
                        fmt::format("fp32 states × 1.5{} (DeepSpeed estimate_zero3, offload optimizer)", per_node)});
    else
      e.host.push_back({"host_model_states", x15(mul({4, L, g})),
                        fmt::format("largest layer × 4 B × {} × 1.5 (DeepSpeed estimate_zero3)", node_gpus)});
  }
}

}  // namespace

uint64_t add_training_terms(Estimate& e, const std::vector<TrainTensor>& trainable) {
  const Workload& w = e.workload;
  const ModelSpec& s = e.spec;
  const uint64_t n = w.ranks();  // DeepSpeed partitions over every rank of every node
  const int z = w.zero;
  const bool off_opt = w.offload != Offload::None;  // params offload implies optimizer offload
  const uint64_t el = elem_bytes(e.compute_dtype);

  uint64_t base_params = 0, adapter_params = 0, grads16 = 0, master = 0, opt = 0, fp32_grads = 0, adapters = 0;
  std::vector<uint64_t> tensor_opt;  // per trainable tensor (FSDP shards each)
  tensor_opt.reserve(trainable.size());
  for (const auto& t : trainable) {
    uint64_t tb = 0;
    const uint64_t ob = optimizer_bytes(w.optimizer, t);
    tensor_opt.push_back(ob);
    opt = add(opt, ob);
    tb = add(tb, ob);
    if (t.adapter) {
      adapter_params = add(adapter_params, t.numel);
      adapters = add(adapters, mul({4, t.numel}));  // PEFT keeps adapters in fp32
      grads16 = add(grads16, mul({4, t.numel}));    // their grads are fp32 too
      tb = add(tb, mul({8, t.numel}));
    } else {
      base_params = add(base_params, t.numel);
      grads16 = add(grads16, mul({el, t.numel}));
      tb = add(tb, mul({el, t.numel}));
      if (e.mixed_precision) {
        master = add(master, mul({4, t.numel}));
        tb = add(tb, mul({4, t.numel}));
        // DeepSpeed keeps fp32 gradients at every stage: ZeRO-1/2 partitions them, and the
        // stage-0 optimizers (fp16/fused_optimizer.py FP16_Optimizer.step flattens grads to
        // fp32; bf16_optimizer.py BF16_Optimizer accumulates into fp32_groups_gradients)
        // hold them whole. Plain PyTorch (transformers) has no second gradient copy.
        if (e.runtime == Runtime::DeepSpeed) fp32_grads = add(fp32_grads, mul({4, t.numel}));
      }
    }
    if (t.module < e.modules.size()) {
      e.modules[t.module].trainable_parameters = add(e.modules[t.module].trainable_parameters, t.numel);
      e.modules[t.module].train_bytes = add(e.modules[t.module].train_bytes, tb);
    }
  }
  const uint64_t T = add(base_params, adapter_params);
  e.trainable_parameters = T;
  const uint64_t L = e.largest_layer_parameters;

  if (e.runtime == Runtime::Fsdp) {
    add_fsdp_model_states(e, trainable, tensor_opt);
  } else {
    // Which states are partitioned over the n GPUs (ZeRO stage) and which live on the host.
    const uint64_t part_opt = z >= 1 ? n : 1, part_grad = z >= 2 ? n : 1, part_param = z >= 3 ? n : 1;
    const std::string zs = z == 0 ? "" : fmt::format(" / {} (ZeRO-{})", ranks_text(w), z);
    if (adapters > 0)
      e.gpu.push_back({"lora_adapters", adapters / part_param,
                       fmt::format("rank {} × (in + out) per target ({}) × 4 B fp32 = {} params{}", w.lora_rank,
                                   fmt::join(w.lora_targets, ","), adapter_params, z >= 3 ? zs : "")});
    const uint64_t g16 = (off_opt || z >= 3) ? 0 : grads16 / part_grad;
    // glibc on the CPU: the previous step's freed gradients (docs/estimate.md).
    e.heap_retained = g16;
    e.heap_retained_formula = "one set of gradients (the previous step's, freed by zero_grad, below this step's tensors)";
    e.gpu.push_back({"gradients", add(g16, off_opt ? 0 : fp32_grads / part_opt),
                     off_opt ? "offloaded to CPU with the optimizer (ZeRO-Offload)"
                     : z >= 3 ? fmt::format("fp32 grad partition 4 B × {} / {} (16-bit grads of the gathered layer are in zero3_gather)", base_params, ranks_text(w))
                              : fmt::format("{} trainable × {} B{}{}", T, adapter_params > 0 ? 4 : el, z >= 2 ? zs : "",
                                            fp32_grads == 0 ? ""
                                            : z == 0 ? fmt::format(" + fp32 grads 4 B × {} (DeepSpeed stage-0 optimizer)", base_params)
                                                     : fmt::format(" + fp32 grad partition 4 B × {} / {}", base_params, ranks_text(w)))});
    e.gpu.push_back({"master_weights", off_opt ? 0 : master / part_opt,
                     !e.mixed_precision || adapter_params > 0 ? "none (weights already fp32 or frozen)"
                     : off_opt ? "offloaded to CPU (ZeRO-Offload)" : fmt::format("fp32 copy 4 B × {}{}", base_params, z >= 1 ? zs : "")});
    e.gpu.push_back({"optimizer_states", off_opt ? 0 : opt / part_opt,
                     off_opt ? "offloaded to CPU (ZeRO-Offload)"
                             : fmt::format("{} states over {} trainable params{}", optimizer_name(w.optimizer), T, z >= 1 ? zs : "")});
    if (z >= 3) {
      // DeepSpeed's largest_layer_memory: the gathered layer's 16-bit params and grads.
      e.gpu.push_back({"zero3_gather", mul({4, L}), fmt::format("4 B × largest layer params ({})", L)});
    }
    add_host_model_states(e, add(add(master, opt), fp32_grads), T, L);
  }

  // Saved activations (Korthikanti et al. 2022, 16-bit activations; scaled for fp32).
  const uint64_t sq = w.context, b = w.batch, h = s.hidden_size, a = s.num_heads, layers = s.num_layers;
  const bool flash = w.attention != Attention::Eager;  // SDPA/flash keep no score matrix for backward
  // Norms of the attention and MLP outputs (Gemma 2/3) beside the two pre-norms 34·s·b·h counts:
  // each keeps its input and its normalized output for backward (measured, docs/measured_torch.md).
  const BlockRecipe recipe = recipe_for(s);
  const uint64_t post_norms = uint64_t(recipe.post_attn_norm) + uint64_t(recipe.post_ffn_norm);
  const uint64_t per_layer_16 = add(flash ? mul({34, sq, b, h}) : mul({sq, b, add(mul({34, h}), mul({5, a, sq}))}),
                                    mul({post_norms, 4, sq, b, h}));
  const uint64_t per_layer = mul({per_layer_16, el}) / 2;
  uint64_t act;
  std::string f;
  if (w.grad_checkpointing) {
    act = add(mul({layers, 2, sq, b, h, el}) / 2, per_layer);
    f = fmt::format("layers({}) × 2·s·b·h (checkpoints) + one layer recomputed s·b·h·({}), s={} b={} h={}{}", layers,
                    flash ? "34" : "34 + 5·a·s/h", sq, b, h, el == 2 ? "" : fmt::format(", × {}/2 B", el));
  } else {
    act = mul({layers, per_layer});
    f = fmt::format("layers({}) × s·b·h·({}{}), s={} b={} h={} a={}{}", layers, flash ? "34 (sdpa/flash: no scores)" : "34 + 5·a·s/h",
                    post_norms ? fmt::format(" + 4 × {} post-norms", post_norms) : "", sq, b, h, a,
                    el == 2 ? "" : fmt::format(", × {}/2 B", el));
  }
  e.activation_bytes = act;
  e.gpu.push_back({"activations", act, f});
  // Final-logit softcapping (Gemma 2) keeps its tanh output for backward: one more b·s·V fp32.
  const uint64_t softcap = s.final_logit_softcap > 0 ? 4 : 0;
  e.logits_bytes = mul({b, sq, static_cast<uint64_t>(s.vocab_size), add(el, 8 + softcap)});
  e.gpu.push_back({"logits", e.logits_bytes,
                   fmt::format("b·s·vocab × ({} B logits + 4 B fp32 upcast + 4 B grad{}) = {}·{}·{}", el,
                               softcap ? " + 4 B the softcap's tanh" : "", b, sq, s.vocab_size)});
  e.runtime_model = {
      e.runtime == Runtime::Fsdp
          ? fmt::format("PyTorch FSDP2 (fully_shard, as accelerate applies it: a unit per decoder layer, the embedding, norm + "
                        "head), {}{}: each rank holds its padded shards and all-gathers one unit at a time",
                        fsdp_layout_text(w), w.offload == Offload::None ? "" : ", CPU offload of parameters, gradients and optimizer")
      : e.runtime == Runtime::DeepSpeed
          ? fmt::format("DeepSpeed ZeRO-{} on {}, offload {}: model states as DeepSpeed's estimators count them "
                        "(fp32 master, optimizer and gradient copies{})", z, ranks_text(w),
                        offload_name(w.offload), z >= 1 ? ", partitioned" : "")
          : fmt::format("PyTorch training step (transformers): {} weights, {} optimizer, no DeepSpeed partitioning",
                        e.mixed_precision ? "16-bit autocast with fp32 master" : dtype_name(e.weight_dtype), optimizer_name(w.optimizer)),
      fmt::format("attention {} (saved activations{}), {}; no KV cache (training keeps none)", flash ? "sdpa/flash" : "eager",
                  flash ? ", no score matrix" : " incl. the score matrix", w.grad_checkpointing ? "gradient checkpointing" : "every layer's activations kept for backward")};
  const uint64_t largest = std::max(mul({b, sq, static_cast<uint64_t>(s.vocab_size), 4}),
                                    mul({b, sq, static_cast<uint64_t>(std::max<int64_t>(s.intermediate_size, 0)), el}));
  return (largest + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

}  // namespace nunchaku::estimate_detail
