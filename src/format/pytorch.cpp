// torch.save checkpoints: the zip format (torch >= 1.6), the legacy stream of
// pickles (torch < 1.6, or _use_new_zipfile_serialization=False) and the old
// tar format. All three share one pickle vocabulary: a tree of dicts/lists whose
// tensor leaves are torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)
// with storage = persistent id ('storage', StorageClass, key, location, numel[, view]).
// We walk the tree once (names, shapes, metadata), then each format says where
// each storage key's bytes are; no tensor data is read.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "format/pickle.hpp"
#include "format/readers.hpp"
#include "format/zip.hpp"

namespace nunchaku {
namespace {

using pickle::Kind;
using pickle::Value;

constexpr size_t kMaxDims = 64;
constexpr char kLegacyMagic[] = "119547037146038801333356";  // torch/serialization.py MAGIC_NUMBER

std::optional<DType> storage_dtype(std::string_view g) {
  static const std::pair<std::string_view, DType> kMap[] = {
      {"torch.FloatStorage", DType::F32},        {"torch.DoubleStorage", DType::F64},
      {"torch.HalfStorage", DType::F16},         {"torch.BFloat16Storage", DType::BF16},
      {"torch.LongStorage", DType::I64},         {"torch.IntStorage", DType::I32},
      {"torch.ShortStorage", DType::I16},        {"torch.CharStorage", DType::I8},
      {"torch.ByteStorage", DType::U8},          {"torch.BoolStorage", DType::BOOL},
      {"torch.ComplexFloatStorage", DType::C64}, {"torch.ComplexDoubleStorage", DType::C128},
      {"torch.UntypedStorage", DType::U8},       {"torch.storage.UntypedStorage", DType::U8}};
  for (auto& [n, t] : kMap)
    if (n == g) return t;
  return std::nullopt;
}

uint64_t elem_bytes(DType t) { return dtype_info(t).block_bytes; }  // storages hold byte-aligned types only

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}


struct Storage {
  std::string key;
  DType dtype = DType::U8;
  uint64_t bytes = 0;        // declared: numel * element size
  std::string first_tensor;  // for errors
  uint64_t pid_offset = 0;   // pickle offset of the first reference
  bool located = false;
  uint64_t data = 0;         // absolute offset of byte 0
  uint64_t available = 0;    // bytes present there
};

struct Pending {
  TensorInfo info;
  size_t storage = 0;
  uint64_t begin = 0;  // bytes from the storage start to the first element
  uint64_t pickle_offset = 0;
};

class Reader {
 public:
  // bare_ids: accept ('storage', ...) tuples where a persistent id belongs (tar files).
  explicit Reader(const Source& src, bool bare_ids = false) : src_(src), bare_ids_(bare_ids) {
    ck_.format = Format::PyTorch;
    ck_.path = src.path();
    ck_.files.push_back({src.path(), src.size()});
  }

  // Walks the unpickled tree into pending tensors and metadata.
  void walk_root(const Value* root, size_t value_count) {
    budget_ = 16 * static_cast<uint64_t>(value_count) + 4096;
    walk(root, "");
  }

  std::vector<Storage>& storages() { return storages_; }
  Storage* storage(const std::string& key) {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : &storages_[it->second];
  }

  Checkpoint finish() {
    for (auto& p : pending_) {
      Storage& s = storages_[p.storage];
      if (!s.located)
        throw Error("pytorch.missing_storage", "storage '" + s.key + "' is referenced but not in the file",
                    {.file = src_.path(), .tensor = p.info.name, .offset = p.pickle_offset});
      if (s.available < s.bytes)
        throw Error("pytorch.storage_truncated",
                    "storage '" + s.key + "' declares " + std::to_string(s.bytes) + " bytes but the file holds " +
                        std::to_string(s.available),
                    {.file = src_.path(), .tensor = p.info.name, .offset = s.data});
      p.info.offset = s.data + p.begin;  // no overflow: begin + nbytes <= bytes <= available, inside the file
      ck_.tensors.push_back(std::move(p.info));
    }
    pending_.clear();
    return std::move(ck_);
  }

