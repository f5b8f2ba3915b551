// Workload option names, "to make it fit" suggestions and the JSON form of an estimate.
#include <algorithm>
#include <functional>
#include <optional>

#include <fmt/ranges.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "memory/engine_memory.hpp"
#include "memory/estimate.hpp"
#include "memory/multinode.hpp"
#include "memory/quant.hpp"
#include "core/units.hpp"

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

// One way to change the workload. Searched levers (batch, context, GPU count) pick the
// value that fits given the other changes of the combination.
enum class Search { None, Batch, Context, Gpus, Nodes };
struct Option {
  int lever = 0;
  int cost = 0;  // what the user gives up: 0 nothing, 1 speed, 2 throughput/precision, 3 quality or hardware, 4 the task
  std::string what, flags;
  std::function<void(Workload&)> apply;
  Search search = Search::None;
};

struct Searcher {
  const Checkpoint& ck;
  const ModelLayout& layout;
  const EstimateBasis& basis;
  uint64_t vram;
  double margin;
  size_t evaluated = 0;

  // Total when the workload fits with `margin` of the runtime's budget left, else nullopt.
  std::optional<uint64_t> fit(const Workload& w) {
    ++evaluated;
    Estimate e;
    try {
      e = estimate(ck, layout, w, basis);
    } catch (const Error&) {
      return std::nullopt;  // an invalid combination (e.g. offload without ZeRO)
    }
    const uint64_t budget = verdict(e, vram).budget;
    const uint64_t keep = static_cast<uint64_t>(static_cast<long double>(budget) * margin);
    if (e.per_gpu_total > budget || budget - e.per_gpu_total < keep) return std::nullopt;
    return e.per_gpu_total;
  }

