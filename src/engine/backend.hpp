// The compute backend of a Transformer: it owns the run state (activations, KV cache,
// logits) in its own memory and implements every op of a layer. The Transformer only
// sequences ops and binds weights; nothing of the run state is touched on the host except
// through logits(). The CPU backend (backend_cpu.cpp) is the oracle; a CUDA backend
// implements the same interface over device memory.
//
// Buffers are named (Buf), sized once by allocate() from engine_memory() (the accounting
// estimate and plan share), row-major with one row per token (Sel/Logits: one per logit
// row). Weights arrive as views (WeightMatrix / VecRef) in their stored dtype, in memory
// the backend can read (can_read()).
// Thread-safety: one op at a time (the Transformer is single-threaded above the backend).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/kernels.hpp"
#include "io/placement.hpp"
#include "memory/engine_memory.hpp"
#include "model/recipe.hpp"

namespace nunchaku::engine {

// Activation buffers, per token: X residual stream, XN normed input of a sub-block, Tmp a
// sub-block's output (hidden each); Q and Att (heads*head_dim); K, V (kv_heads*head_dim);
// Gate, Up (intermediate); MLA's QH (q as projected, heads x (nope + rope)) and Lat (q's low
// rank, then the attention output expanded, heads x v; EngineDims::mla_*_dim, 0 without MLA).
// Per logit row: Sel (hidden), Logits (vocab).
enum class Buf { X, XN, Tmp, Q, Att, K, V, Gate, Up, QH, Lat, Sel, Logits };

// A weight vector (norm scale or bias) as stored: F32, F16 or BF16, n elements.
struct VecRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t n = 0;
  explicit operator bool() const { return data != nullptr; }
};

// out[t] = W . in[t] (+ bias) for the tokens of the batch (or the first `rows` logit rows).
struct MatmulJob {
  const WeightMatrix* w = nullptr;
  Buf out = Buf::Tmp;
  VecRef bias;  // optional, added after the product
};

// Rotary embedding as the model defines it: inv_freq per pair, and how pairs are formed.
//   NeoX ("rotate half"): (i, i + d/2). HF llama/mistral/qwen weights, GGUF qwen2/qwen3.
//   Interleaved: (2i, 2i+1). GGUF arch llama: convert_hf_to_gguf permutes the Q/K rows
//   so llama.cpp's LLAMA_ROPE_TYPE_NORM applies; llama2.c exports are natively so.
enum class RopeStyle { NeoX, Interleaved };

// The shape of the run state and what the ops need to know of the model.
struct BackendSetup {
  EngineDims dims;
  EngineMemory memory;      // sizes of everything allocate() makes (config resolved); KV
                            // positions per layer in memory.kv_positions
  float eps = 1e-5f;        // norm epsilon
  RopeStyle rope = RopeStyle::NeoX;
  std::span<const float> inv_freq;  // rotary table 0: [rot_dims / 2]
  std::span<const float> inv_freq_local;  // table 1 (gemma3's sliding layers), empty if none
  int64_t rot_dims = 0;     // rotated values at the start of each head; 0 = head_dim
                            // (MLA: the last rot_dims of each head, after mla_rank)
  float rope_mscale = 1.0f; // table 0's cos and sin times this (longrope's attention factor)
};

// The tokens of one forward pass: token t has id[t], cache slot slot[t], position pos[t].
struct BatchTokens {
  std::span<const int32_t> id;
  std::span<const int32_t> slot;
  std::span<const int64_t> pos;
};

// A norm and its weights: every run of w.n values of a row is normalized (w.n = hidden for
// the block norms, head_dim for q/k norms). `bias` for NormKind::Layer (optional).
// w.data null with w.n > 0: unit weights (Llama 4's weightless q/k RMS norm; Op::UnitNorm).
struct Norm {
  VecRef w;
  NormKind kind = NormKind::Rms;
  VecRef bias;
  int64_t span = 0;  // normalize only the first `span` values of each row (one run); 0 = the whole row
  bool given() const { return w.n > 0; }  // a norm to apply (with or without weights)
};