 private:
  [[noreturn]] void bad(const std::string& code, const std::string& msg, const std::string& name, uint64_t off) const {
    throw Error(code, msg, {.file = src_.path(), .tensor = name, .offset = off});
  }

  static std::string join(const std::string& prefix, const std::string& k) { return prefix.empty() ? k : prefix + "." + k; }

  std::string key_text(const Value* k) const {
    switch (k->kind) {
      case Kind::String: return utf8_replace_invalid(k->s);
      case Kind::Int: return std::to_string(k->i);
      case Kind::BigInt: return k->s;
      case Kind::Bool: return k->b ? "True" : "False";
      case Kind::None: return "None";
      case Kind::Float: return std::to_string(k->f);
      case Kind::Tuple: {
        std::string s = "(";
        for (size_t i = 0; i < k->items.size(); ++i) s += (i ? ", " : "") + key_text(k->items[i]);
        return s + ")";
      }
      default: return "<" + std::string(pickle::kind_name(k->kind)) + ">";
    }
  }

  static bool is_scalar(const Value* v) {
    switch (v->kind) {
      case Kind::None: case Kind::Bool: case Kind::Int: case Kind::BigInt: case Kind::Float:
      case Kind::String: case Kind::Bytes: case Kind::Global: return true;
      default: return false;
    }
  }

  static nlohmann::json scalar_json(const Value* v) {
    switch (v->kind) {
      case Kind::None: return nullptr;
      case Kind::Bool: return v->b;
      case Kind::Int: return v->i;
      case Kind::Float:
        if (std::isnan(v->f)) return "nan";
        if (std::isinf(v->f)) return v->f > 0 ? "inf" : "-inf";
        return v->f;
      case Kind::String: return utf8_replace_invalid(v->s);
      case Kind::Bytes: return "<" + std::to_string(v->s.size()) + " bytes>";
      default: return v->s;  // BigInt (decimal), Global ("torch.float16")
    }
  }

  void claim(const std::string& name, uint64_t off) {
    if (!names_.insert(name).second)
      bad("pytorch.duplicate_name", "two entries flatten to the same name", name, off);
  }

  void walk(const Value* v, const std::string& name) {
    if (++visits_ > budget_)
      bad("pytorch.too_many_values", "shared references expand to too many entries", name, v->offset);
    switch (v->kind) {
      case Kind::Dict:
        if (v->items.empty() && !name.empty()) {
          claim(name, v->offset);
          ck_.metadata[name] = nlohmann::json::object();
        }
        for (size_t i = 0; i + 1 < v->items.size(); i += 2) walk(v->items[i + 1], join(name, key_text(v->items[i])));
        return;
      case Kind::List: case Kind::Tuple: case Kind::Set: {
        bool scalars = true;
        for (const Value* x : v->items) scalars = scalars && is_scalar(x);
        if (scalars) {  // (0.9, 0.999), [0, 1, 2]: one metadata array
          claim(name, v->offset);
          auto& a = ck_.metadata[name] = nlohmann::json::array();
          for (const Value* x : v->items) a.push_back(scalar_json(x));
          return;
        }
        for (size_t i = 0; i < v->items.size(); ++i) walk(v->items[i], join(name, std::to_string(i)));
        return;
      }
      case Kind::Object:
        if (v->s == "torch._utils._rebuild_parameter" || v->s == "torch._utils._rebuild_parameter_with_state") {
          if (v->items.empty() || v->items[0]->kind != Kind::Object)
            bad("pytorch.bad_tensor", v->s + "() without a tensor", name, v->offset);
          return walk(v->items[0], name);
        }
        if (v->s.starts_with("torch._utils._rebuild_tensor")) return tensor(v, name.empty() ? "tensor" : name);
        claim(name, v->offset);
        ck_.metadata[name] = "<" + v->s + ">";
        return;
      case Kind::PersistentId: {  // a bare storage: report it as a 1-D tensor of its elements
        auto [idx, begin, limit] = storage_of(v, name.empty() ? "storage" : name);
        Pending p;
        p.info.name = name.empty() ? "storage" : name;
        p.info.dtype = storages_[idx].dtype;
        p.info.shape = {static_cast<int64_t>((limit - begin) / elem_bytes(p.info.dtype))};
        p.info.nbytes = limit - begin;
        return add(std::move(p), idx, begin, v->offset);
      }
      default:
        claim(name, v->offset);
        ck_.metadata[name] = scalar_json(v);
        return;
    }
  }

