#include "engine/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>

#include "core/error.hpp"
#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {
namespace {

Error engine_error(const std::string& code, const std::string& msg, const std::string& tensor = "",
                   const std::string& hint = "") {
  return Error(code, msg, {.tensor = tensor, .hint = hint});
}

bool is_gguf_naming(const WeightStore& ws) { return ws.find("token_embd.weight") != nullptr; }

const TensorView* find_tensor(const WeightStore& ws, bool gguf, const std::string& hf, const std::string& gg) {
  return ws.find(gguf ? gg : hf);
}

const TensorView& require(const WeightStore& ws, bool gguf, const std::string& hf, const std::string& gg) {
  const TensorView* t = find_tensor(ws, gguf, hf, gg);
  if (!t) throw engine_error("engine.missing_tensor", "the model has no tensor '" + (gguf ? gg : hf) + "'", gguf ? gg : hf);
  return *t;
}

void check_host(const TensorView& t) {
  if (t.device.kind == Device::Kind::Cuda)
    throw engine_error("engine.not_on_host", "tensor is in GPU memory; the CPU engine needs it in host memory", t.name,
                       "load with --device cpu (a CUDA backend is a later issue)");
  if (!t.strides.empty()) throw engine_error("engine.not_contiguous", "tensor is not contiguous", t.name);
}

WeightMatrix matrix(const TensorView& t, int64_t rows, int64_t cols) {
  check_host(t);
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols)
    throw engine_error("engine.bad_shape",
                       fmt::format("shape [{}] where the model needs [{}, {}]", fmt::join(t.shape, ", "), rows, cols),
                       t.name);
  if (!matmul_supports(t.dtype))
    throw engine_error("engine.unsupported_dtype",
                       "dtype " + std::string(dtype_name(t.dtype)) + " is not supported by the CPU kernels", t.name,
                       "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
  auto rb = dtype_nbytes(t.dtype, uint64_t(cols));
  if (!rb || *rb * uint64_t(rows) != t.nbytes)
    throw engine_error("engine.bad_shape", "row length is not a whole number of blocks", t.name);
  return WeightMatrix{static_cast<const uint8_t*>(t.data), t.dtype, rows, cols, size_t(*rb), t.name};
}

std::vector<float> vec(const TensorView& t, int64_t n) {
  check_host(t);
  int64_t numel = 1;
  for (auto d : t.shape) numel *= d;
  if (numel != n)
    throw engine_error("engine.bad_shape", fmt::format("{} elements where the model needs {}", numel, n), t.name);
  std::vector<float> out(static_cast<size_t>(n));
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::F16: out[i] = blocks::half_to_float(blocks::load_u16(p + 2 * i)); break;
      case DType::BF16: out[i] = blocks::bf16_to_float(blocks::load_u16(p + 2 * i)); break;
      default:
        throw engine_error("engine.unsupported_dtype", "vector of dtype " + std::string(dtype_name(t.dtype)), t.name);
    }
  }
  return out;
}

std::string rope_type_of(const nlohmann::json& rs) {
  if (!rs.is_object()) return "default";
  for (const char* k : {"rope_type", "type"}) {
    auto it = rs.find(k);
    if (it != rs.end() && it->is_string()) return it->get<std::string>();
  }
  return "default";
}

double json_number(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

}  // namespace

