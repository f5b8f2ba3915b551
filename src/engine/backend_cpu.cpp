// The CPU backend: run state in host memory, today's kernels (kernels*.cpp) behind the
// Backend ops, work spread over a ThreadPool. Each op is one dispatch; the arithmetic per
// element is the same whatever the batch, so results do not depend on batch composition.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "engine/backend.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"
#include "engine/moe_route.hpp"
#include "engine/quant_blocks.hpp"
#include "engine/thread_pool.hpp"
#include "io/weight_store.hpp"

namespace nunchaku::engine {
namespace {

// The widest head a ring that wraps mixes in two parts (the second into a stack buffer).
constexpr int64_t kMaxWrapHeadDim = 512;
// Most weight rows in one decode task (prefill tasks match the GEMM's 64-row blocks).
constexpr int64_t kDecodeRows = 256;
constexpr int64_t kDecodeBatchChunk = 32;  // activation rows per decode / small-batch task
static_assert(kMatmulGemmBatch <= kDecodeBatchChunk, "below the GEMM, a batch is one chunk (prefetch() relies on it)");

// Arrays on 64-byte boundaries: the kernels' vector loads of activation rows and cache
// rows then never split a cache line (glibc returns large blocks 16 bytes past a page:
// -20% GEMM throughput on AVX2, -25% on AVX-512).
struct AlignedDelete {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
template <class T>
using Array = std::unique_ptr<T[], AlignedDelete>;

// Element i of a weight vector (F32, F16 or BF16), for vectors read once per use (the MoE
// layers' per-expert biases, wider than the vector slots).
float vec_at(const VecRef& v, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  if (v.dtype == DType::F16) return blocks::half_to_float(blocks::load_u16(p + 2 * i));
  if (v.dtype == DType::BF16) return blocks::bf16_to_float(blocks::load_u16(p + 2 * i));
  float x;
  std::memcpy(&x, p + 4 * i, 4);
  return x;
}

// gpt-oss's expert activation over one row of 2n interleaved gate|up values (bias added
// first, when given), written in place to the row's first n: reads 2i and 2i + 1 >= i.
void clamped_swiglu_row(float* gu, int64_t n, const VecRef& bias, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gu[2 * i], u = gu[2 * i + 1];
    if (bias) g += vec_at(bias, 2 * i), u += vec_at(bias, 2 * i + 1);
    g = std::min(g, limit);  // NaN stays NaN, as torch.clamp
    u = std::max(std::min(u, limit), -limit);
    const float glu = g * (1.0f / (1.0f + std::exp(-(g * alpha))));
    gu[i] = (u + 1.0f) * glu;
  }
}

// The same over gate and up apart (GGUF's ffn_gate_exps / ffn_up_exps), each with its bias;
// the result in `g`.
void clamped_swiglu_split(float* g, const float* u, int64_t n, const VecRef& gb, const VecRef& ub, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i], ui = u[i];
    if (gb) gi += vec_at(gb, i);
    if (ub) ui += vec_at(ub, i);
    gi = std::min(gi, limit);
    ui = std::max(std::min(ui, limit), -limit);
    g[i] = (ui + 1.0f) * (gi * (1.0f / (1.0f + std::exp(-(gi * alpha)))));
  }
}

