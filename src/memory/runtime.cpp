// Inference memory per runtime: what nunchaku, transformers, vLLM and llama.cpp each
// allocate for the same workload, as named components (sources in docs/estimate.md), and
// the fixed costs of each runtime on a GPU or on the CPU.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/thread_memory.hpp"
#include "cuda/engine_ops.hpp"
#include "memory/cpu_kernel_buffers.hpp"
#include "memory/engine_memory.hpp"
#include "memory/estimate_detail.hpp"
#include "core/units.hpp"

namespace nunchaku {

std::string_view runtime_name(Runtime r) {
  switch (r) {
    case Runtime::Nunchaku: return "nunchaku";
    case Runtime::Transformers: return "transformers";
    case Runtime::Vllm: return "vllm";
    case Runtime::LlamaCpp: return "llama.cpp";
    case Runtime::DeepSpeed: return "deepspeed";
    case Runtime::Fsdp: return "fsdp";
  }
  return "?";
}

Runtime parse_runtime(std::string_view s) {
  for (Runtime r : {Runtime::Nunchaku, Runtime::Transformers, Runtime::Vllm, Runtime::LlamaCpp, Runtime::DeepSpeed, Runtime::Fsdp})
    if (runtime_name(r) == s) return r;
  if (s == "llamacpp" || s == "llama-cpp") return Runtime::LlamaCpp;
  throw Error("usage.runtime", fmt::format("--runtime: unknown runtime '{}'", s),
              {.hint = "one of: nunchaku, transformers, vllm, llama.cpp, deepspeed, fsdp, all"});
}

std::string_view attention_name(Attention a) {
  switch (a) {
    case Attention::Default: return "default";
    case Attention::Eager: return "eager";
    case Attention::Sdpa: return "sdpa";
    case Attention::Flash: return "flash";
  }
  return "?";
}

Attention parse_attention(std::string_view s) {
  for (Attention a : {Attention::Default, Attention::Eager, Attention::Sdpa, Attention::Flash})
    if (attention_name(a) == s) return a;
  throw Error("usage.attention", fmt::format("--attention: unknown kernel '{}'", s), {.hint = "one of: eager, sdpa, flash"});
}

namespace estimate_detail {

uint64_t round_up(uint64_t v, uint64_t m) { return v == 0 ? 0 : (v + m - 1) / m * m; }

void set_layer_kv(Estimate& e, int64_t tokens, int64_t batch, const KvCells& cells) {
  for (auto& m : e.modules)
    if (m.kind == ModuleKind::Layer && m.layer >= 0) m.kv_bytes = kv_layer_bytes(e.spec, m.layer, tokens, batch, e.kv_dtype, cells);
}

uint64_t gpus(const Estimate& e) { return static_cast<uint64_t>(std::max(1, e.workload.gpus)); }
std::string split_note(const Estimate& e) { return gpus(e) > 1 ? fmt::format(" / {} GPUs", gpus(e)) : ""; }

uint64_t sum_kv(const Estimate& e) {
  uint64_t kv = 0;
  for (const auto& m : e.modules) kv = add(kv, m.kv_bytes);
  return kv;
}

uint64_t torch_residual_bytes(const Estimate& e, uint64_t tokens) {
  return mul({2, tokens, uint64_t(e.spec.hidden_size), elem_bytes(e.compute_dtype)});
}

uint64_t torch_qkv_bytes(const Estimate& e, uint64_t tokens) {
  const ModelSpec& s = e.spec;
  return mul({tokens, uint64_t(s.num_heads + 2 * s.num_kv_heads), uint64_t(s.head_dim), elem_bytes(e.compute_dtype)});
}

namespace {

constexpr uint64_t kMiB = 1ULL << 20;
// PyTorch on the CPU, the process around the workload (scripts/measure_torch.py,
// docs/measured_torch.md): RSS after the imports, and from_pretrained's own residue.
constexpr uint64_t kTorchImportBytes = 546 * kMiB;
constexpr uint64_t kTorchLoaderBytes = 184 * kMiB;
// llama-cpp-python on the CPU (scripts/measure_llamacpp.py process): RSS after the import.
constexpr uint64_t kLlamaCppImportBytes = 44 * kMiB;
constexpr uint64_t kVllmBlock = 16;            // vLLM --block-size default (CUDA)
constexpr uint64_t kVllmBatchedTokens = kVllmMaxNumBatchedTokens;  // profile run (chunked prefill)
constexpr uint64_t kVllmMaxSeqs = kVllmMaxNumSeqs;                  // sampler profile run

uint64_t round_2mib(uint64_t v) { return round_up(v, 2 * kMiB); }

// One decoder layer's peak transient for `tokens` tokens at once with keys over `ctx`
// (scores only when the kernel materializes them), as PyTorch eager code allocates it.
uint64_t torch_layer_peak(const Estimate& e, uint64_t tokens, uint64_t ctx, bool scores, std::string* f) {
  const ModelSpec& s = e.spec;
  const uint64_t h = s.hidden_size, a = s.num_heads, kvh = s.num_kv_heads, d = s.head_dim,
                 I = std::max<int64_t>(s.intermediate_size, 0), el = elem_bytes(e.compute_dtype);
  const uint64_t residual = torch_residual_bytes(e, tokens);
  const uint64_t qkv = torch_qkv_bytes(e, tokens);
  const uint64_t sc = scores ? mul({a, tokens, ctx, 4 + el}) : 0;
  const uint64_t dense = mul({3, tokens, I, el});
  std::string experts;
  const uint64_t moe = s.num_experts > 0 ? torch_moe_bytes(e, tokens, &experts) : 0;
  const bool any_dense = s.num_experts == 0 || has_dense_layer(e);
  const uint64_t mlp = std::max(any_dense ? dense : 0, moe);
  const std::string mlp_f = s.num_experts == 0 ? fmt::format("3·t·I·{}", el)
                                                : any_dense ? fmt::format("max(dense layers 3·t·I·{}, {})", el, experts) : experts;
  *f = fmt::format("residual 2·t·h·{el} + max(attention t·(a+2·kv)·d·{el}{sc}, mlp {mlp}) with t={t} h={h} a={a} kv={kv} d={d} I={I}",
                   fmt::arg("el", el), fmt::arg("t", tokens), fmt::arg("h", h), fmt::arg("a", a), fmt::arg("kv", kvh), fmt::arg("d", d),
                   fmt::arg("I", I), fmt::arg("mlp", mlp_f),
                   fmt::arg("sc", scores ? fmt::format(" + scores a·t·{}·(4+{})", ctx, el) : " (no score matrix)"));
  return add(residual, std::max(add(qkv, sc), mlp));
}

// What glibc's heap keeps of one layer's transient (no score matrix): a block of
// kGlibcMmapThresholdMax or more is mmapped unless a free chunk holds it, and the chunks the
// layer frees before its MLP allocates come to at most residual + attention. When one MLP
// block (dense t·I, or the experts' (t·k, h)) is that large and larger than those, glibc maps
// the MLP's blocks and unmaps them when freed (qwen3moe-30m at 4096 tokens, fp32: 16-87 MiB
// kept, docs/measured_torch.md); otherwise the whole transient counts (a dense MLP's 48 MiB
// blocks beside 90 MiB of attention and residual stayed in the heap, docs/estimate.md).
uint64_t torch_heap_layer(const Estimate& e, uint64_t tokens, std::string* f) {
  const ModelSpec& s = e.spec;
  const uint64_t el = elem_bytes(e.compute_dtype), I = std::max<int64_t>(s.intermediate_size, 0);
  const uint64_t residual = torch_residual_bytes(e, tokens), qkv = torch_qkv_bytes(e, tokens);
  const bool any_dense = s.num_experts == 0 || has_dense_layer(e);
  std::string experts;
  const uint64_t dense_block = any_dense ? mul({tokens, I, el}) : 0;
  const uint64_t moe_block = s.num_experts > 0 ? torch_moe_block_bytes(e, tokens) : 0;
  const uint64_t moe = s.num_experts > 0 ? torch_moe_bytes(e, tokens, &experts) : 0;
  const uint64_t freed_before = add(residual, qkv);
  auto mapped = [&](uint64_t block) { return block >= kGlibcMmapThresholdMax && block > freed_before; };
  const uint64_t dense = mapped(dense_block) ? 0 : mul({3, dense_block});
  const uint64_t routed = mapped(moe_block) ? moe - mul({4, moe_block}) : moe;
  const bool left_out = (dense_block > 0 && mapped(dense_block)) || (moe_block > 0 && mapped(moe_block));
  *f = left_out ? fmt::format("1.5 × one prefill layer's peak transient without the MLP's blocks of {} and more (mmapped: larger "
                              "than the {} the layer frees before them)",
                              format_bytes(kGlibcMmapThresholdMax), format_bytes(freed_before))
                : "1.5 × one prefill layer's peak transient";
  return add(residual, std::max({qkv, dense, routed}));
}

uint64_t add_nunchaku(Estimate& e) {
  const Workload& w = e.workload;
  const EngineDims d = engine_dims(e.spec);
  EngineConfig c;
  c.max_batch = static_cast<int>(std::min<int64_t>(w.batch, 1 << 30));
  c.max_context = w.context;
  c.kv_dtype = e.kv_dtype;
  c.threads = w.threads;
  c.max_tokens = w.prefill_chunk;  // engine_max_tokens(--prefill-chunk, batch), resolved with the workload
  c.cuda = e.target == Target::Cuda;  // the CUDA backend's run state, as `run` on a GPU sizes it
  // Block-quantized weights prefill through the per-thread f32 panel, as wide as the widest matrix.
  if (cpu_gemm_uses_panel(e.weight_dtype) || w.quant.scheme != QuantScheme::None) c.panel_cols = d.widest_matmul_input();
  EngineMemory m = engine_memory(e.spec, c);
  for (auto& mod : e.modules)
    if (mod.kind == ModuleKind::Layer && d.layers > 0) mod.kv_bytes = m.kv_cache / uint64_t(d.layers);
  const uint64_t n = gpus(e);
  e.gpu.push_back({"kv_cache", m.kv_cache / n,
                   fmt::format("layers({}) × {} × max_batch({}) × max_context({}) × {}({}) × {} B ({}){} (allocated once, no windows)",
                               d.layers, d.mla_rank > 0 ? 1 : 2, c.max_batch, w.context,
                               d.mla_rank > 0 ? "kv_lora_rank + qk_rope_head_dim" : "kv_dim", d.kv_dim(),
                               elem_bytes(e.kv_dtype), dtype_name(e.kv_dtype), split_note(e))});
  e.gpu.push_back({"activations", m.activations,
                   fmt::format("max_tokens({}) × (3·h + 2·q_dim + 2·kv_dim + 2·I{}) × 4 B + token tables 16 B/token + 8 B/slot{}{}",
                               m.config.max_tokens,
                               d.mla_rank > 0 ? fmt::format(" + MLA q {} + latent {}", d.mla_q_dim(), d.mla_lat_dim()) : "",
                               c.cuda ? " + logit rows' indices 8 B/row" : "",
                               d.experts > 0 && !c.cuda
                                   ? fmt::format(" + experts {} (router logits × E({}), per token × top_k({}): 16 B + "
                                                 "(2·h + 2·I_expert({})) × 4 B)",
                                                 format_bytes(cpu_moe_bytes(d, m.config.max_tokens)), d.experts, d.top_k,
                                                 d.expert_inter)
                                   : "")});
  e.gpu.push_back({"logits", m.logits, fmt::format("logit_rows({}) × (hidden + vocab) × 4 B", m.config.logit_rows)});
  e.gpu.push_back({"scratch", m.scratch,
                   c.cuda ? fmt::format("dequantization panel min(widest matrix as fp32, {}) + cuBLAS workspace {} + rotary "
                                        "frequencies (the CUDA backend's scratch)", format_bytes(cuda::kPanelBytes),
                                        format_bytes(cuda::kCublasWorkspaceBytes))
                          : fmt::format("threads({}) × max_context({}) × 4 B (attention scores, one row per thread) + {} "
                                        "widened weight vectors", m.config.threads, w.context, kVecSlots)});
  if (!c.cuda)
    e.gpu.push_back({"thread_buffers", m.thread_buffers,
                     fmt::format("(threads({0}) − 1) × static TLS {1} (each worker thread's thread_locals: the GEMM "
                                 "accumulators){2}", m.config.threads, format_bytes(static_tls_bytes()),
                                 c.panel_cols > 0 && m.config.max_tokens >= kCpuGemmMinRows
                                     ? fmt::format(" + threads({}) × f32 GEMM panel {} rows × {} columns × 4 B", m.config.threads,
                                                   kCpuGemmPanelRows, c.panel_cols)
                                     : " (f32/f16/bf16 weights: no GEMM panel)")});
  if (m.host_logits > 0)
    e.host.push_back({"logits_readback", m.host_logits,
                      fmt::format("page-locked host copy of the logits: logit_rows({}) × vocab({}) × 4 B", m.config.logit_rows, d.vocab)});
  e.activation_bytes = add(add(m.activations, m.scratch), m.thread_buffers);
  if (c.cuda) {  // layers a plan leaves to run on the CPU run with the CPU backend's state
    EngineConfig cpu = c;
    cpu.cuda = false;
    const EngineMemory h = engine_memory(e.spec, cpu);
    e.cpu_activation_bytes = add(add(h.activations, h.scratch), h.thread_buffers);
  }
  e.logits_bytes = m.logits;
  e.runtime_model = {
      fmt::format("nunchaku engine ({}): run state allocated once, sized by the function the engine allocates it with",
                  c.cuda ? "CUDA backend" : "CPU backend"),
      fmt::format("prefill in passes of at most max_tokens = {} (--prefill-chunk, at least the batch; default max(256, batch)); "
                  "attention row by row (no score matrix)", plural(uint64_t(m.config.max_tokens), "token")),
      fmt::format("KV cache: {} × {}, {}, preallocated", plural(uint64_t(c.max_batch), "slot"), plural(uint64_t(w.context), "position"),
                  dtype_name(e.kv_dtype))};
  return 0;
}

// transformers inference: the activations above the whole cache `kv` (per GPU), and the heap
// glibc keeps of them on the CPU.
void add_transformers_activations(Estimate& e, uint64_t kv, bool scores) {
  const Workload& w = e.workload;
  const ModelSpec& s = e.spec;
  // torch.cat in DynamicCache.update: the grown K and V of one layer coexist with the old ones.
  uint64_t layer_kv = 0, prompt_kv = 0;
  for (const auto& m : e.modules) {
    layer_kv = std::max(layer_kv, m.kv_bytes);
    if (m.kind == ModuleKind::Layer && m.layer >= 0)
      prompt_kv = add(prompt_kv, kv_layer_bytes(s, m.layer, w.prefill_chunk, w.batch, e.kv_dtype, {.mla_expanded = true}));
  }
  prompt_kv /= gpus(e);
  // The prompt (b × --prefill-chunk tokens, keys over it) in one forward, then decode to the
  // context: the peak is the prefill's (the prompt's cache + one layer's transient) or the
  // decode's (the whole cache + one layer's K/V twice), charged above the whole cache.
  const uint64_t t = mul({uint64_t(w.batch), uint64_t(w.prefill_chunk)}), ctx = uint64_t(w.prefill_chunk);
  std::string f;
  const uint64_t peak = torch_layer_peak(e, t, ctx, scores, &f);
  const bool decodes = w.prefill_chunk < w.context;
  e.activation_bytes = std::max(add(prompt_kv, peak), add(kv, decodes ? layer_kv : 0)) - kv;
  // 1.5 × one layer's transient: the mean measured over fresh processes (docs/estimate.md).
  // Eager's score matrix is counted once, in activations: freed, it does not stay in the heap
  // (a 2048-token eager forward peaked 617 MiB above the loaded model, 1221 with it counted
  // again; docs/measured_torch.md).
  std::string kept_f;
  const uint64_t kept = torch_heap_layer(e, t, &kept_f);
  e.heap_retained = kept / 2 * 3;
  e.heap_retained_formula = scores ? kept_f + ", its score matrix left out (counted in activations)" : kept_f;
  e.gpu.push_back({"activations", e.activation_bytes,
                   fmt::format("above the whole cache: max(prefill: the prompt's cache {} + one layer (t = batch × prompt(--prefill-chunk)): "
                               "{}, decode{}) − the whole cache",
                               format_bytes(prompt_kv), f,
                               decodes ? fmt::format(": the whole cache + one layer's K/V copy {} (DynamicCache growth)", format_bytes(layer_kv))
                                       : " (none: the prompt is the context)")});
}

uint64_t add_transformers(Estimate& e) {
  const Workload& w = e.workload;
  const ModelSpec& s = e.spec;
  const bool scores = w.attention == Attention::Eager;
  // MLA: transformers' DeepSeek attention caches the decompressed K and V (modeling_deepseek_v3.py).
  set_layer_kv(e, w.context, w.batch, {.mla_expanded = true});
  const uint64_t kv = sum_kv(e), n = gpus(e);
  e.gpu.push_back({"kv_cache", kv / n,
                   fmt::format("DynamicCache at the end: 2 × Σ_layers kv({}) × d({}) × {} tokens × batch({}) × {} B ({}){}", s.num_kv_heads,
                               s.head_dim, w.context, w.batch, elem_bytes(e.kv_dtype), dtype_name(e.kv_dtype), split_note(e))});
  add_transformers_activations(e, kv / n, scores);
  const uint64_t el = elem_bytes(e.compute_dtype), rows = w.all_logits ? w.prefill_chunk : 1;
  // --all-logits: a plain forward, whose one lm_head output (every position) is the result;
  // generate keeps the last position's and an fp32 copy of it.
  e.logits_bytes = mul({uint64_t(w.batch), rows, uint64_t(s.vocab_size), w.all_logits ? el : add(el, 4)});
  std::string logits_f = w.all_logits ? fmt::format("plain forward: batch({}) × positions({}) × vocab({}) × {} B (the lm_head output)",
                                                    w.batch, rows, s.vocab_size, el)
                                      : fmt::format("batch({}) × 1 position (logits_to_keep=1) × vocab({}) × ({} B lm_head output + 4 B "
                                                    "fp32 copy in generate)",
                                                    w.batch, s.vocab_size, el);
  // On the CPU (measured, docs/measured_torch.md) the lm_head runs after the last layer freed
  // its transient: the logits are charged above the activations, not beside them.
  const bool cpu = e.target == Target::Cpu;
  const uint64_t logits = cpu ? e.logits_bytes - std::min(e.logits_bytes, e.activation_bytes) : e.logits_bytes;
  if (cpu) logits_f = fmt::format("{} above the activations ({}), freed before the lm_head runs", logits_f, format_bytes(e.activation_bytes));
  e.gpu.push_back({"logits", logits, logits_f});
  e.runtime_model = {fmt::format("transformers generate: attention {} ({})", scores ? "eager" : "sdpa",
                                 scores ? "fp32 softmax over a materialized score matrix" : "PyTorch SDPA, no score matrix"),
                     "prefill: the whole prompt in one forward (generate does not chunk); --prefill-chunk = the prompt length",
                     "KV: DynamicCache grows by torch.cat each step (no preallocation); logits_to_keep=1"};
  const uint64_t largest = std::max(mul({uint64_t(w.batch), uint64_t(w.prefill_chunk), uint64_t(std::max<int64_t>(s.intermediate_size, 0)), el}),
                                    e.logits_bytes);
  return round_2mib(largest);
}

uint64_t add_vllm(Estimate& e) {
  const Workload& w = e.workload;
  const ModelSpec& s = e.spec;
  const uint64_t n = gpus(e);
  const uint64_t tokens = round_up(uint64_t(w.context), kVllmBlock);
  set_layer_kv(e, static_cast<int64_t>(tokens), w.batch);
  const uint64_t kv = sum_kv(e) / n;
  e.gpu.push_back({"kv_cache", kv,
                   fmt::format("blocks of {}: 2 × Σ_layers kv × d × {} tokens × batch({}) × {} B{}; vLLM fills the rest of its budget with more blocks",
                               kVllmBlock, tokens, w.batch, elem_bytes(e.kv_dtype), split_note(e))});
  const uint64_t t = kVllmBatchedTokens;
  std::string f;
  e.activation_bytes = s.num_experts > 0 ? vllm_moe_peak(e, t, &f) : torch_layer_peak(e, t, t, false, &f);
  e.gpu.push_back({"activations", e.activation_bytes, "profile run at max_num_batched_tokens: " + f});
  e.logits_bytes = mul({kVllmMaxSeqs, uint64_t(s.vocab_size), 4});
  e.gpu.push_back({"logits", e.logits_bytes, fmt::format("sampler profile: max_num_seqs({}) × vocab({}) × 4 B", kVllmMaxSeqs, s.vocab_size)});
  // CUDA: gpu_memory_utilization × total memory; the CPU backend reserves the same share of
  // the NUMA node's memory (CPUWorker.determine_available_memory) and gives the KV cache what
  // the process's RSS leaves of it.
  e.usable_fraction = kVllmGpuMemoryUtilization;
  e.runtime_model = {fmt::format("vLLM: FlashAttention backend (no score matrix), chunked prefill of max_num_batched_tokens {}", t),
                     fmt::format("KV: paged, block size {}, preallocated: gpu_memory_utilization({}) × total − weights − profile peak "
                                 "− non-torch memory − CUDA graphs", kVllmBlock, kVllmGpuMemoryUtilization),
                     fmt::format("verdict against {} × --vram (the share vLLM takes){}", kVllmGpuMemoryUtilization,
                                 e.target == Target::Cuda ? " + the CUDA context and cuBLAS handles, made before vLLM measures it" : "")};
  return round_2mib(mul({t, uint64_t(std::max<int64_t>(s.intermediate_size, 0)), elem_bytes(e.compute_dtype)}));
}

}  // namespace

uint64_t add_runtime_inference(Estimate& e, const Checkpoint& ck) {
  switch (e.runtime) {
    case Runtime::Nunchaku: return add_nunchaku(e);
    case Runtime::Vllm: return add_vllm(e);
    case Runtime::LlamaCpp: return add_llamacpp(e, ck);
    case Runtime::Transformers:
    case Runtime::DeepSpeed:
    case Runtime::Fsdp: return add_transformers(e);
  }
  return 0;
}

void add_overheads(Estimate& e, uint64_t slack_default) {
  auto over = [&](const std::string& name, uint64_t def, const std::string& why) {
    auto it = e.workload.overheads.find(name);
    const bool set = it != e.workload.overheads.end();
    e.gpu.push_back({name, set ? it->second : def, set ? "set with --overhead" : why, true});
  };
  const Runtime r = e.runtime;
  const bool torch = r == Runtime::Transformers || r == Runtime::Vllm || r == Runtime::DeepSpeed || r == Runtime::Fsdp;
  if (e.target == Target::Cpu) {
    if (r == Runtime::Nunchaku)
      over("cpu_runtime", 15 * kMiB, "nunchaku process: binary, shared libraries, C++ runtime, tokenizer tables (measured, docs/estimate.md)");
    else if (torch) {
      over("cpu_runtime", 14 * kMiB,
           "PyTorch CPU runtime after import: first ops, autograd, optimizer (measured, docs/estimate.md)");
      if (r != Runtime::Vllm) {
        // The whole process (docs/measured_torch.md): the interpreter with the libraries
        // imported, and what from_pretrained leaves beside the weights.
        over("python_runtime", kTorchImportBytes,
             "RSS after `import torch, transformers` (torch 2.15, transformers 5.24 and 5.25, Python 3.11; measured)");
        over("torch_loader", kTorchLoaderBytes,
             "what from_pretrained leaves resident beside the weights: modeling modules, loader state (RSS, measured)");
        over("glibc_heap", e.heap_retained,
             "freed blocks glibc's malloc keeps in its heap at the peak (dynamic mmap threshold): " + e.heap_retained_formula +
                 " (measured, docs/estimate.md; 0 with MALLOC_MMAP_THRESHOLD_=65536)");
        e.notes.push_back(
            "PyTorch on the CPU: glibc_heap is what glibc's default malloc keeps of freed tensors at the peak; it "
            "varies between runs of the same job (docs/estimate.md). With MALLOC_MMAP_THRESHOLD_=65536 in the "
            "environment freed blocks go back to the kernel: then use --overhead glibc_heap=0");
      }
    }
    else {
      // llama-cpp-python's process (docs/measured_llamacpp.md, "The whole process").
      over("python_runtime", kLlamaCppImportBytes,
           "RSS after `import llama_cpp` (llama-cpp-python 0.3.36, Python 3.11: the interpreter, libllama and ggml; measured). "
           "llama-cli / llama-server: no Python, set --overhead python_runtime=SIZE (a C program linking libllama: 7 MiB)");
      over("cpu_runtime", e.llamacpp_state, "llama.cpp's state beside its buffers: " + e.llamacpp_state_formula);
    }
    return;
  }
  over("cuda_context", 500 * kMiB, "CUDA context + kernel images (default 500 MiB; measure with nvidia-smi after torch.cuda.init())");
  if (r != Runtime::Nunchaku)
    over("cublas_workspace", 32 * kMiB, "cuBLAS workspace (PyTorch default on sm90: CUBLAS_WORKSPACE_CONFIG=:4096:8 = 32 MiB)");
  // vLLM's worker creates both before its memory snapshot (Worker.init_device), so they are
  // outside gpu_memory_utilization × total (they must fit in the rest of the device).
  if (r == Runtime::Vllm)
    for (const auto& c : e.gpu)
      if (c.name == "cuda_context" || c.name == "cublas_workspace") e.outside_budget = add(e.outside_budget, c.bytes);
  if (r == Runtime::Vllm) over("cuda_graphs", 512 * kMiB, "vLLM CUDA graph capture (typically 0.3-1 GiB; its log says how much)");
  if (torch)
    over("allocator_slack", slack_default,
         "caching-allocator fragmentation: one block of the largest odd-sized transient (MLP intermediate or logits), 2 MiB-rounded");
}

}  // namespace estimate_detail
}  // namespace nunchaku
