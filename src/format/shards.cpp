// Multi-file checkpoints: an index JSON ({"metadata": {"total_size": N},
// "weight_map": {tensor: shard file}}) as written by transformers for
// safetensors and PyTorch shards, or a plain list of shard files. Each shard is
// read once by its own reader (format sniffed from its first bytes) and the
// one-file Checkpoints are merged: files in shard order, tensor file indices
// remapped, metadata merged.
#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "format/source_readers.hpp"
#include "format/json_members.hpp"
#include "format/safetensors_json.hpp"
#include "core/source.hpp"
#include "core/text.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Index files of the largest models are a few MB; this only guards the read.
constexpr uint64_t kMaxIndexBytes = 100'000'000;
constexpr int kMaxIndexDepth = 32;

Checkpoint read_shard(const Source& src) {
  const std::string& path = src.path();
  switch (sniff_source(src)) {
    case SniffedFormat::Safetensors: return read_safetensors(src);
    case SniffedFormat::PyTorchZip:
    case SniffedFormat::PyTorchLegacy:
    case SniffedFormat::PyTorchTar: return read_pytorch(src);
    case SniffedFormat::GGUF:
      throw Error("shards.unsupported_format", "a GGUF file cannot be a shard of a safetensors/PyTorch checkpoint",
                  {.file = path, .offset = 0});
    case SniffedFormat::Unknown: break;
  }
  throw Error("shards.unknown_format",
              src.size() == 0 ? std::string("shard file is empty") : "shard is not a safetensors or PyTorch file",
              {.file = path, .offset = 0});
}

// Reads the shards, up to 8 at a time on their own threads (each header is parsed apart;
// the merge below is in shard order, so results and errors are what one thread gives).
struct ShardReads {
  std::vector<Checkpoint> parts;
  std::vector<std::exception_ptr> errors;  // per shard: why it could not be read
};
ShardReads read_shards(const std::vector<std::string>& files, const SourceOpener& open, bool threads) {
  ShardReads r{std::vector<Checkpoint>(files.size()), std::vector<std::exception_ptr>(files.size())};
  auto& parts = r.parts;
  auto& errors = r.errors;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      try {
        const auto src = open(files[i]);
        if (!src) throw Error("shards.missing", "shard file does not exist", {.file = files[i]});
        parts[i] = read_shard(*src);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t want = threads && files.size() >= 8 ? std::min<size_t>({8, files.size() / 4, std::max(1u, std::thread::hardware_concurrency())}) : 1;
  for (size_t k = 1; k < want; ++k) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // threads refused (ulimit -u): this one reads the rest
      break;
    }
  }
  work();
  for (auto& t : pool) t.join();
  return r;
}

// Fails on the first tensor of ck.tensors[from, end) whose name an earlier one holds; `owner`
// gathers tensor name -> file index (the names are views into ck.tensors).
void check_unique_names(const Checkpoint& ck, size_t from, const std::vector<std::string>& files,
                        std::unordered_map<std::string_view, uint32_t>& owner) {
  for (size_t k = from; k < ck.tensors.size(); ++k) {
    const TensorInfo& t = ck.tensors[k];
    auto [it, fresh] = owner.emplace(t.name, t.file);
    if (!fresh)
      throw Error("shards.duplicate_tensor", "tensor is also in " + files[it->second],
                  {.file = files[t.file], .tensor = t.name, .offset = t.offset,
                   .hint = "two shards hold the same tensor; remove the stale file"});
  }
}