Transformer::Transformer(const ModelSpec& spec, const WeightStore& ws, const EngineOptions& opts)
    : spec_(spec), opts_(opts) {
  const std::string& arch = spec.architecture;
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3")
    throw engine_error("engine.unsupported_architecture", "architecture '" + arch + "' is not supported by the engine", "",
                       "supported: llama, mistral, qwen2, qwen3");
  if (spec.num_experts > 0)
    throw engine_error("engine.unsupported_architecture", "mixture-of-experts models are not supported yet");
  const bool gguf = is_gguf_naming(ws);
  hidden_ = spec.hidden_size;
  heads_ = spec.num_heads;
  kv_heads_ = spec.num_kv_heads > 0 ? spec.num_kv_heads : spec.num_heads;
  head_dim_ = spec.head_dim > 0 ? spec.head_dim : (heads_ > 0 ? hidden_ / heads_ : 0);
  if (hidden_ <= 0 || heads_ <= 0 || head_dim_ <= 0 || head_dim_ % 2 || heads_ % kv_heads_ || spec.num_layers <= 0)
    throw engine_error("engine.bad_spec", fmt::format("inconsistent dimensions: hidden {}, heads {}/{}, head_dim {}, layers {}",
                                                      hidden_, heads_, kv_heads_, head_dim_, spec.num_layers));
  eps_ = spec.norm_eps > 0 ? float(spec.norm_eps) : 1e-5f;

  const TensorView& emb = require(ws, gguf, "model.embed_tokens.weight", "token_embd.weight");
  vocab_ = emb.shape.empty() ? 0 : emb.shape[0];
  embed_ = matrix(emb, vocab_, hidden_);
  if (const TensorView* head = find_tensor(ws, gguf, "lm_head.weight", "output.weight")) lm_head_ = matrix(*head, vocab_, hidden_);
  else lm_head_ = embed_;  // tied embeddings
  final_norm_ = vec(require(ws, gguf, "model.norm.weight", "output_norm.weight"), hidden_);

  const TensorView* gate0 = find_tensor(ws, gguf, "model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight");
  inter_ = gate0 && gate0->shape.size() == 2 ? gate0->shape[0] : spec.intermediate_size;
  const int64_t q_dim = heads_ * head_dim_, kv_dim = kv_heads_ * head_dim_;
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    const std::string hf = fmt::format("model.layers.{}.", l), gg = fmt::format("blk.{}.", l);
    auto get = [&](const char* h, const char* g) -> const TensorView& { return require(ws, gguf, hf + h, gg + g); };
    auto opt = [&](const char* h, const char* g) { return find_tensor(ws, gguf, hf + h, gg + g); };
    Layer L;
    L.q = matrix(get("self_attn.q_proj.weight", "attn_q.weight"), q_dim, hidden_);
    L.k = matrix(get("self_attn.k_proj.weight", "attn_k.weight"), kv_dim, hidden_);
    L.v = matrix(get("self_attn.v_proj.weight", "attn_v.weight"), kv_dim, hidden_);
    L.o = matrix(get("self_attn.o_proj.weight", "attn_output.weight"), hidden_, q_dim);
    L.gate = matrix(get("mlp.gate_proj.weight", "ffn_gate.weight"), inter_, hidden_);
    L.up = matrix(get("mlp.up_proj.weight", "ffn_up.weight"), inter_, hidden_);
    L.down = matrix(get("mlp.down_proj.weight", "ffn_down.weight"), hidden_, inter_);
    L.attn_norm = vec(get("input_layernorm.weight", "attn_norm.weight"), hidden_);
    L.ffn_norm = vec(get("post_attention_layernorm.weight", "ffn_norm.weight"), hidden_);
    if (auto* t = opt("self_attn.q_proj.bias", "attn_q.bias")) L.q_bias = vec(*t, q_dim);
    if (auto* t = opt("self_attn.k_proj.bias", "attn_k.bias")) L.k_bias = vec(*t, kv_dim);
    if (auto* t = opt("self_attn.v_proj.bias", "attn_v.bias")) L.v_bias = vec(*t, kv_dim);
    if (auto* t = opt("self_attn.q_norm.weight", "attn_q_norm.weight")) L.q_norm = vec(*t, head_dim_);
    if (auto* t = opt("self_attn.k_norm.weight", "attn_k_norm.weight")) L.k_norm = vec(*t, head_dim_);
    if (arch == "qwen3" && (L.q_norm.empty() || L.k_norm.empty()))
      throw engine_error("engine.missing_tensor", "qwen3 layer without q/k norm weights", hf + "self_attn.q_norm.weight");
    L.window = size_t(l) < spec.layer_windows.size() ? spec.layer_windows[size_t(l)] : spec.sliding_window;
    layers_.push_back(std::move(L));
  }

  // Rotary frequencies (HF computes them in float32; so do we, for matching logits).
  rope_style_ = opts.rope_style.value_or(gguf && (arch == "llama" || arch == "mistral") ? RopeStyle::Interleaved
                                                                                        : RopeStyle::NeoX);
  const float theta = float(spec.rope_theta > 0 ? spec.rope_theta : 10000.0);
  inv_freq_.resize(size_t(head_dim_ / 2));
  for (int64_t i = 0; i < head_dim_ / 2; ++i)
    inv_freq_[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim_));
  const std::string rtype = rope_type_of(spec.rope_scaling);
  if (rtype == "llama3") {
    const auto& rs = spec.rope_scaling;
    float factor = float(json_number(rs, "factor", 8)), lo = float(json_number(rs, "low_freq_factor", 1)),
          hi = float(json_number(rs, "high_freq_factor", 4)),
          old_ctx = float(json_number(rs, "original_max_position_embeddings", 8192));
    float lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (float& f : inv_freq_) {
      float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen > lo_wavelen) {
        f = f / factor;
      } else if (!(wavelen < hi_wavelen)) {
        float smooth = (old_ctx / wavelen - lo) / (hi - lo);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
  } else if (rtype == "linear") {
    float factor = float(json_number(spec.rope_scaling, "factor", 1));
    for (float& f : inv_freq_) f /= factor;
  } else if (rtype != "default" && rtype != "none") {
    throw engine_error("engine.unsupported_rope", "rope scaling '" + rtype + "' is not supported", "",
                       "supported: none, linear, llama3");
  }
  if (gguf) {  // llama.cpp stores llama3 scaling as per-frequency divisors
    if (const TensorView* rf = ws.find("rope_freqs.weight")) {
      auto ff = vec(*rf, head_dim_ / 2);
      for (size_t i = 0; i < ff.size(); ++i) inv_freq_[i] /= ff[i];
    }
  }

  // Options and run state.
  if (opts_.max_batch <= 0) opts_.max_batch = 1;
  if (opts_.max_context <= 0) opts_.max_context = spec.max_context > 0 ? std::min<int64_t>(spec.max_context, 4096) : 2048;
  if (opts_.max_tokens <= 0) opts_.max_tokens = std::max<int64_t>(256, opts_.max_batch);
  if (opts_.logit_rows <= 0) opts_.logit_rows = opts_.max_batch;
  if (opts_.kv_dtype != DType::F32 && opts_.kv_dtype != DType::F16)
    throw engine_error("engine.bad_option", "KV cache dtype must be F32 or F16");
  backend_ = make_cpu_backend(opts_.threads, opts_.max_context);

  const size_t T = size_t(opts_.max_tokens);
  const size_t esize = opts_.kv_dtype == DType::F16 ? 2 : 4;
  kv_layer_bytes_ = size_t(opts_.max_batch) * size_t(opts_.max_context) * size_t(kv_dim) * esize;
  auto oom = [&](const std::string& why) {
    return Error("engine.out_of_memory",
                 fmt::format("cannot allocate the run state: KV cache {} bytes ({} slots x {} positions x {} layers, {}) "
                             "plus activations for {} tokens{}",
                             kv_layer_bytes_ * 2 * layers_.size(), opts_.max_batch, opts_.max_context, layers_.size(),
                             dtype_name(opts_.kv_dtype), opts_.max_tokens, why),
                 {.hint = "lower --context or --batch-size, or use an f16 KV cache"}, Exit::OutOfMemory);
  };
  // The KV cache's pages are only touched as positions fill, so an over-large one would
  // "succeed" and be killed later; check it against the memory available now instead.
  const uint64_t kv_total = uint64_t(kv_layer_bytes_) * 2 * layers_.size();
  if (uint64_t avail = free_bytes_on(Device{Device::Kind::Cpu, 0}); avail > 0 && kv_total > avail)
    throw oom(fmt::format("; {} bytes are available", avail));
  try {
    x_.resize(T * size_t(hidden_));
    xn_.resize(T * size_t(hidden_));
    tmp_.resize(T * size_t(hidden_));
    q_.resize(T * size_t(q_dim));
    att_.resize(T * size_t(q_dim));
    k_.resize(T * size_t(kv_dim));
    v_.resize(T * size_t(kv_dim));
    gate_.resize(T * size_t(inter_));
    up_.resize(T * size_t(inter_));
    sel_.resize(size_t(opts_.logit_rows) * size_t(hidden_));
    logits_.resize(size_t(opts_.logit_rows) * size_t(vocab_));
    tok_slot_.resize(T);
    tok_pos_.resize(T);
    tok_id_.resize(T);
    slot_len_.assign(size_t(opts_.max_batch), 0);
    kv_.reset(new uint8_t[kv_layer_bytes_ * 2 * layers_.size()]);  // pages are touched as positions fill
  } catch (const std::bad_alloc&) {
    throw oom("");
  }
}

