// llama.cpp's reserved graph for one micro-batch, rebuilt tensor by tensor as its model files
// build it (src/models/<arch>.cpp and src/llama-graph.cpp at llama-cpp-python 0.3.36), so that
// ggml-alloc's plan of it (memory/ggml_graph.hpp) gives the compute buffer llama.cpp logs,
// holes included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/ggml_graph.hpp"

namespace nunchaku::llamacpp_graph {

// What the graph depends on: the micro-batch, the cache and the model's dimensions.
struct Dims {
  // The micro-batch: u tokens in n_stream sequences; n_kv cache cells per stream in full
  // attention layers and n_kv_swa in sliding-window ones (0: none).
  // outputs: the rows the last layer keeps (0: all u).
  int64_t u = 0, n_stream = 1, n_kv = 0, n_kv_swa = 0, outputs = 0;
  bool flash = true;
  bool kv_quantized = false;  // a quantized K/V cache: llama.cpp rotates K and V (Hadamard) around it

  int64_t h = 0, V = 0, layers = 0;
  int64_t a = 0, a_kv = 0, d_k = 0, d_v = 0;
  int64_t I = 0;                  // a dense FFN's width
  bool qkv_bias = false;          // biases on q, k and v (qwen2, qwen2moe, gpt-oss)
  bool o_bias = false;            // a bias on the attention output (gpt-oss)
  bool router_bias = false, expert_bias = false;  // biases on the router and the experts (gpt-oss)
  int64_t E = 0, k = 0, I_exp = 0, I_shexp = 0;
  int norm_topk = -1;             // the routed weights renormalized: 1 / 0, -1: as the architecture does
  double w_scale = 0;             // the routed weights scaled (0 or 1: not)
  bool sigmoid = false;           // sigmoid scores over all experts, not a softmax (deepseek2's gating func 2)
  bool probs_bias = false;        // a per-expert bias added to the scores for the choice only (exp_probs_b)
  int64_t groups = 0, groups_used = 0;  // the choice limited to the best groups_used of `groups` (> 1)
  std::vector<bool> moe_layer;    // per layer: routed experts (empty: every layer when E > 0)
  // MLA (deepseek2): the latent's width, the rotary and unrotated head parts, v's head, the
  // query's low rank (0: none). The cache holds kv_lora + rope values per cell, no V cache.
  int64_t kv_lora = 0, rope = 0, nope = 0, v_head = 0, q_lora = 0;
  std::vector<bool> swa_layer;    // per layer: sliding-window attention (empty: none)
};

// What an architecture's model file does differently from llama's block; set by build() from
// the architecture's name, as llama.cpp's own dispatch does.
struct Traits {
  bool fused_qkv = false;         // one attn_qkv split by views (phi3)
  bool fused_gate_up = false;     // one ffn_up of 2·I rows and ggml_swiglu of it (phi3)
  bool q_scale = false;           // Q scaled after the rope (phi3)
  bool residual_first = false;    // the FFN's residual add takes the residual as its first source (phi3)
  bool qk_norm = false;           // q/k RMS norms (qwen3, qwen3moe, olmoe)
  bool norm_topk = true;          // the routed weights renormalized (llama's experts, qwen3moe, phi3)
  bool shexp_gate = false;        // a sigmoid gate on the shared expert (qwen2moe)
  bool softmax_weight = false;    // softmax over the chosen k logits, not over all experts (gpt-oss)
  bool nextn_output = false;      // the last residual is a graph output, its rows picked after the layers (gpt-oss)
  // llama4: full-attention layers have no rope and scale Q by a temperature input; the rotated
  // layers' q and k are RMS-normed after the rope; sigmoid scores, experts chosen by the logits;
  // the routed weight multiplies the expert's input.
  bool nope_on_full = false, kq_norm_after_rope = false, sigmoid_select_logits = false, weight_before_ffn = false;
  // gemma's: the embeddings scaled; gemma2/3's: RMS norms after attention and after the FFN.
  bool embd_scale = false, post_norms = false;
  // olmo2: no norm before attention or the FFN (only after), q and k normed before their reshape.
  bool no_pre_norms = false, qk_norm_flat = false;
};

// The llama.cpp architectures whose graph is rebuilt here (GGUF general.architecture names).
bool has_graph(const std::string& gguf_arch);

// The graph of `gguf_arch` for these dimensions; nullopt when it is not rebuilt here.
std::optional<ggml_sim::Graph> build(const std::string& gguf_arch, const Dims& d);

}  // namespace nunchaku::llamacpp_graph
