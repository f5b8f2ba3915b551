// What decode speed this CPU gives a model, measured rather than assumed (`estimate --device
// cpu`): the CPU backend's own matmul (its threads, its dispatch, exact and --fast-math) is
// timed at the step's batch on synthetic matrices of each shape and stored type a decode step
// multiplies by, as many copies of each as fill twice the last-level cache, called one after
// the other so that each call reads its weights from memory (and pays its dispatch) as the
// model's matmuls do. A step's time is the sum over shapes of (matrices per step x time per
// call); the attention over the cache, norms and sampling are left out, so the figures are an
// upper bound that a run's measured tok/s approaches while the context stays short.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "format/dtype.hpp"

namespace nunchaku::engine {

// Matrices of one stored type and shape (`rows` outputs of `cols` inputs) one decode step
// multiplies by: `count` of them (routed experts: as many as a batch reaches on average).
struct ProbeClass {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  double count = 0;
  bool exact_only = false;  // run exactly even with --fast-math (the CPU backend's router and routed experts)
  double weights() const { return double(rows) * double(cols) * count; }
};

struct ProbeRate {
  ProbeClass of;
  double exact = 0, fast = 0;  // seconds per matrix; fast == exact without a fast path
  bool fast_path = false;      // --fast-math takes another kernel for these weights on this CPU
};

struct SpeedProbe {
  int threads = 0;
  std::string isa;             // "avx512", "avx2", "scalar"
  int64_t batch = 1;
  double exact_tok_s = 0, fast_tok_s = 0;
  bool fast_path = false;      // some class has a --fast-math kernel on this CPU
  double seconds = 0;          // the probe's own wall time
  uint64_t buffer_bytes = 0;   // the synthetic weights, copies of each matrix side by side
  std::vector<ProbeRate> rates;
  std::vector<ProbeClass> skipped;  // types the dense matmul does not read (MXFP4 experts...)
};

// Classes with no matrices or a type matmul_rows cannot read are skipped. threads <= 0: all
// hardware threads. Throws Error engine.out_of_memory when the synthetic weights cannot be
// allocated.
SpeedProbe probe_decode(std::span<const ProbeClass> classes, int64_t batch, int threads);

}  // namespace nunchaku::engine
