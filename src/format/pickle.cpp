#include "format/pickle.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.hpp"
#include "format/dtype.hpp"

namespace nunchaku::pickle {
namespace {

constexpr size_t kBufBytes = 64 * 1024;
constexpr size_t kMaxLine = 1024;      // protocol-0 GLOBAL lines ("module\nname\n")
constexpr uint64_t kMaxLongBytes = 64;  // LONG4 payload; longer ints are not in torch files

bool is_storage_class(std::string_view n) {
  static constexpr std::string_view kNames[] = {
      "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
      "IntStorage", "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage",
      "ComplexFloatStorage", "ComplexDoubleStorage", "UntypedStorage", "TypedStorage"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

// The whitelist. Everything torch.save emits for tensors, state dicts and plain
// Python containers; nothing that can run code.
bool allowed(const std::string& m, const std::string& n) {
  if (m == "collections" && n == "OrderedDict") return true;
  if (m == "torch._utils")
    return n == "_rebuild_tensor" || n == "_rebuild_tensor_v2" || n == "_rebuild_tensor_v3" ||
           n == "_rebuild_parameter" || n == "_rebuild_parameter_with_state";
  if (m == "torch") {
    if (n == "Size" || n == "device" || is_storage_class(n)) return true;
    return dtype_from_torch(n).has_value();
  }
  if (m == "torch.storage") return n == "UntypedStorage" || n == "TypedStorage";
  if (m == "_codecs") return n == "encode";
  if (m == "builtins" || m == "__builtin__") return n == "set" || n == "frozenset" || n == "slice";
  return false;
}

// Little-endian two's complement bytes -> decimal text (LONG1/LONG4 beyond 64 bits).
std::string bigint_decimal(std::vector<uint8_t> b) {
  bool neg = !b.empty() && (b.back() & 0x80);
  if (neg) {  // magnitude = ~b + 1
    unsigned carry = 1;
    for (auto& x : b) {
      unsigned v = static_cast<uint8_t>(~x) + carry;
      x = static_cast<uint8_t>(v);
      carry = v >> 8;
    }
  }
  std::string digits;
  while (std::any_of(b.begin(), b.end(), [](uint8_t x) { return x != 0; })) {
    unsigned rem = 0;
    for (size_t i = b.size(); i-- > 0;) {
      unsigned cur = (rem << 8) | b[i];
      b[i] = static_cast<uint8_t>(cur / 10);
      rem = cur % 10;
    }
    digits += static_cast<char>('0' + rem);
  }
  if (digits.empty()) digits = "0";
  if (neg) digits += '-';
  std::reverse(digits.begin(), digits.end());
  return digits;
}

}  // namespace

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Global: return "global";
    case Kind::Object: return "object";
    case Kind::PersistentId: return "persistent id";
  }
  return "?";
}

Unpickler::Unpickler(const Source& src, uint64_t begin, uint64_t end)
    : src_(src), pos_(begin), end_(std::max(begin, std::min(end, src.size()))) {}

void Unpickler::fail(const std::string& code, const std::string& msg) const {
  throw Error(code, msg, {.file = src_.path(), .offset = op_});
}

Value* Unpickler::make(Kind k) {
  if (arena_.size() >= kMaxValues)
    fail("pickle.too_large", "more than " + std::to_string(kMaxValues) + " values in one pickle");
  arena_.emplace_back();
  Value* v = &arena_.back();
  v->kind = k;
  v->offset = op_;
  return v;
}

void Unpickler::read(void* dst, size_t n) {
  if (n > left())
    throw Error("pickle.truncated",
                "the pickle ends early: wanted " + std::to_string(n) + " bytes, " + std::to_string(left()) + " left",
                {.file = src_.path(), .offset = pos_, .hint = "the file is truncated or not a pickle"});
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) {
      if (n >= kBufBytes) {  // large payloads bypass the buffer
        src_.read_at(pos_, out, n);
        pos_ += n;
        return;
      }
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(kBufBytes, left()));
      buf_.resize(chunk);
      src_.read_at(pos_, buf_.data(), chunk);
      buf_start_ = pos_;
    }
    size_t in_buf = static_cast<size_t>(buf_start_ + buf_.size() - pos_);
    size_t take = std::min(n, in_buf);
    std::memcpy(out, buf_.data() + (pos_ - buf_start_), take);
    out += take;
    pos_ += take;
    n -= take;
  }
}

