#include "engine/backend_split.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"

namespace nunchaku::engine {
namespace {

class SplitBackend final : public Backend {
 public:
  SplitBackend(std::vector<std::unique_ptr<Backend>> parts, SplitLayout how) : parts_(std::move(parts)), how_(std::move(how)) {
    const int n = int(parts_.size());
    auto bad = [&](const std::string& what) { return Error("engine.bad_split", what, {}, Exit::Internal); };
    if (n == 0) throw bad("a split backend needs at least one part");
    auto in_range = [&](int p) { return p >= 0 && p < n; };
    if (!in_range(how_.embed_part) || !in_range(how_.head_part) || (how_.stream_part >= 0 && !in_range(how_.stream_part)) ||
        (how_.moe_part >= 0 && !in_range(how_.moe_part)))
      throw bad(fmt::format("embedding/head/stream/experts part outside the {}", plural(uint64_t(n), "part")));
    layers_of_.assign(size_t(n), 0);
    for (int p : how_.layer_part) {
      if (!in_range(p)) throw bad(fmt::format("a layer is given part {} of {}", p, n));
      local_.push_back(layers_of_[size_t(p)]++);
    }
    for (int p = 0; p < n; ++p)
      if (layers_of_[size_t(p)] == 0 && p != how_.embed_part && p != how_.head_part && p != how_.moe_part)
        throw bad(fmt::format("part {} ({}) runs nothing", p, parts_[size_t(p)]->describe()));
  }

  std::string describe() const override {
    std::string s = "split:";
    for (size_t p = 0; p < parts_.size(); ++p) {
      int64_t first = -1, last = -1;
      for (size_t l = 0; l < how_.layer_part.size(); ++l)
        if (how_.layer_part[l] == int(p)) {
          if (first < 0) first = int64_t(l);
          last = int64_t(l);
        }
      s += fmt::format("{} {} layers", p ? ";" : "", parts_[p]->describe());
      s += first < 0 ? " none" : fmt::format(" {}-{} ({})", first, last, layers_of_[p]);
      if (int(p) == how_.moe_part) s += ", experts of every layer";
    }
    return s;
  }
  Device device() const override { return head().device(); }
  bool supports(Op op, DType t) const override {
    if (op == Op::Moe && how_.moe_part >= 0) return parts_[size_t(how_.moe_part)]->supports(op, t);
    return std::all_of(parts_.begin(), parts_.end(), [&](const auto& b) { return b->supports(op, t); });
  }
  bool moe_can_read(Device d) const override {
    if (how_.moe_part >= 0) return parts_[size_t(how_.moe_part)]->can_read(d);
    return can_read(d);
  }
  bool can_read(Device d) const override {
    return std::any_of(parts_.begin(), parts_.end(), [&](const auto& b) { return b->can_read(d); });
  }
  int threads() const override {
    int t = 1;
    for (const auto& b : parts_) t = std::max(t, b->threads());
    return t;
  }
  void* native_stream() const override { return parts_[size_t(how_.stream_part >= 0 ? how_.stream_part : how_.head_part)]->native_stream(); }

