// transformers on the CPU, the process's peaks outside the run (docs/measured_torch.md).
// The load's own peak: from_pretrained
// reads the safetensors file through a mapping and converts each tensor to --dtype, so with a
// dtype other than the stored one the file's pages (counted in RSS) sit beside the converted
// weights when the load ends. Measured (torch 2.15, transformers 5.24 and 5.25): fp32 stores loaded
// as bf16 peak at import + loader + file + converted copy within 0.3 %, whatever the
// workload after it, where the workload's own peak is lower.
// The exit's: the interpreter's finalization with torch imported touches a fixed ~116 MiB more
// (`import torch` alone: max RSS 658 MiB, 539 with os._exit) above the end state, which keeps
// the weights and what glibc's heap holds: generate at batch 1 peaks there, not in the run.
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

void add_torch_exit_peak(Estimate& e) {
  if (!torch_cpu(e) || e.workload.mode != Mode::Infer) return;  // training: states and gradients end far below the step's peak
  const auto it = e.workload.overheads.find("torch_exit");
  const uint64_t exit = it != e.workload.overheads.end() ? it->second : kTorchExitBytes;
  uint64_t end = 0, total = 0;
  for (const auto& c : e.gpu) {
    total = add(total, c.bytes);
    if (c.name == "python_runtime" || c.name == "torch_loader" || c.name == "cpu_runtime" || c.name == "weights" || c.name == "glibc_heap")
      end = add(end, c.bytes);
  }
  if (add(end, exit) <= total) return;
  e.gpu.push_back({"exit_peak", add(end, exit) - total,
                   fmt::format("the interpreter's exit: torch_exit {} touched above the end state {} (python_runtime + torch_loader + "
                               "cpu_runtime + weights + glibc_heap), above the run's own {} (the exit's peak is the process's)",
                               format_bytes(exit), format_bytes(end), format_bytes(total))});
}

}  // namespace nunchaku::estimate_detail