uint8_t Unpickler::byte() {
  uint8_t b;
  read(&b, 1);
  return b;
}

uint64_t Unpickler::uint_le(size_t n) {
  uint8_t b[8] = {};
  read(b, n);
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | b[i];
  return v;
}

std::string Unpickler::read_string(uint64_t n) {
  if (n > left())
    throw Error("pickle.truncated",
                "a string of " + std::to_string(n) + " bytes but only " + std::to_string(left()) + " bytes left",
                {.file = src_.path(), .offset = op_, .hint = "the length field is corrupt or the file is truncated"});
  std::string s(static_cast<size_t>(n), '\0');
  read(s.data(), s.size());
  return s;
}

std::string Unpickler::read_line() {
  std::string s;
  for (;;) {
    char c = static_cast<char>(byte());
    if (c == '\n') return s;
    if (s.size() >= kMaxLine) fail("pickle.bad_global", "GLOBAL name longer than " + std::to_string(kMaxLine) + " bytes");
    s += c;
  }
}

void Unpickler::push(Value* v) {
  if (stack_.size() >= kMaxStack) fail("pickle.too_large", "pickle stack deeper than " + std::to_string(kMaxStack));
  stack_.push_back(v);
}

Value* Unpickler::pop() {
  size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) fail("pickle.stack_underflow", "pop from an empty pickle stack");
  Value* v = stack_.back();
  stack_.pop_back();
  return v;
}

Value* Unpickler::top() {
  size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) fail("pickle.stack_underflow", "the pickle stack is empty");
  return stack_.back();
}