// A float buffer whose bytes are counted.
struct Buffer {
  Array<float> p;
  int64_t width = 0;  // floats per row
  float* row(int64_t r) const { return p.get() + r * width; }
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads), warm_(size_t(pool_.size())) {}

  std::string describe() const override {
    return "cpu " + std::string(isa_name(active_isa())) + ", " + plural(uint64_t(pool_.size()), "thread") +
           (cfg_.fast_math ? ", fast math" : "");
  }
  Device device() const override { return Device{Device::Kind::Cpu, 0}; }
  bool can_read(Device d) const override { return d.kind == Device::Kind::Cpu || d.kind == Device::Kind::Disk; }
  int threads() const override { return pool_.size(); }

  void allocate(const BackendSetup& s) override;
  uint64_t allocated_bytes() const override { return allocated_; }

  void set_tokens(const BatchTokens& t) override {
    T_ = int64_t(t.id.size());
    std::copy(t.id.begin(), t.id.end(), id_.get());
    std::copy(t.slot.begin(), t.slot.end(), slot_.get());
    std::copy(t.pos.begin(), t.pos.end(), pos_.get());
  }

  bool supports(Op op, DType t) const override {
    switch (op) {
      case Op::Embed: case Op::Matmul: return matmul_supports(t);
      case Op::Norm: return t == DType::F32 || t == DType::F16 || t == DType::BF16;
      case Op::Attention: return t == DType::F32 || t == DType::F16;  // the KV cache
      case Op::Moe: case Op::Mla: return true;
      case Op::ChunkedAttention: case Op::AttnTemperature: case Op::UnitNorm: case Op::NoRope: return true;
      default: return t == DType::F32;
    }
  }

  void moe(const MoeFfn& f) override;
  void matmul_heads(std::span<const WeightMatrix> w, Buf in, int64_t in_stride, Buf out, int64_t out_stride) override;
  void mla_rope_cache(int64_t layer) override;

  void embed(const WeightMatrix& table, float scale) override {
    Buffer& x = buf(Buf::X);
    pool_.run(T_, [&](int64_t t, int) {
      dequant_row(table, id_[t], x.row(t));
      if (scale != 1.0f)
        for (int64_t i = 0; i < table.cols; ++i) x.row(t)[i] *= scale;
    });
  }

  void norm(Buf in, Buf out, const Norm& n) override {
    const float* wf = norm_weight(n, 0);
    const float* bf = n.kind == NormKind::Layer ? widen(n.bias, 1) : nullptr;
    Buffer &a = buf(in), &b = buf(out);
    const int64_t width = n.span > 0 ? n.span : a.width;
    pool_.run(rows_of(in), [&](int64_t t, int) { norm_row(a.row(t), wf, bf, n, width, b.row(t)); });
  }

  void add_norm(Buf x, Buf delta, Buf out, const Norm& n) override {
    const float* wf = norm_weight(n, 0);
    const float* bf = n.kind == NormKind::Layer ? widen(n.bias, 1) : nullptr;
    Buffer &a = buf(x), &d = buf(delta), &b = buf(out);
    const int64_t H = dims_.hidden;
    pool_.run(T_, [&](int64_t t, int) {
      float* xr = a.row(t);
      const float* dr = d.row(t);
      for (int64_t i = 0; i < H; ++i) xr[i] += dr[i];
      norm_row(xr, wf, bf, n, H, b.row(t));
    });
  }

  void add(Buf x, Buf delta) override {
    Buffer &a = buf(x), &d = buf(delta);
    const int64_t H = dims_.hidden;
    pool_.run(T_, [&](int64_t t, int) {
      float* xr = a.row(t);
      const float* dr = d.row(t);
      for (int64_t i = 0; i < H; ++i) xr[i] += dr[i];
    });
  }

  void act_mul(Buf gate, Buf up, Activation act) override {
    Buffer &g = buf(gate), &u = buf(up);
    pool_.run(T_, [&](int64_t t, int) { act_mul_row(act, g.row(t), u.row(t), dims_.inter); });
  }

  void scale(Buf b, float s) override {
    Buffer& a = buf(b);
    pool_.run(rows_of(b), [&](int64_t t, int) {
      for (int64_t i = 0; i < a.width; ++i) a.row(t)[i] *= s;
    });
  }

  void softcap(Buf b, float cap) override {
    Buffer& a = buf(b);
    pool_.run(rows_of(b), [&](int64_t t, int) { softcap_inplace(a.row(t), a.width, cap); });
  }

  void rope(Buf b, int table) override {
    Buffer& a = buf(b);
    const int64_t heads = a.width / dims_.head_dim;
    pool_.run(T_, [&](int64_t t, int) { rope_row(a.row(t), heads, pos_[t], table); });
  }

  void store_kv(int64_t layer) override {
    Buffer &K = buf(Buf::K), &V = buf(Buf::V);
    pool_.run(T_, [&](int64_t t, int) { store_row(layer, t, K.row(t), V.row(t)); });
  }

  void matmul(std::span<const MatmulJob> jobs, Buf in) override { matmul_rows_of(jobs, buf(in), T_); }
  void matmul_act(const MatmulJob& gate, const MatmulJob& up, Buf in, Activation act) override {
    const MatmulJob jobs[2] = {gate, up};
    matmul_rows_of(jobs, buf(in), T_, act == Activation::Silu ? Fuse::Silu : Fuse::GeluTanh);
  }
  void matmul_add(const MatmulJob& job, Buf in, Buf x) override { matmul_rows_of({&job, 1}, buf(in), T_, Fuse::Add, x); }
  void head(const WeightMatrix& w, int64_t rows) override {
    const MatmulJob j{&w, Buf::Logits, {}};
    matmul_rows_of({&j, 1}, buf(Buf::Sel), rows);
  }

  void rope_and_cache(int64_t layer, const Norm& q_norm, const Norm& k_norm, int table) override;
  void attention(int64_t layer, const Attention& a) override;
  void prefetch(std::span<const MatmulJob> jobs) override;

  void select_rows(std::span<const int64_t> rows, const Norm& n) override {
    const float* wf = norm_weight(n, 0);
    const float* bf = n.kind == NormKind::Layer ? widen(n.bias, 1) : nullptr;
    Buffer &x = buf(Buf::X), &sel = buf(Buf::Sel);
    R_ = int64_t(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) norm_row(x.row(rows[r]), wf, bf, n, dims_.hidden, sel.row(int64_t(r)));
  }

  std::span<const float> logits(int64_t rows) override {
    return {buf(Buf::Logits).p.get(), size_t(rows * dims_.vocab)};
  }

  void write(Buf b, std::span<const float> v) override { std::copy(v.begin(), v.end(), buf(b).p.get()); }
  std::vector<float> read(Buf b, int64_t rows) override {
    const float* p = buf(b).p.get();
    return {p, p + rows * buf(b).width};
  }

  ThreadPool& pool() { return pool_; }

 private:
  Buffer& buf(Buf b) { return bufs_[size_t(b)]; }
  int64_t rows_of(Buf b) const { return b >= Buf::Sel ? R_ : T_; }
  enum class Fuse { None, Silu, GeluTanh, Add };
  static void act_mul_row(Activation act, float* g, const float* u, int64_t n) {
    if (act == Activation::Silu) engine::silu_mul(g, u, n);
    else engine::gelu_tanh_mul(g, u, n);
  }
  // The norm's weights as fp32 in vector slot `slot` (1 + w for RmsOnePlus).
  const float* norm_weight(const Norm& n, int slot);
  // Every run of n.w.n values of a row of `width` normalized.
  void norm_row(const float* x, const float* w, const float* b, const Norm& n, int64_t width, float* out) const {
    const int64_t g = n.w.n;
    for (int64_t o = 0; o < width; o += g) {
      if (n.kind == NormKind::Layer) layernorm(x + o, w, b, eps_, g, out + o);
      else engine::rmsnorm(x + o, w, eps_, g, out + o);
    }
  }
  void store_row(int64_t layer, int64_t t, const float* k, const float* v);
  // How matmul_rows_of splits a matmul: row_tasks tasks of rows_per rows (of total_rows,
  // the jobs' rows in order; Silu: of each job) times chunks of `batch` activation rows.
  struct RowSplit {
    int64_t batch = 0, total_rows = 0, rows_per = 0, row_tasks = 0;
  };
  RowSplit split_rows(std::span<const MatmulJob> jobs, int64_t B, bool silu) const;
  void warm_step(int thread, size_t bytes);
  void matmul_rows_of(std::span<const MatmulJob> jobs, const Buffer& in, int64_t B, Fuse fuse = Fuse::None,
                      Buf resid = Buf::X);
  // `w` as fp32: the stored floats when F32, else widened into vector slot `slot`.
  const float* widen(const VecRef& w, int slot);
  void rope_row(float* v, int64_t heads, int64_t pos, int table) const;
  uint8_t* cache(int64_t layer, int kv) const {  // MLA: one cache, the values are the keys' first mla_rank
    return kv_.get() + kv_layer_off_[size_t(layer)] + (dims_.mla_rank > 0 ? 0 : kv_layer_bytes_[size_t(layer)] * size_t(kv));
  }
  // Byte offset within layer `layer`'s k (or v) of (slot, kv head, ring index)'s head_dim values.
  size_t kv_row_offset(int64_t layer, int64_t slot, int64_t kv_head, int64_t idx) const {
    const size_t row = (size_t(slot) * size_t(dims_.kv_heads) + size_t(kv_head)) * size_t(kv_pos_[size_t(layer)]) + size_t(idx);
    return row * size_t(dims_.head_dim) * (cfg_.kv_dtype == DType::F16 ? 2 : 4);
  }
  template <class T>
  Array<T> alloc(size_t n) {
    allocated_ += n * sizeof(T);
    return Array<T>(new (std::align_val_t(64)) T[n]);
  }

  // A matmul over raw rows: out[b] = W . in[b] for n rows (the experts' gathered rows);
  // with q8 set (fast math), over those rows as Q8_K, ldq bytes apart, instead.
  struct RawJob {
    const WeightMatrix* w = nullptr;
    const float* in = nullptr;
    int64_t ldx = 0, n = 0;
    float* out = nullptr;
    int64_t ldo = 0;
    const uint8_t* q8 = nullptr;
    size_t ldq = 0;
  };
  struct RawTask {
    int32_t job = 0;
    int64_t r0 = 0, r1 = 0, b0 = 0, nb = 0;
  };
  void run_raw(std::span<const RawJob> jobs);  // all in one dispatch
  // moe()'s stages: routing and gathering, the routed experts, the weighted sum (+ shared).
  void moe_route(const MoeFfn& f);
  void moe_routed(const MoeFfn& f);
  void moe_combine(const MoeFfn& f);
  void moe_experts(const MoeFfn& f, bool gate_up, size_t e0, size_t e1);  // experts [e0, e1)
  // fn(i, thread) for i in [0, n): the mixture's per-row steps are a few thousand flops at
  // decode, where a dispatch costs more than the work, so a pass of at most 64 assignments
  // (tokens x top_k) runs them on this thread.
  template <class F>
  void moe_each(int64_t assignments, int64_t n, F&& fn) {
    if (assignments <= 64) for (int64_t i = 0; i < n; ++i) fn(i, 0);
    else pool_.run(n, fn);
  }
  // Fast math: whether the routed experts' gate/up (or down) read their input rows as Q8_K.
  bool moe_q8(const MoeFfn& f, bool gate_up) const;
  // The mixture-of-experts buffers (engine_memory's cpu_moe_bytes), when the model has experts.
  struct MoeState {
    Array<float> router, gathered, gate_up, out, shared_gate;
    Array<uint8_t> q8;  // fast math: the gathered rows (or their activations) as Q8_K, q8_ld bytes apart
    size_t q8_ld = 0;
    float* gate = nullptr;  // [A x inter] each, in gate_up; gpt-oss: rows of 2 x inter from gate
    float* up = nullptr;
    Array<int32_t> choice, order, row_of;
    Array<float> weight;
    Array<int64_t> first;
    std::vector<RawJob> jobs;
    std::vector<RawTask> tasks;  // (also matmul_heads')
    std::vector<int32_t> used;  // experts the pass routes to (streamed experts' rounds)
  } moe_;

  ThreadPool pool_;
  EngineDims dims_;
  EngineConfig cfg_;
  float eps_ = 1e-5f;
  RopeStyle rope_ = RopeStyle::NeoX;
  std::vector<float> inv_freq_[2];  // rotary tables: 0, and 1 (gemma3's sliding layers)
  int64_t rot_ = 0;                 // rotated values per head
  int64_t rot_off_ = 0;             // where they start in a head (MLA: after the latent's mla_rank)
  std::vector<RawJob> head_jobs_;   // matmul_heads' per-head jobs
  float mscale_ = 1.0f;             // table 0's cos/sin factor
  Buffer bufs_[size_t(Buf::Logits) + 1];
  Array<int32_t> id_, slot_;
  Array<int64_t> pos_;
  int64_t T_ = 0, R_ = 0;
  // [layers][2 (k,v)][max_batch][kv_heads][positions of the layer][head_dim]: a head's
  // positions are one contiguous run, which attention streams through (positions strided by
  // kv_dim, the rows of a decode step's attention came from DRAM a few hundred bytes at a
  // time). A sliding layer holds a ring (position p at p mod its positions).
  Array<uint8_t> kv_;
  std::vector<int64_t> kv_pos_;        // per layer: positions per slot
  std::vector<size_t> kv_layer_bytes_, kv_layer_off_;  // per layer: one of k or v; offset of its k
  Array<float> scores_;  // [threads][max_context], attention scratch
  // prefetch(): per thread, the byte ranges of the next matmul's weights it warms during
  // attention (at most kWarmBytes: a share of L2 beside attention's own reads), and how
  // far it has got. Own cache line each.
  static constexpr size_t kWarmBytes = size_t(256) << 10;
  struct alignas(64) Warm {
    struct Seg {
      const uint8_t* p = nullptr;
      size_t bytes = 0;
    } seg[3];
    size_t n = 0, next = 0, done = 0;
  };
  std::vector<Warm> warm_;
  // Fast math: a matmul's input rows as Q8_K (kernels_q8.hpp), q8_ld_ bytes apart, and
  // rounded to bf16 (kernels_fast_bf16.hpp), bf_ld_ values apart.
  Array<uint8_t> q8_;
  size_t q8_ld_ = 0;
  Array<uint16_t> bf_;
  int64_t bf_ld_ = 0;
  Array<float> vecs_;    // [kVecSlots][widest], widened weight vectors
  int64_t widest_ = 0;
  uint64_t allocated_ = 0;
};

