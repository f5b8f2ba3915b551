// A safe unpickler for the subset of pickle that torch.save writes (protocols
// 2-5, plus the protocol-0 GLOBAL opcode). It never imports or calls anything:
// GLOBAL/STACK_GLOBAL resolve only names on a fixed whitelist (collections.OrderedDict,
// torch._utils._rebuild_*, torch.*Storage, torch dtypes, torch.Size, torch.device,
// _codecs.encode, builtins set/frozenset/slice); any other name throws
// Error("pytorch.forbidden_global") naming "module.name". REDUCE of a container
// constructor (OrderedDict, set, torch.Size, ...) builds the container; REDUCE of
// a torch._utils rebuild function yields an Object that the caller interprets.
//
// Bounds: every length is checked against the bytes left before allocating;
// the value count, stack, mark stack and memo are capped; finish() rejects
// cycles and nesting deeper than kMaxDepth, so walking a result recursively is safe.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/source.hpp"

namespace nunchaku::pickle {

inline constexpr size_t kMaxDepth = 100;          // nesting of containers in one pickle
inline constexpr size_t kMaxValues = 8u << 20;    // values created by one pickle
inline constexpr size_t kMaxStack = 1u << 20;     // stack and mark-stack entries
inline constexpr uint64_t kMaxMemoIndex = 1u << 24;

enum class Kind : uint8_t {
  None, Bool, Int, BigInt, Float, String, Bytes,
  Tuple, List, Dict, Set,
  Global,        // a whitelisted name not called (dtype, storage class): s = "module.name"
  Object,        // result of calling a whitelisted function: s = callable, items = args
  PersistentId,  // BINPERSID: items[0] is the persistent id
};

// Values live in the Unpickler's arena and point at each other; they die with it.
struct Value {
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;      // Int
  double f = 0;       // Float
  std::string s;      // String (UTF-8), Bytes, BigInt (decimal), Global/Object name
  std::vector<Value*> items;  // Tuple/List/Set elements; Dict: k0, v0, k1, v1, ...
  uint64_t offset = 0;        // absolute byte offset of the opcode that made it

  bool is_int() const { return kind == Kind::Int; }
  bool is_str() const { return kind == Kind::String; }
  bool is_seq() const { return kind == Kind::Tuple || kind == Kind::List; }
};

std::string_view kind_name(Kind k);

class Unpickler {
 public:
  // Parses one pickle starting at `begin`, not reading at or past `end`.
  Unpickler(const Source& src, uint64_t begin, uint64_t end);
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  // Runs to STOP; the result is owned by this Unpickler. Call once.
  Value* load();
  // Absolute offset just past the STOP opcode (valid after load()).
  uint64_t position() const { return pos_; }
  const std::string& path() const { return src_.path(); }
  size_t value_count() const { return arena_.size(); }

 private:
  Value* make(Kind k);
  uint8_t byte();
  void read(void* dst, size_t n);
  uint64_t uint_le(size_t n);
  std::string read_string(uint64_t n);
  std::string read_line();
  uint64_t left() const { return end_ - pos_; }
  [[noreturn]] void fail(const std::string& code, const std::string& msg) const;

  void push(Value* v);
  Value* pop();
  Value* top();
  std::vector<Value*> pop_mark();
  Value* resolve_global(const std::string& module, const std::string& name);
  Value* call(Value* callable, Value* args);
  void check_depth(Value* root);

  const Source& src_;
  uint64_t pos_, end_;
  uint64_t op_ = 0;  // offset of the opcode being executed
  std::vector<uint8_t> buf_;
  uint64_t buf_start_ = 0;
  std::deque<Value> arena_;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value*> memo_;
};

}  // namespace nunchaku::pickle
