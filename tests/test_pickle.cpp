// The safe unpickler on hand-written opcode strings. Expected values are the
// ones Python's pickle.loads gives for the same bytes (checked by hand with
// pickletools.dis); each error test breaks one rule.
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "format/pickle.hpp"
#include "core/source.hpp"

using namespace nunchaku;
using pickle::Kind;
using pickle::Value;

namespace {

struct Loaded {
  explicit Loaded(const std::string& bytes)
      : src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "mem.pkl"),
        up(src, 0, src.size()),
        root(up.load()) {}
  MemorySource src;
  pickle::Unpickler up;
  const Value* root;
};

std::string code_of(const std::string& bytes) {
  try {
    Loaded l(bytes);
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == "mem.pkl");
    return e.code();
  }
  return "no error";
}

// A string literal with embedded NUL bytes, all of it.
template <size_t N>
std::string B(const char (&s)[N]) { return std::string(s, N - 1); }

std::string u32(uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; }

}  // namespace

TEST_CASE("pickle: scalars", "[pickle]") {
  // pickle.dumps((None, True, False, 255, 1000, -2, 2**40, -(2**40), 1.5, 'héllo'), 2)
  std::string b = B("\x80\x02(N\x88\x89K\xffM\xe8\x03J\xfe\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01"
                  "\x8a\x06\x00\x00\x00\x00\x00\xff"
                  "G?\xf8\x00\x00\x00\x00\x00\x00X\x06\x00\x00\x00h\xc3\xa9llotq\x00.");
  Loaded l(b);
  REQUIRE(l.root->kind == Kind::Tuple);
  const auto& it = l.root->items;
  REQUIRE(it.size() == 10);
  CHECK(it[0]->kind == Kind::None);
  CHECK((it[1]->kind == Kind::Bool && it[1]->b));
  CHECK((it[2]->kind == Kind::Bool && !it[2]->b));
  CHECK(it[3]->i == 255);
  CHECK(it[4]->i == 1000);
  CHECK(it[5]->i == -2);
  CHECK(it[6]->i == (int64_t{1} << 40));
  CHECK(it[7]->i == -(int64_t{1} << 40));
  CHECK(it[8]->f == 1.5);
  CHECK(it[9]->s == "h\xc3\xa9llo");
  CHECK(l.up.position() == b.size());
}

TEST_CASE("pickle: torch's legacy magic number is a big int", "[pickle]") {
  // pickle.dumps(0x1950a86a20f9469cfc6c, 2), the first pickle of every legacy torch file
  Loaded l(B("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."));
  CHECK(l.root->kind == Kind::BigInt);
  CHECK(l.root->s == "119547037146038801333356");
  // -(2**70): LONG1 with 9 bytes
  Loaded n(B("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0."));
  CHECK(n.root->s == "-1180591620717411303424");
}

TEST_CASE("pickle: containers, memo and whitelisted constructors", "[pickle]") {
  // pickle.dumps(collections.OrderedDict([('a', [1, 2]), ('b', {3})]), 2) written by hand:
  // OrderedDict() then SETITEMS; the list is fetched back from the memo for 'c'.
  std::string b = B("\x80\x02\x63\x63ollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00\x61]q\x02(K\x01K\x02"
                  "eX\x01\x00\x00\x00\x62\x63\x62uiltins\nset\n]K\x03\x61\x85RX\x01\x00\x00\x00\x63h\x02u.");
  Loaded l(b);
  REQUIRE(l.root->kind == Kind::Dict);
  REQUIRE(l.root->items.size() == 6);
  CHECK(l.root->items[0]->s == "a");
  const Value* list = l.root->items[1];
  REQUIRE(list->kind == Kind::List);
  REQUIRE(list->items.size() == 2);
  CHECK(list->items[1]->i == 2);
  CHECK(l.root->items[3]->kind == Kind::Set);
  CHECK(l.root->items[5] == list);  // BINGET returns the same object

  // torch.Size((2, 3)) -> tuple; _codecs.encode('\xff\x00', 'latin1') -> 2 bytes
  Loaded s("\x80\x02\x63torch\nSize\nK\x02K\x03\x86\x85R.");
  REQUIRE(s.root->kind == Kind::Tuple);
  CHECK(s.root->items.size() == 2);
  Loaded e(B("\x80\x02\x63_codecs\nencode\nX\x03\x00\x00\x00\xc3\xbf\x00X\x06\x00\x00\x00latin1\x86R."));
  REQUIRE(e.root->kind == Kind::Bytes);
  CHECK(e.root->s == std::string("\xff\x00", 2));

  // protocol 4: FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL, EMPTY_SET + ADDITEMS
  std::string p4 = B("\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00\x8c\x05torch\x94\x8c\x07\x66loat16\x94\x93\x94"
                   "\x8f(K\x01K\x02\x90\x86.");
  Loaded f(p4);
  REQUIRE(f.root->kind == Kind::Tuple);
  CHECK(f.root->items[0]->kind == Kind::Global);
  CHECK(f.root->items[0]->s == "torch.float16");
  CHECK(f.root->items[1]->items.size() == 2);
}

