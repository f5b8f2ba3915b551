#include "engine/speed_probe.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "engine/backend.hpp"
#include "engine/kernels.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"

namespace nunchaku::engine {
namespace {

using Clock = std::chrono::steady_clock;

// The last-level cache as Linux lists it for cpu0 (a VM's own; glibc's sysconf reads the
// host's from cpuid), else sysconf's; 0 when neither says.
uint64_t last_level_cache() {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::FILE* f = std::fopen(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", i).c_str(), "r");
    if (!f) continue;
    unsigned long long v = 0;
    char unit = 0;
    if (std::fscanf(f, "%llu%c", &v, &unit) >= 1)
      best = std::max<uint64_t>(best, uint64_t(v) << (unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0));
    std::fclose(f);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) best = uint64_t(std::max(0L, sysconf(_SC_LEVEL3_CACHE_SIZE)));
#endif
  return best;
}

// Twice the last-level cache, within [64 MiB, 256 MiB], so that a sweep reads its weights from
// memory as a model larger than the cache is read; no more than the model's own step (a model
// that fits the cache is read from it), and at least 1 MiB.
uint64_t buffer_bytes(double step_bytes) {
  const uint64_t from_memory = std::clamp<uint64_t>(2 * last_level_cache(), uint64_t(64) << 20, uint64_t(256) << 20);
  return std::max<uint64_t>(std::min<double>(double(from_memory), step_bytes), uint64_t(1) << 20);
}

bool fast_for(const ProbeClass& c) {
  if (c.exact_only) return false;
  const FastPath p = fast_math_path(c.dtype, c.cols);
  return p == FastPath::Q8K || (p == FastPath::BF16 && fast_bf16_available());
}

struct Probed {
  ProbeClass of;
  int64_t rows = 0;      // rows timed per call: the class's, or as many as the buffer holds
  size_t row_bytes = 0;
};

// One CPU backend (exact or fast math) sized for the widest row and the most rows; returns
// seconds per matrix of each class: the best sweep over the buffer's copies (one call each,
// after a warm sweep), per call, scaled up when the buffer holds only part of a matrix.
std::vector<double> time_classes(std::span<const Probed> classes, const uint8_t* data, uint64_t buffer, int64_t batch,
                                 int threads, bool fast, int& used_threads) {
  int64_t cols = 0, rows = 0;
  for (const Probed& p : classes) cols = std::max(cols, p.of.cols), rows = std::max(rows, p.rows);
  EngineDims d;
  d.hidden = cols, d.inter = std::max(rows, cols), d.heads = 1, d.kv_heads = 1, d.head_dim = 2, d.vocab = 1, d.layers = 0;
  EngineMemory m;
  m.config = EngineConfig{.max_batch = int(batch), .max_context = 1, .max_tokens = batch, .logit_rows = 1, .threads = threads,
                          .panel_cols = cols, .fast_math = fast};
  const float inv_freq[1] = {1.0f};
  auto be = make_cpu_backend(threads);
  used_threads = be->threads();
  m.config.threads = used_threads;
  be->allocate({d, m, 1e-5f, RopeStyle::NeoX, inv_freq});
  const std::vector<int32_t> id(size_t(batch), 0), slot(size_t(batch), 0);
  std::vector<int64_t> pos(size_t(batch), 0);
  be->set_tokens({id, slot, pos});
  be->write(Buf::XN, std::vector<float>(size_t(batch * cols), 0.5f));
  std::vector<double> per_matrix;
  for (const Probed& p : classes) {
    const size_t bytes = size_t(p.rows) * p.row_bytes;
    const size_t copies = std::max<size_t>(1, size_t(buffer / bytes));
    std::vector<WeightMatrix> w;
    for (size_t i = 0; i < copies; ++i) w.push_back({data + i * bytes, p.of.dtype, p.rows, p.of.cols, p.row_bytes, "speed probe"});
    const auto sweep = [&] {
      const auto t0 = Clock::now();
      for (const WeightMatrix& x : w) {
        const MatmulJob job{&x, Buf::Gate};
        be->matmul({&job, 1}, Buf::XN);
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    sweep();  // warm: pages touched, code paths resolved
    double best = 1e30, spent = 0;
    for (int pass = 0; pass < 8 && (pass < 3 || spent < 0.02); ++pass) {
      const double s = sweep();
      best = std::min(best, s), spent += s;
    }
    per_matrix.push_back(best / double(copies) * double(p.of.rows) / double(p.rows));
  }
  return per_matrix;
}

}  // namespace

SpeedProbe probe_decode(std::span<const ProbeClass> classes, int64_t batch, int threads) {
  const auto start = Clock::now();
  SpeedProbe r;
  r.batch = std::clamp<int64_t>(batch, 1, 4096);
  r.isa = std::string(isa_name(active_isa()));
  const auto row_bytes = [](const ProbeClass& c) {
    return c.cols > 0 && c.cols <= (int64_t(1) << 24) && c.rows > 0 ? dtype_nbytes(c.dtype, uint64_t(c.cols)) : std::nullopt;
  };
  double step_bytes = 0;
  for (const ProbeClass& c : classes)
    if (const auto rb = row_bytes(c)) step_bytes += double(*rb) * double(c.rows) * c.count;
  r.buffer_bytes = buffer_bytes(step_bytes);
  std::vector<Probed> probed;
  for (const ProbeClass& c : classes) {
    if (!(c.count > 0)) continue;
    const auto rb = row_bytes(c);
    if (!rb || *rb == 0 || !matmul_supports(c.dtype)) {
      r.skipped.push_back(c);
      continue;
    }
    const int64_t fit = std::max<int64_t>(1, int64_t(r.buffer_bytes / *rb));
    probed.push_back({c, std::min(c.rows, fit), size_t(*rb)});
  }
  if (!probed.empty()) {
    std::vector<uint8_t> data;
    try {
      data.assign(r.buffer_bytes, 0x3C);  // every float, half, scale and code a normal, moderate number
    } catch (const std::bad_alloc&) {
      throw Error("engine.out_of_memory", fmt::format("cannot allocate the speed probe's {} of weights", format_bytes(r.buffer_bytes)),
                  {.hint = "rerun with --no-probe"}, Exit::OutOfMemory);
    }
    const std::vector<double> exact = time_classes(probed, data.data(), r.buffer_bytes, r.batch, threads, false, r.threads);
    std::vector<double> fast = exact;
    r.fast_path = std::any_of(probed.begin(), probed.end(), [](const Probed& p) { return fast_for(p.of); });
    if (r.fast_path) {
      std::vector<Probed> fp;
      for (const Probed& p : probed)
        if (fast_for(p.of)) fp.push_back(p);
      const std::vector<double> f = time_classes(fp, data.data(), r.buffer_bytes, r.batch, threads, true, r.threads);
      for (size_t i = 0, j = 0; i < probed.size(); ++i)
        if (fast_for(probed[i].of)) fast[i] = f[j++];
    }
    double exact_s = 0, fast_s = 0;
    for (size_t i = 0; i < probed.size(); ++i) {
      r.rates.push_back({probed[i].of, exact[i], fast[i], fast_for(probed[i].of)});
      exact_s += probed[i].of.count * exact[i];
      fast_s += probed[i].of.count * fast[i];
    }
    r.exact_tok_s = exact_s > 0 ? double(r.batch) / exact_s : 0;
    r.fast_tok_s = fast_s > 0 ? double(r.batch) / fast_s : 0;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace nunchaku::engine