void CpuBackend::allocate(const BackendSetup& s) {
  dims_ = s.dims;
  cfg_ = s.memory.config;
  eps_ = s.eps;
  rope_ = s.rope;
  inv_freq_[0].assign(s.inv_freq.begin(), s.inv_freq.end());
  inv_freq_[1].assign(s.inv_freq_local.begin(), s.inv_freq_local.end());
  if (inv_freq_[1].empty()) inv_freq_[1] = inv_freq_[0];
  rot_ = s.rot_dims > 0 ? s.rot_dims : dims_.head_dim;
  rot_off_ = dims_.mla_rank;
  head_jobs_.reserve(size_t(dims_.heads));
  mscale_ = s.rope_mscale;
  const size_t esize = cfg_.kv_dtype == DType::F16 ? 2 : 4;
  kv_pos_ = s.memory.kv_positions;
  kv_pos_.resize(size_t(dims_.layers), cfg_.max_context);
  kv_layer_bytes_.clear();
  kv_layer_off_.clear();
  size_t kv_total = 0;
  for (int64_t p : kv_pos_) {
    kv_layer_bytes_.push_back(size_t(cfg_.max_batch) * size_t(p) * size_t(dims_.kv_dim()) * esize);
    kv_layer_off_.push_back(kv_total);
    kv_total += (dims_.mla_rank > 0 ? 1 : 2) * kv_layer_bytes_.back();  // MLA: the latent only
  }
  auto oom = [&](const std::string& why) {
    return Error("engine.out_of_memory",
                 fmt::format("cannot allocate the run state: KV cache {} bytes ({} x {} x {}, {}) "
                             "plus activations for {}{}",
                             s.memory.kv_cache, plural(uint64_t(cfg_.max_batch), "slot"),
                             plural(uint64_t(cfg_.max_context), "position"), plural(uint64_t(dims_.layers), "layer"),
                             dtype_name(cfg_.kv_dtype), plural(uint64_t(cfg_.max_tokens), "token"), why),
                 {.hint = "lower --context or --batch-size, or use an f16 KV cache"}, Exit::OutOfMemory);
  };
  // The KV cache's pages are only touched as positions fill, so an over-large one would
  // "succeed" and be killed later; check it against the memory available now instead.
  if (uint64_t avail = free_bytes_on(device()); avail > 0 && s.memory.total() > avail)
    throw oom(fmt::format("; {} bytes are available", avail));
  const int64_t T = cfg_.max_tokens, R = cfg_.logit_rows;
  try {
    for (size_t b = 0; b < std::size(bufs_); ++b) {
      const int64_t rows = b >= size_t(Buf::Sel) ? R : T;
      bufs_[b].width = buf_width(dims_, Buf(b));
      bufs_[b].p = alloc<float>(size_t(rows * bufs_[b].width));
    }
    id_ = alloc<int32_t>(size_t(T));
    slot_ = alloc<int32_t>(size_t(T));
    pos_ = alloc<int64_t>(size_t(T));
    kv_ = alloc<uint8_t>(kv_total);  // pages are touched as positions fill
    scores_ = alloc<float>(size_t(pool_.size()) * size_t(cfg_.max_context));
    if (dims_.experts > 0) {  // cpu_moe_bytes()
      const size_t E = size_t(dims_.experts), A = size_t(T) * size_t(dims_.top_k), H = size_t(dims_.hidden),
                   I = size_t(dims_.expert_inter);
      moe_.router = alloc<float>(size_t(T) * E);
      moe_.choice = alloc<int32_t>(A);
      moe_.order = alloc<int32_t>(A);
      moe_.row_of = alloc<int32_t>(A);
      moe_.weight = alloc<float>(A);
      moe_.first = alloc<int64_t>(E + 1);
      moe_.gathered = alloc<float>(A * H);
      moe_.out = alloc<float>(A * H);
      moe_.gate_up = alloc<float>(2 * A * I);
      moe_.gate = moe_.gate_up.get();
      moe_.up = moe_.gate + A * I;
      moe_.shared_gate = alloc<float>(size_t(T));
      if (cfg_.fast_math) {  // engine_memory() charges the same (cpu_moe_q8_bytes)
        moe_.q8_ld = cpu_q8k_row_bytes(int64_t(std::max(H, I)));
        moe_.q8 = alloc<uint8_t>(A * moe_.q8_ld);
      }
      moe_.jobs.reserve(2 * E);
      moe_.used.reserve(E);
      moe_.tasks.reserve(size_t(pool_.size()) * 16 + 4 * E);
    }
    widest_ = dims_.widest_vector();
    vecs_ = alloc<float>(size_t(kVecSlots) * size_t(widest_));
    if (cfg_.fast_math) {  // engine_memory() charges the same
      const int64_t in = dims_.widest_matmul_input();
      q8_ld_ = cpu_q8k_row_bytes(in);
      q8_ = alloc<uint8_t>(size_t(std::max(T, R)) * q8_ld_);
      bf_ld_ = int64_t(cpu_bf16x_row_bytes(in) / 2);
      bf_ = alloc<uint16_t>(size_t(std::max(T, R)) * size_t(bf_ld_));
    }
  } catch (const std::bad_alloc&) {
    throw oom("");
  }
}