  // ('storage', StorageClass, key, location, numel[, (view_key, offset, numel)])
  // -> storage index, byte range [begin, limit) of the (view of the) storage.
  std::tuple<size_t, uint64_t, uint64_t> storage_of(const Value* pid, const std::string& name) {
    // burn's synthetic tar files pass the id tuple itself rather than a persistent id.
    const Value* t = pid->kind == Kind::Tuple && bare_ids_ ? pid : pid->items.empty() ? nullptr : pid->items[0];
    if (!t || t->kind != Kind::Tuple || t->items.size() < 5 || !t->items[0]->is_str() || t->items[0]->s != "storage")
      bad("pytorch.bad_persistent_id",
          "persistent id is not ('storage', type, key, location, numel)", name, pid->offset);
    const auto& a = t->items;
    std::optional<DType> dt = a[1]->kind == Kind::Global ? storage_dtype(a[1]->s) : std::nullopt;
    if (!dt) bad("pytorch.bad_storage", "unsupported storage type " + key_text(a[1]), name, a[1]->offset);
    if (!(a[2]->is_str() || a[2]->is_int())) bad("pytorch.bad_storage", "storage key is not a string", name, a[2]->offset);
    const std::string key = key_text(a[2]);
    if (!a[4]->is_int() || a[4]->i < 0) bad("pytorch.bad_storage", "storage size is not a non-negative int", name, a[4]->offset);
    auto bytes = checked_mul(static_cast<uint64_t>(a[4]->i), elem_bytes(*dt));
    if (!bytes || *bytes > src_.size())
      bad("pytorch.storage_out_of_file",
          "storage '" + key + "' declares " + std::to_string(a[4]->i) + " elements, more than the file holds", name, a[4]->offset);
    size_t idx;
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      idx = it->second;
      if (storages_[idx].dtype != *dt || storages_[idx].bytes != *bytes)
        bad("pytorch.storage_conflict", "storage '" + key + "' is declared twice with different types or sizes", name,
            pid->offset);
    } else {
      idx = storages_.size();
      by_key_.emplace(key, idx);
      storages_.push_back({.key = key, .dtype = *dt, .bytes = *bytes, .first_tensor = name, .pid_offset = pid->offset});
    }
    uint64_t begin = 0, limit = *bytes;
    if (a.size() >= 6 && a[5]->kind != Kind::None) {  // legacy storage view of the root storage
      const Value* vm = a[5];
      if (vm->kind != Kind::Tuple || vm->items.size() != 3 || !vm->items[1]->is_int() || !vm->items[2]->is_int() ||
          vm->items[1]->i < 0 || vm->items[2]->i < 0)
        bad("pytorch.bad_storage", "storage view is not (key, offset, numel)", name, vm->offset);
      auto b = checked_mul(static_cast<uint64_t>(vm->items[1]->i), elem_bytes(*dt));
      auto n = checked_mul(static_cast<uint64_t>(vm->items[2]->i), elem_bytes(*dt));
      auto l = b && n ? checked_add(*b, *n) : std::nullopt;
      if (!l || *l > *bytes)
        bad("pytorch.storage_too_small", "storage view extends past the end of storage '" + key + "'", name, vm->offset);
      begin = *b;
      limit = *l;
    }
    return {idx, begin, limit};
  }