  // Largest v in [lo, hi] with ok(v), ok monotone decreasing; 0 if none.
  template <class F>
  static int64_t largest_ok(int64_t lo, int64_t hi, F ok) {
    if (lo > hi || !ok(lo)) return 0;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo + 1) / 2;
      if (ok(mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  // Applies a searched lever to `w`; false when no value fits.
  bool resolve(Search s, const Workload& base, Workload& w, std::string& flags) {
    if (s == Search::Batch) {
      int64_t b = largest_ok(1, base.batch - 1, [&](int64_t v) { Workload x = w; x.batch = v; return fit(x).has_value(); });
      if (b == 0) return false;
      w.batch = b;
      flags = fmt::format("--batch {}", b);
    } else if (s == Search::Context) {
      const int64_t chunk = w.prefill_chunk;
      const int64_t images = w.images_in_context ? w.images * w.image_tokens : 0;  // --context counts text only
      int64_t c = largest_ok(images + 1, base.context - 1, [&](int64_t v) {
        Workload x = w; x.context = v; x.prefill_chunk = std::min(chunk, v); return fit(x).has_value(); });
      if (c == 0) return false;
      w.context = c;
      w.prefill_chunk = std::min(chunk, c);
      flags = fmt::format("--context {}", c - images);
    } else if (s == Search::Gpus) {
      for (int g : {2, 4, 8, 16, 32, 64}) {
        if (g <= base.gpus) continue;
        Workload x = w;
        x.gpus = g;
        if (fit(x)) {
          w.gpus = g;
          flags = fmt::format("--gpus {}", g);
          return true;
        }
      }
      return false;
    } else if (s == Search::Nodes) {
      for (int n : {2, 4, 8, 16, 32}) {
        if (n <= base.nodes) continue;
        Workload x = w;
        x.nodes = n;
        if (fit(x)) {
          w.nodes = n;
          flags = fmt::format("--nodes {}", n);
          return true;
        }
      }
      return false;
    }
    return true;
  }
};

std::vector<Option> levers(const Workload& w, Runtime rt, const ModelSpec* spec) {
  const bool cpu = w.target == Target::Cpu;  // one process in host memory: no GPU count, nothing to offload to
  std::vector<Option> o;
  int lever = 0;
  auto add = [&](int cost, std::string what, std::string flags, std::function<void(Workload&)> f, Search s = Search::None) {
    o.push_back({lever, cost, std::move(what), std::move(flags), std::move(f), s});
  };
  const bool training = w.mode != Mode::Infer;
  if (w.attention == Attention::Eager) {
    add(0, rt == Runtime::Transformers ? "SDPA attention (no score matrix)" : "flash attention",
        rt == Runtime::Transformers ? "--attention sdpa" : "--attention flash",
        [rt](Workload& x) { x.attention = rt == Runtime::Transformers ? Attention::Sdpa : Attention::Flash; x.flash_attention = false; });
    ++lever;
  }
  if (!training) {
    if (!w.kv_dtype && rt != Runtime::LlamaCpp) {
      if (rt != Runtime::Nunchaku) {
        add(1, "fp8 KV cache", "--kv-dtype fp8", [](Workload& x) { x.kv_dtype = DType::F8_E4M3; });
        ++lever;
      } else if (engine_kv_default(spec) != DType::F16) {  // an fp32 model's f32 default
        add(1, "f16 KV cache", "--kv-dtype f16", [](Workload& x) { x.kv_dtype = DType::F16; });
        ++lever;
      }
    }
    if (w.quant.scheme == QuantScheme::None) {
      std::pair<const char*, const char*> q8 = {"q8_0", "--quant q8_0"}, q4 = {"q4_k_m", "--quant q4_k_m"};
      if (rt == Runtime::Transformers) q8 = {"int8", "--quant int8"}, q4 = {"nf4", "--quant nf4"};
      if (rt == Runtime::Vllm) q8 = {"gptq8", "--quant gptq --quant-bits 8"}, q4 = {"awq", "--quant awq"};
      auto spec = [](std::string_view n) { return n == "gptq8" ? parse_quant("gptq", 8) : parse_quant(n, 4, n == "nf4" ? 64 : 128); };
      const QuantSpec s8 = spec(q8.first), s4 = spec(q4.first);
      add(2, std::string("8-bit weights (") + q8.first + ")", q8.second, [s8](Workload& x) { x.quant = s8; });
      add(3, std::string("4-bit weights (") + q4.first + ")", q4.second, [s4](Workload& x) { x.quant = s4; });
      ++lever;
    }
  } else {
    if (!w.grad_checkpointing) {
      add(1, "gradient checkpointing", "--grad-checkpointing", [](Workload& x) { x.grad_checkpointing = true; });
      ++lever;
    }
    if (w.optimizer == Optimizer::AdamW) {
      add(1, "8-bit optimizer states", "--optimizer adamw8bit", [](Workload& x) { x.optimizer = Optimizer::AdamW8bit; });
      ++lever;
    }
    if (w.mode == Mode::Train) {
      add(3, "LoRA", "--mode lora", [](Workload& x) { x.mode = Mode::LoRA; });
      add(4, "QLoRA (4-bit base)", "--mode qlora", [](Workload& x) { x.mode = Mode::QLoRA; });
      ++lever;
    } else if (w.mode == Mode::LoRA) {
      add(3, "QLoRA (4-bit base)", "--mode qlora", [](Workload& x) { x.mode = Mode::QLoRA; });
      ++lever;
    }
    const std::pair<int, Offload> zs[] = {{1, Offload::None}, {2, Offload::None}, {3, Offload::None},
                                          {2, Offload::Optimizer}, {3, Offload::Optimizer}, {3, Offload::Params}};
    if (rt == Runtime::Fsdp) {  // FSDP's own levers: shard over every node, then its CPU offload (fsdp.hpp)
      if (w.fsdp == FsdpStrategy::Hybrid && w.nodes > 1)
        add(1, "FSDP full shard", "--fsdp-strategy full", [](Workload& x) { x.fsdp = FsdpStrategy::Full; });
      if (w.offload == Offload::None && !cpu)
        add(3, "FSDP CPU offload", "--offload params", [](Workload& x) { x.offload = Offload::Params; });
    }
    for (const auto& [z, off] : zs) {
      if (rt == Runtime::Fsdp) break;
      if (z < w.zero || (z == w.zero && off <= w.offload) || (cpu && off != Offload::None)) continue;
      const int cost = off == Offload::None ? 1 : off == Offload::Optimizer ? 2 : 3;
      std::string flags = fmt::format("--runtime deepspeed --zero {}", z);
      if (off != Offload::None) flags += fmt::format(" --offload {}", offload_name(off));
      add(cost, fmt::format("ZeRO-{}{}", z, off == Offload::None ? "" : fmt::format(" + offload {}", offload_name(off))), flags,
          [z = z, off = off](Workload& x) { x.runtime = Runtime::DeepSpeed; x.zero = z; x.offload = off; });
    }
    ++lever;
  }
  if (w.batch > 1) add(2, "largest batch", "", [](Workload&) {}, Search::Batch), ++lever;
  // More machines of the same GPUs: DeepSpeed partitions over every node's GPUs (training
  // only); listed before more GPUs in one machine, which stops at the size of a node.
  if (!cpu && training) add(3, "fewest nodes", "", [](Workload&) {}, Search::Nodes), ++lever;
  if (!cpu) add(3, "fewest GPUs", "", [](Workload&) {}, Search::Gpus), ++lever;
  if (!training && w.context > 1) add(4, "longest context", "", [](Workload&) {}, Search::Context), ++lever;
  return o;
}

}  // namespace

std::vector<Suggestion> suggest_fits(const Checkpoint& ck, const ModelLayout& layout, const Workload& w0, uint64_t vram,
                                     double margin, size_t max_suggestions, const EstimateBasis* given) {
  std::vector<Suggestion> out;
  const EstimateBasis own = given ? EstimateBasis{} : estimate_basis(ck, layout);
  const EstimateBasis& basis = given ? *given : own;
  const Estimate base = estimate(ck, layout, w0, basis);
  const Workload& w = base.workload;
  Searcher S{ck, layout, basis, vram, margin};
  if (S.fit(w)) return out;
  const std::vector<Option> opts = levers(w, base.runtime, layout.spec ? &*layout.spec : nullptr);
  int n_levers = 0;
  for (const auto& o : opts) n_levers = std::max(n_levers, o.lever + 1);
  // Every combination: at most one option per lever, cheapest (then fewest changes) first.
  struct Combo { std::vector<size_t> picks; int cost = 0; };
  std::vector<Combo> combos{{}};
  for (int l = 0; l < n_levers; ++l) {
    const size_t n = combos.size();
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < opts.size(); ++k)
        if (opts[k].lever == l) {
          Combo c = combos[i];
          c.picks.push_back(k);
          c.cost += opts[k].cost;
          combos.push_back(std::move(c));
        }
  }
  std::stable_sort(combos.begin(), combos.end(), [](const Combo& a, const Combo& b) {
    return a.cost != b.cost ? a.cost < b.cost : a.picks.size() < b.picks.size();
  });
  struct Kept {
    std::vector<size_t> fixed;   // options without a searched value, sorted
    Workload w;                  // the workload it fits with (searched values resolved)
  };
  std::vector<Kept> kept;
  constexpr size_t kMaxEstimates = 4000;  // bounds the search on huge option sets
  for (const Combo& c : combos) {
    if (c.picks.empty() || out.size() >= max_suggestions || S.evaluated > kMaxEstimates) continue;
    std::vector<size_t> fixed;
    for (size_t k : c.picks)
      if (opts[k].search == Search::None) fixed.push_back(k);
    const bool searched = fixed.size() != c.picks.size();
    // Dominated: a kept combination with a subset of these fixed changes already fits with a
    // batch and context at least as large on no more GPUs. So a kept combination of fixed
    // changes covers every superset, and one with a searched lever (batch, context, GPUs)
    // covers a superset only when the extra changes do not let that value grow back
    // ("--gpus 2" kept makes "--gpus 2 --context 511" and "--kv-dtype f16 --gpus 2" useless).
    auto dominated = [&](const Workload& x) {
      return std::any_of(kept.begin(), kept.end(), [&](const Kept& k) {
        return std::includes(fixed.begin(), fixed.end(), k.fixed.begin(), k.fixed.end()) && x.batch <= k.w.batch &&
               x.context <= k.w.context && x.ranks() >= k.w.ranks();
      });
    };
    if (!searched && dominated(w)) continue;  // decided before any estimate
    Workload x = w;
    std::vector<std::string> what, flags;
    for (size_t k : c.picks)
      if (opts[k].search == Search::None) opts[k].apply(x), what.push_back(opts[k].what), flags.push_back(opts[k].flags);
    bool ok = true;
    for (size_t k : c.picks) {
      if (opts[k].search == Search::None) continue;
      std::string f;
      ok = ok && S.resolve(opts[k].search, w, x, f);
      what.push_back(opts[k].what);
      flags.push_back(f);
    }
    if (!ok) continue;
    if (searched && dominated(x)) continue;
    auto total = S.fit(x);
    if (!total) continue;
    kept.push_back({fixed, x});
    const uint64_t budget = verdict(estimate(ck, layout, x, basis), vram).budget;
    out.push_back({fmt::format("{}", fmt::join(what, " + ")), fmt::format("{}", fmt::join(flags, " ")), c.cost, *total, budget - *total});
  }
  return out;
}

