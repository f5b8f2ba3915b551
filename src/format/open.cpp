#include "format/open.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include <sys/stat.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/units.hpp"
#include "core/file.hpp"
#include "format/readers.hpp"
#include "format/source_readers.hpp"
#include "core/source.hpp"

namespace nunchaku {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

std::vector<std::string> list_with_ext(const std::string& dir, std::initializer_list<std::string_view> exts) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec)  // unreadable (permissions): say so, not "no checkpoint files"
    throw Error("open.unreadable", "cannot read the directory: " + ec.message(), {.file = dir});
  for (const auto& e : it) {
    if (!e.is_regular_file(ec)) continue;
    std::string p = e.path().string();
    for (auto x : exts)
      if (ends_with(p, x)) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string config_beside(const std::string& path, bool is_dir) {
  fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  fs::path c = dir / "config.json";
  std::error_code ec;
  return fs::is_regular_file(c, ec) ? c.string() : std::string();
}

// Every file is a part of the same split GGUF ("<prefix>-0000K-of-0000N.gguf").
bool one_split_set(const std::vector<std::string>& files) {
  std::optional<GgufSplitName> first;
  for (const auto& f : files) {
    auto s = parse_gguf_split_name(f);
    if (!s) return false;
    if (!first) first = s;
    else if (s->prefix != first->prefix || s->count != first->count) return false;
  }
  return first.has_value();
}

Checkpoint read_one_file(const std::string& path) {
  FileSource src(path);
  switch (sniff_format(path)) {
    case SniffedFormat::GGUF: return read_gguf_parts(path);
    case SniffedFormat::PyTorchZip:
    case SniffedFormat::PyTorchLegacy:
    case SniffedFormat::PyTorchTar: return read_pytorch(src);
    case SniffedFormat::Safetensors: return read_safetensors(src);
    case SniffedFormat::Unknown: break;
  }
  if (src.size() == 0) throw Error("format.empty", "file is empty", {.file = path});
  throw Error("format.unknown", "not a safetensors, GGUF or PyTorch file (unrecognised first bytes)",
              {.file = path, .offset = 0,
               .hint = "nunchaku reads .safetensors, .gguf, and torch.save .bin/.pt/.pth files"});
}

// The weights of one format in a directory, and what to pass to open just them.
struct FormatFiles {
  std::string name;                 // "safetensors", "PyTorch", "GGUF"
  std::vector<std::string> files;   // weight files (and the index), sorted
  std::string choose;               // the path that opens this format alone, "" if none does
};

std::string file_name(const std::string& p) { return fs::path(p).filename().string(); }

// "model.gguf", "a.bin and b.bin", "model-00001-of-00005.safetensors and 4 more".
std::string some_files(const std::vector<std::string>& files) {
  if (files.size() == 1) return file_name(files[0]);
  if (files.size() == 2) return file_name(files[0]) + " and " + file_name(files[1]);
  return file_name(files[0]) + " and " + std::to_string(files.size() - 1) + " more";
}

FormatFiles format_files(const std::string& dir, std::string name, const std::string& index,
                         std::vector<std::string> files) {
  FormatFiles f{std::move(name), std::move(files), ""};
  std::error_code ec;
  const std::string idx = (fs::path(dir) / index).string();
  if (!index.empty() && fs::is_regular_file(idx, ec)) {
    f.choose = idx;
    f.files.insert(f.files.begin(), idx);
  } else if (f.files.size() == 1 || (f.name == "GGUF" && one_split_set(f.files))) {
    f.choose = f.files[0];
  }
  return f;
}

// A directory holding GGUF weights beside safetensors or PyTorch ones is ambiguous (a
// quantized copy is not the same model): exit 2 naming both and the path that opens each.
// Safetensors beside PyTorch .bin/.pt files reads the safetensors, as transformers and vLLM
// do (HF repos ship both; trainer checkpoints hold optimizer.pt, training_args.bin), with
// a warning when those files look like weights.
[[noreturn]] void throw_mixed(const std::string& dir, const std::vector<FormatFiles>& present) {
  std::string what, choose;
  for (size_t i = 0; i < present.size(); ++i) {
    const auto& f = present[i];
    what += (i ? (i + 1 == present.size() ? " and " : ", ") : "") + f.name + " (" + some_files(f.files) + ")";
    if (!f.choose.empty()) choose += (choose.empty() ? "" : " or ") + f.choose;
  }
  throw Error("open.mixed_formats", "the directory holds weights in " + std::to_string(present.size()) + " formats: " + what,
              {.file = dir,
               .hint = choose.empty() ? "move the files of the format you do not want out of the directory"
                                      : "name the one to use: " + choose});
}

Checkpoint open_directory(const std::string& path) {
  const auto st = format_files(path, "safetensors", "model.safetensors.index.json", list_with_ext(path, {".safetensors"}));
  const auto pt = format_files(path, "PyTorch", "pytorch_model.bin.index.json", list_with_ext(path, {".bin", ".pt", ".pth"}));
  const auto gg = format_files(path, "GGUF", "", list_with_ext(path, {".gguf"}));
  if (!gg.files.empty() && (!st.files.empty() || !pt.files.empty())) {
    std::vector<FormatFiles> present;
    for (const auto* f : {&st, &pt, &gg})
      if (!f->files.empty()) present.push_back(*f);
    throw_mixed(path, present);
  }
  Checkpoint ck;
  if (!st.files.empty()) {
    ck = !st.choose.empty() && ends_with(st.choose, ".index.json") ? read_index(st.choose)
         : st.files.size() == 1                                    ? read_one_file(st.files[0])
                                                                   : merge_shards(path, st.files);
    const bool pt_weights = std::any_of(pt.files.begin(), pt.files.end(), [](const std::string& f) {
      return file_name(f).rfind("pytorch_model", 0) == 0 || file_name(f).rfind("model", 0) == 0;
    });
    if (pt_weights)
      ck.warnings.push_back("the directory also holds PyTorch weights (" + some_files(pt.files) +
                            "); read the safetensors, as transformers does" +
                            (pt.choose.empty() ? std::string() : " (pass " + pt.choose + " for the others)"));
  } else if (!pt.files.empty()) {
    ck = !pt.choose.empty() && ends_with(pt.choose, ".index.json") ? read_index(pt.choose)
         : pt.files.size() == 1                                    ? read_one_file(pt.files[0])
                                                                   : merge_shards(path, pt.files);
  } else if (!gg.choose.empty()) {
    ck = read_one_file(gg.files[0]);
  } else if (gg.files.size() > 1) {
    throw Error("open.ambiguous", std::to_string(gg.files.size()) + " GGUF files in the directory (" + some_files(gg.files) + ")",
                {.file = path, .hint = "pass one .gguf file (or the first part of a split GGUF)"});
  } else if (std::error_code ec; std::filesystem::is_regular_file(std::filesystem::path(path) / "model_index.json", ec)) {
    throw Error("open.pipeline", "a diffusers pipeline (model_index.json): its weights are in one folder per part",
                {.file = path, .hint = fmt::format("`nunchaku estimate {0}` sizes the whole pipeline; name a part for the "
                                                   "others, e.g. {0}/transformer", path)});
  } else {
    throw Error("open.no_weights", "no checkpoint files in the directory", {.file = path,
                .hint = "expected *.safetensors, *.index.json, *.bin/*.pt/*.pth or *.gguf"});
  }
  return ck;
}

// Tensor extents of every checkpoint file opened, by canonical path, for core/file.hpp's
// namer: a mapped-read fault (the file shrank) names the tensor whose bytes it hit, from
// the header as it was when opened. Reopening a file replaces its entry.
struct Extent {
  uint64_t begin, end;
  std::string name;
};
std::mutex g_extents_mutex;
std::map<std::string, std::vector<Extent>> g_extents;

void remember_extents(const Checkpoint& ck) {
  std::vector<std::vector<Extent>> per_file(ck.files.size());
  for (const auto& t : ck.tensors)
    if (t.file < per_file.size()) per_file[t.file].push_back({t.offset, t.offset + t.nbytes, t.name});
  std::lock_guard lock(g_extents_mutex);
  for (size_t i = 0; i < ck.files.size(); ++i) {
    std::error_code ec;
    const fs::path canon = fs::weakly_canonical(ck.files[i].path, ec);
    g_extents[ec ? ck.files[i].path : canon.string()] = std::move(per_file[i]);
  }
}

std::string tensor_at(const std::string& file, uint64_t offset) {
  std::lock_guard lock(g_extents_mutex);
  auto it = g_extents.find(file);
  if (it == g_extents.end()) return "";
  for (const auto& e : it->second)
    if (offset >= e.begin && offset < e.end) return e.name;
  return "";
}

}  // namespace