  void add(Pending p, size_t idx, uint64_t begin, uint64_t off) {
    claim(p.info.name, off);
    p.storage = idx;
    p.begin = begin;
    p.pickle_offset = off;
    p.info.storage = storages_[idx].key;
    p.info.file = 0;
    pending_.push_back(std::move(p));
  }

  std::vector<int64_t> int_tuple(const Value* v, const std::string& what, const std::string& name) const {
    if (!v->is_seq()) bad("pytorch.bad_tensor", what + " is not a tuple", name, v->offset);
    if (v->items.size() > kMaxDims) bad("pytorch.bad_tensor", what + " has more than 64 dimensions", name, v->offset);
    std::vector<int64_t> out;
    for (const Value* x : v->items) {
      if (!x->is_int() || x->i < 0) bad("pytorch.bad_tensor", what + " holds a value that is not a non-negative int", name, x->offset);
      out.push_back(x->i);
    }
    return out;
  }

  // _rebuild_tensor(storage, offset, size, stride), _v2(..., requires_grad, hooks[, metadata]),
  // _v3(..., requires_grad, hooks, dtype[, metadata]).
  void tensor(const Value* obj, const std::string& name) {
    const auto& a = obj->items;
    const bool v3 = obj->s == "torch._utils._rebuild_tensor_v3";
    if (a.size() < (v3 ? 7u : 4u) || !(a[0]->kind == Kind::PersistentId || (bare_ids_ && a[0]->kind == Kind::Tuple)))
      bad("pytorch.bad_tensor", obj->s + "() has unexpected arguments", name, obj->offset);
    auto [idx, view_begin, limit] = storage_of(a[0], name);
    Pending p;
    p.info.name = name;
    p.info.dtype = storages_[idx].dtype;
    if (v3) {
      auto d = a[6]->kind == Kind::Global && a[6]->s.starts_with("torch.") ? dtype_from_torch(a[6]->s.substr(6)) : std::nullopt;
      if (!d) bad("pytorch.bad_tensor", "unsupported tensor dtype " + key_text(a[6]), name, a[6]->offset);
      p.info.dtype = *d;
    }
    if (!a[1]->is_int() || a[1]->i < 0) bad("pytorch.bad_tensor", "storage offset is not a non-negative int", name, a[1]->offset);
    p.info.shape = int_tuple(a[2], "size", name);
    std::vector<int64_t> stride = int_tuple(a[3], "stride", name);
    if (stride.size() != p.info.shape.size()) bad("pytorch.bad_tensor", "size and stride differ in length", name, a[3]->offset);

    const uint64_t es = elem_bytes(p.info.dtype);
    auto numel = checked_numel(p.info.shape);
    if (!numel) bad("pytorch.bad_tensor", "element count overflows", name, a[2]->offset);
    // Last element index = sum (size-1)*stride; span = that + 1 elements.
    std::optional<uint64_t> last = 0;
    bool contiguous = true;
    uint64_t expect = 1;
    for (size_t d = p.info.shape.size(); d-- > 0;) {
      const auto sz = static_cast<uint64_t>(p.info.shape[d]);
      const auto st = static_cast<uint64_t>(stride[d]);
      if (sz == 0) continue;
      auto m = checked_mul(sz - 1, st);
      last = m && last ? checked_add(*last, *m) : std::nullopt;
      if (sz != 1) {
        if (st != expect) contiguous = false;
        expect *= sz;  // <= numel, no overflow
      }
    }
    const uint64_t so = static_cast<uint64_t>(a[1]->i);
    auto span = *numel == 0 ? std::optional<uint64_t>(0) : last ? checked_add(*last, 1) : std::nullopt;
    auto span_bytes = span ? checked_mul(*span, es) : std::nullopt;
    auto so_bytes = checked_mul(so, es);
    auto begin = so_bytes ? checked_add(view_begin, *so_bytes) : std::nullopt;
    auto end = begin && span_bytes ? checked_add(*begin, *span_bytes) : std::nullopt;
    if (!end || *end > limit)
      bad("pytorch.storage_too_small",
          "the view (offset " + std::to_string(so) + ", " + (span ? std::to_string(*span) : std::string("too many")) +
              " elements) extends past the end of storage '" + storages_[idx].key + "' (" +
              std::to_string((limit - view_begin) / es) + " elements)",
          name, a[1]->offset);
    if (*numel > 0 && !contiguous) p.info.strides = stride;
    p.info.nbytes = *span_bytes;
    p.info.storage_offset = *begin / es;
    add(std::move(p), idx, *begin, obj->offset);
  }

