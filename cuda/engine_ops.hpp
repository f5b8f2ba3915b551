// The device side of the engine's CUDA backend (src/engine/backend_cuda.cpp), behind a
// plain C++ header (no CUDA includes). Built from engine_ops.cu when the CUDA component is
// on, otherwise from engine_ops_stub.cpp, whose functions fail with "built without CUDA".
//
// Every op is enqueued on the context's compute stream and returns false with `err` set on
// failure (the CUDA call, its error string and file:line); nothing throws or aborts. All
// pointers are device pointers unless named *_host. Activations are fp32, row-major, one
// row per token; weights are read in their stored type (device_math.hpp's WType) and
// dequantized in registers; sums accumulate in fp32 (norms in double, as the CPU engine).
#pragma once

#include <cstdint>
#include <string>

#include "cuda/device_math.hpp"

namespace nunchaku::cuda {

struct DMatrix {  // rows x cols, rows row_bytes apart
  const void* data = nullptr;
  WType type = WType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;
};
struct DVec {  // F32, F16 or BF16; data null = absent (a norm's: unit weights when n > 0)
  const void* data = nullptr;
  WType type = WType::F32;
  int64_t n = 0;
};
// `heads` matrices shaped as w, head h's at w.data + h * stride bytes (matmul_heads).
// input_major: each stored [cols][rows], an input's rows values w.row_bytes apart (F32, F16 or BF16).
struct DHeads {
  DMatrix w;
  bool input_major = false;
  int64_t heads = 1;
  int64_t stride = 0;
};

// Prefill products run as cuBLAS SGEMM over weight panels dequantized to fp32 into a
// scratch of this many bytes at most (the engine's accounting charges it), from this many
// tokens on; fewer tokens use the GEMV kernel, which reads each weight byte once.
constexpr uint64_t kPanelBytes = 64ull << 20;
constexpr uint64_t kCublasWorkspaceBytes = 32ull << 20;
constexpr int64_t kGemmMinTokens = 16;

// One device, its compute stream, a cuBLAS handle and the dequantization panel.
class Context {
 public:
  Context() = default;
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  // Creates the stream and cuBLAS handle and allocates the cuBLAS workspace (counted in
  // allocated()); the stream exists from here on (weight providers order copies on it).
  bool init(int device, std::string* err);
  // Allocates the dequantization panel (counted in allocated()). Once.
  bool alloc_panel(uint64_t panel_bytes, std::string* err);
  int device() const { return device_; }
  void* stream() const { return stream_; }  // cudaStream_t
  uint64_t allocated() const { return allocated_; }

  // Device memory counted in allocated(); free with release().
  void* alloc(uint64_t bytes, std::string* err);
  void release(void* p);
  // Page-locked host memory (for logits read-back and token tables).
  void* alloc_host(uint64_t bytes, std::string* err);
  void release_host(void* p);

  bool upload(void* dst, const void* src_host, uint64_t n, std::string* err);    // async on the stream
  bool download(void* dst_host, const void* src, uint64_t n, std::string* err);  // async on the stream
  bool zero(void* dst, uint64_t n, std::string* err);
  bool synchronize(std::string* err);

  void* panel() const { return panel_; }
  uint64_t panel_bytes() const { return panel_bytes_; }
  void* cublas() const { return cublas_; }