std::vector<Value*> Unpickler::pop_mark() {
  if (marks_.empty()) fail("pickle.stack_underflow", "no MARK on the pickle stack");
  size_t m = marks_.back();
  marks_.pop_back();
  std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

Value* Unpickler::resolve_global(const std::string& module, const std::string& name) {
  if (!allowed(module, name))
    throw Error("pytorch.forbidden_global",
                "the pickle references '" + module + "." + name + "', which is not on the safe list; it was not executed",
                {.file = src_.path(), .offset = op_,
                 .hint = "only tensors, state dicts and plain containers can be read; re-save with "
                         "torch.save(model.state_dict()) or convert to safetensors"});
  Value* g = make(Kind::Global);
  g->s = module + "." + name;
  return g;
}

// REDUCE / NEWOBJ: build containers for constructors, an Object for torch rebuild functions.
Value* Unpickler::call(Value* callable, Value* args) {
  if (callable->kind != Kind::Global) fail("pickle.bad_call", std::string("calling a ") + std::string(kind_name(callable->kind)));
  if (args->kind != Kind::Tuple) fail("pickle.bad_call", "arguments of " + callable->s + " are not a tuple");
  const std::string& f = callable->s;
  const auto& a = args->items;
  if (f == "collections.OrderedDict") {
    Value* d = make(Kind::Dict);
    if (a.empty()) return d;
    if (a.size() != 1 || !(a[0]->is_seq() || a[0]->kind == Kind::Dict)) fail("pickle.bad_call", "OrderedDict() takes one list of pairs");
    if (a[0]->kind == Kind::Dict) {
      d->items = a[0]->items;
      return d;
    }
    for (Value* p : a[0]->items) {
      if (!p->is_seq() || p->items.size() != 2) fail("pickle.bad_call", "OrderedDict() item is not a (key, value) pair");
      d->items.push_back(p->items[0]);
      d->items.push_back(p->items[1]);
    }
    return d;
  }
  if (f == "builtins.set" || f == "builtins.frozenset" || f == "__builtin__.set" || f == "__builtin__.frozenset") {
    Value* s = make(Kind::Set);
    if (a.size() == 1 && (a[0]->is_seq() || a[0]->kind == Kind::Set)) s->items = a[0]->items;
    else if (!a.empty()) fail("pickle.bad_call", f + "() takes one sequence");
    return s;
  }
  if (f == "torch.Size") {
    if (a.size() != 1 || !a[0]->is_seq()) fail("pickle.bad_call", "torch.Size() takes one tuple");
    Value* t = make(Kind::Tuple);
    t->items = a[0]->items;
    return t;
  }
  if (f == "torch.device") {
    if (a.empty() || a.size() > 2 || !a[0]->is_str()) fail("pickle.bad_call", "torch.device() takes (type[, index])");
    Value* s = make(Kind::String);
    s->s = a[0]->s;
    if (a.size() == 2 && a[1]->is_int()) s->s += ":" + std::to_string(a[1]->i);
    return s;
  }
  if (f == "_codecs.encode") {
    // protocol 2 writes bytes as _codecs.encode(str, 'latin1'): each code point < 256 is a byte.
    if (a.empty() || a.size() > 2 || !a[0]->is_str()) fail("pickle.bad_call", "_codecs.encode() takes (str[, encoding])");
    Value* b = make(Kind::Bytes);
    bool latin1 = a.size() == 2 && a[1]->is_str() && (a[1]->s == "latin1" || a[1]->s == "latin-1");
    if (!latin1) {
      b->s = a[0]->s;
      return b;
    }
    const std::string& u = a[0]->s;
    for (size_t i = 0; i < u.size(); ++i) {
      auto c = static_cast<uint8_t>(u[i]);
      if (c < 0x80) b->s += static_cast<char>(c);
      else if ((c & 0xE0) == 0xC0 && i + 1 < u.size() && c <= 0xC3) b->s += static_cast<char>(((c & 0x1F) << 6) | (u[++i] & 0x3F));
      else fail("pickle.bad_call", "_codecs.encode(): not a latin-1 string");
    }
    return b;
  }
  if (f.starts_with("torch._utils._rebuild_") || f == "builtins.slice" || f == "__builtin__.slice") {
    Value* o = make(Kind::Object);
    o->s = f;
    o->items = a;
    return o;
  }
  // dtypes and storage classes are names, not functions torch.save calls.
  fail("pickle.bad_call", "'" + f + "' cannot be called");
}

// Rejects cycles and nesting deeper than kMaxDepth with one O(values + edges)
// pass, so callers may walk the result recursively.
void Unpickler::check_depth(Value* root) {
  std::unordered_map<const Value*, uint32_t> height;  // finished nodes
  struct Frame { Value* v; size_t next; };
  std::vector<Frame> path{{root, 0}};
  std::unordered_map<const Value*, bool> on_path{{root, true}};
  while (!path.empty()) {
    Frame& fr = path.back();
    if (fr.next < fr.v->items.size()) {
      Value* c = fr.v->items[fr.next++];
      if (c->items.empty() || height.count(c)) continue;
      if (on_path.count(c))
        throw Error("pickle.too_deep", "the pickle contains a reference cycle",
                    {.file = src_.path(), .offset = c->offset});
      if (path.size() >= kMaxDepth)
        throw Error("pickle.too_deep", "containers nested more than " + std::to_string(kMaxDepth) + " deep",
                    {.file = src_.path(), .offset = c->offset});
      on_path[c] = true;
      path.push_back({c, 0});
      continue;
    }
    height[fr.v] = 1;
    on_path.erase(fr.v);
    path.pop_back();
  }
}

Value* Unpickler::load() {
  for (;;) {
    op_ = pos_;
    const uint8_t op = byte();
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t p = byte();
        if (p > 5) fail("pickle.bad_protocol", "pickle protocol " + std::to_string(p) + " (at most 5 is known)");
        break;
      }
      case 0x95: {  // FRAME: a length hint only
        uint64_t n = uint_le(8);
        if (n > left()) fail("pickle.truncated", "FRAME of " + std::to_string(n) + " bytes past the end of the pickle");
        break;
      }
      case '.': {  // STOP
        Value* r = pop();
        check_depth(r);
        return r;
      }
      case '(': marks_.push_back(stack_.size());
        if (marks_.size() > kMaxStack) fail("pickle.too_large", "too many MARKs");
        break;
      case '0': pop(); break;                      // POP
      case '1': pop_mark(); break;                 // POP_MARK
      case '2': push(top()); break;                // DUP
      case 'N': push(make(Kind::None)); break;
      case 0x88: case 0x89: {                      // NEWTRUE / NEWFALSE
        Value* v = make(Kind::Bool);
        v->b = op == 0x88;
        push(v);
        break;
      }
      case 'K': case 'M': case 'J': {              // BININT1 / BININT2 / BININT
        Value* v = make(Kind::Int);
        if (op == 'K') v->i = byte();
        else if (op == 'M') v->i = static_cast<int64_t>(uint_le(2));
        else v->i = static_cast<int32_t>(static_cast<uint32_t>(uint_le(4)));
        push(v);
        break;
      }
      case 0x8a: case 0x8b: {                      // LONG1 / LONG4
        uint64_t n = op == 0x8a ? byte() : uint_le(4);
        if (n > kMaxLongBytes) fail("pickle.too_large", "an integer of " + std::to_string(n) + " bytes");
        std::vector<uint8_t> b(n);
        read(b.data(), b.size());
        Value* v;
        if (n <= 8) {
          v = make(Kind::Int);
          uint64_t u = 0;
          for (size_t i = n; i-- > 0;) u = (u << 8) | b[i];
          if (n > 0 && n < 8 && (b[n - 1] & 0x80)) u |= ~uint64_t{0} << (8 * n);  // sign-extend
          v->i = static_cast<int64_t>(u);
        } else {
          v = make(Kind::BigInt);
          v->s = bigint_decimal(std::move(b));
        }
        push(v);
        break;
      }
      case 'G': {                                   // BINFLOAT, big-endian
        uint8_t b[8];
        read(b, 8);
        uint64_t u = 0;
        for (uint8_t x : b) u = (u << 8) | x;
        Value* v = make(Kind::Float);
        v->f = std::bit_cast<double>(u);
        push(v);
        break;
      }
      case 'X': case 0x8c: case 0x8d:               // BINUNICODE / SHORT_BINUNICODE / BINUNICODE8
      case 'U': case 'T':                           // SHORT_BINSTRING / BINSTRING (python 2 str)
      case 'C': case 'B': case 0x8e: case 0x96: {   // SHORT_BINBYTES / BINBYTES / BINBYTES8 / BYTEARRAY8
        uint64_t n;
        if (op == 0x8c || op == 'U' || op == 'C') n = byte();
        else if (op == 0x8d || op == 0x8e || op == 0x96) n = uint_le(8);
        else n = uint_le(4);
        if (op == 'T' && n > 0x7fffffff) fail("pickle.bad_length", "negative BINSTRING length");
        bool text = op == 'X' || op == 0x8c || op == 0x8d || op == 'U' || op == 'T';
        Value* v = make(text ? Kind::String : Kind::Bytes);
        v->s = read_string(n);
        push(v);
        break;
      }
      case ')': push(make(Kind::Tuple)); break;
      case ']': push(make(Kind::List)); break;
      case '}': push(make(Kind::Dict)); break;
      case 0x8f: push(make(Kind::Set)); break;      // EMPTY_SET
      case 't': {
        Value* t = make(Kind::Tuple);
        t->items = pop_mark();
        push(t);
        break;
      }
      case 0x85: case 0x86: case 0x87: {            // TUPLE1..3
        size_t n = op - 0x84u;
        Value* t = make(Kind::Tuple);
        t->items.resize(n);
        for (size_t i = n; i-- > 0;) t->items[i] = pop();
        push(t);
        break;
      }
      case 0x91: {                                  // FROZENSET
        Value* s = make(Kind::Set);
        s->items = pop_mark();
        push(s);
        break;
      }
      case 'a': {                                   // APPEND
        Value* x = pop();
        Value* l = top();
        if (l->kind != Kind::List) fail("pickle.bad_type", "APPEND to a " + std::string(kind_name(l->kind)));
        l->items.push_back(x);
        break;
      }
      case 'e': case 0x90: {                        // APPENDS / ADDITEMS
        auto xs = pop_mark();
        Value* l = top();
        if (l->kind != (op == 'e' ? Kind::List : Kind::Set))
          fail("pickle.bad_type", std::string(op == 'e' ? "APPENDS" : "ADDITEMS") + " to a " + std::string(kind_name(l->kind)));
        l->items.insert(l->items.end(), xs.begin(), xs.end());
        break;
      }
      case 's': {                                   // SETITEM
        Value* v = pop();
        Value* k = pop();
        Value* d = top();
        if (d->kind != Kind::Dict) fail("pickle.bad_type", "SETITEM on a " + std::string(kind_name(d->kind)));
        d->items.push_back(k);
        d->items.push_back(v);
        break;
      }
      case 'u': {                                   // SETITEMS
        auto kv = pop_mark();
        if (kv.size() % 2) fail("pickle.bad_type", "SETITEMS with an odd number of items");
        Value* d = top();
        if (d->kind != Kind::Dict) fail("pickle.bad_type", "SETITEMS on a " + std::string(kind_name(d->kind)));
        d->items.insert(d->items.end(), kv.begin(), kv.end());
        break;
      }
      case 'q': case 'r': case 0x94: {              // BINPUT / LONG_BINPUT / MEMOIZE
        uint64_t idx = op == 'q' ? byte() : op == 'r' ? uint_le(4) : memo_.size();
        if (idx >= kMaxMemoIndex) fail("pickle.bad_memo", "memo index " + std::to_string(idx) + " is too large");
        memo_[idx] = top();
        break;
      }
      case 'h': case 'j': {                         // BINGET / LONG_BINGET
        uint64_t idx = op == 'h' ? byte() : uint_le(4);
        auto it = memo_.find(idx);
        if (it == memo_.end()) fail("pickle.bad_memo", "memo index " + std::to_string(idx) + " was never stored");
        push(it->second);
        break;
      }
      case 'c': {                                   // GLOBAL "module\nname\n"
        std::string m = read_line();
        std::string n = read_line();
        push(resolve_global(m, n));
        break;
      }
      case 0x93: {                                  // STACK_GLOBAL
        Value* n = pop();
        Value* m = pop();
        if (!m->is_str() || !n->is_str()) fail("pickle.bad_global", "STACK_GLOBAL needs two strings");
        push(resolve_global(m->s, n->s));
        break;
      }
      case 'R': case 0x81: {                        // REDUCE / NEWOBJ
        Value* args = pop();
        Value* f = pop();
        push(call(f, args));
        break;
      }
      case 0x92: {                                  // NEWOBJ_EX (cls, args, kwargs)
        Value* kw = pop();
        Value* args = pop();
        Value* f = pop();
        if (kw->kind != Kind::Dict || !kw->items.empty()) fail("pickle.bad_call", "NEWOBJ_EX with keyword arguments");
        push(call(f, args));
        break;
      }
      case 'b': {                                   // BUILD: state (e.g. a state dict's _metadata) is dropped
        pop();
        Value* obj = top();
        if (obj->kind != Kind::Dict && obj->kind != Kind::Object)
          fail("pickle.bad_type", "BUILD on a " + std::string(kind_name(obj->kind)));
        break;
      }
      case 'Q': {                                   // BINPERSID
        Value* p = make(Kind::PersistentId);
        p->items.push_back(pop());
        push(p);
        break;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail("pickle.bad_opcode", std::string("unsupported pickle opcode ") + hex);
      }
    }
  }
}

}  // namespace nunchaku::pickle
