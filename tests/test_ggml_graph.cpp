// ggml-alloc's planner as memory/ggml_graph.cpp replays it, on small graphs worked out by hand
// (ggml/src/ggml-alloc.c: inputs first, best fit among free blocks else the end, in place of a
// source with one user, freed after the last user, 32-byte alignment). The plans of llama.cpp's
// own graphs are checked against its logged buffers in test_estimate_measured_llamacpp.cpp.
#include <catch2/catch.hpp>

#include "memory/ggml_graph.hpp"
#include "memory/llamacpp_graph.hpp"

using namespace nunchaku::ggml_sim;

namespace {
// A tensor of n f32 values (4·n bytes).
Shape f32s(int64_t n) { return {n, 1, 1, 1}; }
}  // namespace

TEST_CASE("ggml plan: best fit among the free blocks, else the end", "[estimate][ggml-plan]") {
  Graph g;
  const int x = g.input(Type::F32, f32s(8), "x");                      // 32 B at 0, alive to the end
  const int n1 = g.op(Kind::Compute, Type::F32, f32s(24), {x});        // 96 B at 32..128
  const int n2 = g.op(Kind::Compute, Type::F32, f32s(16), {x});        // 64 B at 128..192
  const int n3 = g.op(Kind::Compute, Type::F32, f32s(8), {n1});        // 32 B at 192..224; n1 freed: a 96 B hole
  const int n4 = g.op(Kind::Compute, Type::F32, f32s(32), {n2, n3, x});  // 128 B: not in the hole, 224..352
  g.expand(n4);
  const Plan p = plan(g);
  CHECK(p.size == 352);
  CHECK(p.peak_node == n4);
  // Alive then: x, n2, n3 and n4; 32..128 is the hole.
  REQUIRE(p.at_peak.size() == 4);
  uint64_t alive = 0;
  for (const auto& t : p.at_peak) alive += t.bytes;
  CHECK(alive == 32 + 64 + 32 + 128);

  // A 96-byte node after n3 goes in the hole (the smallest block that fits), not at the end.
  Graph h;
  const int y = h.input(Type::F32, f32s(8), "x");
  const int m1 = h.op(Kind::Compute, Type::F32, f32s(24), {y});
  const int m2 = h.op(Kind::Compute, Type::F32, f32s(16), {y});
  const int m3 = h.op(Kind::Compute, Type::F32, f32s(8), {m1});
  const int m4 = h.op(Kind::Compute, Type::F32, f32s(24), {m3});
  h.expand(h.op(Kind::Compute, Type::F32, f32s(8), {m2, m4, y}));  // 32 B: m3 freed at 192..224
  CHECK(plan(h).size == 224);
}

TEST_CASE("ggml plan: in place of a source with one user, not of one with two", "[estimate][ggml-plan]") {
  Graph g;
  const int x = g.input(Type::F32, f32s(64), "x");                 // 256 B at 0
  const int a = g.op(Kind::Compute, Type::F32, f32s(64), {x});     // 256 B at 256
  const int b = g.op(Kind::Inplace, Type::F32, f32s(64), {a});     // a's only user: a's memory
  const int c = g.op(Kind::Inplace, Type::F32, f32s(64), {b});     // b has two users (c, d): new memory at 512
  const int d = g.op(Kind::Compute, Type::F32, f32s(64), {b, c, x});  // x, b and c alive: 768..1024
  g.expand(d);
  CHECK(plan(g).size == 1024);

  // The same with c's source used once: c takes b's memory, d goes where c went before.
  Graph h;
  const int x2 = h.input(Type::F32, f32s(64), "x");
  const int a2 = h.op(Kind::Compute, Type::F32, f32s(64), {x2});
  const int b2 = h.op(Kind::Inplace, Type::F32, f32s(64), {a2});
  const int c2 = h.op(Kind::Inplace, Type::F32, f32s(64), {b2});
  const int d2 = h.op(Kind::Compute, Type::F32, f32s(64), {c2, x2});
  h.expand(d2);
  CHECK(plan(h).size == 768);

  // A different shape is not written in place, whatever the op allows.
  Graph k;
  const int x3 = k.input(Type::F32, f32s(64), "x");
  const int a3 = k.op(Kind::Inplace, Type::F32, {32, 2, 1, 1}, {x3});  // new memory: 256..512; x freed
  k.expand(k.op(Kind::Compute, Type::F32, f32s(8), {a3}));             // in x's place: 0..32
  CHECK(plan(k).size == 512);  // in place of x it would have been 288
}