// One layer's attention: causal GQA of Q against the layer's cache. MLA (EngineDims::mla_rank
// > 0): one kv head whose key rows are the latent rows [mla_rank | mla_rope] and whose values
// are the first mla_rank of the same rows (one cache per layer, no V cache); each head's
// output is mla_rank values at the start of its head_dim-wide slot of Att.
struct Attention {
  int64_t window = 0;   // positions attended (0 = all); a sliding layer's cache is a ring
  float scale = 0;      // scores = scale * q.k (the recipe's, 1/sqrt(head_dim) for llama)
  float softcap = 0;    // scores = cap * tanh(scores / cap) before the softmax; 0 = none
  VecRef sinks;         // per head: a logit that joins each softmax's denominator only
  // Llama 4 (Op::ChunkedAttention): `window` is a chunk, position p attends to [p - p mod
  // window, p]; (Op::AttnTemperature) q times log(floor((p + 1) / temp_floor) + 1) *
  // temp_scale + 1 (temp_floor 0 = none).
  bool chunked = false;
  int64_t temp_floor = 0;
  float temp_scale = 0;
};

// A layer's mixture of experts (Backend::moe): per token, router logits W_r . x (+ bias),
// softmax, the top_k experts (largest weights, ties to the lower index, NaN logits never
// chosen before a number), their weights renormalized to sum 1 when `norm_topk` (or, with
// Routing::TopkSoftmax, a softmax over the k chosen logits: route_token); the output is
// sum_j w_j * down_j(act(gate_j . x) * (up_j . x)), plus, with a shared expert,
// sigmoid(shared_expert_gate . x) * shared(x). Expert e's matrices are experts[e].
// gpt-oss (MoeFfn::gate_up_mixed): `gate` holds gate and up as one matrix of 2 x inter
// outputs, gate at even ones and up at odd, `up` is null; biases are added after the
// products; the activation is the clamped SwiGLU: g = min(gate, limit), u = clamp(up, -limit,
// limit), (u + 1) * g * sigmoid(alpha * g). Its matrices may be input-major or split-scale
// MXFP4 (WeightMatrix; matmul_expert_rows).
struct MoeExpert {
  const WeightMatrix* gate = nullptr;
  const WeightMatrix* up = nullptr;
  const WeightMatrix* down = nullptr;
  VecRef gate_up_bias;  // [2 x inter] (gate_up_mixed)
  VecRef down_bias;     // [hidden]
  VecRef gate_bias, up_bias;  // [inter] each (clamped SwiGLU with gate and up apart: GGUF gpt-oss)
};
struct MoeFfn {
  const WeightMatrix* router = nullptr;  // [experts, hidden]
  std::span<const MoeExpert> experts;
  int64_t top_k = 0;
  bool norm_topk = false;
  Routing routing = Routing::SoftmaxTopk;
  VecRef router_bias;  // [experts], added to the router's logits
  // DeepSeek (Routing::SigmoidTopk; route_token): the choice among the best `groups_used` of
  // `groups` equal groups, by scores plus `choice_bias` [experts] (sigmoid only), the weights
  // times `routed_scale`.
  int64_t groups = 0, groups_used = 0;
  bool group_top2 = false;
  VecRef choice_bias;
  float routed_scale = 1;
  Activation act = Activation::Silu;
  bool gate_up_mixed = false;  // gpt-oss experts as HF stores them: gate|up rows interleaved in `gate`
  // Llama 4: `gate` holds gate and up as one matrix of 2 x inter outputs, gate the first inter,
  // `up` null; and each routed expert's input is x times its weight (the output then unweighted).
  bool gate_up_halves = false;
  bool input_weighted = false;
  bool clamped_swiglu = false;  // gpt-oss's activation (gate_up_mixed or not), its biases, down's bias
  float swiglu_alpha = 0, swiglu_limit = 0;
  const WeightMatrix* shared_gate = nullptr;  // the shared expert (all three, or none)
  const WeightMatrix* shared_up = nullptr;
  const WeightMatrix* shared_down = nullptr;
  VecRef shared_expert_gate;  // [hidden]; absent: the shared expert's output is added as is
  // A GPU run (split backend, experts part on the CPU): the shared expert's matrices are in
  // the layer's device memory, so the layer's part runs it while the experts part runs the
  // routed experts (the Transformer sets it when moe_can_read() refuses where they are).
  bool shared_on_layer = false;
  // Set by a split backend for its experts part: moe() does not compute the shared expert
  // but takes its output (Tmp's rows, as read() gives them) from shared_fetch(), called after
  // the routed experts, then applies shared_expert_gate and adds it as before.
  std::function<std::vector<float>()> shared_fetch;
  // Streamed experts: when set, experts[e]'s data is valid only after bind() was given a
  // list holding e (ascending expert numbers, at most bind_max of them) and until the next
  // bind(); the backend binds the experts the batch routes to, in rounds of bind_max.
  std::function<void(std::span<const int32_t>)> bind;
  int64_t bind_max = 0;
};