const float* CpuBackend::widen(const VecRef& w, int slot) {
  if (!w) return nullptr;
  if (w.dtype == DType::F32) return static_cast<const float*>(w.data);
  float* out = vecs_.get() + size_t(slot) * size_t(widest_);
  const auto* p = static_cast<const uint8_t*>(w.data);
  for (int64_t i = 0; i < w.n; ++i)
    out[i] = w.dtype == DType::F16 ? blocks::half_to_float(blocks::load_u16(p + 2 * i))
                                   : blocks::bf16_to_float(blocks::load_u16(p + 2 * i));
  return out;
}

const float* CpuBackend::norm_weight(const Norm& n, int slot) {
  if (n.kind != NormKind::RmsOnePlus) return widen(n.w, slot);
  const float* w = widen(n.w, slot);
  float* out = vecs_.get() + size_t(slot) * size_t(widest_);
  for (int64_t i = 0; i < n.w.n; ++i) out[i] = 1.0f + w[i];  // in place when widened
  return out;
}

CpuBackend::RowSplit CpuBackend::split_rows(std::span<const MatmulJob> jobs, int64_t B, bool silu) const {
  const bool gemm = B >= kMatmulGemmBatch;
  RowSplit sp;
  sp.batch = gemm ? B : kDecodeBatchChunk;
  for (const auto& j : jobs) sp.total_rows += j.w->rows;
  const int64_t bchunks = (B + sp.batch - 1) / sp.batch;
  const int64_t want_tasks = int64_t(pool_.size()) * (gemm ? 8 : 4);
  int64_t rows_per = std::max<int64_t>(1, (sp.total_rows * bchunks + want_tasks - 1) / want_tasks);
  if (silu) rows_per = (rows_per + 1) / 2, sp.total_rows = jobs[0].w->rows;  // a row of each job per index
  // Multiples of 8 (decode tiles take 8 rows, the others 2). Decode prefetches 2 tiles
  // ahead within a task, so its tasks are longer; prefill tasks match the GEMM blocks.
  sp.rows_per = std::min<int64_t>((rows_per + 7) / 8 * 8, gemm ? 64 : kDecodeRows);
  sp.row_tasks = (sp.total_rows + sp.rows_per - 1) / sp.rows_per;
  return sp;
}

