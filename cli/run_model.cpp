#include "cli/run_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cli/trace_session.hpp"
#include "core/interrupt.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"
#include "core/units.hpp"
#include "memory/engine_memory.hpp"
#include "model/arch/record.hpp"
#include "model/language_model.hpp"

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

// Without --fast-math, on the CPU: when some weights have the approximate fast path, one
// line says so with the factor measured for that type (docs/engine.md, session 14: llama1b,
// 2 threads, AVX-512, batch 1). Exact stays the default.
void fast_math_hint(const Checkpoint& ck) {
  bool kquant = false, bf16 = false;
  for (const TensorInfo& t : ck.tensors) {
    if (t.shape.empty()) continue;
    const engine::FastPath p = engine::fast_math_path(t.dtype, t.shape.back());
    kquant = kquant || p == engine::FastPath::Q8K;
    bf16 = bf16 || (p == engine::FastPath::BF16 && engine::fast_bf16_available());
  }
  if (kquant)
    fmt::print(stderr, "note: this model's K-quant weights have a faster, approximate path: --fast-math (8-bit activations "
                       "as llama.cpp's; measured 1.47x decode, 1.19x prompt on a Q4_K 1B llama, docs/engine.md)\n");
  else if (bf16)
    fmt::print(stderr, "note: this model's BF16 weights have a faster, approximate path on this CPU: --fast-math (bf16 "
                       "activations; measured 1.28x decode, 2.1x prompt on a BF16 1B llama, docs/engine.md)\n");
}

}  // namespace

std::vector<std::string> keep_language_model_noted(Checkpoint& ck, ModelLayout& layout, bool quiet) {
  const std::vector<Module> skipped = keep_language_model(ck, layout);
  std::vector<std::string> names;
  for (const Module& m : skipped) names.push_back(m.name);
  if (skipped.empty() || quiet) return names;
  std::string what;
  for (const Module& m : skipped)
    what += fmt::format("{}{} ({}: {} parameters, {})", what.empty() ? "" : ", ", m.name, m.component, format_count(m.parameters),
                        format_bytes(m.bytes));
  const ModelSpec& s = *layout.spec;
  const ArchRecord* wrap = s.wrapper.empty() ? nullptr : wrapper_record_for(s.wrapper);
  const std::string name = wrap && !wrap->hf_class.empty() ? std::string(wrap->hf_class) : s.wrapper.empty() ? "a multimodal checkpoint" : s.wrapper;
  fmt::print(stderr, "note: {}: the engine runs its language model ({}) on text; not loaded: {}\n", name, s.architecture, what);
  return names;
}

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
  if (!o.place.fast_math && !o.quiet && where.backend.kind == Device::Kind::Cpu) fast_math_hint(ck);
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
