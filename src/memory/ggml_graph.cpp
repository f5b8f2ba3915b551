// The graph stand-in and ggml-alloc's planner (ggml/src/ggml-alloc.c, llama-cpp-python 0.3.36),
// checked against llama.cpp's logged compute buffers by tests/test_llamacpp_graph.cpp.
#include "memory/ggml_graph.hpp"


#include <limits>
#include <stdexcept>

namespace nunchaku::ggml_sim {
namespace {

constexpr uint64_t kAlign = 32;  // TENSOR_ALIGNMENT of the CPU buffer type
uint64_t padded(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

uint64_t elem_bytes(Type t) {
  switch (t) {
    case Type::F32:
    case Type::I32: return 4;
    case Type::F16: return 2;
    case Type::I64: return 8;
  }
  return 4;
}

// Free blocks by offset; the last is the open end of the buffer.
class FreeList {
 public:
  uint64_t top = 0;

  uint64_t take(uint64_t size) {
    size = padded(size);
    // The smallest block that fits (the later of equals), else the end.
    size_t best = blocks_.size() - 1;
    uint64_t best_size = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i + 1 < blocks_.size(); ++i)
      if (blocks_[i].size >= size && blocks_[i].size <= best_size) best = i, best_size = blocks_[i].size;
    Block& b = blocks_[best];
    const uint64_t off = b.off;
    b.off += size;
    b.size -= size;
    if (b.size == 0) blocks_.erase(blocks_.begin() + std::ptrdiff_t(best));
    top = std::max(top, off + size);
    return off;
  }

  void give(uint64_t off, uint64_t size) {
    size = padded(size);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Block& b = blocks_[i];
      if (b.off + b.size == off) {  // after this block: grow it, maybe into the next
        b.size += size;
        if (i + 1 < blocks_.size() && b.off + b.size == blocks_[i + 1].off) {
          b.size += blocks_[i + 1].size;
          blocks_.erase(blocks_.begin() + std::ptrdiff_t(i + 1));
        }
        return;
      }
      if (off + size == b.off) {  // before it: grow it down, maybe into the previous
        b.off = off;
        b.size += size;
        if (i > 0 && blocks_[i - 1].off + blocks_[i - 1].size == b.off) {
          blocks_[i - 1].size += b.size;
          blocks_.erase(blocks_.begin() + std::ptrdiff_t(i));
        }
        return;
      }
    }
    size_t j = 0;
    while (j < blocks_.size() && blocks_[j].off < off) ++j;
    blocks_.insert(blocks_.begin() + std::ptrdiff_t(j), Block{off, size});
  }

 private:
  struct Block {
    uint64_t off, size;
  };
  std::vector<Block> blocks_{Block{0, uint64_t(1) << 62}};
};

class Planner {
 public:
  explicit Planner(const Graph& g, size_t n) : g_(g), st_(n) {}

  Plan run() {
    for (int l : g_.leafs()) allocate(l);
    for (int n : g_.nodes()) {
      const Tensor& t = g_[n];
      if (t.view_src >= 0 && t.kind != Kind::Leaf) ++st_[size_t(t.view_src)].views;
      if (t.input) allocate(n);
      for (int s : t.src) {
        ++st_[size_t(s)].users;
        if (g_[s].input) allocate(s);
      }
    }
    for (int n : g_.nodes()) {
      step_ = n;
      for (int s : g_[n].src) allocate(s);
      allocate(n);
      for (int s : g_[n].src) done_with(s);
    }
    plan_.size = free_.top;
    return plan_;
  }

 private:
  struct State {
    bool live = false;
    uint64_t off = 0;
    int users = 0, views = 0;
  };

  bool same_layout(const Tensor& a, const Tensor& b) const { return a.type == b.type && a.ne == b.ne && b.contiguous && a.contiguous; }

  void placed(int t, uint64_t off) {
    st_[size_t(t)].off = off;
    live_.push_back(t);
    const uint64_t end = off + padded(g_.bytes(t));
    if (end > plan_.size) {
      plan_.size = end;
      plan_.peak_node = step_;
      plan_.at_peak.clear();
      for (int x : live_) plan_.at_peak.push_back({x, st_[size_t(x)].off, g_.bytes(x)});
    }
  }

  void forget(int t) {
    for (size_t i = 0; i < live_.size(); ++i)
      if (live_[i] == t) {
        live_.erase(live_.begin() + std::ptrdiff_t(i));
        return;
      }
  }

  // In place of a source that is alive, owned here, not an output, of the same layout and used
  // by this node alone (a view's memory is never reused: views are not placed).
  bool in_place(int n) {
    const Tensor& t = g_[n];
    if (t.kind != Kind::Inplace) return false;
    for (int p : t.src) {
      State& ps = st_[size_t(p)];
      const Tensor& pt = g_[p];
      if (!ps.live || pt.output || !same_layout(t, pt) || ps.users != 1 || ps.views != 0) continue;
      ps.live = false;
      forget(p);
      placed(n, ps.off);
      return true;
    }
    return false;
  }

