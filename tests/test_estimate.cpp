// estimate(): exact numbers for Llama-2-7B / Llama-3-8B (real config.json, the real tensor
// names and shapes), published GGUF file sizes for the llama.cpp mixes, and golden numbers
// made by scripts/make_golden_estimate.py with accelerate, DeepSpeed and a torch training step.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <tuple>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/thread_memory.hpp"
#include "engine/model.hpp"
#include "tests/test_engine_helpers.hpp"
#include "format/open.hpp"
#include "io/loader.hpp"
#include "memory/estimate.hpp"
#include "memory/quant.hpp"
#include "model/model.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

// The tensors of an HF LlamaForCausalLM with this config (names and shapes as in the
// real model.safetensors.index.json of meta-llama/Llama-2-7b-hf).
std::vector<std::pair<std::string, std::vector<int64_t>>> llama_tensors(const json& c) {
  const int64_t h = c["hidden_size"], i = c["intermediate_size"], v = c["vocab_size"], a = c["num_attention_heads"];
  const int64_t kv = c.value("num_key_value_heads", a), d = h / a, L = c["num_hidden_layers"];
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  t.push_back({"model.embed_tokens.weight", {v, h}});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {h}});
    t.push_back({p + "self_attn.q_proj.weight", {a * d, h}});
    t.push_back({p + "self_attn.k_proj.weight", {kv * d, h}});
    t.push_back({p + "self_attn.v_proj.weight", {kv * d, h}});
    t.push_back({p + "self_attn.o_proj.weight", {h, a * d}});
    t.push_back({p + "mlp.gate_proj.weight", {i, h}});
    t.push_back({p + "mlp.up_proj.weight", {i, h}});
    t.push_back({p + "mlp.down_proj.weight", {h, i}});
    t.push_back({p + "post_attention_layernorm.weight", {h}});
  }
  t.push_back({"model.norm.weight", {h}});
  t.push_back({"lm_head.weight", {v, h}});
  return t;
}

// An in-memory index (no file) of a model with these tensors in `dt`.
Checkpoint index_of(const std::vector<std::pair<std::string, std::vector<int64_t>>>& ts, DType dt, const std::string& config) {
  Checkpoint ck;
  ck.path = "mem";
  ck.config_path = config;
  ck.files.push_back({"mem/model.safetensors", 0});
  uint64_t off = 0;
  for (const auto& [name, shape] : ts) {
    TensorInfo t;
    t.name = name;
    t.dtype = dt;
    t.shape = shape;
    t.offset = off;
    t.nbytes = *dtype_nbytes(dt, t.numel());
    off += t.nbytes;
    ck.tensors.push_back(t);
  }
  ck.files[0].bytes = off;
  return ck;
}

std::string fixture_config(const std::string& model) { return test::testdata("models/" + model + "/config.json"); }

struct Model {
  Checkpoint ck;
  ModelLayout layout;
};

Model llama(const std::string& dir, DType dt = DType::F16) {
  Model m;
  m.ck = index_of(llama_tensors(test::read_json(fixture_config(dir))), dt, fixture_config(dir));
  m.layout = describe_model(m.ck);
  REQUIRE(m.layout.spec.has_value());
  return m;
}

// A real safetensors file whose data region is a hole: header written, then ftruncate.
void write_sparse_safetensors(const std::string& path, const std::vector<std::pair<std::string, std::vector<int64_t>>>& ts) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : ts) {
    uint64_t n = 2;
    for (auto d : shape) n *= static_cast<uint64_t>(d);
    h[name] = {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::string head(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  test::write_file(path, head + text);
  int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(8 + len + off)) == 0);
  ::close(fd);
}