void CpuBackend::prefetch(std::span<const MatmulJob> jobs) {
  // Decode and small batches only (below kMatmulGemmBatch, so one chunk of activation
  // rows): a prefill matmul is a GEMM that reads each weight once for many tokens, and
  // its attention is compute-bound. Thread t will run
  // block t of the matmul's tasks (ThreadPool), i.e. rows [a, b) of the jobs' rows taken in
  // order; its warm-up is the first kWarmBytes of them.
  for (auto& w : warm_) w = {};
  if (jobs.empty() || T_ >= kMatmulGemmBatch) return;
  const RowSplit sp = split_rows(jobs, T_, false);
  const int T = pool_.size();
  for (int t = 0; t < T; ++t) {
    int64_t lo = std::min(sp.total_rows, sp.row_tasks * t / T * sp.rows_per);
    const int64_t hi = std::min(sp.total_rows, sp.row_tasks * (t + 1) / T * sp.rows_per);
    size_t budget = kWarmBytes;
    int64_t base = 0;
    Warm& w = warm_[size_t(t)];
    for (const auto& j : jobs) {  // the range may span jobs (q, k, v)
      const int64_t a = std::max(lo, base), b = std::min(hi, base + j.w->rows);
      if (a < b && w.n < std::size(w.seg)) {
        const size_t bytes = std::min(budget, size_t(b - a) * j.w->row_bytes);
        w.seg[w.n++] = {j.w->data + size_t(a - base) * j.w->row_bytes, bytes};
        budget -= bytes;
      }
      base += j.w->rows;
    }
  }
}

// Thread `thread`'s next `bytes` of its warm-up (called between attention tasks).
void CpuBackend::warm_step(int thread, size_t bytes) {
  Warm& w = warm_[size_t(thread)];
  while (bytes > 0 && w.next < w.n) {
    auto& seg = w.seg[w.next];
    const size_t n = std::min(bytes, seg.bytes - w.done);
    prefetch_l2(seg.p + w.done, n);
    bytes -= n;
    w.done += n;
    if (w.done == seg.bytes) ++w.next, w.done = 0;
  }
}

void CpuBackend::matmul_rows_of(std::span<const MatmulJob> jobs, const Buffer& in, int64_t B, Fuse fuse, Buf resid) {
  // Tasks: (chunk of weight rows) x (chunk of activation rows). Small batches (decode):
  // a chunk of kBatch activation rows stays in L2 while the task's weight rows stream
  // past it once. Large ones (prefill): a task takes all activation rows, so each weight
  // row comes from memory once per forward; the kernel blocks for the caches.
  // Fuse::Silu: jobs are gate and up of the same rows; a task takes rows [r0, r1) of both,
  // then gate = silu(gate) * up on them. Fuse::Add: resid += out on the task's rows.
  // Biases are added by the task that computed the rows, after their products (y = W.x,
  // then y += b: the arithmetic of separate ops, one synchronisation).
  const bool silu = fuse == Fuse::Silu || fuse == Fuse::GeluTanh;  // gate and up rows together
  const RowSplit sp = split_rows(jobs, B, silu);
  const int64_t kBatch = sp.batch, total_rows = sp.total_rows, rows_per = sp.rows_per, row_tasks = sp.row_tasks;
  const int64_t bchunks = (B + kBatch - 1) / kBatch;
  const int64_t ldx = in.width;
  const float* bias[3] = {};
  for (size_t k = 0; k < jobs.size() && k < 3; ++k) bias[k] = widen(jobs[k].bias, int(k));
  // Fast math: the input rows rounded (to 8 bits, to bf16) once, for the jobs whose weights
  // read them.
  const auto path = [&](const MatmulJob& j) { return q8_ ? fast_math_path(j.w->dtype, j.w->cols) : FastPath::None; };
  const auto wants = [&](FastPath p) { return std::any_of(jobs.begin(), jobs.end(), [&](const MatmulJob& j) { return path(j) == p; }); };
  const bool want_q8 = wants(FastPath::Q8K), want_bf = wants(FastPath::BF16);
  if (want_q8 || want_bf) {
    const int64_t cols = jobs[0].w->cols;
    const auto round_row = [&](int64_t t, int) {
      if (want_q8) quantize_q8k(in.row(t), cols, q8_.get() + size_t(t) * q8_ld_);
      if (want_bf) round_bf16_row(in.row(t), cols, bf_.get() + t * bf_ld_);
    };
    if (B == 1) round_row(0, 0);
    else pool_.run(B, round_row);
  }
  pool_.run(row_tasks * bchunks, [&](int64_t task, int) {
    int64_t bc = task / row_tasks, rt = task % row_tasks;
    int64_t b0 = bc * kBatch, nb = std::min(kBatch, B - b0);
    int64_t r0 = rt * rows_per, r1 = std::min(total_rows, r0 + rows_per);
    int64_t base = 0;
    for (size_t k = 0; k < jobs.size(); ++k) {  // the global row range may span jobs
      const MatmulJob& j = jobs[k];
      int64_t lo = std::max(r0, base), hi = std::min(r1, base + j.w->rows);
      if (!silu) base += j.w->rows;
      if (lo >= hi) continue;
      const int64_t off = silu ? 0 : base - j.w->rows;
      const Buffer& out = bufs_[size_t(j.out)];
      switch (path(j)) {
        case FastPath::Q8K:
          matmul_rows_q8k(*j.w, q8_.get() + size_t(b0) * q8_ld_, q8_ld_, nb, out.row(b0), out.width, lo - off, hi - off);
          break;
        case FastPath::BF16:
          matmul_rows_bf16x(*j.w, bf_.get() + b0 * bf_ld_, bf_ld_, nb, out.row(b0), out.width, lo - off, hi - off);
          break;
        case FastPath::None: matmul_rows(*j.w, in.row(b0), ldx, nb, out.row(b0), out.width, lo - off, hi - off);
      }
      if (const float* bv = k < 3 ? bias[k] : nullptr)
        for (int64_t t = b0; t < b0 + nb; ++t)
          for (int64_t i = lo - off; i < hi - off; ++i) out.row(t)[i] += bv[i];
      if (fuse == Fuse::Add)
        for (int64_t t = b0; t < b0 + nb; ++t) {
          float* x = bufs_[size_t(resid)].row(t);
          const float* y = out.row(t);
          for (int64_t i = lo - off; i < hi - off; ++i) x[i] += y[i];
        }
    }
    if (silu && r0 < r1)
      for (int64_t t = b0; t < b0 + nb; ++t)
        act_mul_row(fuse == Fuse::Silu ? Activation::Silu : Activation::GeluTanh, bufs_[size_t(jobs[0].out)].row(t) + r0,
                    bufs_[size_t(jobs[1].out)].row(t) + r0, r1 - r0);
  });
}

