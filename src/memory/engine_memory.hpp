// What nunchaku's own engine allocates for a run, computed from the model's dimensions
// and the run options alone. The engine sizes its buffers with this function and
// `estimate --runtime nunchaku` / `plan` charge with it, so the prediction for our own
// runtime is exact by construction (tests compare it with what the engine allocated).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "format/dtype.hpp"
#include "model/model.hpp"

namespace nunchaku {

// The options `run` passes to the engine; 0 means "the default", resolved below.
struct EngineConfig {
  int max_batch = 1;            // KV slots: sequences held at once
  int64_t max_context = 0;      // positions per slot; 0 = min(spec.max_context, 4096) (2048 if unknown)
  int64_t max_tokens = 0;       // tokens one forward pass may carry; 0 = engine_max_tokens(0, max_batch)
  int64_t logit_rows = 0;       // logit rows one forward pass may return; 0 = max_batch
  DType kv_dtype = DType::F32;  // F32 or F16
  int threads = 1;              // CPU threads (attention scratch is per thread)
  // Columns of the widest matmul weight not stored as f32: the prefill GEMM converts it into
  // a per-thread f32 panel (cpu_kernel_buffers.hpp). 0 = every matmul weight is f32.
  int64_t panel_cols = 0;
  bool cuda = false;            // run state on a CUDA device (backend_cuda.cpp): see engine_memory()
  // Fast math (run --fast-math; CPU only): each matmul's activation rows are also kept
  // rounded to 8 bits (cpu_q8k_row_bytes per row), for the K-quant weights that read them,
  // and to bf16 (cpu_bf16x_row_bytes), for BF16 weights on CPUs with AVX512_BF16.
  bool fast_math = false;
  // Streamed weights: a ring of `stream_slots` slots of `stream_slot_bytes` each (the
  // largest streamed module); 0 slots = every weight resident.
  int64_t stream_slots = 0;
  uint64_t stream_slot_bytes = 0;
  // A streamed MoE layer's routed experts come apart from its slot, at expert granularity:
  // `stream_piece_slots` buffers of `stream_piece_bytes` each (stream_piece_bytes()).
  int64_t stream_piece_slots = 0;
  uint64_t stream_piece_bytes = 0;
};

// The engine's dimensions as it runs them (head_dim and kv heads resolved).
struct EngineDims {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, inter = 0, vocab = 0, layers = 0;
  // Mixture of experts: routed experts, experts per token, a routed expert's intermediate
  // size (0 = dense). `inter` also covers the shared expert's (qwen2_moe).
  int64_t experts = 0, top_k = 0, expert_inter = 0;
  // Multi-head latent attention (mla_rank > 0; DeepSeek): the engine attends over one latent
  // row per position, so kv_heads = 1 and head_dim = mla_rank + mla_rope (q's heads are
  // absorbed into that width); the per-head widths of the projections: q's unrotated part
  // (mla_nope), v (mla_v), and q's low rank (q_rank, 0 = q_proj).
  int64_t mla_rank = 0, mla_rope = 0, mla_nope = 0, mla_v = 0, q_rank = 0;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  // MLA's own per-token buffers: q as projected (heads x (nope + rope)), and one for q's low
  // rank, later the expanded attention output (heads x v). 0 without MLA.
  int64_t mla_q_dim() const { return heads * (mla_nope + mla_rope) * (mla_rank > 0); }
  int64_t mla_lat_dim() const { return mla_rank > 0 ? std::max(q_rank, heads * mla_v) : 0; }
  // The widest matmul input: the columns of the widest layer or head matrix.
  int64_t widest_matmul_input() const { return std::max({hidden, q_dim(), inter, expert_inter, mla_lat_dim()}); }
  // The widest per-layer vector (a norm weight or bias widened to f32): a matmul input or k/v,
  // or a router's bias.
  int64_t widest_vector() const { return std::max({widest_matmul_input(), kv_dim(), experts}); }
};
EngineDims engine_dims(const ModelSpec& spec);

// Bytes per buffer, each as the engine allocates it.
struct EngineMemory {
  EngineConfig config;        // with the defaults resolved
  uint64_t activations = 0;   // per-token work buffers for max_tokens tokens (fp32) + token tables
  uint64_t kv_cache = 0;      // sum over layers of 2 x max_batch x kv_positions[l] x kv_dim x sizeof(kv_dtype)
                              // (MLA: 1 x, the latent row is keys and values)
  // Positions per slot each layer's cache holds (model/recipe.hpp kv_positions): max_context,
  // or a ring for a sliding-window layer.
  std::vector<int64_t> kv_positions;
  uint64_t logits = 0;        // logit_rows x (hidden + vocab) fp32: selected rows and their logits
  uint64_t scratch = 0;       // attention scores (threads x max_context) and kVecSlots weight
                              // vectors as fp32 (max of hidden, q_dim, kv_dim, intermediate);
                              // fast math: max(max_tokens, logit_rows) 8-bit and bf16 activation rows
  // CUDA: activations, KV, logits and scratch live on the device; scratch is instead the
  // prefill dequantization panel (the largest matrix as fp32, at most cuda::kPanelBytes),
  // cuBLAS's workspace and the rotary frequencies; the logit rows' indices are also on the
  // device, and `host_logits` is the page-locked read-back copy of the logits.
  uint64_t host_logits = 0;
  uint64_t stream_pool = 0;   // stream_slots x stream_slot_bytes
  // What the CPU kernels keep per thread, not allocated by the engine itself (0 with `cuda`):
  // each pool worker's static TLS (the calling thread's is the process's own), mostly the
  // GEMM accumulators, and, when panel_cols > 0 and a pass can reach kCpuGemmMinRows
  // tokens, every thread's f32 GEMM panel (kCpuGemmPanelRows x panel_cols x 4 B).
  uint64_t thread_buffers = 0;
  uint64_t total() const;  // saturating sum (device and host parts)
  uint64_t allocated() const;  // total() less thread_buffers: what the engine allocates itself
};

// Slots of the streamed weight provider's pool by default: the module in use + the next one
// being read. The next read is queued the moment a slot is released, so a disk-bound run
// never leaves the disk idle; StreamOptions::slots makes the ring deeper.
constexpr int kStreamSlots = 2;

// Weight vectors (norms, biases) stored as F16/BF16 are widened to fp32 per op into this
// many backend-owned slots (q, k and v biases are the most one op uses).
constexpr int kVecSlots = 3;

// Tokens one forward pass carries (EngineConfig::max_tokens): run's --prefill-chunk when
// given (at least the batch: a decode step carries a token of every sequence), else
// max(256, batch). Prompts are fed in passes of this many tokens.
int64_t engine_max_tokens(int64_t prefill_chunk, int64_t batch);

// The engine's KV cache dtype when --kv-dtype is not given (run, bench and estimate's
// nunchaku runtime alike): the model's 16-bit dtype, f16 (the engine's one 16-bit KV type),
// for every model stored in 16 bits or quantized, as llama.cpp and transformers keep it; f32
// for an fp32 model (exact, as its weights) or one whose dtype is unknown.
DType engine_kv_default(const ModelSpec* spec);
// --kv-dtype for the engine: "auto" (the default above) -> nullopt; f32/fp32, f16/fp16;
// anything else is usage.kv_dtype (exit 2).
std::optional<DType> parse_engine_kv(const std::string& text);

// Bytes of the slot that holds module `m` while it is streamed: its page-aligned read
// layout (io/module_reads.hpp), as the streamed provider lays it out. The provider sizes
// its slots with this and plan charges kStreamSlots x the largest disk module's. A MoE
// layer's routed-expert tensors (is_expert_role) are not in the slot: they are read expert
// by expert into pieces (below).
uint64_t stream_slot_bytes(const Checkpoint& ck, const Module& m);

// The tensors of `m` that a streamed slot holds: all but the routed experts' (the indices
// into m.tensors, ascending). A dense module keeps every tensor.
std::vector<size_t> stream_slot_tensors(const Module& m);

// Routed experts are streamed in pieces: one piece is one expert's gate, up or down rows
// (a row range of a stacked [experts, rows, cols] tensor, half of a fused gate_up's, or one
// per-expert tensor). A piece slot holds the largest piece of the module, page-aligned at
// both ends as an O_DIRECT read needs; 0 for a module without expert tensors.
uint64_t stream_piece_bytes(const Checkpoint& ck, const Module& m);

// Piece slots of the pool: gate, up and down of top_k experts, one token's routing, so a
// decode step reads each layer's experts in one round (more tokens: rounds of top_k experts).
inline int64_t stream_piece_slots(int64_t top_k) { return 3 * std::max<int64_t>(1, top_k); }

// The Transformer's own host tables (token ids, slots, positions, logit rows, positions per
// slot), part of EngineMemory::activations; `c` with its defaults resolved. A split backend
// (engine/backend_split.hpp) charges them once, not once per part.
uint64_t engine_host_tables(const EngineConfig& c);

// Whether the CPU's blocked GEMM dequantizes a weight of this type through the f32 panel:
// block-quantized types do; F32, F16 and BF16 are read in place.
inline bool cpu_gemm_uses_panel(DType t) {
  return t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::MXFP4;  // MXFP4: experts' own kernel
}

// EngineConfig::panel_cols of a checkpoint's weights as stored: the widest input (columns) of
// a block-quantized matmul weight (cpu_gemm_uses_panel), by role (Q, K, V, gate, up and the head read hidden, O
// q_dim, down the intermediate size; a tied embedding is the head), as the engine binds them.
int64_t panel_cols_of(const Checkpoint& ck, const ModelLayout& layout);

// EngineMemory::thread_buffers of a CPU run; `c` with its defaults resolved.
uint64_t cpu_thread_buffers(const EngineConfig& c);

// The CUDA backend's rotary tables on the device: one (or two: gemma3's sliding layers) of
// head_dim / 2 floats.
inline uint64_t cuda_rope_bytes(int64_t head_dim, bool two_tables) {
  return uint64_t(two_tables ? 2 : 1) * uint64_t(head_dim / 2) * 4;
}

// The CPU backend's mixture-of-experts buffers for `tokens` tokens a pass (0 when dense):
// router logits (tokens x experts fp32), per (token, chosen expert) its expert, weight, row
// and the row's assignment (4 B each), each expert's first row (experts + 1, int64), the gathered input
// and the experts' output rows (hidden fp32 each), their gate and up rows (expert_inter fp32
// each), and per token the shared expert's gate (fp32).
uint64_t cpu_moe_bytes(const EngineDims& d, int64_t tokens);

// Resolves the defaults of `cfg` against the spec and sizes every buffer.
EngineMemory engine_memory(const ModelSpec& spec, const EngineConfig& cfg);

}  // namespace nunchaku