const Component* find(const std::vector<Component>& cs, const std::string& name) {
  for (const auto& c : cs)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("estimate: Llama-2-7B fp16 weights and KV cache are exact", "[estimate]") {
  Model m = llama("llama2-7b-config");
  Workload w;
  w.runtime = Runtime::Transformers;  // KV in the compute dtype (nunchaku's is fp32)
  Estimate e = estimate(m.ck, m.layout, w);
  CHECK(e.parameters == 6738415616ULL);
  CHECK(e.component("weights") == 13476831232ULL);  // 6,738,415,616 params × 2 B
  CHECK(e.kv_bytes_per_token == 524288);             // 2 × 32 layers × 32 kv heads × 128 × 2 B
  CHECK(e.context_defaulted);
  CHECK(e.workload.context == 4096);                 // min(max_position_embeddings 4096, 4096)
  CHECK(e.component("kv_cache") == 524288ULL * 4096);
  // The per-module costs a planner charges add up to the components.
  uint64_t w_sum = 0, kv_sum = 0;
  for (const auto& mc : e.modules) {
    w_sum += mc.weight_bytes;
    kv_sum += mc.kv_bytes;
  }
  CHECK(w_sum == e.component("weights"));
  CHECK(kv_sum == e.component("kv_cache"));
  // Per-GPU total is the sum of the named lines, overheads included and overridable.
  uint64_t total = 0;
  for (const auto& c : e.gpu) total += c.bytes;
  CHECK(total == e.per_gpu_total);
  CHECK(e.component("cuda_context") == 500ULL << 20);
  w.overheads["cuda_context"] = 300ULL << 20;
  CHECK(estimate(m.ck, m.layout, w).component("cuda_context") == 300ULL << 20);
  w.batch = 3;
  w.context = 1000;
  CHECK(estimate(m.ck, m.layout, w).component("kv_cache") == 524288ULL * 1000 * 3);
}

TEST_CASE("estimate: Llama-3-8B KV cache with GQA", "[estimate]") {
  Model m = llama("llama3-8b-config", DType::BF16);
  Workload w;
  w.runtime = Runtime::Transformers;
  Estimate e = estimate(m.ck, m.layout, w);
  CHECK(e.kv_bytes_per_token == 131072);  // 2 × 32 × 8 kv heads × 128 × 2 B
  CHECK(e.workload.context == 4096);      // min(8192, 4096)
  CHECK(e.parameters == 8030261248ULL);
}

TEST_CASE("estimate: a sparse safetensors file read through open_checkpoint", "[estimate]") {
  test::TempDir dir;
  const json cfg = test::read_json(fixture_config("llama2-7b-config"));
  test::write_file(dir.file("config.json"), cfg.dump(2));
  write_sparse_safetensors(dir.file("model.safetensors"), llama_tensors(cfg));
  Checkpoint ck = open_checkpoint(dir.path.string());
  ModelLayout layout = describe_model(ck);
  Workload tw;
  tw.runtime = Runtime::Transformers;
  Estimate e = estimate(ck, layout, tw);
  CHECK(e.component("weights") == 13476831232ULL);
  CHECK(e.kv_bytes_per_token == 524288);

  // The CLI on the same directory: table, verdict, exit 3 on OOM, JSON keys.
  auto r = test::run_cli({"estimate", dir.path.string(), "--vram", "12G"});
  CHECK(r.exit_code == 3);
  CHECK(r.out.find("OOM by") != std::string::npos);
  CHECK(r.out.find("to make it fit") != std::string::npos);
  CHECK(r.out.find("default: min(model max 4096, 4096)") != std::string::npos);
  r = test::run_cli({"estimate", dir.path.string(), "--vram", "24G", "--json"});
  CHECK(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(j["component_bytes"]["weights"] == 13476831232ULL);
  CHECK(j["component_bytes"].contains("kv_cache"));
  CHECK(j["component_bytes"].contains("activations"));
  CHECK(j["component_bytes"].contains("logits"));
  CHECK(j["component_bytes"].contains("scratch"));       // nunchaku's engine, the default runtime
  CHECK_FALSE(j["component_bytes"].contains("allocator_slack"));  // it allocates once: no caching allocator
  CHECK(j["runtime"] == "nunchaku");
  CHECK(j["verdict"]["fits"] == true);
  CHECK(j["workload"]["context"] == 4096);
  r = test::run_cli({"estimate", dir.path.string(), "--offload", "optimizer"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("ZeRO") != std::string::npos);
}

TEST_CASE("estimate: the verdict and every suggestion are re-checked with the same model", "[estimate]") {
  Model m = llama("llama2-7b-config");
  Workload w;
  w.runtime = Runtime::Transformers;
  w.batch = 8;
  const uint64_t vram = 24ULL << 30;
  Estimate e = estimate(m.ck, m.layout, w);
  Verdict v = verdict(e, vram);
  REQUIRE_FALSE(v.fits);
  CHECK(v.margin == e.per_gpu_total - vram);
  CHECK(v.text.rfind("OOM by ", 0) == 0);
  auto s = suggest_fits(m.ck, m.layout, w, vram);
  REQUIRE(s.size() >= 2);
  bool saw_batch = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto& x = s[i];
    INFO(x.flags);
    CHECK(x.headroom == vram - x.per_gpu_total);
    CHECK(x.headroom >= vram / 20);  // the default 5% safety margin
    if (i > 0) CHECK(s[i - 1].cost <= x.cost);  // cheapest first
    if (x.flags == "--batch 4") {
      saw_batch = true;  // 12.55 GiB weights + 4 × 2 GiB KV + activations + overheads, 5% spare
      Workload y = w;
      y.batch = 5;  // one more leaves less than 5% of 24 GiB
      const uint64_t t4 = estimate(m.ck, m.layout, y).per_gpu_total;
      CHECK((t4 > vram || vram - t4 < vram / 20));
    }
    // No suggestion repeats an earlier one with more changes.
    for (size_t k = 0; k < i; ++k) CHECK(x.flags.find(s[k].flags) == std::string::npos);
  }
  CHECK(saw_batch);
  CHECK(s.front().flags == "--batch 4");  // nothing cheaper fits: fp8 KV alone leaves < 5%
  CHECK(verdict(e, e.per_gpu_total).text.rfind("fits, ", 0) == 0);
  // A larger margin never suggests less headroom.
  for (const auto& x : suggest_fits(m.ck, m.layout, w, vram, 0.2)) CHECK(x.headroom >= vram / 5);
}

TEST_CASE("estimate: suggestions combine changes (training 7B on 4x80G)", "[estimate]") {
  // One change at a time finds nothing here; ZeRO-2 with checkpointing fits with room to spare.
  Model m = llama("llama2-7b-config", DType::BF16);
  Workload w;
  w.mode = Mode::Train;
  w.gpus = 4;
  w.context = 4096;
  w.batch = 4;
  const uint64_t vram = 80ULL << 30;
  REQUIRE(estimate(m.ck, m.layout, w).per_gpu_total > vram);
  auto s = suggest_fits(m.ck, m.layout, w, vram);
  REQUIRE_FALSE(s.empty());
  bool combined = false;
  for (const auto& x : s) {
    INFO(x.flags);
    combined = combined || x.what.find(" + ") != std::string::npos;
    CHECK(x.headroom >= vram / 20);
  }
  CHECK(combined);
}

TEST_CASE("estimate: no suggestion is dominated by an earlier one", "[estimate]") {
  // An earlier suggestion whose fixed changes are a subset of a later one's, and that fits with
  // a batch and context at least as large on no more GPUs, makes the later one useless.
  struct Parsed {
    std::set<std::string> fixed;
    int64_t batch, context, gpus;
  };
  auto parse = [](const std::string& flags, const Workload& w) {
    Parsed p{{}, w.batch, w.context, w.gpus};
    std::istringstream in(flags);
    std::string name, value;
    while (in >> name >> value) {
      if (name == "--batch") p.batch = std::stoll(value);
      else if (name == "--context") p.context = std::stoll(value);
      else if (name == "--gpus") p.gpus = std::stoll(value);
      else p.fixed.insert(name + " " + value);
    }
    return p;
  };
  Model m = llama("llama2-7b-config");
  struct Case { Runtime rt; int64_t batch, context; uint64_t vram; };
  for (const Case c : {Case{Runtime::Nunchaku, 1, 512, 8ULL << 30}, Case{Runtime::Transformers, 8, 512, 8ULL << 30},
                       Case{Runtime::Vllm, 4, 4096, 16ULL << 30}, Case{Runtime::LlamaCpp, 2, 4096, 6ULL << 30}}) {
    Workload w;
    w.runtime = c.rt;
    w.batch = c.batch;
    w.context = c.context;
    const auto s = suggest_fits(m.ck, m.layout, w, c.vram);
    REQUIRE(s.size() >= 2);
    for (size_t j = 0; j < s.size(); ++j)
      for (size_t i = 0; i < j; ++i) {
        const Parsed a = parse(s[i].flags, w), b = parse(s[j].flags, w);
        INFO(runtime_name(c.rt) << ": '" << s[i].flags << "' before '" << s[j].flags << "'");
        const bool subset = std::includes(b.fixed.begin(), b.fixed.end(), a.fixed.begin(), a.fixed.end());
        CHECK_FALSE((subset && b.batch <= a.batch && b.context <= a.context && b.gpus >= a.gpus));
      }
  }
}

TEST_CASE("estimate: sliding-window layers and MLA caches", "[estimate]") {
  ModelSpec s;
  s.num_layers = 4;
  s.num_heads = 8;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.hidden_size = 512;
  s.layer_windows = {1024, 0, 1024, 0};  // gemma2-style alternation
  // window layers hold min(1024, 4096) tokens, full layers 4096: 2·2·64·2 B per token.
  CHECK(kv_cache_bytes(s, 4096, 1, DType::F16) == 2ULL * 2 * 64 * 2 * (1024 + 4096 + 1024 + 4096));
  CHECK(kv_cache_bytes(s, 512, 2, DType::F16) == 2ULL * 2 * 64 * 2 * 512 * 2 * 4);  // context under the window
  s.layer_windows.clear();
  s.sliding_window = 4096;  // Mistral-7B-v0.1: every layer windowed
  CHECK(kv_cache_bytes(s, 32768, 1, DType::F16) == 2ULL * 2 * 64 * 2 * 4096 * 4);
  ModelSpec d;  // DeepSeek-V2-Lite: kv_lora_rank 512, qk_rope_head_dim 64, 27 layers
  d.num_layers = 27;
  d.num_heads = 16;
  d.hidden_size = 2048;
  d.kv_lora_rank = 512;
  d.qk_rope_head_dim = 64;
  CHECK(kv_cache_bytes(d, 1, 1, DType::BF16) == 27ULL * (512 + 64) * 2);
}

TEST_CASE("estimate: quantized what-ifs match published GGUF sizes of Llama-2-7B", "[estimate]") {
  // TheBloke/Llama-2-7B-GGUF file sizes: Q8_0 7,161,089,728 B, Q4_0 3,825,807,040 B,
  // Q4_K_M 4,081,004,224 B. All three share the same metadata + vocab header, so the
  // tensor data is file size − the same header (741,056 B, Q8_0 and Q4_0 agree on it).
  Model m = llama("llama2-7b-config");
  const uint64_t header = 741056;
  auto weights = [&](const std::string& q) {
    Workload w;
    w.quant = parse_quant(q);
    return estimate(m.ck, m.layout, w).component("weights");
  };
  CHECK(weights("q8_0") == 7161089728ULL - header);
  CHECK(weights("q4_0") == 3825807040ULL - header);
  CHECK(weights("q4_k_m") == 4081004224ULL - header);
}

TEST_CASE("estimate: bitsandbytes / GPTQ / AWQ tensor bytes by hand", "[estimate]") {
  TensorInfo t;
  t.name = "model.layers.0.self_attn.q_proj.weight";
  t.dtype = DType::F16;
  t.shape = {4096, 4096};
  t.nbytes = 4096ULL * 4096 * 2;
  const uint64_t n = 4096ULL * 4096;
  QuantContext qc;
  qc.num_layers = 32;
  Module layer{"model.layers.0", ModuleKind::Layer, 0, {0}};
  layer.roles = {Role::Q};
  const auto role = quant_role(layer, 0, t);
  REQUIRE(role == TensorRole::Linear);
  // LLM.int8: int8 weights + one fp32 scale per output row.
  CHECK(quantized_tensor(parse_quant("int8"), t, role, 0, qc, t.nbytes).bytes == n + 4096 * 4);
  // NF4: n/2 + fp32 absmax per 64 + 16-entry fp32 code.
  CHECK(quantized_tensor(parse_quant("nf4"), t, role, 0, qc, t.nbytes).bytes == n / 2 + n / 64 * 4 + 64);
  // NF4 double quant: uint8 absmax per 64, fp32 per 256 blocks, fp32 offset.
  CHECK(quantized_tensor(parse_quant("nf4", 4, 64, true), t, role, 0, qc, t.nbytes).bytes ==
        n / 2 + n / 64 + n / 64 / 256 * 4 + 4 + 64);
  // GPTQ 4-bit g128: qweight n/2, qzeros 32 groups × 4096/8 int32, fp16 scales, int32 g_idx.
  CHECK(quantized_tensor(parse_quant("gptq"), t, role, 0, qc, t.nbytes).bytes == n / 2 + 32 * 512 * 4 + 32 * 4096 * 2 + 4096 * 4);
  CHECK(quantized_tensor(parse_quant("awq"), t, role, 0, qc, t.nbytes).bytes == n / 2 + 32 * 512 * 4 + 32 * 4096 * 2);
  // Embeddings, norms and lm_head stay as they are under bitsandbytes and GPTQ.
  TensorInfo emb = t;
  emb.name = "model.embed_tokens.weight";
  const Module emb_module{"model.embed_tokens", ModuleKind::Embedding, -1, {1}};
  CHECK(quant_role(emb_module, 0, emb) == TensorRole::Embedding);
  CHECK(quantized_tensor(parse_quant("nf4"), emb, quant_role(emb_module, 0, emb), -1, qc, 123).bytes == 123);
  TensorInfo head = t;
  head.name = "lm_head.weight";
  const Module head_module{"lm_head", ModuleKind::Head, -1, {2}};
  CHECK(quantized_tensor(parse_quant("gptq"), head, quant_role(head_module, 0, head), -1, qc, 77).bytes == 77);
  // The role comes from the module the record made and the table's role, not the name:
  // GPT-2's position table is no token embedding, a norm is a vector, and a layer tensor of
  // a family without a table (no roles) is a Linear.
  const Module wpe{"transformer.wpe", ModuleKind::Embedding, -1, {3}};
  CHECK(quant_role(wpe, 0, emb) == TensorRole::Other);
  CHECK(quant_role(head_module, 0, emb) == TensorRole::Head);
  TensorInfo norm = t;
  norm.shape = {4096};
  CHECK(quant_role(layer, 0, norm) == TensorRole::Vector);
  const Module untabled{"model.layers.0", ModuleKind::Layer, 0, {0}};
  CHECK(quant_role(untabled, 0, t) == TensorRole::Linear);
  CHECK_THROWS_AS(parse_quant("q9_9"), Error);
  CHECK_THROWS_AS(parse_quant("awq", 3), Error);
}

TEST_CASE("estimate: weights against accelerate's estimator on the same config", "[estimate]") {
  const json g = test::read_json(test::testdata("golden/estimate_accelerate.json"));
  for (const char* name : {"llama2-7b-config", "llama3-8b-config"}) {
    Model m = llama(name);
    const json& a = g["models"][name];
    Workload w;
    w.dtype = DType::F32;
    Estimate e = estimate(m.ck, m.layout, w);
    CHECK(e.parameters == a["parameters"].get<uint64_t>());
    // accelerate also counts the two non-persistent rotary buffers (2 × head_dim/2 fp32 = 512 B),
    // which are not in the checkpoint.
    CHECK(e.component("weights") + 512 == a["total_size_fp32"].get<uint64_t>());
    w.dtype = DType::F16;
    CHECK(estimate(m.ck, m.layout, w).component("weights") + 256 == a["rows"][1]["total_size"].get<double>());
    // accelerate's int8 is fp32 ÷ 4 (1 B per parameter and buffer element). LLM.int8 really
    // adds an fp32 scale per output row of every linear layer and keeps embeddings, norms and
    // lm_head in fp16 (1 B more each): the difference must be exactly that.
    w.quant = parse_quant("int8");
    const uint64_t ours = estimate(m.ck, m.layout, w).component("weights");
    const uint64_t theirs = static_cast<uint64_t>(a["rows"][2]["total_size"].get<double>());
    uint64_t row_scales = 0, kept = 0;
    for (const auto& t : m.ck.tensors) {
      const bool linear = t.shape.size() == 2 && t.name.find(".layers.") != std::string::npos;
      if (linear) row_scales += 4 * static_cast<uint64_t>(t.shape[0]);
      else kept += t.numel();
    }
    CHECK(ours == theirs - 128 + row_scales + kept);
  }
}

TEST_CASE("estimate: ZeRO-2/3 model states agree with DeepSpeed's estimators", "[estimate]") {
  const json g = test::read_json(test::testdata("golden/estimate_deepspeed.json"));
  Model m = llama("llama2-7b-config", DType::BF16);
  Workload w;
  w.mode = Mode::Train;
  w.context = 1;
  REQUIRE(estimate(m.ck, m.layout, w).largest_layer_parameters == g["largest_layer_params"].get<uint64_t>());
  for (const auto& c : g["cases"]) {
    w.zero = c["stage"];
    w.gpus = c["gpus"];
    w.offload = parse_offload(c["offload"].get<std::string>());
    Estimate e = estimate(m.ck, m.layout, w);
    const uint64_t states = e.component("weights") + e.component("gradients") + e.component("master_weights") +
                            e.component("optimizer_states") + e.component("zero3_gather");
    INFO("stage " << c["stage"] << " gpus " << c["gpus"] << " offload " << c["offload"]);
    // Each line is floor-divided by the GPU count on its own: at most one byte per line off.
    CHECK(states <= c["gpu"].get<uint64_t>() + 5);
    CHECK(states + 5 >= c["gpu"].get<uint64_t>());
    const Component* host = find(e.host, "host_model_states");
    REQUIRE(host != nullptr);
    CHECK(host->bytes == c["cpu"].get<uint64_t>());
  }
}

TEST_CASE("estimate: training terms against a measured torch training step", "[estimate]") {
  const json g = test::read_json(test::testdata("golden/estimate_torch_train.json"));
  std::vector<std::pair<std::string, std::vector<int64_t>>> ts;
  for (const auto& t : g["tensors"]) ts.push_back({t["name"], t["shape"].get<std::vector<int64_t>>()});
  test::TempDir dir;
  json cfg = g["config"];
  cfg["architectures"] = {"LlamaForCausalLM"};
  cfg["model_type"] = "llama";
  test::write_file(dir.file("config.json"), cfg.dump());
  Checkpoint ck = index_of(ts, DType::F32, dir.file("config.json"));
  ModelLayout layout = describe_model(ck);
  Workload w;
  w.mode = Mode::Train;
  w.batch = g["batch"];
  w.context = g["seq"];
  w.attention = Attention::Eager;  // the golden step materializes scores (make_golden_estimate.py)
  Estimate e = estimate(ck, layout, w);
  CHECK(e.parameters == g["parameters"].get<uint64_t>());
  CHECK_FALSE(e.mixed_precision);
  CHECK(e.component("gradients") == 4 * e.parameters);
  CHECK(e.component("optimizer_states") == 8 * e.parameters);
  CHECK(e.component("master_weights") == 0);
  // Host RSS has no CUDA context, cuBLAS workspace or allocator slack; the rest must
  // match the measured peak growth. Tolerance ±15%: Korthikanti's 34·s·b·h assumes a 4h
  // GELU MLP (this model: SwiGLU 3h) and glibc's allocator keeps some freed pages.
  uint64_t predicted = 0;
  for (const auto& c : e.gpu)
    if (!c.overhead) predicted += c.bytes;
  const double measured = g["peak_rss_growth_bytes"].get<double>();
  INFO("predicted " << predicted << " measured " << measured);
  CHECK(predicted > measured * 0.85);
  CHECK(predicted < measured * 1.15);
}

TEST_CASE("estimate: LoRA, QLoRA and optimizers", "[estimate]") {
  Model m = llama("llama2-7b-config");
  Workload w;
  w.mode = Mode::LoRA;
  w.context = 512;
  Estimate e = estimate(m.ck, m.layout, w);
  // PEFT default for llama: q_proj, v_proj; rank 16: 16 × (4096 + 4096) per target × 2 × 32 layers.
  const uint64_t lora_params = 16ULL * 8192 * 2 * 32;
  CHECK(e.trainable_parameters == lora_params);
  CHECK(e.component("lora_adapters") == 4 * lora_params);
  CHECK(e.component("gradients") == 4 * lora_params);
  CHECK(e.component("optimizer_states") == 8 * lora_params);
  CHECK(e.component("weights") == 13476831232ULL);  // frozen base, fp16
  w.mode = Mode::QLoRA;
  Estimate q = estimate(m.ck, m.layout, w);
  CHECK(q.workload.quant.scheme == QuantScheme::NF4);
  CHECK(q.component("weights") < e.component("weights") / 3);
  // Full fine-tuning, per-optimizer states.
  w.mode = Mode::Train;
  w.dtype = DType::BF16;
  auto states = [&](Optimizer o) { w.optimizer = o; return estimate(m.ck, m.layout, w).component("optimizer_states"); };
  const uint64_t P = 6738415616ULL;
  CHECK(states(Optimizer::AdamW) == 8 * P);
  CHECK(states(Optimizer::SGD) == 0);
  CHECK(states(Optimizer::SGDMomentum) == 4 * P);
  CHECK(states(Optimizer::Lion) == 4 * P);
  CHECK(states(Optimizer::AdamW8bit) < 2 * P + P / 10);
  CHECK(states(Optimizer::Adafactor) < P / 100);  // factored: rows + cols per matrix
  w.optimizer = Optimizer::AdamW;
  w.attention = Attention::Eager;
  e = estimate(m.ck, m.layout, w);
  CHECK(e.mixed_precision);
  CHECK(e.component("master_weights") == 4 * P);
  // Korthikanti: s·b·h·(34 + 5·a·s/h) per layer, 2·s·b·h with checkpointing (+ one layer recomputed).
  const uint64_t s = 512, h = 4096, a = 32;
  CHECK(e.component("activations") == 32 * s * (34 * h + 5 * a * s));
  w.grad_checkpointing = true;
  CHECK(estimate(m.ck, m.layout, w).component("activations") == 32 * 2 * s * h + s * (34 * h + 5 * a * s));
}

TEST_CASE("estimate: invalid workloads are errors with their own codes", "[estimate]") {
  Model m = llama("llama2-7b-config");
  auto code = [&](Workload w) -> std::string {
    try {
      (void)estimate(m.ck, m.layout, w);
    } catch (const Error& e) {
      return e.code();
    }
    return "";
  };
  Workload w;
  w.mode = Mode::Train;
  w.offload = Offload::Optimizer;
  CHECK(code(w) == "estimate.offload_needs_zero");
  w.zero = 2;
  w.offload = Offload::Params;
  CHECK(code(w) == "estimate.offload_needs_zero");
  Workload b;
  b.batch = 0;
  CHECK(code(b) == "usage.batch");
  Workload o;
  o.overheads["gpu_tax"] = 1;
  CHECK(code(o) == "usage.overhead");
  Workload z;
  z.zero = 2;
  CHECK(code(z) == "usage.zero_needs_training");
  // No config and nothing recognisable: inference is its weights (3 f32 values, in no
  // module here) and the fixed costs; training needs the dimensions (tests/test_module_tree.cpp
  // has a real module tree).
  Checkpoint bare = index_of({{"x", {3}}}, DType::F32, "");
  ModelLayout none;
  CHECK(estimate(bare, none, Workload{}).runtime == Runtime::Transformers);
  Workload train;
  train.mode = Mode::Train;
  try {
    (void)estimate(bare, none, train);
    FAIL("expected estimate.no_spec");
  } catch (const Error& e) {
    CHECK(e.code() == "estimate.no_spec");
  }
  // Huge batch × context saturates instead of wrapping to a small number.
  Workload big;
  big.batch = 1 << 24;
  big.context = 1LL << 31;
  CHECK(estimate(m.ck, m.layout, big).per_gpu_total == UINT64_MAX);
}

TEST_CASE("estimate: a real GGUF (stories260K) counts its stored bytes and its GQA cache", "[estimate]") {
  NUNCHAKU_REQUIRE_SHARED();
  Checkpoint ck = open_checkpoint(test::shared_testfile("gguf/stories260K.gguf"));
  ModelLayout layout = describe_model(ck);
  Workload w;
  w.runtime = Runtime::LlamaCpp;  // f16 cache, as llama.cpp
  Estimate e = estimate(ck, layout, w);
  // llama.cpp keeps token_embd (512 × 64 f32) in host memory; the rest is on the GPU.
  CHECK(e.component("weights") + e.host_total == ck.total_bytes());
  CHECK(e.host_total == 512 * 64 * 4);
  // llama.context_length 2048, 5 layers, 4 KV heads × head_dim 8 (64 / 8 heads), F16 cache.
  CHECK(e.workload.context == 2048);
  CHECK(e.kv_bytes_per_token == 2 * 5 * 4 * 8 * 2);
  CHECK(e.kv_dtype == DType::F16);
}

TEST_CASE("estimate --runtime nunchaku: the run state the engine allocates", "[estimate][runtime]") {
  // The engine itself (engine::Transformer on the run fixture) against the estimate: KV cache,
  // activations and logits equal what the engine allocated for the same options.
  const std::string path = test::testdata("run/llama-spm");
  for (auto [batch, context, kv] : {std::tuple{1, 0, DType::F32}, std::tuple{3, 200, DType::F32}, std::tuple{8, 64, DType::F16}}) {
    engine::EngineOptions eo;
    eo.max_batch = batch;
    eo.max_context = context == 0 ? 256 : context;  // the helper's own default is 128; run's is the model max
    eo.kv_dtype = kv;
    auto em = test::load_engine_model(path, eo, Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
    const engine::Transformer& tf = *em.tf;
    const Checkpoint& ck = em.ck;
    const ModelLayout& layout = em.layout;
    Workload w;
    w.batch = batch;
    w.context = context;
    w.kv_dtype = kv;
    w.threads = 2;
    w.target = Target::Cpu;
    Estimate e = estimate(ck, layout, w);
    INFO("batch " << batch << " context " << context);
    CHECK(e.runtime == Runtime::Nunchaku);
    CHECK(e.workload.context == tf.max_context());  // default: min(model max 256, 4096)
    CHECK(e.component("kv_cache") + e.component("activations") + e.component("logits") + e.component("scratch") ==
          tf.state_bytes());  // what the engine's backend allocated
    // Per-module KV adds up to the component (plan charges modules).
    uint64_t kv_sum = 0;
    for (const auto& m : e.modules) kv_sum += m.kv_bytes;
    CHECK(kv_sum == e.component("kv_cache"));
    // The CPU: the process's fixed cost, no CUDA context or allocator slack.
    CHECK(e.component("cpu_runtime") > 0);
    CHECK(e.component("cuda_context") == 0);
    CHECK(e.component("allocator_slack") == 0);
  }
}

TEST_CASE("estimate --runtime nunchaku on a GPU: the CUDA backend's run state", "[estimate][runtime]") {
  Model m = llama("llama2-7b-config");  // fp16: hidden 4096, 32 heads x 128, ffn 11008, vocab 32000
  Workload w;
  w.runtime = Runtime::Nunchaku;
  w.batch = 2;
  w.context = 4096;
  w.threads = 4;
  const Estimate e = estimate(m.ck, m.layout, w);  // the default device: cuda
  // Scratch by hand: the widest matrix as fp32 (32000 x 11008 x 4 B = 1.4 GB) capped at the
  // 64 MiB dequantization panel, cuBLAS's 32 MiB workspace and 64 rotary frequencies.
  CHECK(e.component("scratch") == (64ULL << 20) + (32ULL << 20) + 64 * 4);
  CHECK(e.component("thread_buffers") == 0);  // no CPU kernels on the device
  REQUIRE(find(e.host, "logits_readback") != nullptr);
  CHECK(find(e.host, "logits_readback")->bytes == 2ULL * 32000 * 4);  // page-locked copy of 2 rows
  w.target = Target::Cpu;
  const Estimate c = estimate(m.ck, m.layout, w);
  CHECK(e.component("activations") == c.component("activations") + 2 * 8);  // the logit rows' indices on the device
  CHECK(find(c.host, "logits_readback") == nullptr);
  // A plan charges a device that runs layers on the CPU the CPU backend's state instead.
  CHECK(e.cpu_activation_bytes == c.component("activations") + c.component("scratch") + c.component("thread_buffers"));
  // CPU, 16-bit weights: 3 workers' TLS; the GEMM reads 16-bit rows in place (no panel).
  CHECK(c.component("thread_buffers") == 3 * static_tls_bytes());
  CHECK(estimate(m.ck, m.layout, w).activation_bytes == c.component("activations") + c.component("scratch") + c.component("thread_buffers"));
  Model f32 = llama("llama2-7b-config", DType::F32);
  CHECK(estimate(f32.ck, f32.layout, w).component("thread_buffers") == 3 * static_tls_bytes());  // f32: no panel
  // Quantized weights: + 4 threads' f32 panels of 32 rows x 11008 columns (down_proj).
  w.quant.scheme = QuantScheme::GGML;
  CHECK(estimate(m.ck, m.layout, w).component("thread_buffers") == 3 * static_tls_bytes() + 4ULL * 32 * 11008 * 4);
}

TEST_CASE("estimate --device cpu: no GPU levers, no offload to the memory the states are in", "[estimate][runtime]") {
  Model m = llama("llama2-7b-config", DType::BF16);
  Workload w;
  w.target = Target::Cpu;
  w.context = 512;
  auto s = suggest_fits(m.ck, m.layout, w, 8ULL << 30);  // nunchaku, 13.5 GB of weights in 8 GiB
  REQUIRE_FALSE(s.empty());
  for (const auto& x : s) {
    INFO(x.flags);
    CHECK(x.flags.find("--gpus") == std::string::npos);
  }
  w.mode = Mode::Train;
  s = suggest_fits(m.ck, m.layout, w, 64ULL << 30);
  REQUIRE_FALSE(s.empty());
  for (const auto& x : s) {
    INFO(x.flags);
    CHECK(x.flags.find("--offload") == std::string::npos);
    CHECK(x.flags.find("--gpus") == std::string::npos);
  }
  w.runtime = Runtime::DeepSpeed;
  w.zero = 2;
  w.offload = Offload::Optimizer;
  try {
    (void)estimate(m.ck, m.layout, w);
    FAIL("offload on the CPU");
  } catch (const Error& e) {
    CHECK(std::string(e.code()) == "usage.offload_cpu");
  }
  // Training runtimes describe themselves like the inference ones.
  w.offload = Offload::None;
  const Estimate t = estimate(m.ck, m.layout, w);
  REQUIRE(t.runtime_model.size() == 2);
  CHECK_THAT(t.runtime_model[0], Catch::Contains("ZeRO-2"));
  CHECK_THAT(t.runtime_model[1], Catch::Contains("no KV cache"));
}

TEST_CASE("estimate --runtime transformers: SDPA by default, eager adds exactly the score matrix", "[estimate][runtime]") {
  // The case: llama-2-7b, batch 1, context 32768. Weights + KV = 30.66 GB.
  Model m = llama("llama2-7b-config");
  Workload w;
  w.runtime = Runtime::Transformers;
  w.context = 32768;
  Estimate sdpa = estimate(m.ck, m.layout, w);
  CHECK(sdpa.workload.attention == Attention::Sdpa);
  const uint64_t weights_kv = 13476831232ULL + 524288ULL * 32768;
  CHECK(sdpa.component("weights") + sdpa.component("kv_cache") == weights_kv);
  CHECK(sdpa.per_gpu_total < weights_kv + (5ULL << 30));  // 2.5 GiB prefill + 0.5 GiB KV copy + overheads, not 200 GB
  w.attention = Attention::Eager;
  Estimate eager = estimate(m.ck, m.layout, w);
  // t = 32768 tokens: eager peak = qkv t·(32+2·32)·128·2 + scores 32·t·32768·(4+2); SDPA peak = mlp 3·t·11008·2.
  const uint64_t t = 32768, qkv = t * 96 * 128 * 2, scores = 32 * t * 32768 * 6, mlp = 3 * t * 11008 * 2;
  CHECK(eager.component("activations") - sdpa.component("activations") == qkv + scores - mlp);
  // The logits are last-position only (logits_to_keep=1): fp16 head output + fp32 copy.
  CHECK(sdpa.component("logits") == 32000ULL * (2 + 4));
  // KV notes the context warning when above the model's maximum (4096).
  CHECK(std::any_of(sdpa.notes.begin(), sdpa.notes.end(), [](const std::string& n) { return n.rfind("warning: --context 32768", 0) == 0; }));
  // vLLM's refusal of a longer --max-model-len is named for vLLM only (transformers and
  // llama.cpp run past the trained length).
  const auto names_vllm = [](const Estimate& x) {
    return std::any_of(x.notes.begin(), x.notes.end(), [](const std::string& n) {
      return n.rfind("warning: --context 32768", 0) == 0 && n.find("vLLM refuses") != std::string::npos;
    });
  };
  CHECK_FALSE(names_vllm(sdpa));
  w.attention = Attention::Default;
  w.runtime = Runtime::Vllm;
  CHECK(names_vllm(estimate(m.ck, m.layout, w)));
  w.runtime = Runtime::LlamaCpp;
  CHECK_FALSE(names_vllm(estimate(m.ck, m.layout, w)));
}

TEST_CASE("estimate --runtime vllm / llama.cpp: preallocation, budget share, host embeddings", "[estimate][runtime]") {
  Model m = llama("llama2-7b-config");
  Workload w;
  w.context = 1000;
  w.batch = 2;
  w.runtime = Runtime::Vllm;
  Estimate v = estimate(m.ck, m.layout, w);
  CHECK(v.component("kv_cache") == 524288ULL * 1008 * 2);  // 1000 tokens in blocks of 16 = 1008
  // vLLM 0.33: gpu_memory_utilization 0.92 of the device, and the CUDA context and cuBLAS
  // handles made before its memory snapshot on top of that share.
  CHECK(v.usable_fraction == 0.92);
  CHECK(v.outside_budget == (500ULL + 32) << 20);
  CHECK(verdict(v, 20ULL << 30).budget == static_cast<uint64_t>((20ULL << 30) * 0.92L) + ((500ULL + 32) << 20));
  CHECK(verdict(v, 1ULL << 30).budget == 1ULL << 30);  // never more than the device
  CHECK(v.component("cuda_graphs") > 0);
  w.runtime = Runtime::LlamaCpp;
  Estimate l = estimate(m.ck, m.layout, w);
  CHECK(l.kv_dtype == DType::F16);
  CHECK(l.component("kv_cache") == 524288ULL * 2048);  // n_ctx = 2 × 1000 padded to 256
  // Token embeddings (32000 × 4096 × 2 B) stay in host memory.
  CHECK(l.component("weights") == 13476831232ULL - 32000ULL * 4096 * 2);
  REQUIRE(find(l.host, "token_embeddings") != nullptr);
  CHECK(find(l.host, "token_embeddings")->bytes == 32000ULL * 4096 * 2);
  CHECK(l.component("allocator_slack") == 0);
  w.runtime = Runtime::Nunchaku;
  w.mode = Mode::Train;
  try {
    (void)estimate(m.ck, m.layout, w);
    FAIL("nunchaku does not train");
  } catch (const Error& e) {
    CHECK(std::string(e.code()) == "usage.runtime_mode");
  }
}

TEST_CASE("estimate --runtime llama.cpp: compute buffer as llama.cpp reports it", "[estimate][runtime]") {
  // Expectations: "CPU compute buffer size" that llama.cpp (llama-cpp-python 0.3.36) logged
  // for random-weight f16 GGUFs of these shapes at these n_ctx / n_seq / flash settings
  // (docs/estimate.md, llama.cpp runtime). Its MiB have two decimals (%.2f); the estimate
  // plans llama.cpp's graph as ggml-alloc does (memory/llamacpp_graph), so it rounds to them.
  struct Shape {
    int64_t h, I, a, kv, V, L;
  };
  struct Case {
    Shape s;
    int64_t batch, context;
    bool flash;
    double mib;
  };
  const Shape m1{768, 2048, 12, 12, 956, 8}, m2{512, 2816, 8, 4, 3000, 2}, m3{256, 512, 4, 4, 32000, 1};
  const Case cases[] = {
      {m1, 1, 1024, true, 19.01}, {m1, 1, 1024, false, 36.51}, {m1, 1, 512, false, 23.51}, {m1, 1, 4096, false, 114.51},
      {m1, 1, 8192, true, 26.01}, {m1, 2, 1024, true, 19.01}, {m1, 8, 512, true, 18.51},   {m1, 1, 300, true, 10.85},
      {m2, 1, 1024, false, 24.01}, {m2, 1, 2048, false, 42.01}, {m2, 1, 4096, true, 24.51}, {m2, 4, 1024, false, 24.01},
      {m3, 1, 1024, true, 63.50}, {m3, 1, 4096, false, 64.00}, {m3, 8, 128, true, 63.50}};
  test::TempDir dir;
  for (const Case& c : cases) {
    INFO("h " << c.s.h << " batch " << c.batch << " context " << c.context << " flash " << c.flash);
    const json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.s.h},
                      {"intermediate_size", c.s.I}, {"num_attention_heads", c.s.a}, {"num_key_value_heads", c.s.kv},
                      {"num_hidden_layers", c.s.L}, {"vocab_size", c.s.V}, {"max_position_embeddings", 8192}};
    const std::string path = dir.file("config-" + std::to_string(c.s.h) + ".json");
    test::write_file(path, cfg.dump());
    const Checkpoint ck = index_of(llama_tensors(cfg), DType::F16, path);
    const ModelLayout layout = describe_model(ck);
    Workload w;
    w.runtime = Runtime::LlamaCpp;
    w.target = Target::Cpu;
    w.batch = c.batch;
    w.context = c.context;
    w.attention = c.flash ? Attention::Default : Attention::Eager;
    const Estimate e = estimate(ck, layout, w);
    const double got = double(e.llamacpp_compute_buffer) / (1 << 20);  // the reserve (activations: its written pages)
    CHECK(std::abs(got - c.mib) < 0.005);
  }
}

TEST_CASE("estimate: training keeps no KV cache, ZeRO-0 and ZeRO-1 agree on one GPU", "[estimate][runtime]") {
  Model m = llama("llama2-7b-config", DType::BF16);
  Workload w;
  w.mode = Mode::Train;
  w.context = 512;
  Estimate t = estimate(m.ck, m.layout, w);
  CHECK(t.runtime == Runtime::Transformers);
  CHECK(t.component("kv_cache") == 0);
  for (const auto& mc : t.modules) CHECK(mc.kv_bytes == 0);
  const uint64_t P = 6738415616ULL;
  auto states = [&](const Estimate& e) {
    return e.component("weights") + e.component("gradients") + e.component("master_weights") + e.component("optimizer_states");
  };
  CHECK(states(t) == 16 * P);  // PyTorch AMP: 2 + 2 + 4 + 8 B/param
  // DeepSpeed keeps fp32 gradients at stage 0 too (FP16_Optimizer / BF16_Optimizer): 20 B/param,
  // the same as ZeRO-1 on one GPU.
  w.runtime = Runtime::DeepSpeed;
  w.zero = 0;
  const uint64_t z0 = states(estimate(m.ck, m.layout, w));
  w.zero = 1;
  const uint64_t z1 = states(estimate(m.ck, m.layout, w));
  CHECK(z0 == 20 * P);
  CHECK(z1 == z0);
  w.gpus = 4;
  w.zero = 0;
  const uint64_t z0_4 = states(estimate(m.ck, m.layout, w));
  w.zero = 1;
  CHECK(states(estimate(m.ck, m.layout, w)) < z0_4);  // partitioning only ever helps
  CHECK(z0_4 == 20 * P);
}

TEST_CASE("estimate --device cpu: glibc's heap retention for PyTorch", "[estimate][runtime]") {
  // docs/estimate.md: with glibc's default malloc, a PyTorch process on the CPU peaks above
  // its live tensors by about one prefill layer's transient (inference) or one set of
  // gradients (training). Llama-2-7B fp16, batch 1, a 512-token prompt, SDPA.
  Model m = llama("llama2-7b-config");
  Workload w;
  w.runtime = Runtime::Transformers;
  w.target = Target::Cpu;
  w.context = 512;
  Estimate e = estimate(m.ck, m.layout, w);
  // 1.5 × (residual 2·t·h·2 B + the MLP's gate, up and act(gate)·up 3·t·I·2 B, larger than q, k, v)
  CHECK(e.component("glibc_heap") == (2ULL * 512 * 4096 * 2 + 3ULL * 512 * 11008 * 2) / 2 * 3);
  w.overheads["glibc_heap"] = 0;  // MALLOC_MMAP_THRESHOLD_ set: nothing kept
  CHECK(estimate(m.ck, m.layout, w).component("glibc_heap") == 0);
  w.overheads.clear();
  // Tensors over glibc's 32 MiB mmap-threshold maximum count too (measured: freed heap space
  // serves them): at 2048 tokens the MLP's are 43 MiB each.
  w.context = 2048;
  CHECK(estimate(m.ck, m.layout, w).component("glibc_heap") == (2ULL * 2048 * 4096 * 2 + 3ULL * 2048 * 11008 * 2) / 2 * 3);
  w.context = 512;
  w.mode = Mode::Train;
  Estimate t = estimate(m.ck, m.layout, w);
  CHECK(t.component("glibc_heap") == 6738415616ULL * 2);  // one set of fp16 gradients
  CHECK(t.component("glibc_heap") == t.component("gradients"));
  w.target = Target::Cuda;  // the caching allocator, not glibc
  CHECK(estimate(m.ck, m.layout, w).component("glibc_heap") == 0);
  w.mode = Mode::Infer;
  w.target = Target::Cpu;
  w.runtime = Runtime::Nunchaku;  // allocates its run state once: nothing freed during a pass
  CHECK(estimate(m.ck, m.layout, w).component("glibc_heap") == 0);
}

TEST_CASE("estimate CLI: --runtime all, --device cpu, --gpus against --vram", "[estimate][cli]") {
  const std::string model = test::testdata("models/llama");
  auto r = test::run_cli({"estimate", model, "--runtime", "all", "--vram", "1G"});
  REQUIRE(r.exit_code == 0);
  for (const char* name : {"nunchaku", "transformers", "vllm", "llama.cpp"}) CHECK_THAT(r.out, Catch::Contains(name));
  auto j = json::parse(test::run_cli({"estimate", model, "--runtime", "all", "--json"}).out);
  CHECK(j["runtimes"].size() == 4);
  CHECK(j["runtimes"]["llama.cpp"]["runtime"] == "llama.cpp");
  auto cpu = json::parse(test::run_cli({"estimate", model, "--device", "cpu", "--runtime", "transformers", "--json"}).out);
  CHECK(cpu["device"] == "cpu");
  CHECK(cpu["component_bytes"].contains("cpu_runtime"));
  CHECK_FALSE(cpu["component_bytes"].contains("cuda_context"));
  auto t = test::run_cli({"estimate", model, "--mode", "train", "--runtime", "all"});
  CHECK_THAT(t.out, Catch::Contains("deepspeed"));
  CHECK_THAT(t.out, !Catch::Contains("llama.cpp"));
  // One size and --gpus 2: two GPUs of that size; two sizes and --gpus 3: a usage error.
  auto g = json::parse(test::run_cli({"estimate", model, "--vram", "1G", "--gpus", "2", "--json"}).out);
  CHECK(g["workload"]["gpus"] == 2);
  CHECK(test::run_cli({"estimate", model, "--vram", "1G,1G", "--gpus", "3"}).exit_code == 2);
  CHECK(test::run_cli({"plan", model, "--vram", "1G,1G", "--gpus", "3"}).exit_code == 2);
  CHECK(test::run_cli({"estimate", model, "--runtime", "tensorrt"}).exit_code == 2);
  // plan with no GPU budget charges the CPU what estimate --device cpu charges the run, less the
  // process's own fixed cost (a budget for what the run allocates, as run --cpu-ram).
  const std::string spm = test::testdata("run/llama-spm");
  const std::vector<std::string> wl = {"--threads", "2", "--batch", "4", "--context", "128", "--json"};
  std::vector<std::string> ea = {"estimate", spm, "--device", "cpu"}, pa = {"plan", spm, "--vram", "0"};
  ea.insert(ea.end(), wl.begin(), wl.end());
  pa.insert(pa.end(), wl.begin(), wl.end());
  auto est = json::parse(test::run_cli(ea).out);
  auto pl = json::parse(test::run_cli(pa).out);
  CHECK(pl["runtime"] == "nunchaku");
  CHECK(pl["device"] == "cuda");
  REQUIRE(pl["devices"].size() == 1);
  CHECK(pl["devices"][0]["overhead_bytes"] == 0);
  CHECK(pl["devices"][0]["total_bytes"].get<uint64_t>() ==
        est["total_bytes"].get<uint64_t>() - est["component_bytes"]["cpu_runtime"].get<uint64_t>());
  pa.insert(pa.begin() + 2, {"--device", "cpu"});
  CHECK(json::parse(test::run_cli(pa).out)["device"] == "cpu");
  // Above the model's maximum (256): a warning on stderr, the table says so too.
  auto c = test::run_cli({"estimate", model, "--context", "1000"});
  CHECK(c.exit_code == 0);
  CHECK_THAT(c.err, Catch::Contains("warning: --context 1000 is above the model's maximum (256"));
}

TEST_CASE("estimate: llama.cpp's own flags with another runtime are said to be ignored, not dropped silently", "[estimate]") {
  const std::string m = test::testdata("models/llama");
  auto notes = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"estimate", m, "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    auto r = test::run_cli(a);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json doc = json::parse(r.out);
    std::string all;
    for (const auto& n : doc["notes"]) all += n.get<std::string>() + "\n";
    return all;
  };
  CHECK_THAT(notes({"--ubatch", "128", "--no-repack"}),
             Catch::Contains("--ubatch, --no-repack are llama.cpp's (--runtime llama.cpp): nunchaku has no such setting"));
  CHECK_THAT(notes({"--swa-full", "--runtime", "transformers"}), Catch::Contains("--swa-full is llama.cpp's"));
  CHECK_THAT(notes({"--ubatch", "128", "--swa-full", "--no-repack", "--runtime", "llama.cpp"}), !Catch::Contains("llama.cpp's (--runtime"));
  CHECK_THAT(notes({}), !Catch::Contains("llama.cpp's (--runtime"));
}
