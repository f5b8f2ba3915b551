// transformers on the CPU, the process's peaks outside the run (docs/measured_torch.md).
// The load's own peak: from_pretrained
// reads the safetensors file through a mapping and converts each tensor to --dtype, so with a
// dtype other than the stored one the file's pages (counted in RSS) sit beside the converted
// weights when the load ends. Measured (torch 2.15, transformers 5.24 and 5.25): fp32 stores loaded
// as bf16 peak at import + loader + file + converted copy within 0.3 %, whatever the
// workload after it, where the workload's own peak is lower.
// The exit's: the interpreter's finalization with torch imported touches a fixed ~116 MiB more
// (`import torch` alone: max RSS 658 MiB, 539 with os._exit; at the exit_group call of that
// process the CUDA libraries' file pages had grown by 49 MiB libcublasLt, 36 cusparseLt, 14
// libtorch_cuda and less elsewhere) above the end state, which keeps the weights and what
// glibc's heap holds: generate at batch 1 peaks there, not in the run. Training's end state
// keeps its step's freed activations, heap and gradients in glibc's heap, less the logits'
// blocks (unmapped when freed where a block is at or over glibc's largest mmap threshold)
// and the optimizer's states (finalization frees them before the libraries' exit code runs:
// in a full-training run four 24 MiB state blocks were unmapped ahead of it): LoRA (tiny
// states) peaks there.
#include <fmt/format.h>

#include "memory/estimate_detail.hpp"
#include "core/units.hpp"

namespace nunchaku::estimate_detail {

namespace {
constexpr uint64_t kTorchExitBytes = 116ULL << 20;

bool torch_cpu(const Estimate& e) {
  return e.target == Target::Cpu && (e.runtime == Runtime::Transformers || e.runtime == Runtime::DeepSpeed);
}
}  // namespace

namespace {
// "model.layers.0.mlp.experts.3.up_proj.weight": one expert's tensor, which transformers 5
// stacks into one tensor per layer and projection at load.
bool per_expert_tensor(std::string_view n) {
  const auto at = n.find(".experts.");
  return at != std::string_view::npos && at + 9 < n.size() && n[at + 9] >= '0' && n[at + 9] <= '9';
}
}  // namespace

void add_torch_fused_experts(Estimate& e, const Checkpoint& ck) {
  if (!torch_cpu(e) || e.runtime != Runtime::Transformers) return;
  if (ck.format != Format::Safetensors || e.workload.quant.scheme != QuantScheme::None) return;
  uint64_t file = 0, experts = 0;
  for (const auto& t : ck.tensors) {
    file = add(file, t.nbytes);
    if (per_expert_tensor(t.name)) experts = add(experts, t.nbytes);
  }
  if (experts == 0 || file != e.component("weights")) return;  // converted: the fused copy is the weights
  e.gpu.push_back({"fused_experts", experts,
                   fmt::format("from_pretrained stacks the checkpoint's per-expert tensors into one per layer and projection: a "
                               "copy of {} as stored, beside the file's mapping, which the other tensors keep and which holds "
                               "the experts' pages read (measured, docs/measured_torch.md)",
                               format_bytes(experts))});
}

void add_torch_load_peak(Estimate& e, const Checkpoint& ck) {
  if (!torch_cpu(e)) return;
  if (ck.format != Format::Safetensors || e.workload.quant.scheme != QuantScheme::None) return;
  uint64_t file = 0;
  for (const auto& t : ck.tensors) file = add(file, t.nbytes);
  if (file == e.component("weights")) return;  // as stored: the mapping is the weights
  // The run's part above the weights and the process baseline.
  uint64_t run = 0;
  for (const auto& c : e.gpu)
    if (c.name != "weights" && c.name != "python_runtime" && c.name != "torch_loader") run = add(run, c.bytes);
  if (file <= run) return;
  e.gpu.push_back({"load_peak", file - run,
                   fmt::format("from_pretrained converting to {}: the stored file's {} mapped beside the converted weights, above the "
                               "run's own {} (the load's peak is the process's)",
                               dtype_name(e.weight_dtype), format_bytes(file), format_bytes(run))});
}

namespace {
// The end state the exit touches above: inference keeps the process baseline, the weights and
// glibc's heap; training every term of its step but what goes back before the exit.
uint64_t torch_end_state(const Estimate& e, std::string* f) {
  uint64_t end = 0;
  if (e.workload.mode == Mode::Infer) {
    for (const auto& c : e.gpu)
      if (c.name == "python_runtime" || c.name == "torch_loader" || c.name == "cpu_runtime" || c.name == "weights" ||
          c.name == "fused_experts" || c.name == "glibc_heap")
        end = add(end, c.bytes);
    *f = "python_runtime + torch_loader + cpu_runtime + weights + fused_experts + glibc_heap";
    return end;
  }
  const uint64_t logit_block = mul({uint64_t(e.workload.batch), uint64_t(e.workload.context), uint64_t(e.spec.vocab_size), 4});
  const bool logits_unmapped = logit_block >= kGlibcMmapThresholdMax;
  for (const auto& c : e.gpu)
    if (c.name != "optimizer_states" && !(logits_unmapped && c.name == "logits")) end = add(end, c.bytes);
  *f = fmt::format("the step's terms less optimizer_states (freed before the libraries' exit code){}",
                   logits_unmapped ? fmt::format(" and logits (blocks of b·s·V·4 = {}, unmapped when freed)", format_bytes(logit_block))
                                   : "");
  return end;
}
}  // namespace

void add_torch_exit_peak(Estimate& e) {
  if (!torch_cpu(e)) return;
  const auto it = e.workload.overheads.find("torch_exit");
  const uint64_t exit = it != e.workload.overheads.end() ? it->second : kTorchExitBytes;
  uint64_t total = 0;
  for (const auto& c : e.gpu) total = add(total, c.bytes);
  std::string f;
  const uint64_t end = torch_end_state(e, &f);
  if (add(end, exit) <= total) return;
  e.gpu.push_back({"exit_peak", add(end, exit) - total,
                   fmt::format("the interpreter's exit: torch_exit {} touched above the end state {} ({}), above the run's own {} (the "
                               "exit's peak is the process's)",
                               format_bytes(exit), format_bytes(end), f, format_bytes(total))});
}

}  // namespace nunchaku::estimate_detail
