// What the [cuda] tests share (test_cuda_backend.cpp, test_cuda_moe.cpp, test_cuda_llama4.cpp,
// test_cuda_mla.cpp): the twin rig, a CPU backend (the oracle) and a CUDA backend over the same
// dimensions and run options, weights with a host and a device copy, and the op table (one row
// per op, types and shape: the NMSE of the CUDA buffer against the CPU's, within a bound;
// printed with a failing row, and whole with NUNCHAKU_OP_TABLE=1); and a model loaded for
// cuda:0 as `run` places it (a mixture of experts in host memory). Cases call have_gpu()
// first: without a device (or the emulator build) they report skipped.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cuda/engine_ops.hpp"
#include "cuda/loader.hpp"
#include "engine/backend.hpp"
#include "engine/engine.hpp"
#include "io/convert.hpp"
#include "io/loader.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

namespace nunchaku::test {

using engine::Backend;
using engine::BatchTokens;
using engine::Buf;
using engine::buf_width;
using engine::make_cpu_backend;
using engine::make_cuda_backend;
using engine::RopeStyle;
using engine::VecRef;
using engine::WeightMatrix;

inline bool have_gpu() {
  std::string why;
  if (cuda::engine_available(&why)) {
    if (const std::string emu = cuda_emulator_name(); !emu.empty())
      WARN("ran on " << emu << ", not a GPU: the CUDA source executed on the CPU (docs/engine.md)");
    return true;
  }
  skip_case("no CUDA device (" + why + ")");
  return false;
}

// Host bytes copied to cuda:0, freed at scope end.
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(const std::vector<uint8_t>& host) {
    std::string err;
    p = cuda::device_alloc(0, host.size(), &err);
    INFO(err);
    REQUIRE(p);
    cuda::CopyStream s;
    REQUIRE(s.init(0, 1, 0, &err));
    REQUIRE(s.h2d(p, host.data(), host.size(), &err));
    REQUIRE(s.synchronize(&err));
  }
  ~DeviceBytes() { cuda::device_free(0, p); }
  DeviceBytes(const DeviceBytes&) = delete;
};

inline void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

// rows x cols of `t`, random, with finite block scales (small, so values stay O(1..100)).
inline std::vector<uint8_t> random_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(t);
  const size_t row_bytes = size_t(cols / info.block_elems * info.block_bytes);
  std::vector<uint8_t> m(size_t(rows) * row_bytes);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(8, 12), man(0, 1023), sign(0, 1);
  auto small_half = [&] { return uint16_t((sign(rng) << 15) | (exp(rng) << 10) | man(rng)); };
  if (info.kind != DTypeKind::Quantized) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      float v = nd(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (t == DType::F32) std::memcpy(m.data() + 4 * i, &v, 4);
      else put16(m.data() + 2 * i, t == DType::F16 ? f32_to_f16(bits) : uint16_t(bits >> 16));
    }
    return m;
  }
  for (auto& b : m) b = uint8_t(rng());
  for (size_t off = 0; off < m.size(); off += info.block_bytes) {
    uint8_t* b = m.data() + off;
    switch (t) {
      case DType::Q6_K: put16(b + 208, small_half()); break;
      case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: put16(b, small_half()); break;
      default: put16(b, small_half()); put16(b + 2, small_half()); break;
    }
  }
  return m;
}

inline std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// A weight matrix with a host copy (for the CPU backend) and a device copy (for CUDA).
struct TwinMatrix {
  std::vector<uint8_t> host;
  std::unique_ptr<DeviceBytes> dev;
  WeightMatrix cpu, gpu;
  // `offset` bytes before the matrix: 2 makes 16-bit rows unaligned for 16-byte loads.
  TwinMatrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng, size_t offset = 0)
      : host(random_matrix(t, rows, cols, rng)) {
    const size_t rb = host.size() / size_t(rows);
    host.insert(host.begin(), offset, uint8_t(0));
    dev = std::make_unique<DeviceBytes>(host);
    cpu = {host.data() + offset, t, rows, cols, rb, std::string(dtype_name(t))};
    gpu = cpu;
    gpu.data = static_cast<const uint8_t*>(dev->p) + offset;
  }
};
struct TwinVec {
  std::vector<uint8_t> host;
  std::unique_ptr<DeviceBytes> dev;
  VecRef cpu, gpu;
  TwinVec(DType t, int64_t n, std::mt19937& rng) : host(random_matrix(t, 1, n, rng)) {
    dev = std::make_unique<DeviceBytes>(host);
    cpu = {host.data(), t, n};
    gpu = {dev->p, t, n};
  }
};

