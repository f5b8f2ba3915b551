// Training peaks that depend on the step (docs/measured_torch.md):
// - --steps 1: torch.optim.AdamW makes its states lazily in the first step(), after backward
//   has freed the saved activations, so the first step peaks at max(activations + logits,
//   states) beside the weights and gradients, not at their sum (measured on the CPU: one
//   step 1952 MiB, two steps 2390; with checkpointing 2010 and 2170). Its heap holds no
//   previous step's gradients: glibc keeps the logits' buffers (and, with checkpointing, the
//   recomputed layer's activations) that the parameter-shaped states do not refill.
// - LoRA on the CPU: the frozen base's backward frees activation-sized gradient blocks that
//   no weight gradient refills (its adapters' are tiny), so glibc keeps most of the saved
//   activations' size in its heap: 7/8 of them, the mean over ten fresh processes at three
//   shapes (0.77-0.97 of the activations term: the run's peak less the same run's with
//   MALLOC_MMAP_THRESHOLD_=65536, docs/measured_torch.md).
#include <algorithm>

#include <fmt/format.h>

#include "memory/estimate_detail.hpp"
#include "core/units.hpp"

namespace nunchaku::estimate_detail {

namespace {
Component* find(Estimate& e, std::string_view name) {
  for (auto& c : e.gpu)
    if (c.name == name) return &c;
  return nullptr;
}
}  // namespace

void adjust_training_peak(Estimate& e) {
  const Workload& w = e.workload;
  Component* act = find(e, "activations");
  const uint64_t transient = add(act ? act->bytes : 0, e.component("logits"));
  if (w.steps == 1)
    if (Component* st = find(e, "optimizer_states"); st && st->bytes > 0) {
      const uint64_t states = st->bytes;
      st->bytes = states > transient ? states - transient : 0;
      st->formula = fmt::format("first step: {} made in step() after backward freed activations + logits ({}); charged above them "
                                "(was: {})",
                                format_bytes(states), format_bytes(transient), st->formula);
    }
  if (w.steps == 1 && e.target == Target::Cpu && !w.overheads.contains("glibc_heap"))
    if (Component* heap = find(e, "glibc_heap")) {
      heap->bytes = add(e.component("logits"), w.grad_checkpointing ? e.component("activations") : 0);
      heap->formula = fmt::format("first step: no previous gradients; what backward freed last, that the states made in step() do not "
                                  "refill: the logits' buffers{} (measured, docs/measured_torch.md)",
                                  w.grad_checkpointing ? " + the recomputed layer's activations" : "");
    }
  const bool lora = w.mode == Mode::LoRA || w.mode == Mode::QLoRA;
  if (lora && e.target == Target::Cpu && !w.overheads.contains("glibc_heap"))
    if (Component* heap = find(e, "glibc_heap"); heap && act && act->bytes / 8 * 7 > heap->bytes) {
      heap->bytes = act->bytes / 8 * 7;
      heap->formula = "LoRA: the frozen base's backward frees activation-sized blocks that its adapters' gradients do not refill: "
                      "glibc keeps 7/8 of the activations' size (measured: 0.77-0.97 over ten processes at three shapes, "
                      "docs/measured_torch.md)";
    }
}

}  // namespace nunchaku::estimate_detail