void CpuBackend::run_raw(std::span<const RawJob> jobs) {
  // Tasks as in matmul_rows_of: (weight rows) x (activation rows); a job of at least
  // kMatmulGemmBatch rows is one GEMM chunk, smaller ones chunks of kDecodeBatchChunk.
  auto batch_of = [](const RawJob& j) { return j.n >= kMatmulGemmBatch ? j.n : kDecodeBatchChunk; };
  int64_t work = 0;
  bool gemm = false;
  for (const RawJob& j : jobs) {
    work += j.w->rows * ((j.n + batch_of(j) - 1) / batch_of(j));
    gemm = gemm || j.n >= kMatmulGemmBatch;
  }
  const int64_t want = int64_t(pool_.size()) * (gemm ? 8 : 4);
  const int64_t rows_per = std::min<int64_t>((std::max<int64_t>(1, (work + want - 1) / want) + 7) / 8 * 8,
                                             gemm ? 64 : kDecodeRows);
  auto& tasks = moe_.tasks;
  tasks.clear();
  for (size_t k = 0; k < jobs.size(); ++k) {
    const RawJob& j = jobs[k];
    for (int64_t b0 = 0; b0 < j.n; b0 += batch_of(j))
      for (int64_t r0 = 0; r0 < j.w->rows; r0 += rows_per)
        tasks.push_back({int32_t(k), r0, std::min(j.w->rows, r0 + rows_per), b0, std::min(batch_of(j), j.n - b0)});
  }
  pool_.run(int64_t(tasks.size()), [&](int64_t i, int) {
    const RawTask& t = tasks[size_t(i)];
    const RawJob& j = jobs[size_t(t.job)];
    if (j.q8) matmul_rows_q8k(*j.w, j.q8 + size_t(t.b0) * j.ldq, j.ldq, t.nb, j.out + t.b0 * j.ldo, j.ldo, t.r0, t.r1);
    else matmul_expert_rows(*j.w, j.in + t.b0 * j.ldx, j.ldx, t.nb, j.out + t.b0 * j.ldo, j.ldo, t.r0, t.r1);
  });
}

bool CpuBackend::moe_q8(const MoeFfn& f, bool gate_up) const {
  if (!moe_.q8 || f.gate_up_mixed || f.gate_up_halves) return false;  // gpt-oss, Llama 4: exact kernels only
  // Every expert's matrix must take the Q8_K path (a layer's experts share a type, stacked or not).
  return std::all_of(f.experts.begin(), f.experts.end(), [&](const MoeExpert& x) {
    const auto q8k = [](const WeightMatrix* w) { return w && fast_math_path(w->dtype, w->cols) == FastPath::Q8K; };
    return gate_up ? q8k(x.gate) && q8k(x.up) : q8k(x.down);
  });
}

// The active experts' gate and up (gate_up) or down matmuls over their gathered rows. Fast
// math (K-quant experts): the rows of experts [e0, e1) rounded to Q8_K first, once for gate
// and up together, as the dense matmul rounds its input.
void CpuBackend::moe_experts(const MoeFfn& f, bool gate_up, size_t e0, size_t e1) {
  const int64_t H = dims_.hidden, I = dims_.expert_inter;
  const bool one = f.gate_up_mixed || f.gate_up_halves;  // gate|up rows of 2I in `gate`
  const int64_t w = one ? 2 * I : I;
  const bool q8 = moe_q8(f, gate_up);
  if (q8) {
    const int64_t r0 = moe_.first[e0], n = moe_.first[e1] - r0, cols = gate_up ? H : I;
    const float* in = gate_up ? moe_.gathered.get() : moe_.gate;
    const int64_t ld = gate_up ? H : w;
    const auto round_row = [&](int64_t i, int) {
      quantize_q8k(in + (r0 + i) * ld, cols, moe_.q8.get() + size_t(r0 + i) * moe_.q8_ld);
    };
    moe_each(n, n, round_row);
  }
  const auto q8_of = [&](int64_t r) { return q8 ? moe_.q8.get() + size_t(r) * moe_.q8_ld : nullptr; };
  auto& jobs = moe_.jobs;
  jobs.clear();
  for (size_t e = e0; e < e1; ++e) {
    const int64_t r = moe_.first[e], n = moe_.first[e + 1] - r;
    if (n == 0) continue;
    const MoeExpert& x = f.experts[e];
    if (gate_up && one) {
      jobs.push_back({x.gate, moe_.gathered.get() + r * H, H, n, moe_.gate + r * w, w});
    } else if (gate_up) {
      jobs.push_back({x.gate, moe_.gathered.get() + r * H, H, n, moe_.gate + r * I, I, q8_of(r), moe_.q8_ld});
      jobs.push_back({x.up, moe_.gathered.get() + r * H, H, n, moe_.up + r * I, I, q8_of(r), moe_.q8_ld});
    } else {
      jobs.push_back({x.down, moe_.gate + r * w, w, n, moe_.out.get() + r * H, H, q8_of(r), moe_.q8_ld});
    }
  }
  run_raw(jobs);
}

void CpuBackend::moe(const MoeFfn& f) {
  const int64_t E = dims_.experts, k = f.top_k;
  if (E <= 0 || int64_t(f.experts.size()) != E || k <= 0 || k > dims_.top_k)
    throw Error("engine.bad_spec", fmt::format("a mixture of {} experts (top {}) where the run state holds {} (top {})",
                                               f.experts.size(), k, E, dims_.top_k), {}, Exit::Internal);
  moe_route(f);
  moe_routed(f);
  moe_combine(f);
}

// The router's logits, each token's choice and weights, the assignments grouped by expert,
// and each assignment's row of x gathered (Llama 4: times its weight).
void CpuBackend::moe_route(const MoeFfn& f) {
  const int64_t T = T_, E = dims_.experts, k = f.top_k, H = dims_.hidden, A = T * k;
  const Buffer& xn = buf(Buf::XN);
  const RouteLimits limits{f.groups, f.groups_used, widen(f.choice_bias, 1), f.routed_scale, f.group_top2};
  const RawJob router{f.router, xn.p.get(), xn.width, T, moe_.router.get(), E};
  run_raw({&router, 1});
  moe_each(A, T, [&](int64_t t, int) {
    float* logits = moe_.router.get() + t * E;
    if (f.router_bias)
      for (int64_t e = 0; e < E; ++e) logits[e] += vec_at(f.router_bias, e);
    route_token({logits, size_t(E)}, f.norm_topk, {moe_.choice.get() + t * k, size_t(k)},
                {moe_.weight.get() + t * k, size_t(k)}, f.routing, limits);
  });
  group_by_expert({moe_.choice.get(), size_t(A)}, E, {moe_.first.get(), size_t(E + 1)}, {moe_.order.get(), size_t(A)});
  moe_each(A, A, [&](int64_t r, int) {
    const int32_t a = moe_.order[r];
    moe_.row_of[a] = int32_t(r);
    float* g = moe_.gathered.get() + r * H;
    std::memcpy(g, xn.row(a / k), size_t(H) * 4);
    if (f.input_weighted)  // Llama 4: the expert sees x times its weight
      for (int64_t i = 0; i < H; ++i) g[i] *= moe_.weight[a];
  });
}