// Two backends over the same dimensions and run options.
struct Rig {
  EngineDims d;
  std::unique_ptr<Backend> cpu, gpu;
  std::vector<float> inv_freq;
  std::vector<float> inv_freq_local;  // table 1 (theta 1e6), with sliding layers
  EngineMemory mem;                   // the CPU backend's
  // hidden 256, 4:2 heads of 64, ffn 512, 2 layers; vocab 321: the head's rows are not a
  // multiple of the 4 rows a GEMV block takes, so the last block has warps past the last row
  // (which must not read or write anything). panel_bytes > 0: a dequantization panel of that
  // size instead of the largest matrix's. windows: per layer (sliding layers hold rings); then
  // a second rotary table too. rot: rotated values per head (0 = head_dim).
  Rig(DType kv = DType::F32, RopeStyle rope = RopeStyle::NeoX, uint64_t panel_bytes = 0, int64_t logit_rows = 8,
      const std::vector<int64_t>& windows = {}, int64_t rot = 0)
      : Rig(rig_spec({256, 4, 2, 64, 512, 321, 2}, windows),
            {.max_batch = 4, .max_context = 64, .max_tokens = 32, .logit_rows = logit_rows, .kv_dtype = kv, .threads = 2},
            rope, rot, panel_bytes) {}
  // Any model: its dimensions engine_dims(spec) (MLA's too), rings where spec.layer_windows
  // slide (then the second rotary table), the run options `c`.
  Rig(const ModelSpec& spec, EngineConfig c, RopeStyle rope, int64_t rot = 0, uint64_t panel_bytes = 0)
      : d(engine_dims(spec)) {
    const bool local = !spec.layer_windows.empty();
    const int64_t dims = rot ? rot : d.head_dim;
    for (int64_t i = 0; i < dims / 2; ++i) {
      inv_freq.push_back(float(std::pow(10000.0, -2.0 * double(i) / double(dims))));
      if (local) inv_freq_local.push_back(float(std::pow(1e6, -2.0 * double(i) / double(dims))));
    }
    cpu = make_cpu_backend(2);
    gpu = make_cuda_backend(0);
    mem = engine_memory(spec, c);
    cpu->allocate({d, mem, 1e-5f, rope, inv_freq, inv_freq_local, rot});
    c.cuda = true;
    EngineMemory mg = engine_memory(spec, c);
    if (panel_bytes) mg.scratch = cuda::kCublasWorkspaceBytes + cuda_rope_bytes(d.head_dim, local) + panel_bytes;
    gpu->allocate({d, mg, 1e-5f, rope, inv_freq, inv_freq_local, rot});
    CHECK(gpu->allocated_bytes() <= mg.total());  // the rest is the Transformer's host tables
  }
  // A spec of dimensions `d` and 64 positions; layers with windows (gemma3's sliding layers).
  static ModelSpec rig_spec(const EngineDims& d, const std::vector<int64_t>& windows) {
    ModelSpec spec = spec_with_dims(d, 64);
    if (!windows.empty()) spec.architecture = "gemma3", spec.layer_windows = windows, spec.rope_local_theta = 1e6;
    return spec;
  }
  void write(Buf b, const std::vector<float>& v) {
    cpu->write(b, v);
    gpu->write(b, v);
  }
  void tokens(const std::vector<int32_t>& id, const std::vector<int32_t>& slot, const std::vector<int64_t>& pos) {
    BatchTokens t{id, slot, pos};
    cpu->set_tokens(t);
    gpu->set_tokens(t);
  }
  // Largest |gpu - cpu| over the first `rows` rows of b, relative to the largest |cpu|.
  double diff(Buf b, int64_t rows) {
    auto want = cpu->read(b, rows), got = gpu->read(b, rows);
    double scale = 0, err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, double(std::abs(want[i])));
      const double e = abs_diff(got[i], want[i]);
      if (e > err) err = e, worst = i;
    }
    const int64_t w = buf_width(d, b);
    static constexpr const char* kNames[] = {"X", "XN", "Tmp", "Q", "Att", "K", "V", "Gate", "Up", "QH", "Lat", "Sel", "Logits"};
    static_assert(std::size(kNames) == size_t(Buf::Logits) + 1, "one name per Buf");
    UNSCOPED_INFO("buffer " << kNames[int(b)] << " [" << rows << " x " << w << "]: max error " << err << " at row "
                            << int64_t(worst) / w << " col " << int64_t(worst) % w << " (cpu "
                            << (want.empty() ? 0.f : want[worst]) << ", gpu " << (got.empty() ? 0.f : got[worst])
                            << "), scale " << scale);
    return err / std::max(scale, 1.0);
  }
};

