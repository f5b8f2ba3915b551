// The split backend (engine/backend_split.hpp): layers run on several backends, the residual
// stream moving between them. Over CPU parts it must give exactly what one CPU backend gives
// (same kernels, same sums), whatever the assignment, and the greedy tokens transformers gave
// (testdata/engine/goldens.json); its run state is each part's own, as plan_state() says.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/backend_split.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

struct Loaded {
  Checkpoint ck;
  ModelLayout layout;
  LoadResult load;
  std::unique_ptr<WeightProvider> weights;
};

// Every weight in host memory, or (embedding_on_host) only the embedding, the rest left in
// file mappings (Disk).
Loaded load_cpu(const std::string& path, bool embedding_on_host = false) {
  Loaded m;
  m.ck = open_checkpoint(path);
  m.layout = describe_model(m.ck);
  LoadOptions lo;
  const Device host{Device::Kind::Cpu, 0};
  lo.placement = place_all(m.layout, embedding_on_host ? Device{Device::Kind::Disk, 0} : host);
  for (const Module& mod : m.layout.modules)
    if (embedding_on_host && mod.kind == ModuleKind::Embedding) lo.placement.modules[mod.name] = host;
  m.load = load_checkpoint(m.ck, m.layout, lo);
  m.weights = std::make_unique<ResidentProvider>(m.layout, m.load.store);
  return m;
}

EngineOptions options() {
  EngineOptions o;
  o.max_batch = 2;
  o.max_context = 64;
  o.logit_rows = 64;
  return o;
}

std::vector<std::unique_ptr<Backend>> cpu_parts(int n) {
  std::vector<std::unique_ptr<Backend>> parts;
  for (int i = 0; i < n; ++i) parts.push_back(make_cpu_backend(2));
  return parts;
}

// Every logit of a whole-prompt pass (all positions), then two sequences decoding together.
std::vector<float> run_all(Transformer& tf, const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<float> out;
  SeqChunk pre[2] = {{0, 0, a, true}, {1, 0, b, true}};
  auto l = tf.forward(pre);
  out.assign(l.begin(), l.end());
  int32_t next[2] = {test::argmax(l.data() + (a.size() - 1) * size_t(tf.vocab()), tf.vocab()),
                     test::argmax(l.data() + (a.size() + b.size() - 1) * size_t(tf.vocab()), tf.vocab())};
  int64_t pos[2] = {int64_t(a.size()), int64_t(b.size())};
  for (int step = 0; step < 4; ++step) {
    SeqChunk dec[2] = {{0, pos[0]++, {&next[0], 1}, false}, {1, pos[1]++, {&next[1], 1}, false}};
    auto d = tf.forward(dec);
    out.insert(out.end(), d.begin(), d.end());
    next[0] = test::argmax(d.data(), tf.vocab());
    next[1] = test::argmax(d.data() + tf.vocab(), tf.vocab());
  }
  return out;
}

const nlohmann::json& golden(const std::string& key) {
  static nlohmann::json g = nlohmann::json::parse(std::ifstream(test::testdata("engine/goldens.json")));
  return g.at(key);
}

}  // namespace

TEST_CASE("split backend: CPU parts give one CPU backend's logits bit for bit, in any assignment", "[engine][multi]") {
  for (const char* name : {"llama-small", "qwen3"}) {
    INFO(name);
    Loaded m = load_cpu(test::testdata(std::string("engine/") + name));
    const auto& g = golden(std::string("engine/") + name);
    const auto p0 = g.at("prompts")[0].get<std::vector<int32_t>>();
    const auto p1 = g.at("prompts")[1].get<std::vector<int32_t>>();

    auto one = make_cpu_backend(2);
    Transformer ref(m.layout, *m.weights, *one, options());
    const std::vector<float> want = run_all(ref, p0, p1);
    REQUIRE(ref.layers() == 2);

    struct Case {
      int parts;
      SplitLayout how;
    };
    const Case cases[] = {
        {2, {{0, 1}, 0, 1, -1}},     // GPU-style ranges: embed on the first, head on the last
        {2, {{1, 0}, 0, 1, -1}},     // the stream crosses three times per pass
        {3, {{1, 2}, 0, 0, -1}},     // a part with only the embedding and the head
    };
    for (const Case& c : cases) {
      INFO("parts " << c.parts << ", layers on " << c.how.layer_part[0] << "," << c.how.layer_part[1]);
      auto split = make_split_backend(cpu_parts(c.parts), c.how);
      Transformer tf(m.layout, *m.weights, *split, options());
      const std::vector<float> got = run_all(tf, p0, p1);
      REQUIRE(got.size() == want.size());
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      // Each part holds its own layers' KV only: the KV total is one model's, the rest is
      // per part (activations and scratch each), the Transformer's tables once.
      CHECK(tf.predicted().kv_cache == ref.predicted().kv_cache);
      CHECK(tf.state_bytes() == tf.predicted().allocated());
      CHECK(tf.state_bytes() > ref.state_bytes());
      CHECK(split->describe().find("split:") == 0);
    }
    // Greedy decoding on a split equals transformers' continuations.
    auto split = make_split_backend(cpu_parts(2), {{1, 0}, 1, 0, -1});
    Transformer tf(m.layout, *m.weights, *split, options());
    for (size_t i = 0; i < g.at("prompts").size(); ++i) {
      INFO("greedy prompt " << i);
      CHECK(test::greedy(tf, g.at("prompts")[i].get<std::vector<int32_t>>(), 16) ==
            g.at("continuations")[i].get<std::vector<int32_t>>());
    }
  }
}