 private:
  int device_ = -1;
  void* stream_ = nullptr;
  void* cublas_ = nullptr;
  void* panel_ = nullptr;
  uint64_t panel_bytes_ = 0;
  void* workspace_ = nullptr;
  uint64_t allocated_ = 0;
};

// x[t] = table[ids[t]] as fp32 times `scale`, hidden = table.cols.
bool embed(Context& c, const DMatrix& table, const int32_t* ids, int64_t T, float scale, float* x, std::string* err);

// A norm: kind 0 RMS (w * x / rms), 1 RMS with (1 + w) (Gemma as stored by HF), 2 layer norm
// (w * (x - mean) / std + bias); every run of w.n values of a row is normalized. w.data null
// with w.n > 0: unit weights (Llama 4's q/k norms); w.n 0: no norm (rope_and_cache).
enum class NormType : int { Rms = 0, RmsOnePlus = 1, Layer = 2 };
struct DNorm {
  DVec w, bias;
  NormType kind = NormType::Rms;
};
// For R rows `ld` floats apart, of which the first `width` are normalized: row r is
// in[rows[r]] when rows (device int64 indices) is given, else in[r]; with delta, in[r] +=
// delta[r] first (then rows must be null). out[r] = norm(row). in may equal out.
bool norm(Context& c, float* in, const float* delta, const int64_t* rows, float* out, int64_t R, int64_t width,
          int64_t ld, const DNorm& n, float eps, std::string* err);
bool add(Context& c, float* x, const float* delta, int64_t count, std::string* err);
// gate = act(gate) * up: act 0 SiLU, 1 GELU (tanh approximation).
bool act_mul(Context& c, float* gate, const float* up, int64_t count, int act, std::string* err);
bool scale(Context& c, float* x, int64_t count, float s, std::string* err);
bool softcap(Context& c, float* x, int64_t count, float cap, std::string* err);  // x = cap * tanh(x / cap)
// y[b*ldy + r] = sum_i W[r][i] x[b*ldx + i] (+ bias[r]) for r < w.rows, b < B.
bool matmul(Context& c, const DMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
            const DVec& bias, std::string* err);
// Per head h: y[b*ldy + h*y_stride + r] = sum_i W_h[r][i] x[b*ldx + h*x_stride + i] for r < w.rows,
// b < B, all heads in one dispatch (MLA's absorbed q and expanded output).
bool matmul_heads(Context& c, const DHeads& w, const float* x, int64_t ldx, int64_t x_stride, int64_t B, float* y,
                  int64_t ldy, int64_t y_stride, std::string* err);

struct AttnShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t positions = 0;    // positions per cache slot of this layer (a sliding layer: a ring, p at p mod positions)
  bool f16_cache = false;
  bool neox = true;         // rotary pairs: (i, i+rot/2) or (2i, 2i+1)
  int64_t rot_dims = 0;     // rotated values at the start of each head (0 = head_dim)
  float mscale = 1.0f;      // cos and sin times this (the rotary table's; longrope)
  // MLA: the rotated values start rot_off into a head (after the latent's rank), and a cache
  // row's values are its first v_dims (0: a V cache of head_dim values per row).
  int64_t rot_off = 0;
  int64_t v_dims = 0;
};
// Per token t: x (T rows of heads*head_dim) rotated per head at pos[t] (inv_freq: rot/2 floats).
bool rope(Context& c, const AttnShape& s, float* x, int64_t heads, int64_t T, const int64_t* pos, const float* inv_freq,
          std::string* err);
// k and v of each token into the caches at (slot[t], pos[t] mod positions); vcache null: k only.
bool store_kv(Context& c, const AttnShape& s, const float* k, const float* v, int64_t T, const int32_t* slot,
              const int64_t* pos, void* kcache, void* vcache, std::string* err);
// Per token t: optional per-head norm of q and k (q_norm/k_norm, head_dim wide), RoPE at
// pos[t] (none when inv_freq is null: Llama 4's NoPE layers), then k and v written to the
// cache as store_kv. Caches: [slots][positions][kv_heads*head_dim], F32 or F16.
bool rope_and_cache(Context& c, const AttnShape& s, float* q, float* k, const float* v, int64_t T, const int32_t* slot,
                    const int64_t* pos, const float* inv_freq, const DNorm& q_norm, const DNorm& k_norm, float eps,
                    void* kcache, void* vcache, std::string* err);
struct AttnOpts {
  int64_t window = 0;   // positions attended (0: from 0)
  float scale = 0;      // scores = scale * q.k
  float softcap = 0;    // scores = cap * tanh(scores / cap); 0 none
  DVec sinks;           // per head: a logit in each softmax's denominator only
  bool chunked = false; // Llama 4: `window` is a chunk, lo = pos - pos mod window
  int64_t temp_floor = 0;  // Llama 4's NoPE layers: scale times log(floor((pos + 1) / temp_floor) + 1)
  float temp_scale = 0;    // * temp_scale + 1 (temp_floor 0: none)
};
// Causal GQA: out[t][h] = softmax(scores of q[t][h] against K[slot[t]][lo..pos[t]]) V[...], lo =
// pos - window + 1 (window 0: from 0; chunked: the chunk's first position). Heads up to 640
// wide (MLA's latent rows: 512 + 64); with s.v_dims, each head's first v_dims outputs only.
bool attention(Context& c, const AttnShape& s, const float* q, int64_t T, const int32_t* slot, const int64_t* pos,
               const AttnOpts& o, const void* kcache, const void* vcache, float* out, std::string* err);
// MLA (s: one kv head of head_dim = rank + rope, rot_dims = rope, rot_off = rank), per token t:
// each head's rotated part of q, qh[t][h * (nope + rope) + nope, + rope), into q[t][h * head_dim
// + rank, + rope) and rotated there at pos[t]; k[t]'s last rope values rotated; k[t] into the
// cache at (slot[t], pos[t] mod positions) (one cache: the values are the keys' first rank).
bool mla_rope_cache(Context& c, const AttnShape& s, const float* qh, int64_t nope, float* q, float* k, int64_t T,
                    const int32_t* slot, const int64_t* pos, const float* inv_freq, void* cache, std::string* err);

// For tests and gpu-check: whether a device answers, and the dequantized row r of w into
// out_host (through the same element function the kernels use).
bool engine_available(std::string* why);
// Whether cuBLAS (opened on first use, not linked) loads and has every function we call.
bool blas_available(std::string* why);
bool dequant_row_on_device(Context& c, const DMatrix& w, int64_t r, float* out_host, std::string* err);

}  // namespace nunchaku::cuda
