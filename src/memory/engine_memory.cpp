#include "memory/engine_memory.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/thread_memory.hpp"
#include "cuda/engine_ops.hpp"
#include "io/module_reads.hpp"
#include "memory/cpu_kernel_buffers.hpp"
#include "memory/workload_defaults.hpp"
#include "model/recipe.hpp"

namespace nunchaku {

uint64_t EngineMemory::allocated() const {
  return sat_add(sat_add(sat_add(activations, kv_cache), sat_add(logits, scratch)), sat_add(stream_pool, host_logits));
}

uint64_t EngineMemory::total() const { return sat_add(allocated(), thread_buffers); }

EngineDims engine_dims(const ModelSpec& spec) {
  EngineDims d;
  d.hidden = spec.hidden_size;
  d.heads = spec.num_heads;
  d.kv_heads = spec.num_kv_heads > 0 ? spec.num_kv_heads : spec.num_heads;
  d.head_dim = spec.head_dim > 0 ? spec.head_dim : (d.heads > 0 ? d.hidden / d.heads : 0);
  d.inter = spec.intermediate_size;
  d.vocab = spec.vocab_size;
  d.layers = spec.num_layers;
  if (spec.num_experts > 0 && spec.num_experts_per_tok > 0) {
    d.experts = spec.num_experts;
    d.top_k = std::min(spec.num_experts_per_tok, spec.num_experts);
    d.expert_inter = spec.moe_intermediate_size > 0 ? spec.moe_intermediate_size : spec.intermediate_size;
    d.inter = std::max(d.inter, spec.shared_expert_intermediate_size);
  }
  if (spec.kv_lora_rank > 0 && spec.qk_rope_head_dim > 0) {  // MLA: attention over the latent
    d.mla_rank = spec.kv_lora_rank;
    d.mla_rope = spec.qk_rope_head_dim;
    d.mla_nope = spec.qk_nope_head_dim;
    d.mla_v = spec.v_head_dim;
    d.q_rank = spec.q_lora_rank;
    d.kv_heads = 1;
    d.head_dim = d.mla_rank + d.mla_rope;
  }
  return d;
}

uint64_t cpu_moe_bytes(const EngineDims& d, int64_t tokens) {
  if (d.experts <= 0 || d.top_k <= 0) return 0;
  const uint64_t T = uint64_t(std::max<int64_t>(0, tokens)), A = sat_prod(T, uint64_t(d.top_k));
  const uint64_t per_assignment = sat_add(16, sat_prod(uint64_t(2 * d.hidden + 2 * d.expert_inter), 4));
  return sat_add(sat_add(sat_prod(T, uint64_t(d.experts), 4), sat_prod(A, per_assignment)),
                 sat_add(sat_prod(uint64_t(d.experts) + 1, 8), sat_prod(T, 4)));
}

int64_t engine_max_tokens(int64_t prefill_chunk, int64_t batch) {
  return prefill_chunk > 0 ? std::max(prefill_chunk, batch) : std::max<int64_t>(256, batch);
}

DType engine_kv_default(const ModelSpec* spec) {
  if (!spec) return DType::F32;
  std::string d = spec->dtype;  // config.json's torch_dtype ("float32") or a stored dtype / GGUF file type ("F32")
  for (char& c : d) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return d.empty() || d == "f32" || d == "float32" || d == "fp32" || d == "float" ? DType::F32 : DType::F16;
}

std::optional<DType> parse_engine_kv(const std::string& text) {
  if (text == "auto" || text.empty()) return std::nullopt;
  if (text == "f32" || text == "fp32") return DType::F32;
  if (text == "f16" || text == "fp16") return DType::F16;
  throw Error("usage.kv_dtype", fmt::format("--kv-dtype must be auto, f32 or f16, not '{}'", text),
              {.hint = "auto: f16 for a 16-bit or quantized model, f32 for an fp32 one"});
}

std::vector<size_t> stream_slot_tensors(const Module& m) {
  std::vector<size_t> keep;
  for (size_t i = 0; i < m.tensors.size(); ++i)
    if (i >= m.roles.size() || !is_expert_role(m.roles[i])) keep.push_back(i);
  return keep;
}

uint64_t stream_slot_bytes(const Checkpoint& ck, const Module& m) {
  Module slot = m;  // the tensors the slot holds that exist (a layout made for another index)
  slot.tensors.clear();
  slot.roles.clear();
  for (size_t i : stream_slot_tensors(m))
    if (m.tensors[i] < ck.tensors.size()) {
      slot.tensors.push_back(m.tensors[i]);
      if (i < m.roles.size()) slot.roles.push_back(m.roles[i]);
    }
  return plan_module_reads(ck, slot).bytes;
}

uint64_t stream_piece_bytes(const Checkpoint& ck, const Module& m) {
  constexpr uint64_t kPage = 4096;
  uint64_t largest = 0;
  for (size_t i = 0; i < m.tensors.size() && i < m.roles.size(); ++i) {
    if (!is_expert_role(m.roles[i]) || m.tensors[i] >= ck.tensors.size()) continue;
    const TensorInfo& t = ck.tensors[m.tensors[i]];
    uint64_t piece = t.nbytes;
    if (t.shape.size() >= 3 && t.shape[0] > 0) piece /= uint64_t(t.shape[0]);  // stacked (MXFP4 blocks: 4-D): one expert's
    if (m.roles[i] == Role::ExpGateUp) piece /= 2;                              // its gate or its up half
    // (gpt-oss's ExpGateUpMixed: gate and up interleaved, one piece per expert)
    largest = std::max(largest, piece);
  }
  // Any start within a page and the end rounded up: at most one page more than the bytes.
  return largest == 0 ? 0 : (largest + kPage - 1) / kPage * kPage + kPage;
}

uint64_t engine_host_tables(const EngineConfig& c) {
  return sat_add(sat_add(sat_prod(uint64_t(c.max_tokens), 4 + 8 + 4), sat_prod(uint64_t(c.logit_rows), 8)),
                 sat_prod(uint64_t(c.max_batch), 8));
}

int64_t panel_cols_of(const Checkpoint& ck, const ModelLayout& layout) {
  if (!layout.spec) return 0;
  const EngineDims d = engine_dims(*layout.spec);
  bool has_head = false;
  for (const Module& m : layout.modules)
    has_head = has_head || std::find(m.roles.begin(), m.roles.end(), Role::Head) != m.roles.end();
  int64_t cols = 0;
  for (const Module& m : layout.modules) {
    // gpt-oss's experts (input-major or split-scale MXFP4) never take the GEMM.
    const bool mixed = std::find(m.roles.begin(), m.roles.end(), Role::ExpGateUpMixed) != m.roles.end();
    for (size_t i = 0; i < m.tensors.size() && i < m.roles.size(); ++i) {
      if (m.tensors[i] >= ck.tensors.size() || !cpu_gemm_uses_panel(ck.tensors[m.tensors[i]].dtype)) continue;
      if (mixed && is_expert_role(m.roles[i])) continue;
      switch (m.roles[i]) {
        case Role::Q: case Role::K: case Role::V: case Role::Gate: case Role::Up: case Role::Head: cols = std::max(cols, d.hidden); break;
        case Role::O: cols = std::max(cols, d.q_dim()); break;
        case Role::Down: case Role::ShDown: cols = std::max(cols, d.inter); break;
        case Role::Router: case Role::ExpGate: case Role::ExpUp: case Role::ExpGateUp: case Role::ShGate: case Role::ShUp:
          cols = std::max(cols, d.hidden);
          break;
        case Role::ExpDown: cols = std::max(cols, d.expert_inter); break;
        case Role::Embed: if (!has_head) cols = std::max(cols, d.hidden); break;
        default: break;
      }
    }
  }
  return cols;
}

uint64_t cpu_thread_buffers(const EngineConfig& c) {
  const uint64_t threads = uint64_t(std::max(1, c.threads));
  const uint64_t tls = sat_prod(threads - 1, static_tls_bytes());
  if (c.panel_cols <= 0 || c.max_tokens < kCpuGemmMinRows) return tls;
  return sat_add(tls, sat_prod(threads, uint64_t(kCpuGemmPanelRows), uint64_t(c.panel_cols), 4));
}

EngineMemory engine_memory(const ModelSpec& spec, const EngineConfig& cfg) {
  EngineMemory m;
  EngineConfig& c = m.config;
  c = cfg;
  if (c.max_batch <= 0) c.max_batch = 1;
  if (c.max_context <= 0) c.max_context = default_context(spec.max_context);
  if (c.max_tokens <= 0) c.max_tokens = engine_max_tokens(0, c.max_batch);
  if (c.logit_rows <= 0) c.logit_rows = c.max_batch;
  if (c.threads <= 0) c.threads = 1;
  const EngineDims d = engine_dims(spec);
  const uint64_t T = uint64_t(c.max_tokens), R = uint64_t(c.logit_rows);
  // Sizes saturate at UINT64_MAX: an absurd --context x --batch must read as "does not fit",
  // never wrap to something small.
  // x, normed x, residual delta (hidden); q and attention output (q_dim); k, v (kv_dim);
  // gate, up (intermediate): fp32 each. Token tables (slot int32, position int64, id int32)
  // on the host and in the backend, the logit rows' token indices (int64) and the positions
  // each slot holds (int64).
  // MLA: q as projected and the low-rank / expanded-output buffer (EngineDims::mla_*_dim).
  const uint64_t per_token = uint64_t(3 * d.hidden + 2 * d.q_dim() + 2 * d.kv_dim() + 2 * d.inter + d.mla_q_dim() + d.mla_lat_dim()) * 4;
  m.activations = sat_add(sat_add(sat_prod(T, per_token), sat_prod(T, 4 + 8 + 4)), engine_host_tables(c));
  if (!c.cuda) m.activations = sat_add(m.activations, cpu_moe_bytes(d, c.max_tokens));
  const uint64_t esize = c.kv_dtype == DType::F16 ? 2 : 4;
  const BlockRecipe recipe = recipe_for(spec);
  m.kv_positions.clear();
  for (const LayerRecipe& l : recipe.layers) {
    m.kv_positions.push_back(kv_positions(l, c.max_context, c.max_tokens));
    m.kv_cache = sat_add(m.kv_cache, sat_prod(d.mla_rank > 0 ? 1 : 2, uint64_t(c.max_batch), uint64_t(m.kv_positions.back()),
                                              uint64_t(d.kv_dim()), esize));
  }
  m.logits = sat_prod(R, uint64_t(d.hidden + d.vocab), 4);
  const int64_t widest = d.widest_vector();
  m.scratch = sat_add(sat_prod(uint64_t(c.threads), uint64_t(c.max_context), 4), sat_prod(uint64_t(kVecSlots), uint64_t(widest), 4));
  if (c.fast_math && !c.cuda) {  // both roundings, whatever the weights' types (the plan does not depend on the CPU)
    const int64_t in = d.widest_matmul_input();
    m.scratch = sat_add(m.scratch, sat_prod(std::max(T, R), cpu_q8k_row_bytes(in) + cpu_bf16x_row_bytes(in)));
    // and the routed experts' gathered rows (one per token and choice) as Q8_K
    if (d.experts > 0 && d.top_k > 0)
      m.scratch = sat_add(m.scratch, sat_prod(T, uint64_t(d.top_k), cpu_q8k_row_bytes(std::max(d.hidden, d.expert_inter))));
  }
  if (c.cuda) {
    const uint64_t widest_matrix = sat_prod(uint64_t(std::max({d.vocab, d.inter, d.q_dim(), d.hidden})),
                                            uint64_t(d.widest_matmul_input()), 4);
    m.scratch = sat_add(sat_add(std::min<uint64_t>(widest_matrix, cuda::kPanelBytes), cuda::kCublasWorkspaceBytes),
                        cuda_rope_bytes(d.head_dim, recipe.ropes.size() > 1));
    m.activations = sat_add(m.activations, sat_prod(R, 8));
    m.host_logits = sat_prod(R, uint64_t(d.vocab), 4);
  }
  m.stream_pool = sat_add(sat_prod(uint64_t(std::max<int64_t>(0, c.stream_slots)), c.stream_slot_bytes),
                          sat_prod(uint64_t(std::max<int64_t>(0, c.stream_piece_slots)), c.stream_piece_bytes));
  m.thread_buffers = c.cuda ? 0 : cpu_thread_buffers(c);
  return m;
}

}  // namespace nunchaku