TEST_CASE("split backend: experts on a part of their own give one CPU backend's logits bit for bit", "[engine][multi][moe]") {
  // qwen2_moe: a shared expert with its sigmoid gate and a dense layer; mixtral: plain top-2.
  const nlohmann::json goldens = nlohmann::json::parse(std::ifstream(test::testdata("engine/moe.json")));
  for (const char* name : {"qwen2_moe", "mixtral"}) {
    INFO(name);
    Loaded m = load_cpu(test::testdata(std::string("engine/") + name));
    const auto& g = goldens.at(name);
    const auto p0 = g.at("prompt").get<std::vector<int32_t>>();
    const auto ids = g.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> p1(ids.begin(), ids.begin() + 9);
    auto one = make_cpu_backend(2);
    Transformer ref(m.layout, *m.weights, *one, options());
    const std::vector<float> want = run_all(ref, p0, p1);
    const int64_t L = ref.layers();
    REQUIRE(L >= 2);
    struct Case {
      int parts;
      SplitLayout how;
      const char* what;
    };
    const Case cases[] = {
        {2, {std::vector<int>(size_t(L), 0), 0, 0, -1, 1}, "every layer on part 0, every mixture on part 1"},
        {2, {std::vector<int>(size_t(L), 1), 1, 1, -1, 0}, "the experts' part holds no layer, embedding or head"},
        {2, {{0, 1}, 0, 1, -1, 1}, "the experts' part also runs the last layer"},
    };
    for (const Case& c : cases) {
      if (c.how.layer_part.size() != size_t(L)) continue;
      INFO(c.what);
      auto split = make_split_backend(cpu_parts(c.parts), c.how);
      Transformer tf(m.layout, *m.weights, *split, options());
      const std::vector<float> got = run_all(tf, p0, p1);
      REQUIRE(got.size() == want.size());
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      CHECK(tf.state_bytes() == tf.predicted().allocated());
      CHECK(tf.predicted().kv_cache == ref.predicted().kv_cache);
      CHECK(split->describe().find("experts of every layer") != std::string::npos);
      CHECK(split->host_part_bytes() == 0);  // no GPU part: nothing is apart from it
    }
    // With the experts apart: transformers' logits and 32 greedy ids (test_engine_moe's check).
    auto split = make_split_backend(cpu_parts(2), {std::vector<int>(size_t(L), 0), 0, 0, -1, 1});
    Transformer tf(m.layout, *m.weights, *split, options());
    test::check_against_golden(tf, g);
  }
  CHECK_THROWS_WITH(make_split_backend(cpu_parts(2), {{0, 0}, 0, 0, -1, 2}), Catch::Contains("experts part"));
  CHECK_THROWS_WITH(make_split_backend(cpu_parts(3), {{0, 0}, 0, 0, -1, 1}), Catch::Contains("runs nothing"));
}

TEST_CASE("split backend: a layout that does not match the parts or the model is an error", "[engine][multi]") {
  CHECK_THROWS_WITH(make_split_backend(cpu_parts(2), {{0, 2}, 0, 1, -1}), Catch::Contains("part 2"));
  CHECK_THROWS_WITH(make_split_backend(cpu_parts(3), {{0, 1}, 0, 1, -1}), Catch::Contains("runs nothing"));
  CHECK_THROWS(make_split_backend({}, {}));
  Loaded m = load_cpu(test::testdata("engine/llama-small"));
  auto split = make_split_backend(cpu_parts(2), {{0, 1, 1}, 0, 1, -1});  // 3 layers named, the model has 2
  CHECK_THROWS_WITH(Transformer(m.layout, *m.weights, *split, options()), Catch::Contains("3 layers"));
}

namespace {

// A CPU backend that claims it cannot read host memory (only file mappings), as a GPU
// backend cannot: the Transformer must gather an untied embedding on the host for it.
class HostBlind final : public test::ForwardingBackend {
 public:
  std::string describe() const override { return "host-blind " + in->describe(); }
  bool can_read(Device d) const override { return d.kind == Device::Kind::Disk; }
  void embed(const WeightMatrix& table, float scale) override {
    ++embeds;
    in->embed(table, scale);
  }
  void write(Buf b, std::span<const float> v) override {
    ++writes;
    in->write(b, v);
  }
  int embeds = 0, writes = 0;
};


}  // namespace

TEST_CASE("an untied embedding the backend cannot read is gathered on the host, with the same logits", "[engine][multi]") {
  Loaded m = load_cpu(test::testdata("engine/llama-small"), true);
  const auto& g = golden("engine/llama-small");
  const auto p0 = g.at("prompts")[0].get<std::vector<int32_t>>();
  const auto p1 = g.at("prompts")[1].get<std::vector<int32_t>>();
  auto cpu = make_cpu_backend(2);
  Transformer ref(m.layout, *m.weights, *cpu, options());
  HostBlind blind;
  Transformer tf(m.layout, *m.weights, blind, options());
  const std::vector<float> want = run_all(ref, p0, p1), got = run_all(tf, p0, p1);
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
  CHECK(blind.embeds == 0);  // never handed the table it cannot read
  CHECK(blind.writes == 5);  // one row block per forward pass: the prefill, then 4 decode steps
  // A tied embedding is also the head, which runs on the backend: it must be readable there.
  Loaded tied = load_cpu(test::testdata("engine/llama-tied"), true);
  HostBlind blind2;
  CHECK_THROWS_WITH(Transformer(tied.layout, *tied.weights, blind2, options()), Catch::Contains("cannot read"));
}