// The routed experts' gate and up, activation, down: at once, or (streamed experts) in
// rounds of at most bind_max experts, each round's bound just before it runs.
void CpuBackend::moe_routed(const MoeFfn& f) {
  const int64_t E = dims_.experts, A = T_ * f.top_k, H = dims_.hidden, I = dims_.expert_inter;
  // The expert of gathered row r (rows are grouped by expert).
  const auto expert_of = [&](int64_t r) {
    return size_t(std::upper_bound(moe_.first.get(), moe_.first.get() + E + 1, r) - moe_.first.get() - 1);
  };
  auto experts = [&](size_t e0, size_t e1) {
    moe_experts(f, true, e0, e1);
    moe_each(A, moe_.first[e1] - moe_.first[e0], [&](int64_t i, int) {
      const int64_t r = moe_.first[e0] + i;
      const MoeExpert& x = f.experts[expert_of(r)];
      if (f.gate_up_mixed)
        clamped_swiglu_row(moe_.gate + r * 2 * I, I, x.gate_up_bias, f.swiglu_alpha, f.swiglu_limit);
      else if (f.gate_up_halves)  // the product into the row's first half, which down reads
        act_mul_row(f.act, moe_.gate + r * 2 * I, moe_.gate + r * 2 * I + I, I);
      else if (f.clamped_swiglu)
        clamped_swiglu_split(moe_.gate + r * I, moe_.up + r * I, I, x.gate_bias, x.up_bias, f.swiglu_alpha, f.swiglu_limit);
      else
        act_mul_row(f.act, moe_.gate + r * I, moe_.up + r * I, I);
    });
    moe_experts(f, false, e0, e1);
    if (f.clamped_swiglu)
      moe_each(A, moe_.first[e1] - moe_.first[e0], [&](int64_t i, int) {
        const int64_t r = moe_.first[e0] + i;
        if (const VecRef& b = f.experts[expert_of(r)].down_bias)
          for (int64_t h = 0; h < H; ++h) moe_.out[r * H + h] += vec_at(b, h);
      });
  };
  if (!f.bind) return experts(0, size_t(E));
  std::vector<int32_t>& used = moe_.used;
  used.clear();
  for (int64_t e = 0; e < E; ++e)
    if (moe_.first[e + 1] > moe_.first[e]) used.push_back(int32_t(e));
  const size_t per = size_t(std::max<int64_t>(1, f.bind_max));
  for (size_t i = 0; i < used.size(); i += per) {
    const size_t n = std::min(per, used.size() - i);
    f.bind({used.data() + i, n});
    experts(size_t(used[i]), size_t(used[i + n - 1]) + 1);
  }
}

// Tmp = each token's routed outputs, weighted, summed in ascending expert order (as
// transformers accumulates), plus the shared expert's output (times its sigmoid gate).
void CpuBackend::moe_combine(const MoeFfn& f) {
  const int64_t T = T_, k = f.top_k, H = dims_.hidden;
  const Buffer& xn = buf(Buf::XN);
  Buffer& out = buf(Buf::Tmp);
  const bool shared = f.shared_gate || f.shared_fetch;
  if (f.shared_fetch) {  // computed by the caller's device meanwhile (a split backend's GPU)
    write(Buf::Tmp, f.shared_fetch());
  } else if (f.shared_gate) {  // Tmp = shared(x) (* sigmoid(gate . x))
    const MatmulJob gu[2] = {{f.shared_gate, Buf::Gate, {}}, {f.shared_up, Buf::Up, {}}};
    matmul_rows_of(gu, xn, T, f.act == Activation::Silu ? Fuse::Silu : Fuse::GeluTanh);
    const MatmulJob down{f.shared_down, Buf::Tmp, {}};
    matmul_rows_of({&down, 1}, buf(Buf::Gate), T);
  }
  const float* sg = shared ? widen(f.shared_expert_gate, 0) : nullptr;
  moe_each(T * k, T, [&](int64_t t, int) {
    float* o = out.row(t);
    float g = 1.0f;
    if (sg) {
      float dot = 0;
      for (int64_t i = 0; i < H; ++i) dot += xn.row(t)[i] * sg[i];
      g = 1.0f / (1.0f + std::exp(-dot));
    }
    int32_t js[64];
    const int64_t n = std::min<int64_t>(k, 64);
    for (int64_t j = 0; j < n; ++j) js[j] = int32_t(j);
    const int32_t* ch = moe_.choice.get() + t * k;
    std::sort(js, js + n, [&](int32_t a, int32_t b) { return ch[a] < ch[b]; });
    float* acc = moe_.gathered.get() + moe_.row_of[t * k] * H;  // this token's first gathered row: free now
    std::fill(acc, acc + H, 0.0f);
    for (int64_t q = 0; q < n; ++q) {
      const float w = f.input_weighted ? 1.0f : moe_.weight[t * k + js[q]];
      const float* y = moe_.out.get() + int64_t(moe_.row_of[t * k + js[q]]) * H;
      for (int64_t i = 0; i < H; ++i) acc[i] += w * y[i];
    }
    for (int64_t i = 0; i < H; ++i) o[i] = acc[i] + (shared ? g * o[i] : 0.0f);
  });
}

void CpuBackend::matmul_heads(std::span<const WeightMatrix> w, Buf in, int64_t in_stride, Buf out, int64_t out_stride) {
  const Buffer &x = buf(in), &y = buf(out);
  head_jobs_.clear();
  for (size_t h = 0; h < w.size(); ++h)
    head_jobs_.push_back({&w[h], x.p.get() + int64_t(h) * in_stride, x.width, T_, y.p.get() + int64_t(h) * out_stride, y.width});
  run_raw(head_jobs_);
}

void CpuBackend::mla_rope_cache(int64_t layer) {
  const int64_t heads = dims_.heads, hd = dims_.head_dim, r = dims_.mla_rank, rope = dims_.mla_rope;
  const int64_t qk = dims_.mla_nope + rope;
  Buffer &QH = buf(Buf::QH), &Q = buf(Buf::Q), &K = buf(Buf::K);
  pool_.run(T_, [&](int64_t t, int) {
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(Q.row(t) + h * hd + r, QH.row(t) + h * qk + dims_.mla_nope, size_t(rope) * 4);
    rope_row(Q.row(t), heads, pos_[t], 0);
    rope_row(K.row(t), 1, pos_[t], 0);
    store_row(layer, t, K.row(t), nullptr);
  });
}

