// Split GGUF: llama.cpp's gguf-split and gguf-py's GGUFWriter(split_max_*) write one
// model as "<prefix>-0000K-of-0000N.gguf", K = 1..N. Every part is a complete GGUF
// file; the first holds all key-values, every part holds split.no (K-1, uint16),
// split.count (N, uint16) and split.tensors.count (tensors over all parts, int32).
// Any part (or the directory, in open.cpp) opens the whole set; each part is read by
// read_gguf and merged in part order, after these checks:
//   every part exists, its split.no and split.count agree with its name,
//   no tensor is in two parts, split.tensors.count equals the tensors found.
#include <cstdio>
#include <filesystem>
#include <unordered_map>

#include "core/error.hpp"
#include "format/readers.hpp"
#include "format/source_readers.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSuffix = ".gguf";
constexpr size_t kDigits = 5;  // llama.cpp and gguf-py both write %05d

bool all_digits(std::string_view s) {
  if (s.size() != kDigits) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::optional<uint64_t> meta_uint(const Checkpoint& ck, const char* key) {
  auto it = ck.metadata.find(key);
  if (it == ck.metadata.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  const int64_t v = it->get<int64_t>();
  return v < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(v));
}

std::string meta_shown(const Checkpoint& ck, const char* key) {
  auto it = ck.metadata.find(key);
  return it == ck.metadata.end() ? std::string("missing") : it->dump();
}

// split.no / split.count of one part against the part number in its name.
void check_part(const Checkpoint& part, const std::string& path, uint32_t no, uint32_t count) {
  const auto n = meta_uint(part, "split.count");
  if (!n || *n != count)
    throw Error("gguf.split_mismatch",
                "split.count is " + meta_shown(part, "split.count") + " but the file name says " +
                    plural(count, "part"),
                {.file = path, .hint = "the parts come from different splits; re-download the whole set"});
  const auto k = meta_uint(part, "split.no");
  if (!k || *k != no - 1)
    throw Error("gguf.split_mismatch",
                "split.no is " + meta_shown(part, "split.no") + " but the file name says part " + std::to_string(no) +
                    " (split.no " + std::to_string(no - 1) + ")",
                {.file = path, .hint = "the parts were renamed or come from different splits"});
}

Checkpoint read_part(const std::string& path, uint32_t no, uint32_t count, const std::string& asked, const SourceOpener& open) {
  const auto missing = [&] {
    return Error("gguf.split_missing_part",
                 "part " + std::to_string(no) + " of " + std::to_string(count) + " of the split GGUF is missing",
                 {.file = asked, .hint = "expected " + path + "; download every part into the same folder"});
  };
  if (!open) {  // the local file system
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) throw missing();
    if (!fs::is_regular_file(st))
      throw Error("gguf.split_missing_part",
                  "part " + std::to_string(no) + " of " + std::to_string(count) + " is not a regular file",
                  {.file = path});
    return read_gguf(FileSource(path));
  }
  const auto src = open(path);
  if (!src) throw missing();
  return read_gguf(*src);
}

}  // namespace

std::optional<GgufSplitName> parse_gguf_split_name(const std::string& path) {
  // "-NNNNN-of-NNNNN.gguf"
  constexpr size_t kTail = 1 + kDigits + 4 + kDigits + kSuffix.size();
  if (path.size() < kTail) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail);
  if (tail[0] != '-' || tail.substr(1 + kDigits, 4) != "-of-" || tail.substr(kTail - kSuffix.size()) != kSuffix)
    return std::nullopt;
  const std::string_view k = tail.substr(1, kDigits), n = tail.substr(1 + kDigits + 4, kDigits);
  if (!all_digits(k) || !all_digits(n)) return std::nullopt;
  GgufSplitName s{path.substr(0, path.size() - kTail), static_cast<uint32_t>(std::stoul(std::string(k))),
                  static_cast<uint32_t>(std::stoul(std::string(n)))};
  if (s.no == 0 || s.count == 0 || s.no > s.count) return std::nullopt;
  return s;
}

std::string gguf_split_path(const std::string& prefix, uint32_t no, uint32_t count) {
  char tail[32];
  std::snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", no, count);
  return prefix + tail;
}

Checkpoint read_gguf_parts(const std::string& path) { return read_gguf_parts(path, nullptr); }

// `open` empty: the local file system, with its own errors for a part that is not a file.
Checkpoint read_gguf_parts(const std::string& path, const SourceOpener& open) {
  Checkpoint given = [&] {
    if (open) {
      const auto src = open(path);
      if (!src) throw Error("gguf.missing", "file does not exist", {.file = path});
      return read_gguf(*src);
    }
    return read_gguf(FileSource(path));
  }();
  const auto name = parse_gguf_split_name(path);
  const auto meta_count = meta_uint(given, "split.count");
  if (!name) {
    if (meta_count && *meta_count > 1)
      throw Error("gguf.split_name",
                  "the file is part of a " + std::to_string(*meta_count) +
                      "-part split GGUF (split.count) but its name does not end in -0000K-of-0000N.gguf",
                  {.file = path, .hint = "give the parts the names gguf-split wrote (model-00001-of-0000" +
                                         std::to_string(*meta_count) + ".gguf, ...)"});
    return given;
  }
  if (name->count == 1 && (!meta_count || *meta_count <= 1)) return given;
  check_part(given, path, name->no, name->count);

  Checkpoint ck;
  std::unordered_map<std::string, uint32_t> owner;  // tensor name -> part number
  for (uint32_t no = 1; no <= name->count; ++no) {
    const std::string part_path = gguf_split_path(name->prefix, no, name->count);
    Checkpoint part = no == name->no ? std::move(given) : read_part(part_path, no, name->count, path, open);
    if (no != name->no) check_part(part, part_path, no, name->count);
    for (const auto& t : part.tensors) {
      auto [it, fresh] = owner.emplace(t.name, no);
      if (!fresh)
        throw Error("gguf.split_duplicate_tensor", "tensor is also in part " + std::to_string(it->second),
                    {.file = part_path, .tensor = t.name, .offset = t.offset});
    }
    append_shard(ck, std::move(part), no == 1);
  }
  const std::string first = gguf_split_path(name->prefix, 1, name->count);
  const auto want = meta_uint(ck, "split.tensors.count");
  if (!want || *want != ck.tensors.size())
    throw Error("gguf.split_tensor_count",
                "split.tensors.count is " + meta_shown(ck, "split.tensors.count") + " but the " +
                    plural(name->count, "part") + " hold " + plural(ck.tensors.size(), "tensor"),
                {.file = first, .hint = "a part is from another split or was rewritten; re-download the set"});
  ck.path = path;
  return ck;
}

}  // namespace nunchaku
