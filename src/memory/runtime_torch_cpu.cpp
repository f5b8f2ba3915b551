// transformers on the CPU, the load's own peak (docs/measured_torch.md): from_pretrained
// reads the safetensors file through a mapping and converts each tensor to --dtype, so with a
// dtype other than the stored one the file's pages (counted in RSS) sit beside the converted
// weights when the load ends. Measured (torch 2.15, transformers 5.24): fp32 stores loaded
// as bf16 peak at import + loader + file + converted copy within 0.3 %, whatever the
// workload after it, where the workload's own peak is lower.
#include <fmt/format.h>

#include "memory/estimate_detail.hpp"
#include "core/units.hpp"

namespace nunchaku::estimate_detail {

void add_torch_load_peak(Estimate& e, const Checkpoint& ck) {
  const Runtime r = e.runtime;
  if (e.target != Target::Cpu || (r != Runtime::Transformers && r != Runtime::DeepSpeed)) return;
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

}  // namespace nunchaku::estimate_detail