TEST_CASE("pickle: rebuild functions become objects, persistent ids are kept", "[pickle]") {
  std::string b = B("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage\x63torch\nHalfStorage\n"
                  "X\x01\x00\x00\x00\x30X\x03\x00\x00\x00\x63puK\x04tQK\x00K\x04\x85K\x01\x85\x89}tR.");
  Loaded l(b);
  REQUIRE(l.root->kind == Kind::Object);
  CHECK(l.root->s == "torch._utils._rebuild_tensor_v2");
  REQUIRE(l.root->items.size() == 6);
  REQUIRE(l.root->items[0]->kind == Kind::PersistentId);
  CHECK(l.root->items[0]->items[0]->items[1]->s == "torch.HalfStorage");
}

TEST_CASE("pickle: a forbidden global is named and never called", "[pickle]") {
  // pickle.dumps of an object whose __reduce__ returns (os.system, ('touch pwned',))
  std::string b = B("\x80\x02\x63os\nsystem\nX\x0b\x00\x00\x00touch pwned\x85R.");
  try {
    Loaded l(b);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "pytorch.forbidden_global");
    CHECK(std::string(e.what()).find("os.system") != std::string::npos);
    CHECK(e.context().offset == 2u);
  }
  // STACK_GLOBAL spelling, and names that merely look like torch
  CHECK(code_of("\x80\x04\x8c\x08\x62uiltins\x8c\x04\x65val\x93.") == "pytorch.forbidden_global");
  CHECK(code_of("\x80\x02\x63torch\nload\n.") == "pytorch.forbidden_global");
  CHECK(code_of("\x80\x02\x63torch._utils\n_rebuild_qtensor\n.") == "pytorch.forbidden_global");
  // a whitelisted name that is not a function torch.save calls
  CHECK(code_of("\x80\x02\x63torch\nfloat32\n)R.") == "pickle.bad_call");
}

TEST_CASE("pickle: truncation and huge length fields", "[pickle]") {
  CHECK(code_of("") == "pickle.truncated");
  CHECK(code_of("\x80\x02]") == "pickle.truncated");                          // no STOP
  CHECK(code_of("\x80\x02X" + u32(0xFFFFFFF0) + "ab.") == "pickle.truncated");  // 4 GiB string claimed
  CHECK(code_of("\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\x7f.") == "pickle.truncated");  // BINUNICODE8
  CHECK(code_of("\x80\x02\x42" + u32(0x7FFFFFFF) + ".") == "pickle.truncated");  // BINBYTES
  CHECK(code_of("\x80\x02\x8b" + u32(0xFFFFFFFF) + ".") == "pickle.too_large");  // LONG4
  CHECK(code_of(B("\x80\x04\x95\xff\xff\xff\xff\x00\x00\x00\x00N.")) == "pickle.truncated");  // FRAME
  CHECK(code_of("\x80\x02\x63os\nsystem") == "pickle.truncated");  // GLOBAL line never ends
}

TEST_CASE("pickle: stack, memo and opcode rules", "[pickle]") {
  CHECK(code_of("\x80\x02.") == "pickle.stack_underflow");
  CHECK(code_of("\x80\x02K\x01(s.") == "pickle.stack_underflow");   // SETITEM cannot pop across a MARK
  CHECK(code_of("\x80\x02t.") == "pickle.stack_underflow");          // TUPLE without MARK
  CHECK(code_of(B("\x80\x02h\x05.")) == "pickle.bad_memo");              // BINGET of an unset slot
  CHECK(code_of("\x80\x02N" "r\xff\xff\xff\xff.") == "pickle.bad_memo");  // LONG_BINPUT index 2^32-1
  CHECK(code_of("\x80\x02Z.") == "pickle.bad_opcode");
  CHECK(code_of("\x80\x09N.") == "pickle.bad_protocol");
  CHECK(code_of("\x80\x02)K\x01\x61.") == "pickle.bad_type");         // APPEND to a tuple
  CHECK(code_of("\x80\x02NK\x01K\x02s.") == "pickle.bad_type");      // SETITEM on None
}

TEST_CASE("pickle: deep nesting and cycles are rejected", "[pickle]") {
  // [[[...]]] 1000 deep: ']' x1000 then APPEND x999
  std::string deep = "\x80\x02" + std::string(1000, ']') + std::string(999, 'a') + ".";
  CHECK(code_of(deep) == "pickle.too_deep");
  // 99 levels are fine
  std::string ok = "\x80\x02" + std::string(99, ']') + std::string(98, 'a') + ".";
  CHECK(code_of(ok) == "no error");
  // l = []; l.append(l)
  CHECK(code_of(B("\x80\x02]q\x00h\x00\x61.")) == "pickle.too_deep");
  // a DAG with exponential paths but few nodes is accepted in linear time
  std::string dag = B("\x80\x02]q\x00");
  for (int i = 0; i < 60; ++i) dag += B("h\x00h\x00\x86q\x00");
  CHECK(code_of(dag + ".") == "no error");
}
