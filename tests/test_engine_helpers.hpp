// Helpers shared by the engine tests: load a checkpoint (onto the CPU by default) and build a
// Transformer over it, greedy decoding straight on forward(), SentencePiece piece decoding,
// running a check once per CPU instruction set.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "engine/engine.hpp"
#include "engine/kernels.hpp"
#include "engine/model.hpp"
#include "format/open.hpp"
#include "io/loader.hpp"
#include "io/placement.hpp"
#include "memory/engine_memory.hpp"
#include "model/model.hpp"

namespace nunchaku {
struct DevicePlan;
}

namespace nunchaku::test {

// A loaded model and its engine (movable: the engine keeps no reference to ck or layout, and
// the store's memory does not move with it).
struct EngineModel {
  Checkpoint ck;
  ModelLayout layout;
  LoadResult load;
  engine::Engine engine;
  engine::Transformer* tf = nullptr;
};

// The options of the tiny fixtures' short runs: 64 positions, 16 logit rows, 16 new tokens.
inline engine::EngineOptions short_run_options() {
  engine::EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 16;
  o.max_tokens = 16;
  return o;
}

// The golden fixtures' runs (testdata/engine/*.json): 64 positions, every prompt row's logits
// (64 rows), passes of at most `max_tokens` tokens, `batch` sequences.
inline engine::EngineOptions golden_options(int64_t max_tokens = 16, int64_t batch = 2) {
  engine::EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 64;
  o.max_tokens = max_tokens;
  o.max_batch = batch;
  return o;
}

// Every weight on `where` (CPU memory by default; cuda:N runs on the CUDA backend; Disk leaves them on disk: file mappings,
// or streamed through a pool when `stream` is given).
inline EngineModel load_engine_model(const std::string& path, engine::EngineOptions opts,
                                                      Device where = Device{Device::Kind::Cpu, 0},
                                                      std::optional<engine::StreamOptions> stream = std::nullopt,
                                                      int threads = 0) {
  EngineModel m;
  m.ck = open_checkpoint(path);
  m.layout = describe_model(m.ck);
  LoadOptions lo;
  lo.placement = place_all(m.layout, where);
  m.load = load_checkpoint(m.ck, m.layout, lo);
  if (opts.max_context == 0) opts.max_context = 128;
  // Weights on a CUDA device run on that device's backend.
  const Device backend = where.kind == Device::Kind::Cuda ? where : Device{Device::Kind::Cpu, 0};
  m.engine = engine::make_engine(m.ck, m.layout, m.load.store, {opts, threads, stream, backend});
  m.tf = m.engine.model.get();
  return m;
}

// plan's charge for a nunchaku CPU run of `m` with every module on disk (streamed): what
// it charges the CPU for the stream pool is devices[0].staging (test_engine_helpers.cpp).
DevicePlan all_on_disk_plan(const EngineModel& m);

// A copy of the one-file safetensors checkpoint in directory `src` (config.json and
// model.safetensors) in `dir`, its header through `edit` (the data region as it was: renames
// and same-size reshapes keep the offsets valid): malformed-checkpoint tests.
void copy_with_header(const std::string& src, const std::string& dir, const std::function<void(nlohmann::json&)>& edit);
// Renames tensor `from` of a safetensors header to `to`.
void rename_tensor(nlohmann::json& header, const std::string& from, const std::string& to);
// The engine's error code for a copy of the checkpoint in `src` whose header went through
// `edit` ("" if it builds); *tensor: the tensor the error names. A failure unless exit 2.
std::string engine_error_of(const std::string& src, const std::function<void(nlohmann::json&)>& edit,
                            const engine::EngineOptions& opts, std::string* tensor);
// Every layer of the checkpoint at `path` on disk, streamed whole or with its experts read
// per expert (`opts` sizing the engine, 2 threads): `prompt`'s logits equal the resident
// engine's bit for bit, and so do 8 greedy ids; the run state plus the stream pool is what
// the engine predicted, and plan's staging for an all-on-disk run is the pool.
void check_streamed_equals_resident(const std::string& path, const std::vector<int32_t>& prompt,
                                    const engine::EngineOptions& opts);
// The run state of `m` (built for `batch` sequences of `context` on `threads` CPU threads)
// equals estimate --runtime nunchaku's for the same workload (`kv` where the engine's KV
// dtype is not estimate's default for the file). Returns the estimate's kv_cache bytes.
uint64_t check_state_is_estimate(const EngineModel& m, int64_t batch, int64_t context, int threads,
                             std::optional<DType> kv = std::nullopt);

// A ModelSpec of dimensions `d` (engine_dims() gives `d` back) and `max_context` positions:
// for tests that size backends with engine_memory() without a checkpoint.
inline ModelSpec spec_with_dims(const EngineDims& d, int64_t max_context) {
  ModelSpec s;
  s.hidden_size = d.hidden;
  s.num_heads = d.heads;
  s.num_kv_heads = d.kv_heads;
  s.head_dim = d.head_dim;
  s.intermediate_size = d.inter;
  s.vocab_size = d.vocab;
  s.num_layers = d.layers;
  s.max_context = max_context;
  return s;
}

// A CPU backend allocated with fast math on for a one-layer model of hidden 256, 4:2 heads
// of 64, intermediate 512 (the widest matmul input), vocab 64; 20 tokens, 2 threads (the
// fast-math tests' dispatch checks).
struct FastMathBackend {
  EngineDims d{256, 4, 2, 64, 512, 64, 1};
  ModelSpec spec = spec_with_dims(d, 32);
  EngineConfig config{.max_batch = 1, .max_context = 32, .max_tokens = 20, .logit_rows = 1, .threads = 2,
                      .fast_math = true};
  EngineMemory mem = engine_memory(spec, config);
  std::vector<float> inv_freq = std::vector<float>(size_t(d.head_dim / 2), 1.0f);
  std::unique_ptr<engine::Backend> be = engine::make_cpu_backend(2);
  FastMathBackend() { be->allocate({d, mem, 1e-5f, engine::RopeStyle::NeoX, inv_freq}); }
};

// A backend that hands every primitive to a CPU backend (`in`), the fused ops left to
// Backend's default compositions: tests override what they pretend (memory it cannot read,
// an op it does not run) and count calls.
class ForwardingBackend : public engine::Backend {
 public:
  std::unique_ptr<engine::Backend> in = engine::make_cpu_backend(2);
  std::string describe() const override { return in->describe(); }
  Device device() const override { return in->device(); }
  bool can_read(Device d) const override { return in->can_read(d); }
  int threads() const override { return in->threads(); }
  void allocate(const engine::BackendSetup& s) override { in->allocate(s); }
  uint64_t allocated_bytes() const override { return in->allocated_bytes(); }
  void set_tokens(const engine::BatchTokens& t) override { in->set_tokens(t); }
  bool supports(engine::Op op, DType t) const override { return in->supports(op, t); }
  void embed(const engine::WeightMatrix& table, float scale) override { in->embed(table, scale); }
  void norm(engine::Buf a, engine::Buf b, const engine::Norm& n) override { in->norm(a, b, n); }
  void matmul(std::span<const engine::MatmulJob> j, engine::Buf x) override { in->matmul(j, x); }
  void act_mul(engine::Buf g, engine::Buf u, Activation a) override { in->act_mul(g, u, a); }
  void scale(engine::Buf b, float s) override { in->scale(b, s); }
  void softcap(engine::Buf b, float c) override { in->softcap(b, c); }
  void rope(engine::Buf b, int t) override { in->rope(b, t); }
  void store_kv(int64_t l) override { in->store_kv(l); }
  void attention(int64_t l, const engine::Attention& a) override { in->attention(l, a); }
  void moe(const engine::MoeFfn& f) override { in->moe(f); }
  void add(engine::Buf x, engine::Buf d) override { in->add(x, d); }
  void select_rows(std::span<const int64_t> r, const engine::Norm& n) override { in->select_rows(r, n); }
  void head(const engine::WeightMatrix& w, int64_t r) override { in->head(w, r); }
  std::span<const float> logits(int64_t r) override { return in->logits(r); }
  void write(engine::Buf b, std::span<const float> v) override { in->write(b, v); }
  std::vector<float> read(engine::Buf b, int64_t r) override { return in->read(b, r); }
};

// Calls f(isa) with each instruction set's kernels active in turn (kAllIsas order), for every
// one this machine has; each one not built in or not supported by the CPU is named in a WARN.
// The ISA active before is restored afterwards, also when f fails a REQUIRE or throws.
template <class F>
void for_each_isa(F&& f) {
  struct Restore {
    engine::Isa was;
    ~Restore() { engine::set_isa(was); }
  } restore{engine::active_isa()};
  for (engine::Isa isa : engine::kAllIsas) {
    if (!engine::isa_available(isa)) {
      WARN("kernels for " << engine::isa_name(isa) << " skipped: not built in or not supported by this CPU");
      continue;
    }
    f(engine::set_isa(isa));
  }
}

// |a - b| for comparing an output with its reference, infinite when exactly one of them is
// NaN (both NaN: 0). A running std::max(err, |a - b|) would skip a NaN output, since
// std::max(err, NaN) keeps err, and the check after it would pass.
inline double abs_diff(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0.0 : INFINITY;
  return std::abs(a - b);
}

// An integer from the environment (the hidden benchmark cases' settings), else `fallback`.
inline int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

inline int32_t argmax(const float* v, int64_t n) {
  return int32_t(std::max_element(v, v + n) - v);
}

// Greedy decoding in slot `slot` on forward() directly (prompt in one chunk, then one
// token per step); stops after n tokens or when stop_token comes (not included).
inline std::vector<int32_t> greedy(engine::Transformer& tf, const std::vector<int32_t>& prompt, int n,
                                   int32_t stop_token = -1, int slot = 0) {
  std::vector<int32_t> out;
  engine::SeqChunk ch{slot, 0, prompt, false};
  auto logits = tf.forward({&ch, 1});
  int64_t pos = int64_t(prompt.size());
  for (int i = 0; i < n; ++i) {
    int32_t next = argmax(logits.data(), tf.vocab());
    if (next == stop_token) break;
    out.push_back(next);
    if (i + 1 == n) break;
    engine::SeqChunk step{slot, pos++, {&out.back(), 1}, false};
    logits = tf.forward({&step, 1});
  }
  return out;
}

// Largest |ours - ref| over the largest |ref| (a logits row against a golden row).
inline double rel_error(const float* ours, const nlohmann::json& ref) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(ref[i].get<double>()));
    err = std::max(err, abs_diff(ours[i], ref[i].get<double>()));
  }
  return err / std::max(scale, 1e-6);
}