// Reads every file and fails on a tensor name found in two of them. `owner` (when given)
// receives tensor name -> file index. `threads`: the opener may be called from several
// threads at once (local files; the Hub's opener is not). `names_checked` (when given):
// when every shard reads, the name check is left to the caller (an index's weight_map
// proves names unique more cheaply) and *names_checked says so.
Checkpoint read_and_merge(const std::vector<std::string>& files, const SourceOpener& open, bool threads,
                          std::unordered_map<std::string_view, uint32_t>* owner_out = nullptr,
                          bool* names_checked = nullptr) {
  ShardReads reads = read_shards(files, open, threads);
  size_t total = 0;
  for (const auto& p : reads.parts) total += p.tensors.size();
  Checkpoint ck;
  ck.tensors.reserve(total);  // never reallocated below: the name views stay valid
  const bool check = !names_checked || std::any_of(reads.errors.begin(), reads.errors.end(), [](auto& e) { return bool(e); });
  if (names_checked) *names_checked = check;
  std::unordered_map<std::string_view, uint32_t> own;
  std::unordered_map<std::string_view, uint32_t>& owner = owner_out ? *owner_out : own;
  if (check) owner.reserve(total);
  // In shard order, as one thread reading them in turn would fail: the first shard that
  // cannot be read, or the first name that an earlier shard already holds.
  for (size_t i = 0; i < files.size(); ++i) {
    if (reads.errors[i]) std::rethrow_exception(reads.errors[i]);
    const size_t from = ck.tensors.size();
    append_shard(ck, std::move(reads.parts[i]), i == 0);
    if (check) check_unique_names(ck, from, files, owner);
  }
  return ck;
}

std::vector<uint8_t> read_index_bytes(const Source& src) {
  if (src.size() > kMaxIndexBytes)
    throw Error("index.too_large", "index file has " + std::to_string(src.size()) + " bytes, over the " +
                    std::to_string(kMaxIndexBytes) + "-byte limit",
                {.file = src.path()});
  return src.read_vec(0, static_cast<size_t>(src.size()));
}

// What must hold before the JSON parser sees the text.
void check_index_bytes(const std::vector<uint8_t>& bytes, const std::string& path) {
  if (size_t deep = detail::too_deep_at(bytes.data(), bytes.size(), kMaxIndexDepth); deep != std::string::npos)
    throw Error("index.too_deep", "index JSON nests deeper than " + std::to_string(kMaxIndexDepth) + " levels",
                {.file = path, .offset = deep});
  // nlohmann's lexer takes a NUL as end of input; JSON never holds one.
  if (auto nul = std::find(bytes.begin(), bytes.end(), uint8_t{0}); nul != bytes.end())
    throw Error("index.not_json", "index is not valid JSON (NUL byte)",
                {.file = path, .offset = static_cast<uint64_t>(nul - bytes.begin())});
}

json parse_index_json(const std::vector<uint8_t>& bytes, const std::string& path) {
  try {
    return json::parse(bytes.begin(), bytes.end());
  } catch (const json::parse_error& e) {
    throw Error("index.not_json", "index is not valid JSON", {.file = path, .offset = e.byte > 0 ? e.byte - 1 : 0});
  } catch (const json::exception&) {  // out_of_range 406: a number beyond double range
    throw Error("index.not_json", "index is not valid JSON (number out of range)", {.file = path});
  }
}