SniffedFormat sniff_format(const std::string& path) { return sniff_source(FileSource(path)); }

SniffedFormat sniff_source(const Source& src) {
  uint8_t b[512] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), sizeof b));
  src.read_at(0, b, n);
  if (n >= 4 && std::memcmp(b, "GGUF", 4) == 0) return SniffedFormat::GGUF;
  if (n >= 4 && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4) return SniffedFormat::PyTorchZip;
  if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return SniffedFormat::PyTorchLegacy;
  if (n >= 262 && std::memcmp(b + 257, "ustar", 5) == 0) return SniffedFormat::PyTorchTar;
  if (n >= 9 && b[8] == '{') return SniffedFormat::Safetensors;
  // A safetensors header may start with whitespace before '{'.
  if (n >= 9 && (b[8] == ' ' || b[8] == '\n')) return SniffedFormat::Safetensors;
  return SniffedFormat::Unknown;
}

std::unique_ptr<Source> open_local_source(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  return std::make_unique<FileSource>(path);
}

Checkpoint open_checkpoint(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  set_mapped_tensor_namer(&tensor_at);
  std::error_code ec;
  if (struct stat st {}; ::stat(path.c_str(), &st) != 0)  // ENOENT, but also ELOOP, EACCES, ENOTDIR
    throw Error("open.not_found", fmt::format("cannot open: {}", std::strerror(errno)), {.file = path});
  Checkpoint ck;
  bool dir = fs::is_directory(path, ec);
  if (dir) {
    ck = open_directory(path);
  } else if (ends_with(path, ".index.json")) {
    ck = read_index(path);
  } else {
    ck = read_one_file(path);
  }
  // The contract of Checkpoint::tensors: file order, then offset order (pickle
  // order in PyTorch files is not storage order). Stable, so aliases keep their order.
  // Safetensors shards arrive sorted: the check saves moving 100k tensors through a buffer.
  auto file_order = [](const TensorInfo& a, const TensorInfo& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  };
  if (!std::is_sorted(ck.tensors.begin(), ck.tensors.end(), file_order))
    std::stable_sort(ck.tensors.begin(), ck.tensors.end(), file_order);
  ck.path = path;
  if (ck.config_path.empty()) ck.config_path = config_beside(path, dir);
  remember_extents(ck);
  log::info("opened {}: {}, {}, {} ({:.1f} ms, headers only)", path, format_name(ck.format), plural(ck.files.size(), "file"),
            plural(ck.tensors.size(), "tensor"), std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  for (const auto& f : ck.files) log::debug("  file {} ({})", f.path, format_bytes(f.bytes));
  if (!ck.config_path.empty()) log::debug("  config {}", ck.config_path);
  return ck;
}

}  // namespace nunchaku