  const Source& src_;
  bool bare_ids_;
  Checkpoint ck_;
  std::vector<Storage> storages_;
  std::unordered_map<std::string, size_t> by_key_;
  std::vector<Pending> pending_;
  std::unordered_set<std::string> names_;
  uint64_t visits_ = 0, budget_ = 0;
};

// ---- zip (torch >= 1.6) ------------------------------------------------------

Checkpoint read_zip(const Source& src) {
  zip::Archive ar(src);
  const zip::Entry* pkl = nullptr;
  for (const auto& e : ar.entries()) {  // "<top>/data.pkl"; the shallowest wins (TorchScript has nested ones)
    if (e.name != "data.pkl" && !e.name.ends_with("/data.pkl")) continue;
    auto depth = [](const std::string& n) { return std::count(n.begin(), n.end(), '/'); };
    if (!pkl || depth(e.name) < depth(pkl->name)) pkl = &e;
  }
  if (!pkl)
    throw Error("pytorch.no_data_pkl", "zip archive has no data.pkl entry", {.file = src.path(),
                .hint = "not a torch.save checkpoint (torch.save zips hold <name>/data.pkl)"});
  const std::string top = pkl->name.substr(0, pkl->name.size() - std::string("data.pkl").size());

  if (const zip::Entry* bo = ar.find(top + "byteorder")) {
    uint64_t at = ar.stored_data_offset(*bo);
    if (bo->size > 16) throw Error("pytorch.bad_zip", "byteorder entry is too long", {.file = src.path(), .offset = at});
    auto v = src.read_vec(at, static_cast<size_t>(bo->size));
    std::string order(v.begin(), v.end());
    if (order != "little")
      throw Error("pytorch.big_endian", "checkpoint byte order is '" + utf8_replace_invalid(order) + "'; only little-endian is supported",
                  {.file = src.path(), .offset = at, .hint = "load and re-save it with torch on a little-endian machine"});
  }

  const uint64_t at = ar.stored_data_offset(*pkl);
  pickle::Unpickler up(src, at, at + pkl->size);
  const Value* root = up.load();
  Reader r(src);
  r.walk_root(root, up.value_count());
  for (Storage& s : r.storages()) {
    const zip::Entry* e = ar.find(top + "data/" + s.key);
    if (!e)
      throw Error("pytorch.missing_storage", "storage entry '" + top + "data/" + s.key + "' is not in the archive",
                  {.file = src.path(), .tensor = s.first_tensor, .offset = s.pid_offset});
    s.data = ar.stored_data_offset(*e);
    s.available = e->size;
    s.located = true;
  }
  return r.finish();
}

// ---- legacy stream (torch < 1.6) ---------------------------------------------

const Value* load_at(const Source& src, uint64_t& pos, std::unique_ptr<pickle::Unpickler>& keep) {
  keep = std::make_unique<pickle::Unpickler>(src, pos, src.size());
  const Value* v = keep->load();
  pos = keep->position();
  return v;
}

void check_sys_info(const Source& src, const Value* info) {
  if (info->kind != Kind::Dict) return;
  for (size_t i = 0; i + 1 < info->items.size(); i += 2)
    if (info->items[i]->is_str() && info->items[i]->s == "little_endian" && info->items[i + 1]->kind == Kind::Bool &&
        !info->items[i + 1]->b)
      throw Error("pytorch.big_endian", "checkpoint was written on a big-endian machine",
                  {.file = src.path(), .offset = info->offset, .hint = "load and re-save it with torch on a little-endian machine"});
}

