// Workload option names, "to make it fit" suggestions and the JSON form of an estimate.
#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "memory/estimate.hpp"
#include "memory/quant.hpp"
#include "memory/units.hpp"

namespace nunchaku {

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::Infer: return "infer";
    case Mode::Train: return "train";
    case Mode::LoRA: return "lora";
    case Mode::QLoRA: return "qlora";
  }
  return "?";
}

std::string_view optimizer_name(Optimizer o) {
  switch (o) {
    case Optimizer::AdamW: return "adamw";
    case Optimizer::AdamW8bit: return "adamw8bit";
    case Optimizer::SGD: return "sgd";
    case Optimizer::SGDMomentum: return "sgd-momentum";
    case Optimizer::Adafactor: return "adafactor";
    case Optimizer::Lion: return "lion";
  }
  return "?";
}

std::string_view offload_name(Offload o) {
  switch (o) {
    case Offload::None: return "none";
    case Offload::Optimizer: return "optimizer";
    case Offload::Params: return "params";
  }
  return "?";
}

Mode parse_mode(std::string_view s) {
  for (Mode m : {Mode::Infer, Mode::Train, Mode::LoRA, Mode::QLoRA})
    if (mode_name(m) == s) return m;
  throw Error("usage.mode", fmt::format("--mode: unknown mode '{}'", s), {.hint = "one of: infer, train, lora, qlora"});
}

Optimizer parse_optimizer(std::string_view s) {
  for (Optimizer o : {Optimizer::AdamW, Optimizer::AdamW8bit, Optimizer::SGD, Optimizer::SGDMomentum, Optimizer::Adafactor, Optimizer::Lion})
    if (optimizer_name(o) == s) return o;
  throw Error("usage.optimizer", fmt::format("--optimizer: unknown optimizer '{}'", s),
              {.hint = "one of: adamw, adamw8bit, sgd, sgd-momentum, adafactor, lion"});
}

Offload parse_offload(std::string_view s) {
  for (Offload o : {Offload::None, Offload::Optimizer, Offload::Params})
    if (offload_name(o) == s) return o;
  throw Error("usage.offload", fmt::format("--offload: unknown target '{}'", s), {.hint = "one of: none, optimizer, params"});
}