// A transformers golden (prompt, prompt_logits, ids, final_logits): every prompt position's
// logits within 1e-4 relative, the greedy ids, then the whole sequence again in passes of
// max_tokens in slot 1 (a second sequence beside the first; prefill batches route many
// tokens to one expert at once, decode one), its last logits within 1e-4, and the run state
// (with a streamed run's pool) as engine_memory predicts it.
inline void check_against_golden(engine::Transformer& tf, const nlohmann::json& g) {
  const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
  const auto want = g.at("ids").get<std::vector<int32_t>>();
  engine::SeqChunk ch{0, 0, prompt, true};
  auto out = tf.forward({&ch, 1});
  REQUIRE(out.size() == prompt.size() * size_t(tf.vocab()));
  for (size_t r = 0; r < prompt.size(); ++r) {
    INFO("prompt position " << r);
    CHECK(rel_error(out.data() + r * size_t(tf.vocab()), g.at("prompt_logits")[r]) < 1e-4);
  }
  CHECK(greedy(tf, prompt, int(want.size())) == want);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), want.begin(), want.end() - 1);
  std::span<const float> last;
  const size_t pass = size_t(std::max<int64_t>(1, tf.max_tokens()));
  for (size_t at = 0; at < seq.size(); at += pass) {
    const size_t n = std::min(seq.size() - at, pass);
    engine::SeqChunk part{1, int64_t(at), std::span<const int32_t>(seq).subspan(at, n), false};
    last = tf.forward({&part, 1});
  }
  CHECK(rel_error(last.data(), g.at("final_logits")) < 1e-4);
  CHECK(tf.state_bytes() + tf.weights().pool_bytes() == tf.predicted().allocated());  // a streamed run's pool too
}

// Minimal SentencePiece piece decoding for tests ('▁' -> ' ', <0xNN> -> byte); the real
// tokenizer lives in src/tokenizer.
inline std::string decode_spm_pieces(const std::vector<std::string>& vocab, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    const std::string& p = vocab.at(size_t(id));
    if (p.size() == 6 && p.rfind("<0x", 0) == 0 && p.back() == '>') {
      out.push_back(char(std::stoi(p.substr(3, 2), nullptr, 16)));
      continue;
    }
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xe2\x96\x81") == 0) {
        out.push_back(' ');
        i += 3;
      } else {
        out.push_back(p[i++]);
      }
    }
  }
  return out;
}

}  // namespace nunchaku::test