Checkpoint read_legacy(const Source& src) {
  uint64_t pos = 0;
  std::unique_ptr<pickle::Unpickler> magic_p, proto_p, info_p, main_p, keys_p;
  const Value* magic = load_at(src, pos, magic_p);
  if (magic->kind != Kind::BigInt || magic->s != kLegacyMagic)
    throw Error("pytorch.bad_magic", "not a torch.save file: the first pickle is not torch's magic number",
                {.file = src.path(), .offset = 0, .hint = "plain pickles of Python objects are not checkpoints"});
  const Value* proto = load_at(src, pos, proto_p);
  if (!proto->is_int() || proto->i != 1001)
    throw Error("pytorch.bad_version", "unsupported legacy protocol version", {.file = src.path(), .offset = proto->offset});
  check_sys_info(src, load_at(src, pos, info_p));
  const Value* root = load_at(src, pos, main_p);
  Reader r(src);
  r.walk_root(root, main_p->value_count());
  const Value* keys = load_at(src, pos, keys_p);
  if (keys->kind != Kind::List)
    throw Error("pytorch.bad_storage", "the storage key list is not a list", {.file = src.path(), .offset = keys->offset});
  // Each storage: 8-byte little-endian element count, then the elements; skipped, not read.
  for (const Value* k : keys->items) {
    if (!k->is_str()) throw Error("pytorch.bad_storage", "storage key is not a string", {.file = src.path(), .offset = k->offset});
    Storage* s = r.storage(k->s);
    if (!s || s->located)
      throw Error("pytorch.bad_storage", "storage '" + k->s + "' is " + (s ? "listed twice" : "not used by any tensor"),
                  {.file = src.path(), .offset = k->offset});
    uint8_t n8[8];
    if (src.size() - pos < 8)
      throw Error("pytorch.storage_out_of_file", "storage '" + k->s + "' starts past the end of the file",
                  {.file = src.path(), .tensor = s->first_tensor, .offset = pos, .hint = "the file is truncated"});
    src.read_at(pos, n8, 8);
    auto bytes = checked_mul(le64(n8), elem_bytes(s->dtype));
    auto end = bytes ? checked_add(pos + 8, *bytes) : std::nullopt;
    if (!end || *end > src.size())
      throw Error("pytorch.storage_out_of_file",
                  "storage '" + k->s + "' of " + std::to_string(le64(n8)) + " elements extends past the end of the file",
                  {.file = src.path(), .tensor = s->first_tensor, .offset = pos, .hint = "the file is truncated"});
    s->data = pos + 8;
    s->available = *bytes;
    s->located = true;
    pos = *end;
  }
  return r.finish();
}

// ---- tar (torch < 0.4): entries sys_info, pickle, storages[, tensors] ---------

struct TarEntry { uint64_t data = 0, size = 0; };

std::unordered_map<std::string, TarEntry> tar_entries(const Source& src) {
  std::unordered_map<std::string, TarEntry> out;
  uint64_t pos = 0;
  while (src.size() - pos >= 512) {
    uint8_t h[512];
    src.read_at(pos, h, sizeof h);
    if (std::all_of(h, h + 512, [](uint8_t b) { return b == 0; })) break;
    std::string name(reinterpret_cast<const char*>(h), strnlen(reinterpret_cast<const char*>(h), 100));
    uint64_t size = 0;
    for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; ++i) size = size * 8 + (h[i] - '0');  // 11 octal digits: no overflow
    const uint64_t data = pos + 512;
    if (size > src.size() - data)
      throw Error("pytorch.entry_out_of_file", "tar entry '" + utf8_replace_invalid(name) + "' extends past the end of the file",
                  {.file = src.path(), .offset = pos, .hint = "the file is truncated"});
    if (h[156] == '0' || h[156] == 0) out.emplace(name, TarEntry{data, size});
    pos = data + (size + 511) / 512 * 512;
    if (pos > src.size()) break;
  }
  return out;
}