Transformer::~Transformer() = default;

uint64_t Transformer::state_bytes() const {
  uint64_t floats = x_.size() + xn_.size() + tmp_.size() + q_.size() + att_.size() + k_.size() + v_.size() +
                    gate_.size() + up_.size() + sel_.size() + logits_.size();
  return floats * 4 + uint64_t(kv_layer_bytes_) * 2 * layers_.size();
}

std::string Transformer::describe() const {
  return fmt::format("{}, {} layers, hidden {}, heads {}/{} x {}, ffn {}, vocab {}, weights {}, rope {}, kv {}, {}",
                     spec_.architecture, layers_.size(), hidden_, heads_, kv_heads_, head_dim_, inter_, vocab_,
                     dtype_name(layers_.empty() ? embed_.dtype : layers_[0].q.dtype),
                     rope_style_ == RopeStyle::NeoX ? "neox" : "interleaved", dtype_name(opts_.kv_dtype),
                     backend_->describe());
}

void Transformer::rope_row(float* v, int64_t heads, int64_t pos) const {
  const int64_t half = head_dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    float angle = float(pos) * inv_freq_[size_t(i)];
    float c = float(std::cos(double(angle))), s = float(std::sin(double(angle)));
    for (int64_t h = 0; h < heads; ++h) {
      float* x = v + h * head_dim_;
      int64_t a = rope_style_ == RopeStyle::NeoX ? i : 2 * i, b = rope_style_ == RopeStyle::NeoX ? i + half : 2 * i + 1;
      float x0 = x[a], x1 = x[b];
      x[a] = x0 * c - x1 * s;
      x[b] = x1 * c + x0 * s;
    }
  }
}