TEST_CASE("ggml plan: a view keeps its source alive until the view's last user", "[estimate][ggml-plan]") {
  Graph g;
  const int x = g.input(Type::F32, f32s(8), "x");                     // 0..32
  const int a = g.op(Kind::Compute, Type::F32, f32s(64), {x});        // 32..288
  const int v = g.view(a, f32s(16));                                  // no memory
  const int b = g.op(Kind::Compute, Type::F32, f32s(16), {x});        // 288..352
  const int c = g.op(Kind::Compute, Type::F32, f32s(64), {b, v});     // a still alive (v): 352..608
  g.expand(c);
  CHECK(plan(g).size == 608);
  // Without the view, a is freed after its last user b and c takes its place.
  Graph h;
  const int x2 = h.input(Type::F32, f32s(8), "x");
  const int a2 = h.op(Kind::Compute, Type::F32, f32s(64), {x2});
  const int b2 = h.op(Kind::Compute, Type::F32, f32s(16), {a2});
  h.expand(h.op(Kind::Compute, Type::F32, f32s(64), {b2}));
  CHECK(plan(h).size == 352);
}

TEST_CASE("ggml plan: sizes are 32-byte aligned, externals and outputs are never freed", "[estimate][ggml-plan]") {
  Graph g;
  const int w = g.external({1000, 1000, 1, 1});                       // a weight: no memory here
  const int x = g.input(Type::I32, f32s(3), "ids");                   // 12 B -> 0..32
  const int a = g.op(Kind::Compute, Type::F32, f32s(5), {w, x});      // 20 B -> 32..64; ids freed
  g.set_output(a);
  const int b = g.op(Kind::Compute, Type::F32, f32s(8), {a});         // in the ids' place, 0..32; a is an output: kept
  const int c = g.op(Kind::Inplace, Type::F32, f32s(8), {b});         // in place of b
  g.expand(g.op(Kind::Compute, Type::F16, f32s(32), {c}));            // 64 B: 64..128 (c alive while it runs)
  CHECK(plan(g).size == 128);
  CHECK(g.leafs().size() == 2);  // the weight and the ids, discovered depth first
}

TEST_CASE("llama.cpp graph: dimensions no model has are not rebuilt (the estimate keeps its formula)", "[estimate][ggml-plan]") {
  using nunchaku::llamacpp_graph::build;
  using nunchaku::llamacpp_graph::Dims;
  Dims d;
  d.u = 512, d.n_kv = 4096, d.h = 256, d.V = 1000, d.layers = 2, d.a = 4, d.a_kv = 2, d.d_k = d.d_v = 64, d.I = 512;
  REQUIRE(build("llama", d).has_value());
  CHECK_FALSE(build("bert", d).has_value());  // not an architecture rebuilt here
  Dims e = d;
  e.E = 8, e.k = 0, e.I_exp = 128;  // experts, none used per token
  CHECK_FALSE(build("llama", e).has_value());
  e.k = 9;  // more used than there are
  CHECK_FALSE(build("llama", e).has_value());
  e.k = 2;
  CHECK(build("llama", e).has_value());
  e.groups = 3, e.groups_used = 1;  // 8 experts do not split into 3 groups (llama.cpp asserts)
  CHECK_FALSE(build("llama", e).has_value());
  e.groups = 4, e.groups_used = 4;  // every group used: llama.cpp asserts fewer
  CHECK_FALSE(build("llama", e).has_value());
  e.groups = 8, e.groups_used = 2;  // one expert per group: no two best to sum
  CHECK_FALSE(build("llama", e).has_value());
  e.groups = 4, e.groups_used = 2;
  CHECK(build("llama", e).has_value());
  Dims f = d;
  f.layers = 1 << 30;  // a header's layer count no graph is built for
  CHECK_FALSE(build("llama", f).has_value());
  f = d;
  f.a_kv = 0;  // no KV heads
  CHECK_FALSE(build("llama", f).has_value());
  f = d;
  f.n_stream = 3;  // 512 tokens do not split into 3 sequences (llama.cpp rounds; the estimate does before)
  CHECK_FALSE(build("llama", f).has_value());
  f = d;
  f.moe_layer.assign(5, true);  // a per-layer list of the wrong length
  CHECK_FALSE(build("llama", f).has_value());
}