// The primitives (Backend::supports). Fused ops are compositions of them; Moe is its own
// (a backend without it refuses MoE models before they run).
// Llama 4's pieces are ops of their own, so a backend without them refuses the model: chunked
// attention and the query temperature (Attention), unweighted norms (Norm), layers without rotary
// positions (rope_and_cache's table -1).
enum class Op : uint8_t { Embed, Matmul, Norm, ActMul, Scale, Softcap, Add, Rope, Attention, Moe, Mla,
                          ChunkedAttention, AttnTemperature, UnitNorm, NoRope };
std::string_view op_name(Op op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;   // e.g. "cpu avx2, 2 threads"
  virtual Device device() const = 0;          // where the run state lives
  virtual bool can_read(Device weights) const = 0;  // weights the kernels can read in place
  // Weights the moe op can read in place (a split backend runs it on its CPU part: host memory).
  virtual bool moe_can_read(Device weights) const { return can_read(weights); }
  virtual int threads() const = 0;            // host threads (sizes the attention scratch)
  virtual void* native_stream() const { return nullptr; }  // CUDA: the compute stream (cudaStream_t)
  // Whether op `op` runs with data of type `t`: weights (Embed, Matmul), norm/bias vectors
  // (Norm), the KV cache (Attention), activations (the rest: F32). The Transformer asks
  // before it builds, so an unsupported model is refused with the op named, not mid-run.
  virtual bool supports(Op op, DType t) const = 0;

  // What allocate() will make for a model of `spec` under `cfg` (the defaults resolved):
  // engine_memory() for one backend; a split backend (backend_split.hpp) sizes each part
  // for its own layers and returns the sum. The Transformer passes the result to allocate().
  virtual EngineMemory plan_state(const ModelSpec& spec, const EngineConfig& cfg) { return engine_memory(spec, cfg); }
  // Allocates the run state (throws Error engine.out_of_memory, exit 3). Once.
  virtual void allocate(const BackendSetup& setup) = 0;
  // Bytes allocate() made, counted at each allocation (tests compare with engine_memory).
  virtual uint64_t allocated_bytes() const = 0;
  // Of plan_state()'s prediction, the bytes in host memory while the ops run on a GPU (a
  // split's CPU part, which runs the experts): 0 for one backend.
  virtual uint64_t host_part_bytes() const { return 0; }

  // ---- primitives, in the order the Transformer calls them ----
  // Rows: T (the batch's tokens) for per-token buffers; Sel and Logits: the rows of the last
  // select_rows().
  virtual void set_tokens(const BatchTokens& tokens) = 0;           // T = tokens.id.size()
  // The ops that follow, up to the next begin_layer() or select_rows(), are layer `layer`'s
  // (a split backend runs them on the part that holds that layer).
  virtual void begin_layer(int64_t /*layer*/) {}
  virtual void embed(const WeightMatrix& table, float scale) = 0;  // X[t] = table[id[t]] * scale
  virtual void norm(Buf in, Buf out, const Norm& n) = 0;           // per row (in may be out)
  // All jobs read the same input; one dispatch for q/k/v (or gate/up) together.
  virtual void matmul(std::span<const MatmulJob> jobs, Buf in) = 0;
  virtual void act_mul(Buf gate, Buf up, Activation act) = 0;      // gate = act(gate) * up
  virtual void scale(Buf b, float s) = 0;                          // b *= s
  virtual void softcap(Buf b, float cap) = 0;                      // b = cap * tanh(b / cap)
  virtual void add(Buf x, Buf delta) = 0;                          // x += delta
  // Q or K (b) rotated per head at each token's position with rotary table `table`.
  virtual void rope(Buf b, int table) = 0;
  // K and V of each token into layer `layer`'s cache at (slot, pos).
  virtual void store_kv(int64_t layer) = 0;
  // Q against layer `layer`'s cache (positions up to each token's own), into Att.
  virtual void attention(int64_t layer, const Attention& a) = 0;
  // Tmp = the mixture of experts of XN (MoeFfn). Only backends that support(Op::Moe).
  virtual void moe(const MoeFfn& f) = 0;
  // Per head h, one dispatch for all: out[t][h * out_stride, + w[h].rows) = w[h] .
  // in[t][h * in_stride, + w[h].cols) (MLA: q's unrotated part absorbed into the latent, the
  // attention output expanded). Only backends that support(Op::Mla).
  virtual void matmul_heads(std::span<const WeightMatrix> w, Buf in, int64_t in_stride, Buf out, int64_t out_stride);
  // MLA, per token: each head's rotated part of q (QH's last mla_rope values) into Q after its
  // mla_rank absorbed values, rotated (table 0) there; the latent row's last mla_rope values
  // (K) rotated; the latent row into layer `layer`'s cache at (slot, pos).
  virtual void mla_rope_cache(int64_t layer);
  // A hint: the next matmul reads `jobs`' weights (the views stay valid until it has run).
  // A backend may start fetching them during the ops in between: the CPU backend's threads
  // warm the first part of their shares of the rows into L2 while decode's attention runs.
  virtual void prefetch(std::span<const MatmulJob> /*jobs*/) {}
  // Sel[r] = norm(X[rows[r]]) for the tokens that need logits.
  virtual void select_rows(std::span<const int64_t> rows, const Norm& n) = 0;
  // Head over the first `rows` Sel rows into Logits.
  virtual void head(const WeightMatrix& w, int64_t rows) = 0;
  // Logits of the first `rows` rows, [rows][vocab], readable on the host until the next op.
  virtual std::span<const float> logits(int64_t rows) = 0;

  // ---- fused ops: the same arithmetic as the primitives they replace, in fewer passes ----
  // (Defaults compose the primitives; a backend overrides them to save a synchronisation.)
  // Per token: q/k norms per head (when given), rope (none when `table` is -1), then K and V
  // into the cache.
  virtual void rope_and_cache(int64_t layer, const Norm& q_norm, const Norm& k_norm, int table) {
    if (q_norm.given()) norm(Buf::Q, Buf::Q, q_norm);
    if (k_norm.given()) norm(Buf::K, Buf::K, k_norm);
    if (table >= 0) rope(Buf::Q, table), rope(Buf::K, table);
    store_kv(layer);
  }
  // x += delta; out = norm(x).
  virtual void add_norm(Buf x, Buf delta, Buf out, const Norm& n) {
    add(x, delta);
    norm(x, out, n);
  }
  // gate.out = act(gate . in) * (up . in), as matmul({gate, up}) then act_mul.
  virtual void matmul_act(const MatmulJob& gate, const MatmulJob& up, Buf in, Activation act) {
    const MatmulJob jobs[2] = {gate, up};
    matmul(jobs, in);
    act_mul(gate.out, up.out, act);
  }
  // x += job . in (job.out as scratch), as matmul({job}) then add(x, job.out).
  virtual void matmul_add(const MatmulJob& job, Buf in, Buf x) {
    matmul({&job, 1}, in);
    add(x, job.out);
  }

  // The first rows of a buffer to or from the host, row-major, `width(b)` floats per row:
  // tests and diagnostics, the split backend's moves of X between parts, and an embedding
  // gathered on the host (Transformer, when the backend cannot read the table).
  virtual void write(Buf b, std::span<const float> values) = 0;
  virtual std::vector<float> read(Buf b, int64_t rows) = 0;
};

// Floats per row of buffer `b` for these dimensions.
int64_t buf_width(const EngineDims& d, Buf b);

// threads <= 0: all hardware threads.
std::unique_ptr<Backend> make_cpu_backend(int threads);
// The CUDA backend on cuda:`device` (backend_cuda.cpp). Throws Error engine.no_cuda when
// the binary has no CUDA or the device does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace nunchaku::engine
