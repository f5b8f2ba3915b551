// The CUDA backend: the run state (activations, KV cache, logits) in one device's memory,
// every op a kernel of cuda/engine_ops.cu on one compute stream, weights read in place from
// device memory in their stored type. The CPU backend is its oracle (tests/test_cuda.cpp
// compares op by op); results differ from it only by fp32 summation order.
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "cuda/device_info.hpp"
#include "cuda/engine_ops.hpp"
#include "cuda/loader.hpp"
#include "engine/backend.hpp"
#include "io/weight_store.hpp"

namespace nunchaku::engine {
namespace {

bool has_wtype(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0: case DType::Q4_1:
    case DType::Q5_0: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return true;
    default: return false;
  }
}

cuda::WType wtype(DType t) {
  switch (t) {
    case DType::F32: return cuda::WType::F32;
    case DType::F16: return cuda::WType::F16;
    case DType::BF16: return cuda::WType::BF16;
    case DType::Q8_0: return cuda::WType::Q8_0;
    case DType::Q4_0: return cuda::WType::Q4_0;
    case DType::Q4_1: return cuda::WType::Q4_1;
    case DType::Q5_0: return cuda::WType::Q5_0;
    case DType::Q5_1: return cuda::WType::Q5_1;
    case DType::Q4_K: return cuda::WType::Q4_K;
    case DType::Q5_K: return cuda::WType::Q5_K;
    case DType::Q6_K: return cuda::WType::Q6_K;
    default: throw Error("engine.unsupported_dtype", fmt::format("the CUDA backend cannot read {} weights", dtype_name(t)));
  }
}

cuda::DMatrix dmatrix(const WeightMatrix& w) { return {w.data, wtype(w.dtype), w.rows, w.cols, w.row_bytes}; }
cuda::DVec dvec(const VecRef& v) { return v ? cuda::DVec{v.data, wtype(v.dtype), v.n} : cuda::DVec{}; }
// A norm's weights keep their count without data: unit weights (Llama 4's q/k norms).
cuda::DNorm dnorm(const Norm& n) {
  const cuda::NormType k = n.kind == NormKind::Rms ? cuda::NormType::Rms
                           : n.kind == NormKind::RmsOnePlus ? cuda::NormType::RmsOnePlus : cuda::NormType::Layer;
  const cuda::DVec w = n.w ? dvec(n.w) : cuda::DVec{nullptr, cuda::WType::F32, n.w.n};
  return {w, dvec(n.bias), k};
}

// MLA's per-head matrices (Transformer::bind_mla: row ranges of one tensor) as one strided
// run when they are (same shape and type, equally far apart), else nullopt.
std::optional<cuda::DHeads> strided_heads(std::span<const WeightMatrix> w) {
  const WeightMatrix& a = w[0];
  const int64_t stride = w.size() > 1 ? int64_t(w[1].data - a.data) : 0;
  for (size_t h = 1; h < w.size(); ++h) {
    const WeightMatrix& b = w[h];
    if (b.dtype != a.dtype || b.rows != a.rows || b.cols != a.cols || b.row_bytes != a.row_bytes ||
        b.input_major != a.input_major || b.data != a.data + int64_t(h) * stride)
      return std::nullopt;
  }
  return cuda::DHeads{dmatrix(a), a.input_major, int64_t(w.size()), stride};
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : index_(device) {
    std::string why;
    if (!cuda::engine_available(&why))
      throw Error("engine.no_cuda", fmt::format("cannot run on cuda:{}: {}", device, why),
                  {.hint = "run with --device cpu"});
    for (const auto& d : cuda::list_devices())
      if (d.index == device) name_ = d.name;
    if (name_.empty())
      throw Error("engine.no_cuda", fmt::format("there is no cuda:{} on this machine", device),
                  {.hint = "`nunchaku --version` lists the devices"});
    // The stream exists from construction: the weight provider made before allocate()
    // orders its copies against it.
    if (!ctx_.init(index_, &err_)) {
      if (err_.find("cudaMalloc") != std::string::npos)
        throw Error("engine.out_of_memory", fmt::format("cannot allocate cuBLAS's workspace on cuda:{}: {}", index_, err_),
                    {}, Exit::OutOfMemory);
      ok(false, "set up the compute stream");
    }
  }
  ~CudaBackend() override {
    std::string err;
    ctx_.synchronize(&err);
    for (void* p : device_) ctx_.release(p);
    ctx_.release_host(host_logits_);
  }

  std::string describe() const override { return fmt::format("cuda:{} {}", index_, name_); }
  Device device() const override { return Device{Device::Kind::Cuda, index_}; }
  bool can_read(Device d) const override { return d == device(); }
  int threads() const override { return 1; }
  void* native_stream() const override { return ctx_.stream(); }

  void allocate(const BackendSetup& s) override;
  uint64_t allocated_bytes() const override { return ctx_.allocated() + host_bytes_; }

  void set_tokens(const BatchTokens& t) override {
    T_ = int64_t(t.id.size());
    ok(ctx_.upload(id_, t.id.data(), t.id.size_bytes(), &err_), "upload token ids");
    ok(ctx_.upload(slot_, t.slot.data(), t.slot.size_bytes(), &err_), "upload token slots");
    ok(ctx_.upload(pos_, t.pos.data(), t.pos.size_bytes(), &err_), "upload token positions");
  }
  bool supports(Op op, DType t) const override {
    switch (op) {
      case Op::Embed: case Op::Matmul: return has_wtype(t);
      case Op::Norm: return t == DType::F32 || t == DType::F16 || t == DType::BF16;
      case Op::Attention: return t == DType::F32 || t == DType::F16;  // the KV cache
      case Op::Moe: return false;  // a split's CPU part runs every mixture of experts (make_engine)
      case Op::Mla: return true;
      case Op::ChunkedAttention: case Op::AttnTemperature: case Op::UnitNorm: case Op::NoRope: return true;  // Llama 4's
      default: return t == DType::F32;
    }
  }
  void embed(const WeightMatrix& table, float scale) override {
    ok(cuda::embed(ctx_, dmatrix(table), id_, T_, scale, buf(Buf::X), &err_), "embed");
  }
  void norm(Buf in, Buf out, const Norm& n) override {
    const int64_t w = n.span > 0 ? n.span : width(in);  // MLA's q and kv low-rank norms: a row's first values
    ok(cuda::norm(ctx_, buf(in), nullptr, nullptr, buf(out), rows_of(in), w, width(in), dnorm(n), eps_, &err_), "norm");
  }
  void add_norm(Buf x, Buf delta, Buf out, const Norm& n) override {
    ok(cuda::norm(ctx_, buf(x), buf(delta), nullptr, buf(out), T_, dims_.hidden, dims_.hidden, dnorm(n), eps_, &err_),
       "add_norm");
  }
  void matmul(std::span<const MatmulJob> jobs, Buf in) override {
    for (const MatmulJob& j : jobs)
      ok(cuda::matmul(ctx_, dmatrix(*j.w), buf(in), width(in), T_, buf(j.out), width(j.out), dvec(j.bias), &err_),
         j.w->name.c_str());
  }
  void rope(Buf b, int table) override {
    ok(cuda::rope(ctx_, table_shape(shape_, table), buf(b), width(b) / dims_.head_dim, T_, pos_, inv_freq_[table ? 1 : 0], &err_), "rope");
  }
  void store_kv(int64_t layer) override {
    ok(cuda::store_kv(ctx_, layer_shape(layer), buf(Buf::K), buf(Buf::V), T_, slot_, pos_, cache(layer, 0), v_cache(layer),
                      &err_),
       "store_kv");
  }
  void rope_and_cache(int64_t layer, const Norm& qn, const Norm& kn, int table) override {
    // The kernel fuses per-head norms (unit weights included); a norm over all of q or k
    // (olmoe: w.n is the row's width) runs first as a row norm. Table -1: no rotation (NoPE).
    const bool q_row = qn.given() && qn.w.n != dims_.head_dim, k_row = kn.given() && kn.w.n != dims_.head_dim;
    if (q_row) norm(Buf::Q, Buf::Q, qn);
    if (k_row) norm(Buf::K, Buf::K, kn);
    const cuda::DNorm q_head = qn.given() && !q_row ? dnorm(qn) : cuda::DNorm{};
    const cuda::DNorm k_head = kn.given() && !k_row ? dnorm(kn) : cuda::DNorm{};
    ok(cuda::rope_and_cache(ctx_, table_shape(layer_shape(layer), table), buf(Buf::Q), buf(Buf::K), buf(Buf::V), T_, slot_, pos_,
                            table < 0 ? nullptr : inv_freq_[table ? 1 : 0], q_head, k_head,
                            eps_, cache(layer, 0), v_cache(layer), &err_),
       "rope_and_cache");
  }
  void matmul_heads(std::span<const WeightMatrix> w, Buf in, int64_t in_stride, Buf out, int64_t out_stride) override {
    if (w.empty()) return;
    if (const auto run = strided_heads(w)) {
      ok(cuda::matmul_heads(ctx_, *run, buf(in), width(in), in_stride, T_, buf(out), width(out), out_stride, &err_),
         w[0].name.c_str());
      return;
    }
    for (size_t h = 0; h < w.size(); ++h)  // heads of any layout: one dispatch each
      ok(cuda::matmul_heads(ctx_, {dmatrix(w[h]), w[h].input_major, 1, 0}, buf(in) + int64_t(h) * in_stride, width(in), 0, T_,
                            buf(out) + int64_t(h) * out_stride, width(out), 0, &err_),
         w[h].name.c_str());
  }
  void mla_rope_cache(int64_t layer) override {
    ok(cuda::mla_rope_cache(ctx_, table_shape(layer_shape(layer), 0), buf(Buf::QH), dims_.mla_nope, buf(Buf::Q), buf(Buf::K), T_,
                            slot_, pos_, inv_freq_[0], cache(layer, 0), &err_),
       "mla_rope_cache");
  }
  void moe(const MoeFfn&) override {
    throw Error("engine.unsupported_architecture", "the CUDA backend does not run mixture-of-experts layers yet");
  }
  void attention(int64_t layer, const Attention& a) override {
    const cuda::AttnOpts o{a.window, a.scale, a.softcap, dvec(a.sinks), a.chunked, a.temp_floor, a.temp_scale};
    ok(cuda::attention(ctx_, layer_shape(layer), buf(Buf::Q), T_, slot_, pos_, o, cache(layer, 0), cache(layer, 1),
                       buf(Buf::Att), &err_),
       "attention");
  }
  void add(Buf x, Buf delta) override { ok(cuda::add(ctx_, buf(x), buf(delta), T_ * dims_.hidden, &err_), "add"); }
  void act_mul(Buf gate, Buf up, Activation act) override {
    ok(cuda::act_mul(ctx_, buf(gate), buf(up), T_ * dims_.inter, act == Activation::Silu ? 0 : 1, &err_), "act_mul");
  }
  void scale(Buf b, float s) override { ok(cuda::scale(ctx_, buf(b), rows_of(b) * width(b), s, &err_), "scale"); }
  void softcap(Buf b, float cap) override { ok(cuda::softcap(ctx_, buf(b), rows_of(b) * width(b), cap, &err_), "softcap"); }
  void select_rows(std::span<const int64_t> rows, const Norm& n) override {
    R_ = int64_t(rows.size());
    ok(ctx_.upload(sel_rows_, rows.data(), rows.size_bytes(), &err_), "upload logit rows");
    ok(cuda::norm(ctx_, buf(Buf::X), nullptr, sel_rows_, buf(Buf::Sel), R_, dims_.hidden, dims_.hidden, dnorm(n), eps_, &err_),
       "select_rows");
  }
  void head(const WeightMatrix& w, int64_t rows) override {
    ok(cuda::matmul(ctx_, dmatrix(w), buf(Buf::Sel), dims_.hidden, rows, buf(Buf::Logits), dims_.vocab, {}, &err_),
       "head");
  }
  std::span<const float> logits(int64_t rows) override {
    const uint64_t n = uint64_t(rows * dims_.vocab);
    ok(ctx_.download(host_logits_, buf(Buf::Logits), n * 4, &err_) && ctx_.synchronize(&err_), "logits read-back");
    return {host_logits_, size_t(n)};
  }
  void write(Buf b, std::span<const float> v) override {
    ok(ctx_.upload(buf(b), v.data(), v.size_bytes(), &err_) && ctx_.synchronize(&err_), "write a buffer");
  }
  std::vector<float> read(Buf b, int64_t rows) override {
    std::vector<float> out(size_t(rows * width(b)));
    ok(ctx_.download(out.data(), buf(b), out.size() * 4, &err_) && ctx_.synchronize(&err_), "read a buffer");
    return out;
  }

 private:
  float* buf(Buf b) const { return bufs_[size_t(b)]; }
  int64_t width(Buf b) const { return widths_[size_t(b)]; }
  int64_t rows_of(Buf b) const { return b >= Buf::Sel ? R_ : T_; }
  // Layer `layer`'s k (kv 0) or v (1) cache. MLA: one cache, the latent rows, whose first
  // mla_rank values are the values.
  void* cache(int64_t layer, int kv) const {
    const size_t v = dims_.mla_rank > 0 ? 0 : kv_layer_bytes_[size_t(layer)] * size_t(kv);
    return static_cast<uint8_t*>(kv_) + kv_layer_off_[size_t(layer)] + v;
  }
  void* v_cache(int64_t layer) const { return dims_.mla_rank > 0 ? nullptr : cache(layer, 1); }  // where V is written
  cuda::AttnShape table_shape(cuda::AttnShape s, int table) const {
    s.mscale = table ? 1.0f : mscale_;
    return s;
  }
  cuda::AttnShape layer_shape(int64_t layer) const {
    cuda::AttnShape s = shape_;
    s.positions = kv_pos_[size_t(layer)];
    return s;
  }
  void ok(bool good, const char* op) {
    if (good) return;
    throw Error("engine.cuda", fmt::format("{} on cuda:{}: {}", op, index_, err_),
                {.hint = "rerun with NUNCHAKU_CUDA_SYNC=1 to stop at the failing kernel"}, Exit::Internal);
  }
  template <class T>
  T* device_alloc(uint64_t n, const BackendSetup& s) {
    void* p = ctx_.alloc(n * sizeof(T), &err_);
    if (!p) throw oom(s, n * sizeof(T));
    device_.push_back(p);
    return static_cast<T*>(p);
  }
  Error oom(const BackendSetup& s, uint64_t wanted) const;

  int index_ = 0;
  std::string name_;
  cuda::Context ctx_;
  std::string err_;
  EngineDims dims_;
  float eps_ = 1e-5f;
  cuda::AttnShape shape_;
  float* bufs_[size_t(Buf::Logits) + 1] = {};
  int64_t widths_[size_t(Buf::Logits) + 1] = {};
  int32_t *id_ = nullptr, *slot_ = nullptr;
  int64_t *pos_ = nullptr, *sel_rows_ = nullptr;
  float* inv_freq_[2] = {};  // rotary tables 0 and 1 (1 = 0 when the model has one)
  void* kv_ = nullptr;  // per layer, k then v: [max_batch][positions of the layer][kv_dim]
  std::vector<int64_t> kv_pos_;
  std::vector<size_t> kv_layer_bytes_, kv_layer_off_;
  float* host_logits_ = nullptr;
  uint64_t host_bytes_ = 0;
  std::vector<void*> device_;
  int64_t T_ = 0, R_ = 0;
  float mscale_ = 1.0f;  // rotary table 0's cos/sin factor
};

Error CudaBackend::oom(const BackendSetup& s, uint64_t wanted) const {
  cuda::MemInfo mi;
  std::string e;
  const bool known = cuda::mem_info(index_, mi, &e);
  return Error("engine.out_of_memory",
               fmt::format("cannot allocate the run state on cuda:{}: {} wanted ({}), {} free; the run state is {} "
                           "(KV cache {}, activations {}, logits {}, scratch {})",
                           index_, format_bytes(wanted), err_, known ? format_bytes(mi.free_bytes) : "?",
                           format_bytes(s.memory.total()), format_bytes(s.memory.kv_cache),
                           format_bytes(s.memory.activations), format_bytes(s.memory.logits),
                           format_bytes(s.memory.scratch)),
               {.hint = "lower --context or --batch-size, use --kv-dtype f16, or give the weights less VRAM (--vram)"},
               Exit::OutOfMemory);
}

void CudaBackend::allocate(const BackendSetup& s) {
  dims_ = s.dims;
  eps_ = s.eps;
  const EngineConfig& cfg = s.memory.config;
  shape_ = {dims_.heads, dims_.kv_heads, dims_.head_dim, cfg.max_context, cfg.kv_dtype == DType::F16,
            s.rope == RopeStyle::NeoX, s.rot_dims > 0 ? s.rot_dims : dims_.head_dim};
  shape_.rot_off = dims_.mla_rank;  // MLA: the rotated values follow the latent's rank (as the CPU's rope_row)
  shape_.v_dims = dims_.mla_rank;
  mscale_ = s.rope_mscale;
  const uint64_t freq_bytes = cuda_rope_bytes(dims_.head_dim, !s.inv_freq_local.empty());
  // The panel: what engine_memory charged as scratch, less the workspace and frequencies.
  const uint64_t panel = s.memory.scratch - cuda::kCublasWorkspaceBytes - freq_bytes;
  if (!ctx_.alloc_panel(panel, &err_)) throw oom(s, panel);
  const int64_t T = cfg.max_tokens, R = cfg.logit_rows;
  for (size_t b = 0; b < std::size(bufs_); ++b) {
    const int64_t rows = b >= size_t(Buf::Sel) ? R : T;
    widths_[b] = buf_width(dims_, Buf(b));
    bufs_[b] = device_alloc<float>(uint64_t(rows * widths_[b]), s);
  }
  id_ = device_alloc<int32_t>(uint64_t(T), s);
  slot_ = device_alloc<int32_t>(uint64_t(T), s);
  pos_ = device_alloc<int64_t>(uint64_t(T), s);
  sel_rows_ = device_alloc<int64_t>(uint64_t(R), s);
  kv_pos_ = s.memory.kv_positions;
  kv_pos_.resize(size_t(dims_.layers), cfg.max_context);
  size_t kv_total = 0;
  for (int64_t p : kv_pos_) {
    kv_layer_bytes_.push_back(size_t(cfg.max_batch) * size_t(p) * size_t(dims_.kv_dim()) * (shape_.f16_cache ? 2 : 4));
    kv_layer_off_.push_back(kv_total);
    kv_total += (dims_.mla_rank > 0 ? 1 : 2) * kv_layer_bytes_.back();  // MLA: the latent only (engine_memory)
  }
  kv_ = device_alloc<uint8_t>(uint64_t(kv_total), s);
  // Both tables at head_dim / 2 floats (what engine_memory charges); a partial rotary uses the first rot / 2.
  const int64_t tables = s.inv_freq_local.empty() ? 1 : 2;
  float* freqs = device_alloc<float>(freq_bytes / 4, s);
  for (int64_t i = 0; i < tables; ++i) {
    inv_freq_[i] = freqs + i * (dims_.head_dim / 2);
    const auto& src = i ? s.inv_freq_local : s.inv_freq;
    ok(ctx_.upload(inv_freq_[i], src.data(), src.size_bytes(), &err_), "upload rotary frequencies");
  }
  if (tables == 1) inv_freq_[1] = inv_freq_[0];
  host_logits_ = static_cast<float*>(ctx_.alloc_host(uint64_t(R * dims_.vocab) * 4, &err_));
  if (!host_logits_) throw oom(s, uint64_t(R * dims_.vocab) * 4);
  host_bytes_ = uint64_t(R * dims_.vocab) * 4;
  ok(ctx_.synchronize(&err_), "allocate the run state");
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace nunchaku::engine