// Normalized mean squared error of the GPU's first `rows` rows of b against the CPU's
// (ggml's test-backend-ops measure): sum (gpu - cpu)^2 / sum cpu^2.
inline double nmse(Rig& r, Buf b, int64_t rows) {
  const auto want = r.cpu->read(b, rows), got = r.gpu->read(b, rows);
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : num;
}

// Bounds. Exact: gathers (same dequantization, no arithmetic after it but one product).
// Element-wise ops and norms: fp32 results one rounding apart at most (device expf/tanhf
// against glibc's; double sums in a different order), relative error ~1e-7, NMSE ~1e-14.
// Matmuls and attention: fp32 sums of up to 512 products in another order, NMSE ~1e-12;
// a wrong index, pairing or scale gives NMSE > 1e-3.
constexpr double kExact = 0, kElementwise = 1e-11, kSums = 1e-9;

struct Row {
  std::string op, type, shape;
  double nmse, bound;
};

// Runs one row of the table: `f(backend, gpu?)` on both, then the NMSE of `out`.
template <class F>
void row(std::vector<Row>& table, Rig& r, const std::string& op, const std::string& type, Buf out, int64_t rows,
         double bound, F&& f) {
  f(*r.cpu, false);
  f(*r.gpu, true);
  const double e = nmse(r, out, rows);
  table.push_back({op, type, fmt::format("{} x {}", rows, buf_width(r.d, out)), e, bound});
  INFO(op << " " << type << " [" << table.back().shape << "]: NMSE " << e << " (bound " << bound << ")");
  CHECK(e <= bound);
}

inline void print(const std::vector<Row>& table) {
  std::string s = fmt::format("{:<22} {:<22} {:<12} {:>10} {:>8}\n", "op", "type", "shape", "nmse", "bound");
  for (const Row& x : table) s += fmt::format("{:<22} {:<22} {:<12} {:>10.2e} {:>8.0e}\n", x.op, x.type, x.shape, x.nmse, x.bound);
  UNSCOPED_INFO(s);  // shown with a failing row
  if (std::getenv("NUNCHAKU_OP_TABLE")) std::fputs(s.c_str(), stdout);
}

inline void set_batch(Rig& r, const std::vector<int32_t>& slot, const std::vector<int64_t>& pos) {
  std::vector<int32_t> id(slot.size());
  for (size_t i = 0; i < id.size(); ++i) id[i] = int32_t((i * 37 + 5) % size_t(r.d.vocab));
  r.tokens(id, slot, pos);
}

// A model on cuda:0 as `run --device cuda:0` places it: every module on the GPU but each MoE
// layer's mixture of experts in host memory (moe_on_host: the CPU part beside the GPU runs it);
// `streamed_layer` >= 0: that layer's rest in host memory too, streamed to the GPU per pass.
struct GpuModel {
  Checkpoint ck;
  ModelLayout layout;
  LoadResult load;
  engine::Engine engine;
};
inline void load_on_gpu(GpuModel& m, const std::string& path, const engine::EngineOptions& o, bool moe_on_host = true,
                        int streamed_layer = -1) {
  const Device gpu{Device::Kind::Cuda, 0}, host{Device::Kind::Cpu, 0};
  m.ck = open_checkpoint(path);
  m.layout = describe_model(m.ck);
  LoadOptions lo;
  lo.placement = place_all(m.layout, gpu);
  for (const Module& mod : m.layout.modules) {
    if (mod.kind != ModuleKind::Layer) continue;
    if (std::find(mod.roles.begin(), mod.roles.end(), Role::Router) != mod.roles.end()) lo.placement.experts[mod.name] = host;
    if (mod.layer == streamed_layer) lo.placement.modules[mod.name] = host;
  }
  lo.placement.moe_on_host = moe_on_host;
  m.load = load_checkpoint(m.ck, m.layout, lo);
  m.engine = engine::make_engine(m.ck, m.layout, m.load.store, {o, 2, std::nullopt, gpu});
}

}  // namespace nunchaku::test
