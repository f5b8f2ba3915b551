// estimate() for a checkpoint without a model description: what accelerate's
// infer_auto_device_map and `accelerate estimate-memory` can say of any module tree, the
// weights by module, plus the runtime's fixed costs.
#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "memory/estimate_detail.hpp"
#include "memory/engine_memory.hpp"

namespace nunchaku::estimate_detail {

Estimate estimate_weights_only(const Checkpoint& ck, const ModelLayout& layout, const Workload& win) {
  const std::string hint = "put the model's config.json beside the weights";
  if (win.mode != Mode::Infer)
    throw Error("estimate.no_spec",
                "training needs the model's dimensions (activations), and this checkpoint has no config.json or GGUF "
                "metadata; inference is estimated from the weights alone",
                {.hint = hint});
  if (win.runtime && *win.runtime != Runtime::Transformers)
    throw Error("estimate.no_spec",
                fmt::format("{} runs the decoder LLMs it knows; without config.json or GGUF metadata this checkpoint is "
                            "estimated as a PyTorch module tree (--runtime transformers, as accelerate places it)",
                            runtime_name(*win.runtime)),
                {.hint = hint});
  if (win.quant.scheme != QuantScheme::None)
    throw Error("estimate.no_spec", "--quant keeps embeddings, norms and the head as the model's description says; "
                "this checkpoint has none", {.hint = "--dtype converts every float tensor alike"});
  if (win.nodes != 1)
    throw Error("usage.nodes", fmt::format("--nodes {}: a module tree without a model description is estimated for one machine "
                                           "(transformers)", win.nodes), {.hint = "leave --nodes out"});
  if (win.gpus < 1 || win.gpus > 65536)
    throw Error("usage.gpus", fmt::format("--gpus {} is out of range 1..65536", win.gpus));
  Estimate e;
  e.workload = win;
  e.workload.runtime = Runtime::Transformers;
  e.runtime = Runtime::Transformers;
  e.target = win.target;
  e.weight_dtype = win.dtype.value_or(dominant_dtype(ck));
  e.compute_dtype = dtype_info(e.weight_dtype).kind == DTypeKind::Float ? e.weight_dtype : DType::F32;
  e.kv_dtype = e.compute_dtype;
  e.runtime_model.push_back("a PyTorch module tree (no model description): weights as loaded, modules placed as "
                            "accelerate places them; activations depend on the model's forward and are not counted");
  uint64_t weights = 0;
  for (const Module& m : layout.modules) {
    ModuleCost mc{m.name, m.kind, m.layer, 0, 0, 0, 0, 0};
    for (size_t ti : m.tensors) {
      if (ti >= ck.tensors.size()) continue;
      const TensorInfo& t = ck.tensors[ti];
      const bool convert = win.dtype.has_value() && dtype_info(t.dtype).kind == DTypeKind::Float;
      mc.parameters += t.numel();
      mc.weight_bytes = add(mc.weight_bytes, convert ? mul({t.numel(), elem_bytes(*win.dtype)}) : t.nbytes);
    }
    mc.stream_bytes = stream_slot_bytes(ck, m);
    e.parameters += mc.parameters;
    weights = add(weights, mc.weight_bytes);
    e.modules.push_back(std::move(mc));
  }
  const uint64_t n = uint64_t(win.gpus);
  const std::string wdesc = win.dtype ? fmt::format("Σ numel × {} B of the float tensors ({})", elem_bytes(*win.dtype),
                                                    dtype_name(*win.dtype))
                                      : "Σ tensor bytes from the index (as stored)";
  e.gpu.push_back({"weights", weights / n, n > 1 ? fmt::format("({}) / {} GPUs (model split evenly)", wdesc, n) : wdesc});
  add_overheads(e, 0);
  for (const auto& c : e.gpu) e.per_gpu_total = add(e.per_gpu_total, c.bytes);
  for (const auto& c : e.host) e.host_total = add(e.host_total, c.bytes);
  e.notes.push_back("no model description (config.json or GGUF metadata): weights and the runtime's fixed costs only; "
                    "KV cache and activations need the model's dimensions and are not counted");
  return e;
}

}  // namespace nunchaku::estimate_detail
