// A stand-in for the graph llama.cpp reserves, and ggml-alloc's plan for it.
//
// ggml-alloc (ggml/src/ggml-alloc.c at llama-cpp-python 0.3.36) places every tensor of a
// graph in one buffer: the graph inputs first, then each node in order, in its parent's memory
// where the op allows it (and the parent has no other user), else in the smallest free block
// that fits, else at the end; a tensor is freed after its last user. The buffer is the highest
// end reached. The holes that order leaves are what a formula of the tensors alive at the peak
// misses (docs/measured_llamacpp.md), so the estimate builds the graph and replays the plan.
//
// Only what the plan depends on is kept: sizes, shapes and types (a node reuses its parent's
// memory only when they match), sources, views, and which tensors live in other buffers
// (weights, the KV cache). Node order is ggml's: sources left to right, depth first.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace nunchaku::ggml_sim {

// Element types by their size: what matters here is the bytes and whether two layouts match.
enum class Type : uint8_t { F32, F16, I32, I64 };

// What the planner needs of an op: whether it may write over its source (ggml_op_can_inplace).
enum class Kind : uint8_t {
  Leaf,     // a graph input or constant (GGML_OP_NONE)
  View,     // reshape, view, permute, transpose: no memory of its own
  Inplace,  // ADD, MUL, SCALE, RMS_NORM, ROPE, SOFT_MAX, UNARY, CLAMP, ...
  Compute,  // every other op (MUL_MAT, GET_ROWS, FLASH_ATTN_EXT, GLU, CPY, CONT, ...)
};

using Shape = std::array<int64_t, 4>;

struct Tensor {
  Kind kind = Kind::Compute;
  Type type = Type::F32;
  Shape ne{1, 1, 1, 1};
  bool contiguous = true;
  bool external = false;  // in another buffer (weights, KV cache): never planned
  bool input = false, output = false;
  int view_src = -1;      // the tensor a view (or a write into a cache) aliases
  std::vector<int> src;
  std::string name;
};

class Graph {
 public:
  // Tensors outside the plan: weights and caches (their views are external too).
  int external(Shape ne, Type t = Type::F16, std::string name = {});
  // A graph input llama.cpp fills before each compute (tokens, positions, masks, row ids).
  int input(Type t, Shape ne, std::string name);
  // A node computed from its sources into new memory, or in place of one (Kind::Inplace).
  int op(Kind k, Type t, Shape ne, std::vector<int> src, std::string name = {});
  // A view of `of` with another shape (reshape and view at offset 0 keep it contiguous).
  int view(int of, Shape ne, bool contiguous = true, std::string name = {});
  // A node whose result is written into another tensor (ggml_cpy, ggml_set_rows into a cache).
  int write_into(int dst, std::vector<int> src, std::string name = {});
  void set_output(int t) { t_[size_t(t)].output = true; }
  // ggml_build_forward_expand: the tensor and its unvisited sources, depth first.
  void expand(int t);

  const Tensor& operator[](int i) const { return t_[size_t(i)]; }
  Tensor& operator[](int i) { return t_[size_t(i)]; }
  const std::vector<int>& nodes() const { return nodes_; }
  const std::vector<int>& leafs() const { return leafs_; }
  uint64_t bytes(int i) const;

 private:
  int leaf(Type t, Shape ne, std::string name, bool external, bool input);
  std::vector<Tensor> t_;
  std::vector<int> nodes_, leafs_;
  std::vector<char> visited_;
};

// One tensor's place in the plan, for a listing.
struct Placed {
  int tensor = -1;
  uint64_t offset = 0, bytes = 0;
};

struct Plan {
  uint64_t size = 0;           // the buffer: the highest end any tensor reached (32-byte aligned)
  int peak_node = -1;          // the node whose allocation first reached it
  std::vector<Placed> at_peak; // what was alive then (the rest below `size` is holes)
};

// ggml-alloc's plan of the graph in one buffer with 32-byte alignment (the CPU buffer type's).
Plan plan(const Graph& g);


}  // namespace nunchaku::ggml_sim