void CpuBackend::rope_row(float* v, int64_t heads, int64_t pos, int table) const {
  const int64_t hd = dims_.head_dim, half = rot_ / 2;
  const bool neox = rope_ == RopeStyle::NeoX;
  const std::vector<float>& inv_freq = inv_freq_[table ? 1 : 0];
  for (int64_t i = 0; i < half; ++i) {
    float angle = float(pos) * inv_freq[size_t(i)];
    float c = float(std::cos(double(angle))), s = float(std::sin(double(angle)));
    if (table == 0 && mscale_ != 1.0f) c *= mscale_, s *= mscale_;
    for (int64_t h = 0; h < heads; ++h) {
      float* x = v + h * hd + rot_off_;
      int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      float x0 = x[a], x1 = x[b];
      x[a] = x0 * c - x1 * s;
      x[b] = x1 * c + x0 * s;
    }
  }
}

void CpuBackend::store_row(int64_t layer, int64_t t, const float* k, const float* v) {
  const int64_t hd = dims_.head_dim, idx = pos_[t] % kv_pos_[size_t(layer)];
  uint8_t* kcache = cache(layer, 0);
  uint8_t* vcache = cache(layer, 1);
  for (int64_t h = 0; h < dims_.kv_heads; ++h) {
    const size_t off = kv_row_offset(layer, slot_[t], h, idx);
    const bool values = dims_.mla_rank == 0;  // MLA: the latent row is both
    if (cfg_.kv_dtype == DType::F16) {
      store_f16(k + h * hd, reinterpret_cast<uint16_t*>(kcache + off), hd);
      if (values) store_f16(v + h * hd, reinterpret_cast<uint16_t*>(vcache + off), hd);
    } else {
      std::memcpy(kcache + off, k + h * hd, size_t(hd) * 4);
      if (values) std::memcpy(vcache + off, v + h * hd, size_t(hd) * 4);
    }
  }
}

void CpuBackend::rope_and_cache(int64_t layer, const Norm& q_norm, const Norm& k_norm, int table) {
  const float* qn = q_norm.given() ? norm_weight(q_norm, 0) : nullptr;  // null when given: unit weights
  const float* kn = k_norm.given() ? norm_weight(k_norm, 1) : nullptr;
  Buffer &Q = buf(Buf::Q), &K = buf(Buf::K), &V = buf(Buf::V);
  pool_.run(T_, [&](int64_t t, int) {
    float* q = Q.row(t);
    float* k = K.row(t);
    if (q_norm.given()) norm_row(q, qn, nullptr, q_norm, Q.width, q);
    if (k_norm.given()) norm_row(k, kn, nullptr, k_norm, K.width, k);
    if (table >= 0) rope_row(q, dims_.heads, pos_[t], table), rope_row(k, dims_.kv_heads, pos_[t], table);
    store_row(layer, t, k, V.row(t));
  });
}

// The cache rows a token attends to are positions [lo, pos], at ring indices from lo mod
// the layer's positions: one contiguous run, or two when the ring wraps.
void CpuBackend::attention(int64_t layer, const Attention& a) {
  const int64_t heads = dims_.heads, hd = dims_.head_dim, ring = kv_pos_[size_t(layer)];
  const int64_t group = heads / dims_.kv_heads;
  const bool f16 = cfg_.kv_dtype == DType::F16;
  const float scale = a.scale > 0 ? a.scale : 1.0f / std::sqrt(float(hd));
  const int64_t vd = dims_.mla_rank > 0 ? dims_.mla_rank : hd;  // values per row (MLA: the latent)
  const float* sinks = widen(a.sinks, 2);
  const uint8_t* kc = cache(layer, 0);
  const uint8_t* vc = cache(layer, 1);
  const Buffer &Q = buf(Buf::Q), &out = buf(Buf::Att);
  if (hd > kMaxWrapHeadDim && ring < cfg_.max_context)
    throw Error("engine.bad_spec", fmt::format("head_dim {} above the {} a sliding-window layer supports", hd, kMaxWrapHeadDim));
  // The warm-up of prefetch(), spread over each thread's share of the tasks.
  const int64_t per_thread = (T_ * heads + pool_.size() - 1) / pool_.size();
  const size_t warm_per_task = (kWarmBytes / size_t(per_thread) + 63) / 64 * 64;
  pool_.run(T_ * heads, [&](int64_t task, int thread) {
    const int64_t t = task / heads, h = task % heads, g = h / group;
    const int64_t pos = pos_[t];
    const int64_t lo = a.window <= 0 ? 0 : a.chunked ? pos - pos % a.window : std::max<int64_t>(0, pos - a.window + 1);
    const float* q = Q.row(t) + h * hd;
    // Llama 4's query temperature, folded into the scale (q's scale, applied to its scores).
    const float s = a.temp_floor > 0
                        ? scale * (std::log1p(std::floor(float(pos + 1) / float(a.temp_floor))) * a.temp_scale + 1.0f)
                        : scale;
    float* o = out.row(t) + h * hd;
    float* sc = scores_.get() + size_t(thread) * size_t(cfg_.max_context);
    const int64_t n = pos - lo + 1, first = lo % ring, n1 = std::min(n, ring - first), n2 = n - n1;
    const size_t at = kv_row_offset(layer, slot_[t], g, first), wrap = kv_row_offset(layer, slot_[t], g, 0);
    attn_scores(q, kc + at, f16, hd, n1, hd, s, sc);
    if (n2) attn_scores(q, kc + wrap, f16, hd, n2, hd, s, sc + n1);
    if (a.softcap > 0) softcap_inplace(sc, n, a.softcap);
    if (sinks) softmax_with_sink(sc, n, sinks[h]);
    else softmax_inplace(sc, n);
    attn_mix(sc, vc + at, f16, hd, n1, vd, o);
    if (n2) {
      alignas(64) float rest[kMaxWrapHeadDim];
      attn_mix(sc + n1, vc + wrap, f16, hd, n2, vd, rest);
      for (int64_t e = 0; e < vd; ++e) o[e] += rest[e];
    }
    warm_step(thread, warm_per_task);
  });
  for (auto& w : warm_) w = {};
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace nunchaku::engine