  void allocate(int n) {
    const Tensor& t = g_[n];
    State& s = st_[size_t(n)];
    if (t.external || s.live || t.view_src >= 0 || t.kind == Kind::View) return;
    s.live = true;
    if (in_place(n)) return;
    placed(n, free_.take(g_.bytes(n)));
  }

  void release(int n) {
    if (g_[n].output) return;
    State& s = st_[size_t(n)];
    free_.give(s.off, g_.bytes(n));
    s.live = false;
    forget(n);
  }

  // After a node: a source with no user or view left is freed (a view frees what it aliases
  // once that has no user or view left).
  void done_with(int p) {
    State& ps = st_[size_t(p)];
    --ps.users;
    if (ps.users > 0 || ps.views > 0) return;
    const int vsrc = g_[p].view_src;
    if (vsrc >= 0) {
      State& vs = st_[size_t(vsrc)];
      --vs.views;
      if (vs.views == 0 && vs.users == 0 && vs.live) release(vsrc);
    } else if (ps.live) {
      release(p);
    }
  }

  const Graph& g_;
  std::vector<State> st_;
  FreeList free_;
  std::vector<int> live_;
  Plan plan_;
  int step_ = -1;
};

}  // namespace

uint64_t Graph::bytes(int i) const {
  const Tensor& t = t_[size_t(i)];
  uint64_t n = elem_bytes(t.type);
  for (int64_t d : t.ne) n *= uint64_t(std::max<int64_t>(d, 0));
  return n;
}

int Graph::leaf(Type t, Shape ne, std::string name, bool external, bool input) {
  Tensor x;
  x.kind = Kind::Leaf;
  x.type = t;
  x.ne = ne;
  x.external = external;
  x.input = input;
  x.name = std::move(name);
  t_.push_back(std::move(x));
  return int(t_.size()) - 1;
}

int Graph::external(Shape ne, Type t, std::string name) { return leaf(t, ne, std::move(name), true, false); }

int Graph::input(Type t, Shape ne, std::string name) { return leaf(t, ne, std::move(name), false, true); }

int Graph::op(Kind k, Type t, Shape ne, std::vector<int> src, std::string name) {
  Tensor x;
  x.kind = k;
  x.type = t;
  x.ne = ne;
  x.src = std::move(src);
  x.name = std::move(name);
  t_.push_back(std::move(x));
  return int(t_.size()) - 1;
}

int Graph::view(int of, Shape ne, bool contiguous, std::string name) {
  Tensor x;
  const Tensor& o = t_[size_t(of)];
  x.kind = Kind::View;
  x.type = o.type;
  x.ne = ne;
  x.contiguous = contiguous;
  x.external = o.external;
  x.view_src = o.view_src >= 0 ? o.view_src : of;  // ggml keeps the root of a view chain
  x.src = {of};
  x.name = std::move(name);
  t_.push_back(std::move(x));
  return int(t_.size()) - 1;
}

int Graph::write_into(int dst, std::vector<int> src, std::string name) {
  const Tensor& d = t_[size_t(dst)];
  Tensor x;
  x.kind = Kind::Compute;
  x.type = d.type;
  x.ne = d.ne;
  x.external = d.external;
  x.view_src = d.view_src >= 0 ? d.view_src : dst;
  x.src = std::move(src);
  x.name = std::move(name);
  t_.push_back(std::move(x));
  return int(t_.size()) - 1;
}

void Graph::expand(int root) {
  visited_.resize(t_.size(), 0);
  // Depth first, sources left to right, each tensor listed after its sources (iterative: a
  // graph of thousands of nodes chains deeper than a thread's stack should be asked to).
  std::vector<std::pair<int, size_t>> stack;
  if (visited_[size_t(root)]) return;
  visited_[size_t(root)] = 1;
  stack.push_back({root, 0});
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    const Tensor& t = t_[size_t(n)];
    if (next < t.src.size()) {
      const int s = t.src[next++];
      if (s < 0 || size_t(s) >= t_.size()) throw std::logic_error("ggml_sim: a source out of range");
      if (!visited_[size_t(s)]) {
        visited_[size_t(s)] = 1;
        stack.push_back({s, 0});
      }
      continue;
    }
    (t.kind == Kind::Leaf ? leafs_ : nodes_).push_back(n);
    stack.pop_back();
  }
}

Plan plan(const Graph& g) {
  size_t n = 0;
  for (int i : g.nodes()) n = std::max(n, size_t(i) + 1);
  for (int i : g.leafs()) n = std::max(n, size_t(i) + 1);
  for (int i : g.nodes())
    for (int s : g[i].src) n = std::max(n, size_t(s) + 1);
  for (int i : g.nodes())
    if (g[i].view_src >= 0) n = std::max(n, size_t(g[i].view_src) + 1);
  return Planner(g, n).run();
}

}  // namespace nunchaku::ggml_sim