std::span<const float> Transformer::forward(std::span<const SeqChunk> chunks) {
  // Validate and flatten.
  int64_t T = 0, R = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SeqChunk& ch = chunks[c];
    if (ch.slot < 0 || ch.slot >= opts_.max_batch)
      throw engine_error("engine.bad_batch", fmt::format("slot {} outside [0, {})", ch.slot, opts_.max_batch));
    for (size_t d = 0; d < c; ++d)
      if (chunks[d].slot == ch.slot) throw engine_error("engine.bad_batch", fmt::format("slot {} twice in one batch", ch.slot));
    if (ch.tokens.empty()) throw engine_error("engine.bad_batch", "empty chunk");
    if (ch.start < 0 || ch.start + int64_t(ch.tokens.size()) > opts_.max_context)
      throw engine_error("engine.context_full",
                         fmt::format("positions {}..{} do not fit a context of {}", ch.start,
                                     ch.start + int64_t(ch.tokens.size()), opts_.max_context));
    if (ch.start > slot_len_[size_t(ch.slot)])
      throw engine_error("engine.bad_batch", fmt::format("slot {} holds {} positions; a chunk starting at {} would attend to "
                                                         "unwritten ones", ch.slot, slot_len_[size_t(ch.slot)], ch.start));
    T += int64_t(ch.tokens.size());
    R += ch.all_logits ? int64_t(ch.tokens.size()) : 1;
  }
  if (T > opts_.max_tokens)
    throw engine_error("engine.bad_batch", fmt::format("{} tokens in one forward, the engine holds {}", T, opts_.max_tokens));
  if (R > opts_.logit_rows)
    throw engine_error("engine.bad_batch", fmt::format("{} logit rows wanted, the engine holds {}", R, opts_.logit_rows));
  {
    int64_t t = 0;
    for (const SeqChunk& ch : chunks)
      for (size_t i = 0; i < ch.tokens.size(); ++i, ++t) {
        int32_t id = ch.tokens[i];
        if (id < 0 || id >= vocab_)
          throw engine_error("engine.bad_token", fmt::format("token id {} outside the vocabulary [0, {})", id, vocab_));
        tok_id_[size_t(t)] = id;
        tok_slot_[size_t(t)] = ch.slot;
        tok_pos_[size_t(t)] = ch.start + int64_t(i);
      }
  }
  if (T == 0) return {};
  for (const SeqChunk& ch : chunks) slot_len_[size_t(ch.slot)] = ch.start + int64_t(ch.tokens.size());

  const int64_t H = hidden_, q_dim = heads_ * head_dim_, kv_dim = kv_heads_ * head_dim_;
  const bool f16 = opts_.kv_dtype == DType::F16;
  const size_t esize = f16 ? 2 : 4;
  Backend& be = *backend_;

  be.parallel_for(T, [&](int64_t t, int) { dequant_row(embed_, tok_id_[size_t(t)], x_.data() + t * H); });

  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    uint8_t* kcache = kv_.get() + kv_layer_bytes_ * (2 * l);
    uint8_t* vcache = kcache + kv_layer_bytes_;

    be.parallel_for(T, [&](int64_t t, int) { rmsnorm(x_.data() + t * H, L.attn_norm.data(), eps_, H, xn_.data() + t * H); });
    const MatmulJob qkv[3] = {{&L.q, q_.data(), q_dim}, {&L.k, k_.data(), kv_dim}, {&L.v, v_.data(), kv_dim}};
    be.matmul(qkv, xn_.data(), H, T);

    be.parallel_for(T, [&](int64_t t, int) {
      float* q = q_.data() + t * q_dim;
      float* k = k_.data() + t * kv_dim;
      float* v = v_.data() + t * kv_dim;
      if (!L.q_bias.empty()) for (int64_t i = 0; i < q_dim; ++i) q[i] += L.q_bias[size_t(i)];
      if (!L.k_bias.empty()) for (int64_t i = 0; i < kv_dim; ++i) k[i] += L.k_bias[size_t(i)];
      if (!L.v_bias.empty()) for (int64_t i = 0; i < kv_dim; ++i) v[i] += L.v_bias[size_t(i)];
      if (!L.q_norm.empty()) for (int64_t h = 0; h < heads_; ++h) rmsnorm(q + h * head_dim_, L.q_norm.data(), eps_, head_dim_, q + h * head_dim_);
      if (!L.k_norm.empty()) for (int64_t h = 0; h < kv_heads_; ++h) rmsnorm(k + h * head_dim_, L.k_norm.data(), eps_, head_dim_, k + h * head_dim_);
      rope_row(q, heads_, tok_pos_[size_t(t)]);
      rope_row(k, kv_heads_, tok_pos_[size_t(t)]);
      size_t off = (size_t(tok_slot_[size_t(t)]) * size_t(opts_.max_context) + size_t(tok_pos_[size_t(t)])) * size_t(kv_dim) * esize;
      if (f16) {
        store_f16(k, reinterpret_cast<uint16_t*>(kcache + off), kv_dim);
        store_f16(v, reinterpret_cast<uint16_t*>(vcache + off), kv_dim);
      } else {
        std::memcpy(kcache + off, k, size_t(kv_dim) * 4);
        std::memcpy(vcache + off, v, size_t(kv_dim) * 4);
      }
    });

    AttentionJob aj;
    aj.tokens = T;
    aj.heads = heads_;
    aj.kv_heads = kv_heads_;
    aj.head_dim = head_dim_;
    aj.max_context = opts_.max_context;
    aj.window = L.window;
    aj.scale = 1.0f / std::sqrt(float(head_dim_));
    aj.q = q_.data();
    aj.out = att_.data();
    aj.slot = tok_slot_.data();
    aj.pos = tok_pos_.data();
    aj.k = kcache;
    aj.v = vcache;
    aj.f16 = f16;
    be.attention(aj);

    const MatmulJob o[1] = {{&L.o, tmp_.data(), H}};
    be.matmul(o, att_.data(), q_dim, T);
    be.parallel_for(T, [&](int64_t t, int) {
      float* x = x_.data() + t * H;
      const float* d = tmp_.data() + t * H;
      for (int64_t i = 0; i < H; ++i) x[i] += d[i];
      rmsnorm(x, L.ffn_norm.data(), eps_, H, xn_.data() + t * H);
    });
    const MatmulJob gu[2] = {{&L.gate, gate_.data(), inter_}, {&L.up, up_.data(), inter_}};
    be.matmul(gu, xn_.data(), H, T);
    be.parallel_for(T, [&](int64_t t, int) { silu_mul(gate_.data() + t * inter_, up_.data() + t * inter_, inter_); });
    const MatmulJob dn[1] = {{&L.down, tmp_.data(), H}};
    be.matmul(dn, gate_.data(), inter_, T);
    be.parallel_for(T, [&](int64_t t, int) {
      float* x = x_.data() + t * H;
      const float* d = tmp_.data() + t * H;
      for (int64_t i = 0; i < H; ++i) x[i] += d[i];
    });
  }

  // Final norm on the rows that need logits, then the head.
  {
    int64_t t = 0, r = 0;
    for (const SeqChunk& ch : chunks) {
      int64_t n = int64_t(ch.tokens.size());
      for (int64_t i = ch.all_logits ? 0 : n - 1; i < n; ++i, ++r)
        rmsnorm(x_.data() + (t + i) * H, final_norm_.data(), eps_, H, sel_.data() + r * H);
      t += n;
    }
  }
  const MatmulJob head[1] = {{&lm_head_, logits_.data(), vocab_}};
  be.matmul(head, sel_.data(), H, R);
  return {logits_.data(), size_t(R * vocab_)};
}

}  // namespace nunchaku::engine