  EngineMemory plan_state(const ModelSpec& spec, const EngineConfig& cfg) override {
    if (int64_t(how_.layer_part.size()) != spec.num_layers)
      throw Error("engine.bad_split", fmt::format("the split names {}, the model has {}", plural(how_.layer_part.size(), "layer"),
                                                  spec.num_layers), {}, Exit::Internal);
    memory_.clear();
    EngineMemory sum;
    for (size_t p = 0; p < parts_.size(); ++p) {
      ModelSpec sub = spec;
      sub.num_layers = layers_of_[p];
      keep_layers_of(int(p), sub.layer_windows);
      keep_layers_of(int(p), sub.layer_kv_heads);
      EngineConfig c = cfg;
      c.cuda = parts_[p]->device().kind == Device::Kind::Cuda;
      c.threads = parts_[p]->threads();
      if (int(p) != how_.stream_part) c.stream_slots = 0, c.stream_slot_bytes = 0, c.stream_piece_slots = 0, c.stream_piece_bytes = 0;
      if (int(p) != how_.head_part) c.logit_rows = 1;  // never asked for logits: one row, not R
      memory_.push_back(parts_[p]->plan_state(sub, c));
      const EngineMemory& m = memory_.back();
      // The Transformer's host tables exist once, whatever the number of parts (added below).
      sum.activations += m.activations - std::min(m.activations, engine_host_tables(m.config));
      sum.kv_cache += m.kv_cache;
      sum.logits += m.logits;
      sum.scratch += m.scratch;
      sum.host_logits += m.host_logits;
      sum.stream_pool += m.stream_pool;
      sum.thread_buffers += m.thread_buffers;
    }
    sum.config = memory_[size_t(how_.head_part)].config;  // logit rows as the head's part holds them
    sum.activations += engine_host_tables(sum.config);
    sum.config.cuda = cfg.cuda;
    sum.config.threads = cfg.threads;
    return sum;
  }
  void allocate(const BackendSetup& setup) override {
    if (memory_.size() != parts_.size())
      throw Error("engine.bad_split", "allocate() before plan_state()", {}, Exit::Internal);
    for (size_t p = 0; p < parts_.size(); ++p) {
      BackendSetup s = setup;
      s.dims.layers = layers_of_[p];
      s.memory = memory_[p];
      parts_[p]->allocate(s);
    }
  }
  uint64_t host_part_bytes() const override {
    const bool gpus = std::any_of(parts_.begin(), parts_.end(), [](const auto& b) { return b->device().kind == Device::Kind::Cuda; });
    uint64_t n = 0;
    for (size_t p = 0; p < parts_.size() && p < memory_.size(); ++p)
      if (gpus && parts_[p]->device().kind == Device::Kind::Cpu)  // its share of plan_state()'s sum
        n += memory_[p].allocated() - std::min(memory_[p].activations, engine_host_tables(memory_[p].config));
    return n;
  }
  uint64_t allocated_bytes() const override {
    uint64_t n = 0;
    for (const auto& b : parts_) n += b->allocated_bytes();
    return n;
  }