// A weight_map value must name a file beside the index, not escape its folder.
bool plain_relative(const std::string& name) {
  if (name.empty()) return false;
  fs::path p(name);
  if (p.is_absolute() || p.has_root_name()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

// Appends `part` (a one-file or merged Checkpoint) to `into`. Storage keys of
// PyTorch shards are per file ("0", "1", ...), so they get the file index as a
// prefix to keep "same key = same bytes" true across files.
void append_shard(Checkpoint& into, Checkpoint&& part, bool first) {
  if (first) into.format = part.format;
  else if (part.format != into.format)
    throw Error("shards.mixed_formats",
                "shard is " + std::string(format_name(part.format)) + " but earlier shards are " +
                    std::string(format_name(into.format)),
                {.file = part.files.empty() ? std::string() : part.files[0].path});
  const auto base = static_cast<uint32_t>(into.files.size());
  for (auto& f : part.files) into.files.push_back(std::move(f));
  for (auto& t : part.tensors) {
    t.file += base;
    if (!t.storage.empty()) t.storage = std::to_string(t.file) + "/" + t.storage;
    into.tensors.push_back(std::move(t));
  }
  // Shards written by one save carry the same __metadata__; the first value wins.
  if (part.metadata.is_object())
    for (auto& [k, v] : part.metadata.items())
      if (!into.metadata.contains(k)) into.metadata[k] = std::move(v);
  for (auto& w : part.warnings) into.warnings.push_back(std::move(w));
}

namespace {

// The index, read. The usual one (an object whose weight_map maps distinct names to plain
// strings) is split into members without a DOM: 46k weight_map entries in a nlohmann map
// cost more than all the shard headers. Anything else is parsed whole by the JSON parser,
// whose path words every error as it always did (weight_map in name order); the split
// path hands over to it on any doubt, before a shard is read.
struct Index {
  std::string path;
  std::vector<uint8_t> bytes;
  json doc;                                 // parser's path: the whole document
  bool parsed = false;
  json metadata;                            // the "metadata" member; null when absent
  std::vector<std::string_view> shards;     // the distinct shard names, as first met
  std::vector<std::pair<std::string_view, uint32_t>> weight_map;  // tensor -> index into shards
  std::unordered_map<std::string_view, uint32_t> listed;           // the same, by name
  uint32_t last = 0;                        // the shard of the previous entry
};

// Adds one weight_map entry; false when the name is listed already.
bool add_entry(Index& ix, std::string_view name, std::string_view shard) {
  if (ix.shards.empty() || ix.shards[ix.last] != shard) {  // entries come grouped by shard
    auto it = std::find(ix.shards.begin(), ix.shards.end(), shard);
    if (it == ix.shards.end()) it = ix.shards.insert(it, shard);
    ix.last = static_cast<uint32_t>(it - ix.shards.begin());
  }
  if (!ix.listed.emplace(name, ix.last).second) return false;
  ix.weight_map.emplace_back(name, ix.last);
  return true;
}

// The split path (detail::scan_plain_index); false (and `ix` to be refilled) where the
// parser must decide. The weight_map is plain ASCII two levels deep, and every other member
// is checked here as the whole text would be, so the checks before the parser all hold.
bool split_index(Index& ix) {
  const std::string_view text(reinterpret_cast<const char*>(ix.bytes.data()), ix.bytes.size());
  detail::PlainIndex p;
  if (!detail::scan_plain_index(text, p) || p.weight_map.empty()) return false;
  std::unordered_set<std::string_view> seen{"weight_map"};
  for (const auto& [name, value] : p.others) {
    if (!seen.insert(name).second) return false;  // the parser keeps the last one
    const auto* bytes = reinterpret_cast<const uint8_t*>(value.data());
    if (first_invalid_utf8(value) != std::string_view::npos || value.find('\0') != std::string_view::npos ||
        detail::too_deep_at(bytes, value.size(), kMaxIndexDepth - 1) != std::string::npos)
      return false;
    try {  // parsed, as the whole document would be
      json v = json::parse(value);
      if (name == "metadata") ix.metadata = std::move(v);
    } catch (const json::exception&) {
      return false;
    }
  }
  ix.weight_map.reserve(p.weight_map.size());
  ix.listed.reserve(p.weight_map.size());
  for (const auto& [name, shard] : p.weight_map)
    if (!add_entry(ix, name, shard)) return false;
  for (auto shard : ix.shards)
    if (!plain_relative(std::string(shard))) return false;
  return true;
}

// The parser's path: the whole document, checked as an object with a non-empty weight_map
// of plain file names, entries in name order.
void parse_index(Index& ix) {
  ix = Index{std::move(ix.path), std::move(ix.bytes)};
  check_index_bytes(ix.bytes, ix.path);
  ix.doc = parse_index_json(ix.bytes, ix.path);
  ix.parsed = true;
  const json& doc = ix.doc;
  const std::string& index_path = ix.path;
  if (!doc.is_object())
    throw Error("index.not_object", std::string("index JSON is a ") + doc.type_name() + ", not an object",
                {.file = index_path});
  auto wm = doc.find("weight_map");
  if (wm == doc.end() || !wm->is_object())
    throw Error("index.no_weight_map", "index has no \"weight_map\" object", {.file = index_path,
                .hint = "expected {\"metadata\": {...}, \"weight_map\": {\"tensor\": \"shard file\"}}"});
  if (wm->empty()) throw Error("index.empty", "\"weight_map\" lists no tensors", {.file = index_path});
  ix.weight_map.reserve(wm->size());
  ix.listed.reserve(wm->size());
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      throw Error("index.bad_entry", std::string("weight_map value is a ") + shard.type_name() + ", not a file name",
                  {.file = index_path, .tensor = name});
    const auto& s = shard.get_ref<const std::string&>();
    if (!plain_relative(s))
      throw Error("index.bad_shard_path", "shard \"" + s + "\" is not a file name beside the index",
                  {.file = index_path, .tensor = name});
    add_entry(ix, name, s);  // the DOM's keys are distinct
  }
  if (auto m = doc.find("metadata"); m != doc.end()) ix.metadata = *m;
}

Index read_index_doc(const Source& src) {
  Index ix;
  ix.path = src.path();
  ix.bytes = read_index_bytes(src);
  if (!split_index(ix)) parse_index(ix);
  return ix;
}

// The shards in name order (model-00001-of-00003 ... sort as written): name -> path.
std::map<std::string, std::string> index_shards(const Index& ix) {
  const fs::path dir = fs::path(ix.path).parent_path();
  std::map<std::string, std::string> shard_paths;  // shard name -> path
  for (auto shard : ix.shards) shard_paths.emplace(shard, (dir / shard).string());
  return shard_paths;
}

// Every shard of the index on the local file system, or the error naming why not.
std::vector<std::string> local_shards(const std::map<std::string, std::string>& shard_paths, const std::string& index_path) {
  std::vector<std::string> files;
  for (const auto& [shard, path] : shard_paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) {
      // A dangling or looping symlink exists as a link but not as a file.
      std::error_code link_ec;  // keep `ec`: why the target could not be reached (ENOENT, ELOOP)
      const bool link = fs::is_symlink(fs::symlink_status(path, link_ec));
      throw Error("index.missing_shard",
                  "shard \"" + shard + "\" named by the index " +
                      (link ? "is a symbolic link that leads nowhere (" + ec.message() + ")" : std::string("does not exist")),
                  {.file = index_path, .hint = "expected " + path + "; download the missing shard"});
    }
    if (!fs::is_regular_file(st))
      throw Error("index.missing_shard",
                  "shard \"" + shard + "\" named by the index is not a regular file (" +
                      (fs::is_directory(st) ? "a directory" : fs::is_fifo(st) ? "a FIFO" : "a device or special file") + ")",
                  {.file = index_path, .hint = "expected the shard's bytes at " + path});
    files.push_back(path);
  }
  return files;
}

// Every weight_map entry against the shard that holds it, in name order: the first that is
// missing or elsewhere is the error. `where`: tensor name -> file index, from the merge.
void check_weight_map(Index& ix, const std::vector<uint32_t>& shard_file, const std::vector<std::string>& files,
                      const std::unordered_map<std::string_view, uint32_t>& where) {
  if (!ix.parsed)  // the split path's names are distinct, so name order is the parser's order
    std::sort(ix.weight_map.begin(), ix.weight_map.end());
  for (const auto& [name, shard] : ix.weight_map) {
    const uint32_t file = shard_file[shard];
    const std::string& path = files[file];
    auto it = where.find(name);
    if (it == where.end() || it->second != file) {
      std::string hint = it == where.end() ? "no shard holds it"
                                           : "it is in " + files[it->second] + "; the index is stale";
      throw Error("index.tensor_not_in_shard", "the index places this tensor in " + path + ", which lacks it",
                  {.file = ix.path, .tensor = std::string(name), .hint = hint});
    }
  }
}

// True when every tensor is in the shard the index names and the index lists no other:
// then names are unique across shards (two alike would be listed for one file, which
// cannot hold both) and nothing is unlisted.
bool index_matches(const Index& ix, const Checkpoint& ck, const std::vector<uint32_t>& shard_file) {
  if (ck.tensors.size() != ix.weight_map.size()) return false;
  for (const auto& t : ck.tensors) {
    auto it = ix.listed.find(t.name);
    if (it == ix.listed.end() || shard_file[it->second] != t.file) return false;
  }
  return true;
}

// The checkpoint the index describes: its shards merged, every weight_map entry checked
// against the shard that holds it, unlisted tensors and an off total_size warned about.
Checkpoint index_checkpoint(Index& ix, const std::map<std::string, std::string>& shard_paths,
                            const std::vector<std::string>& files, const SourceOpener& open, bool threads) {
  const std::string& index_path = ix.path;
  std::unordered_map<std::string_view, uint32_t> where;  // tensor -> file index
  bool names_checked = false;
  Checkpoint ck = read_and_merge(files, open, threads, &where, &names_checked);
  ck.path = index_path;

  std::unordered_map<std::string_view, uint32_t> file_of;  // shard path -> file index
  for (uint32_t i = 0; i < files.size(); ++i) file_of.emplace(files[i], i);
  std::vector<uint32_t> shard_file(ix.shards.size());  // shard id in the index -> file index
  for (size_t k = 0; k < ix.shards.size(); ++k)
    shard_file[k] = file_of.at(shard_paths.find(std::string(ix.shards[k]))->second);

  if (!index_matches(ix, ck, shard_file)) {  // what is wrong, as the one-by-one checks find it
    if (!names_checked) check_unique_names(ck, 0, files, where);
    check_weight_map(ix, shard_file, files, where);
  }

  // Tensors the index does not list: readable, but a sign of a stale index.
  // Every entry was found above and names are unique, so equal counts mean none is unlisted.
  std::vector<size_t> unlisted(files.size(), 0);
  std::vector<std::string> first_unlisted(files.size());
  if (ix.weight_map.size() != ck.tensors.size())
    for (const auto& t : ck.tensors)
      if (!ix.listed.count(t.name) && unlisted[t.file]++ == 0) first_unlisted[t.file] = t.name;
  for (size_t i = 0; i < files.size(); ++i)
    if (unlisted[i])
      ck.warnings.push_back(files[i] + ": " + plural(unlisted[i], "tensor") + " not listed in " + index_path +
                            " (first: '" + first_unlisted[i] + "')");

  // metadata.total_size is advisory (transformers computes it its own way); never fatal.
  json index_meta = json::object();
  if (const json* m = &ix.metadata; !m->is_null()) {
    if (m->is_object()) {
      index_meta = *m;
      if (auto ts = m->find("total_size"); ts != m->end()) {
        const uint64_t sum = ck.total_bytes();
        if (!ts->is_number() || (ts->is_number_float() ? ts->get<double>() != static_cast<double>(sum)
                                                       : !ts->is_number_unsigned() || ts->get<uint64_t>() != sum))
          ck.warnings.push_back(index_path + ": metadata.total_size is " +
                                (ts->is_number() ? ts->dump() : std::string("a ") + ts->type_name()) +
                                " but the tensors take " +
                                std::to_string(sum) + " bytes");
      }
    } else {
      ck.warnings.push_back(index_path + ": \"metadata\" is a " + std::string(m->type_name()) + ", ignored");
    }
  }
  ck.metadata["index"] = std::move(index_meta);
  return ck;
}

}  // namespace

Checkpoint read_index(const std::string& index_path) {
  Index ix = read_index_doc(FileSource(index_path));
  const auto shard_paths = index_shards(ix);
  return index_checkpoint(ix, shard_paths, local_shards(shard_paths, index_path), open_local_source, true);
}

Checkpoint read_index(const std::string& index_path, const SourceOpener& open) {
  const auto index = open(index_path);
  if (!index) throw Error("index.missing", "index file does not exist", {.file = index_path});
  Index ix = read_index_doc(*index);
  const auto shard_paths = index_shards(ix);
  std::vector<std::string> files;
  for (const auto& [shard, path] : shard_paths) files.push_back(path);
  return index_checkpoint(ix, shard_paths, files, open, false);
}

Checkpoint merge_shards(const std::string& display_path, const std::vector<std::string>& files) {
  if (files.empty()) throw Error("shards.none", "no shard files to read", {.file = display_path});
  Checkpoint ck = read_and_merge(files, open_local_source, true);
  ck.path = display_path;
  return ck;
}

}  // namespace nunchaku
