#include "cli/run_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cli/trace_session.hpp"
#include "core/interrupt.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"
#include "memory/engine_memory.hpp"

namespace nunchaku::cli {
namespace {

// --fast-math that cannot take the fast path anywhere says so.
void fast_math_note(const Checkpoint& ck, const Device& backend) {
  const auto any = [&](auto&& pred) { return std::any_of(ck.tensors.begin(), ck.tensors.end(), pred); };
  const bool fast = any([](const TensorInfo& t) {
    return !t.shape.empty() && engine::fast_math_path(t.dtype, t.shape.back()) != engine::FastPath::None;
  });
  const bool bf16 = any([](const TensorInfo& t) { return t.dtype == DType::BF16 && t.shape.size() == 2; });
  if (!fast && bf16 && !engine::fast_bf16_available())
    fmt::print(stderr, "note: --fast-math: BF16 weights take the fast path only on a CPU with AVX512_BF16 and the "
                       "AVX-512 kernels (this CPU has not, or NUNCHAKU_ISA is below avx512); every matmul stays exact\n");
  else if (!fast)
    fmt::print(stderr, "note: --fast-math: no weight of this model is Q4_K, Q5_K, Q6_K or BF16; every matmul stays exact\n");
  else if (backend.kind == Device::Kind::Cuda)
    fmt::print(stderr, "note: --fast-math applies to layers the CPU runs; the CUDA backend computes exactly\n");
}

}  // namespace

std::unique_ptr<RunModel> load_run_model(const RunModelOptions& o, const Checkpoint& ck, const ModelLayout& layout,
                                         TraceSession* tr) {
  const RunPlacement where = run_placement(o.place, ck, layout);
  LoadOptions lo;
  lo.placement = where.placement;
  lo.cancel = &interrupt_flag();
  auto probe = std::make_unique<GpuMemoryProbe>(where.gpus());
  if (tr)
    for (const Device& d : where.gpus()) tr->watch_cuda(d.index);
  if (!where.batch_reason.empty() && !o.quiet)
    fmt::print(stderr, "batch size auto: {} ({})\n", where.batch_size, where.batch_reason);
  auto m = std::unique_ptr<RunModel>(new RunModel{load_checkpoint(ck, layout, lo), {}, nullptr, nullptr, where.batch_size, where.backend});
  if (where.backend.kind == Device::Kind::Cuda) m->gpu = std::move(probe);
  engine::EngineSetup es;
  es.options.max_batch = m->batch_size;
  es.options.max_context = o.place.context;
  es.options.kv_dtype = o.place.kv_dtype;
  es.options.max_tokens = engine_max_tokens(o.place.prefill_chunk, m->batch_size);  // what estimate charges
  es.options.fast_math = o.place.fast_math;
  es.threads = o.place.threads;
  es.device = where.backend;
  if (o.place.fast_math && !o.quiet) fast_math_note(ck, where.backend);
  if (o.offload == "stream") es.stream = engine::StreamOptions{};
  m->setup = es;
  m->engine = engine::make_engine(ck, layout, m->loaded.store, es);
  m->model = m->engine.model.get();
  if (m->gpu) m->gpu->sample();
  return m;
}

void remake_engine(RunModel& m, const Checkpoint& ck, const ModelLayout& layout, int threads) {
  m.model = nullptr;
  m.engine = {};  // its run state freed before the next one is allocated
  m.setup.threads = threads;
  m.engine = engine::make_engine(ck, layout, m.loaded.store, m.setup);
  m.model = m.engine.model.get();
}

}  // namespace nunchaku::cli