  void set_tokens(const BatchTokens& t) override {
    for (auto& b : parts_) b->set_tokens(t);
    tokens_ = int64_t(t.id.size());
    cur_ = how_.embed_part;
  }
  void embed(const WeightMatrix& table, float scale) override {
    cur_ = how_.embed_part;
    part().embed(table, scale);
  }
  void begin_layer(int64_t layer) override {
    move_to(how_.layer_part.at(size_t(layer)));
    part().begin_layer(local(layer));
  }
  void norm(Buf in, Buf out, const Norm& n) override { part().norm(in, out, n); }
  void matmul(std::span<const MatmulJob> jobs, Buf in) override { part().matmul(jobs, in); }
  void act_mul(Buf gate, Buf up, Activation act) override { part().act_mul(gate, up, act); }
  void scale(Buf b, float s) override { target(b).scale(b, s); }
  void softcap(Buf b, float cap) override { target(b).softcap(b, cap); }
  void add(Buf x, Buf delta) override { part().add(x, delta); }
  void rope(Buf b, int table) override { part().rope(b, table); }
  void store_kv(int64_t layer) override { part().store_kv(local(layer)); }
  void attention(int64_t layer, const Attention& a) override { part().attention(local(layer), a); }
  void moe(const MoeFfn& f) override {
    if (how_.moe_part < 0 || how_.moe_part == cur_) return part().moe(f);
    Backend& experts = *parts_[size_t(how_.moe_part)];
    experts.write(Buf::XN, part().read(Buf::XN, tokens_));
    if (!f.shared_on_layer || !f.shared_gate) {
      experts.moe(f);
    } else {
      // The shared expert here, queued before the experts part starts on the routed experts
      // (a GPU computes it meanwhile), its output read back after them.
      Backend& here = part();
      const MatmulJob gate{f.shared_gate, Buf::Gate, {}}, up{f.shared_up, Buf::Up, {}}, down{f.shared_down, Buf::Tmp, {}};
      here.matmul_act(gate, up, Buf::XN, f.act);
      here.matmul({&down, 1}, Buf::Gate);
      MoeFfn routed = f;
      routed.shared_gate = routed.shared_up = routed.shared_down = nullptr;
      routed.shared_fetch = [&] { return here.read(Buf::Tmp, tokens_); };
      experts.moe(routed);
    }
    part().write(Buf::Tmp, experts.read(Buf::Tmp, tokens_));
  }
  void matmul_heads(std::span<const WeightMatrix> w, Buf in, int64_t is, Buf out, int64_t os) override {
    part().matmul_heads(w, in, is, out, os);
  }
  void mla_rope_cache(int64_t layer) override { part().mla_rope_cache(local(layer)); }
  void prefetch(std::span<const MatmulJob> jobs) override { part().prefetch(jobs); }
  void rope_and_cache(int64_t layer, const Norm& qn, const Norm& kn, int table) override {
    part().rope_and_cache(local(layer), qn, kn, table);
  }
  void add_norm(Buf x, Buf delta, Buf out, const Norm& n) override { part().add_norm(x, delta, out, n); }
  void matmul_act(const MatmulJob& gate, const MatmulJob& up, Buf in, Activation act) override {
    part().matmul_act(gate, up, in, act);
  }
  void matmul_add(const MatmulJob& job, Buf in, Buf x) override { part().matmul_add(job, in, x); }
  void select_rows(std::span<const int64_t> rows, const Norm& n) override {
    move_to(how_.head_part);
    part().select_rows(rows, n);
  }
  void head(const WeightMatrix& w, int64_t rows) override { parts_[size_t(how_.head_part)]->head(w, rows); }
  std::span<const float> logits(int64_t rows) override { return parts_[size_t(how_.head_part)]->logits(rows); }
  void write(Buf b, std::span<const float> values) override { part().write(b, values); }
  std::vector<float> read(Buf b, int64_t rows) override { return part().read(b, rows); }

 private:
  Backend& part() const { return *parts_[size_t(cur_)]; }
  // Sel and Logits live on the head's part; the per-token buffers where the pass is.
  Backend& target(Buf b) const { return b >= Buf::Sel ? *parts_[size_t(how_.head_part)] : part(); }
  const Backend& head() const { return *parts_[size_t(how_.head_part)]; }
  int64_t local(int64_t layer) const { return local_.at(size_t(layer)); }
  // The residual stream of this pass's tokens to part p (through the host).
  void move_to(int p) {
    if (p == cur_) return;
    const std::vector<float> x = part().read(Buf::X, tokens_);
    parts_[size_t(p)]->write(Buf::X, x);
    cur_ = p;
  }
  // Per-layer lists (size = all layers) cut to the layers of part p.
  template <class T>
  void keep_layers_of(int p, std::vector<T>& v) const {
    if (v.size() != how_.layer_part.size()) return;
    std::vector<T> kept;
    for (size_t l = 0; l < v.size(); ++l)
      if (how_.layer_part[l] == p) kept.push_back(v[l]);
    v = std::move(kept);
  }

  std::vector<std::unique_ptr<Backend>> parts_;
  SplitLayout how_;
  std::vector<int64_t> layers_of_, local_;  // layers per part; each layer's index within its part
  std::vector<EngineMemory> memory_;        // per part, from plan_state()
  int64_t tokens_ = 0;
  int cur_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_split_backend(std::vector<std::unique_ptr<Backend>> parts, SplitLayout layout) {
  return std::make_unique<SplitBackend>(std::move(parts), std::move(layout));
}

}  // namespace nunchaku::engine