// Names: docs/json.md (bytes *_bytes, counts num_*, null for none); shape: docs/schema/estimate.json.
nlohmann::json to_json(const Estimate& e) {
  using nlohmann::json;
  const Workload& w = e.workload;
  auto positive = [](int64_t v) { return v > 0 ? json(v) : json(nullptr); };
  json j;
  // A module tree (no config.json or GGUF metadata) has no model description.
  j["model"] = e.spec.architecture.empty() ? json(nullptr) : e.spec.to_json();
  j["runtime"] = runtime_name(e.runtime);
  j["device"] = e.target == Target::Cpu ? "cpu" : "cuda";
  j["usable_fraction"] = e.usable_fraction;
  j["runtime_model"] = e.runtime_model;
  j["workload"] = {{"mode", mode_name(w.mode)},        {"batch", w.batch},
                   {"context", positive(w.context)},   {"context_defaulted", e.context_defaulted},
                   {"prefill_chunk", positive(w.prefill_chunk)}, {"weight_dtype", dtype_name(e.weight_dtype)},
                   {"compute_dtype", dtype_name(e.compute_dtype)}, {"kv_dtype", dtype_name(e.kv_dtype)},
                   {"quant", w.quant.label().empty() ? json(nullptr) : json(w.quant.label())},
                   {"optimizer", optimizer_name(w.optimizer)},
                   {"grad_checkpointing", w.grad_checkpointing}, {"attention", attention_name(w.attention)},
                   {"all_logits", w.all_logits},       {"lora_rank", w.lora_rank},
                   {"lora_targets", w.lora_targets},   {"gpus", w.gpus}, {"nodes", w.nodes},
                   {"zero", w.zero},                   {"offload", offload_name(w.offload)},
                   {"mixed_precision", e.mixed_precision}, {"ubatch", w.ubatch},
                   {"swa_full", w.swa_full},           {"repack", w.repack ? json(*w.repack) : json(nullptr)},
                   {"steps", w.steps},                 {"images", w.images},
                   {"image_tokens", positive(w.images > 0 ? w.image_tokens : 0)}};
  j["num_parameters"] = e.parameters;
  j["num_active_parameters"] = e.active_parameters;
  j["weight_bytes_per_token"] = e.weight_bytes_per_token;
  j["guessed"] = e.guessed;
  j["num_trainable_parameters"] = e.trainable_parameters;
  j["largest_layer_num_parameters"] = e.largest_layer_parameters;
  j["kv_cache_bytes_per_token"] = e.kv_bytes_per_token;
  json comps = json::object(), formulas = json::object(), host = json::object();
  for (const auto& c : e.gpu) {
    comps[c.name] = c.bytes;
    formulas[c.name] = c.formula;
  }
  for (const auto& c : e.host) {
    host[c.name] = c.bytes;
    formulas[c.name] = c.formula;
  }
  j["component_bytes"] = comps;
  // llama.cpp: its compute buffer as it reserves it (its log line), beside what activations charges.
  if (e.llamacpp_compute_buffer > 0) j["llamacpp_compute_buffer_bytes"] = e.llamacpp_compute_buffer;
  j["host_component_bytes"] = host;
  j["formulas"] = formulas;
  j["overheads"] = json::array();
  for (const auto& c : e.gpu)
    if (c.overhead) j["overheads"].push_back(c.name);
  j["total_bytes"] = e.per_gpu_total;
  j["host_total_bytes"] = e.host_total;
  j["topology"] = topology_json(e);
  j["modules"] = json::array();
  for (const auto& m : e.modules)
    j["modules"].push_back({{"name", m.name}, {"kind", module_kind_name(m.kind)},
                            {"layer", m.kind == ModuleKind::Layer ? json(m.layer) : json(nullptr)},
                            {"num_parameters", m.parameters}, {"weight_bytes", m.weight_bytes}, {"kv_cache_bytes", m.kv_bytes},
                            {"num_trainable_parameters", m.trainable_parameters}, {"train_state_bytes", m.train_bytes}});
  j["notes"] = e.notes;
  return j;
}

nlohmann::json to_json(const Verdict& v) {
  const int64_t margin = static_cast<int64_t>(v.margin);
  return {{"vram_bytes", v.vram}, {"budget_bytes", v.budget}, {"fits", v.fits}, {"status", v.fits ? "fits" : "oom"},
          {"headroom_bytes", v.fits ? margin : -margin}, {"text", v.text}};
}

nlohmann::json to_json(const std::vector<Suggestion>& s) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : s)
    a.push_back({{"subcommand", "estimate"}, {"flags", x.flags}, {"what", x.what}, {"cost", x.cost},
                 {"total_bytes", x.per_gpu_total}, {"headroom_bytes", x.headroom},
                 {"verdict", {{"fits", true}, {"status", "fits"}, {"text", fmt::format("fits, {} headroom", format_bytes(x.headroom))}}}});
  return a;
}

}  // namespace nunchaku