Checkpoint read_tar(const Source& src) {
  auto entries = tar_entries(src);
  auto need = [&](const std::string& n) -> const TarEntry& {
    auto it = entries.find(n);
    if (it == entries.end())
      throw Error("pytorch.bad_tar", "old tar-format checkpoint has no '" + n + "' entry", {.file = src.path()});
    return it->second;
  };
  if (entries.count("tensors"))
    throw Error("pytorch.unsupported", "tar-format checkpoint with a 'tensors' entry (torch < 0.4) is not supported",
                {.file = src.path(), .hint = "load it with an old torch and re-save with torch.save"});
  if (auto it = entries.find("sys_info"); it != entries.end()) {
    pickle::Unpickler up(src, it->second.data, it->second.data + it->second.size);
    check_sys_info(src, up.load());
  }
  const TarEntry& main = need("pickle");
  pickle::Unpickler up(src, main.data, main.data + main.size);
  const Value* root = up.load();
  Reader r(src, /*bare_ids=*/true);
  r.walk_root(root, up.value_count());

  // storages: count, then per storage a pickle (key, location, type), 8-byte count, elements.
  const TarEntry& st = need("storages");
  const uint64_t end = st.data + st.size;
  uint64_t pos = st.data;
  auto next = [&](std::unique_ptr<pickle::Unpickler>& keep) {
    keep = std::make_unique<pickle::Unpickler>(src, pos, end);
    const Value* v = keep->load();
    pos = keep->position();
    return v;
  };
  std::unique_ptr<pickle::Unpickler> cp;
  const Value* count = next(cp);
  if (!count->is_int() || count->i < 0 || static_cast<uint64_t>(count->i) > st.size / 8)
    throw Error("pytorch.bad_storage", "bad storage count", {.file = src.path(), .offset = count->offset});
  for (int64_t i = 0; i < count->i; ++i) {
    std::unique_ptr<pickle::Unpickler> hp;
    const Value* h = next(hp);
    if (h->kind != Kind::Tuple || h->items.size() != 3 || !h->items[0]->is_str() || h->items[2]->kind != Kind::Global)
      throw Error("pytorch.bad_storage", "storage header is not (key, location, type)", {.file = src.path(), .offset = h->offset});
    const std::string& key = h->items[0]->s;
    auto dt = storage_dtype(h->items[2]->s);
    Storage* s = r.storage(key);
    if (!dt || (s && (s->located || s->dtype != *dt)))
      throw Error("pytorch.bad_storage", "storage '" + key + "' has a bad type or is listed twice", {.file = src.path(), .offset = h->offset});
    if (end - pos < 8)
      throw Error("pytorch.storage_out_of_file", "storage '" + key + "' is cut short", {.file = src.path(), .offset = pos});
    uint8_t n8[8];
    src.read_at(pos, n8, 8);
    auto bytes = checked_mul(le64(n8), elem_bytes(*dt));
    if (!bytes || *bytes > end - pos - 8)
      throw Error("pytorch.storage_out_of_file", "storage '" + key + "' extends past its tar entry",
                  {.file = src.path(), .offset = pos, .hint = "the file is truncated"});
    if (s) {
      s->data = pos + 8;
      s->available = *bytes;
      s->located = true;
    }
    pos += 8 + *bytes;
  }
  return r.finish();
}

}  // namespace

Checkpoint read_pytorch(const Source& src) {
  uint8_t head[262] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), sizeof head));
  if (n) src.read_at(0, head, n);
  if (n >= 2 && head[0] == 'P' && head[1] == 'K') return read_zip(src);
  if (n >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) return read_tar(src);
  if (n >= 2 && head[0] == 0x80) return read_legacy(src);
  throw Error("pytorch.unknown_format", "not a torch.save file (neither zip, legacy pickle nor tar)",
              {.file = src.path(), .offset = 0, .hint = n < 4 ? "the file is truncated" : ""});
}

}  // namespace nunchaku