namespace {

bool fits(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram, uint64_t* total) {
  Estimate e = estimate(ck, layout, w);
  if (total) *total = e.per_gpu_total;
  return e.per_gpu_total <= vram;
}

// Largest v in [lo, hi] with ok(v), assuming ok is monotone decreasing; 0 if none.
template <class F>
int64_t largest_ok(int64_t lo, int64_t hi, F ok) {
  if (lo > hi || !ok(lo)) return 0;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (ok(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

void push(std::vector<Suggestion>& out, const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram,
          std::string what, std::string flags) {
  uint64_t total = 0;
  if (!fits(ck, layout, w, vram, &total)) return;
  out.push_back({std::move(what), std::move(flags), total, vram - total});
}

}  // namespace

std::vector<Suggestion> suggest_fits(const Checkpoint& ck, const ModelLayout& layout, const Workload& w0, uint64_t vram) {
  std::vector<Suggestion> out;
  const Estimate base = estimate(ck, layout, w0);
  if (base.per_gpu_total <= vram) return out;
  const Workload& w = base.workload;
  const bool training = w.mode != Mode::Infer;

  int64_t b = largest_ok(1, std::max<int64_t>(w.batch - 1, 1), [&](int64_t v) { Workload x = w; x.batch = v; return fits(ck, layout, x, vram, nullptr); });
  if (b > 0 && b < w.batch) { Workload x = w; x.batch = b; push(out, ck, layout, x, vram, "largest batch", fmt::format("--batch {}", b)); }
  int64_t c = largest_ok(1, w.context - 1, [&](int64_t v) { Workload x = w; x.context = v; x.prefill_chunk = std::min(w.prefill_chunk, v); return fits(ck, layout, x, vram, nullptr); });
  if (c > 0) { Workload x = w; x.context = c; x.prefill_chunk = std::min(w.prefill_chunk, c); push(out, ck, layout, x, vram, "longest context", fmt::format("--context {}", c)); }
  if (!w.flash_attention) {
    Workload x = w;
    x.flash_attention = true;
    size_t before = out.size();
    push(out, ck, layout, x, vram, "flash attention (no score matrix)", "--flash-attention");
    if (out.size() == before && w.batch > 1) {  // flash alone is not enough: with the largest batch
      int64_t fb = largest_ok(1, w.batch - 1, [&](int64_t v) { Workload y = x; y.batch = v; return fits(ck, layout, y, vram, nullptr); });
      if (fb > 0) { x.batch = fb; push(out, ck, layout, x, vram, "flash attention + largest batch", fmt::format("--flash-attention --batch {}", fb)); }
    }
  }

  if (w.mode == Mode::Infer || w.mode == Mode::LoRA) {
    // The least aggressive quantization that fits (largest footprint first).
    std::vector<std::pair<QuantSpec, std::string>> cands;
    auto q = [&](std::string_view name, int bits, int group, bool dq, std::string flags) {
      cands.push_back({parse_quant(name, bits, group, dq), std::move(flags)});
    };
    if (w.mode == Mode::Infer) {
      q("int8", 4, 128, false, "--quant int8");
      q("gptq", 8, 128, false, "--quant gptq --quant-bits 8");
      for (auto ft : {"q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k"}) q(ft, 4, 128, false, fmt::format("--quant {}", ft));
      q("gptq", 3, 128, false, "--quant gptq --quant-bits 3");
    }
    q("nf4", 4, 64, false, "--quant nf4");
    q("nf4", 4, 64, true, "--quant nf4 --double-quant");
    q("gptq", 4, 128, false, "--quant gptq --quant-bits 4 --group-size 128");
    std::vector<std::pair<uint64_t, size_t>> fitting;
    for (size_t i = 0; i < cands.size(); ++i) {
      Workload x = w;
      x.quant = cands[i].first;
      if (w.mode == Mode::LoRA) x.mode = Mode::QLoRA;
      uint64_t total = 0;
      if (fits(ck, layout, x, vram, &total)) fitting.push_back({total, i});
    }
    if (!fitting.empty()) {
      auto best = *std::max_element(fitting.begin(), fitting.end());
      Workload x = w;
      x.quant = cands[best.second].first;
      if (w.mode == Mode::LoRA) x.mode = Mode::QLoRA;
      push(out, ck, layout, x, vram, "mildest quantization that fits",
           (w.mode == Mode::LoRA ? "--mode qlora " : "") + cands[best.second].second);
    }
    if (w.mode == Mode::Infer && !w.kv_dtype) {
      Workload x = w;
      x.kv_dtype = DType::F8_E4M3;
      push(out, ck, layout, x, vram, "fp8 KV cache", "--kv-dtype fp8");
    }
  }
  if (training) {
    if (!w.grad_checkpointing) { Workload x = w; x.grad_checkpointing = true; push(out, ck, layout, x, vram, "gradient checkpointing", "--grad-checkpointing"); }
    if (w.mode == Mode::Train) {
      Workload x = w; x.mode = Mode::LoRA; x.zero = 0; x.offload = Offload::None;
      push(out, ck, layout, x, vram, "LoRA instead of full fine-tuning", "--mode lora");
      if (w.optimizer != Optimizer::AdamW8bit) { Workload y = w; y.optimizer = Optimizer::AdamW8bit; push(out, ck, layout, y, vram, "8-bit optimizer states", "--optimizer adamw8bit"); }
    }
    // ZeRO stage, then offload, with the current GPU count; then more GPUs with ZeRO-3.
    bool found = false;
    for (int z = w.zero + 1; z <= 3 && !found; ++z) {
      Workload x = w; x.zero = z;
      size_t before = out.size();
      push(out, ck, layout, x, vram, "ZeRO stage", fmt::format("--zero {}", z));
      found = out.size() > before;
    }
    for (Offload o : {Offload::Optimizer, Offload::Params}) {
      if (found || o <= w.offload) continue;
      Workload x = w; x.zero = std::max(w.zero, o == Offload::Params ? 3 : 2); x.offload = o;
      size_t before = out.size();
      push(out, ck, layout, x, vram, "ZeRO-Offload", fmt::format("--zero {} --offload {}", x.zero, offload_name(o)));
      found = out.size() > before;
    }
    for (int g : {2, 4, 8, 16, 32, 64}) {
      if (g <= w.gpus) continue;
      Workload x = w; x.gpus = g; x.zero = 3;
      size_t before = out.size();
      push(out, ck, layout, x, vram, "GPU count", fmt::format("--gpus {} --zero 3", g));
      if (out.size() > before) break;
    }
  } else {
    for (int g : {2, 4, 8, 16}) {
      if (g <= w.gpus) continue;
      Workload x = w; x.gpus = g;
      size_t before = out.size();
      push(out, ck, layout, x, vram, "GPU count (model split)", fmt::format("--gpus {}", g));
      if (out.size() > before) break;
    }
  }
  return out;
}

nlohmann::json to_json(const Estimate& e) {
  using nlohmann::json;
  const Workload& w = e.workload;
  json j;
  j["model"] = e.spec.to_json();
  j["model"]["num_layers"] = e.spec.num_layers;
  j["model"]["hidden_size"] = e.spec.hidden_size;
  j["model"]["num_heads"] = e.spec.num_heads;
  j["model"]["num_kv_heads"] = e.spec.num_kv_heads;
  j["model"]["head_dim"] = e.spec.head_dim;
  j["model"]["vocab_size"] = e.spec.vocab_size;
  j["workload"] = {{"mode", mode_name(w.mode)},        {"batch", w.batch},
                   {"context", w.context},             {"context_defaulted", e.context_defaulted},
                   {"prefill_chunk", w.prefill_chunk}, {"weight_dtype", dtype_name(e.weight_dtype)},
                   {"compute_dtype", dtype_name(e.compute_dtype)}, {"kv_dtype", dtype_name(e.kv_dtype)},
                   {"quant", w.quant.label()},         {"optimizer", optimizer_name(w.optimizer)},
                   {"grad_checkpointing", w.grad_checkpointing}, {"flash_attention", w.flash_attention},
                   {"all_logits", w.all_logits},       {"lora_rank", w.lora_rank},
                   {"lora_targets", w.lora_targets},   {"gpus", w.gpus},
                   {"zero", w.zero},                   {"offload", offload_name(w.offload)},
                   {"mixed_precision", e.mixed_precision}};
  j["parameters"] = e.parameters;
  j["trainable_parameters"] = e.trainable_parameters;
  j["largest_layer_parameters"] = e.largest_layer_parameters;
  j["kv_bytes_per_token"] = e.kv_bytes_per_token;
  json comps = json::object(), formulas = json::object(), host = json::object();
  for (const auto& c : e.gpu) {
    comps[c.name] = c.bytes;
    formulas[c.name] = c.formula;
  }
  for (const auto& c : e.host) {
    host[c.name] = c.bytes;
    formulas[c.name] = c.formula;
  }
  j["components"] = comps;
  j["host"] = host;
  j["formulas"] = formulas;
  j["overheads"] = json::array();
  for (const auto& c : e.gpu)
    if (c.overhead) j["overheads"].push_back(c.name);
  j["per_gpu_total"] = e.per_gpu_total;
  j["host_total"] = e.host_total;
  j["modules"] = json::array();
  for (const auto& m : e.modules)
    j["modules"].push_back({{"name", m.name}, {"kind", module_kind_name(m.kind)}, {"layer", m.layer},
                            {"parameters", m.parameters}, {"weight_bytes", m.weight_bytes}, {"kv_bytes", m.kv_bytes},
                            {"trainable_parameters", m.trainable_parameters}, {"train_bytes", m.train_bytes}});
  j["notes"] = e.notes;
  return j;
}

nlohmann::json to_json(const Verdict& v) {
  return {{"vram", v.vram}, {"fits", v.fits}, {v.fits ? "headroom" : "shortfall", v.margin}, {"text", v.text}};
}

nlohmann::json to_json(const std::vector<Suggestion>& s) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : s)
    a.push_back({{"what", x.what}, {"flags", x.flags}, {"per_gpu_total", x.per_gpu_total}, {"headroom", x.headroom}});
  return a;
}

}  // namespace nunchaku
