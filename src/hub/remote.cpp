#include "hub/remote.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/source.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "format/source_readers.hpp"
#include "hub/hub_errors.hpp"
#include "hub/http.hpp"
#include "hub/repo_files.hpp"
#include "hub/url.hpp"
#include "io/atomic_output.hpp"

namespace nunchaku::hub {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kSafetensorsFirst = 100'001;   // bytes=0-100000, as huggingface_hub and hf-mem
constexpr uint64_t kGgufFirst = 1u << 20;         // 1 MiB, doubling
constexpr uint64_t kMaxHeaderBytes = 256u << 20;  // no header is read past this
constexpr uint64_t kMaxJson = 100'000'000;        // config.json, the index

// Thrown by PrefixSource while fetching: the reader wants bytes up to `end` (not an Error,
// so no reader's handler takes it for a broken file).
struct NeedBytes {
  uint64_t end;
};

// A remote file's first bytes, with its true size: the format readers parse headers from
// it as from the file itself. A read past the bytes held throws NeedBytes (while fetching)
// or Error hub.header_cache (a cached header that is shorter than it was).
class PrefixSource final : public Source {
 public:
  PrefixSource(std::string path, uint64_t size, const std::string& bytes, bool fetching)
      : path_(std::move(path)), size_(size), bytes_(bytes), fetching_(fetching) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, void* buf, size_t n) const override {
    if (offset + n > size_)
      throw Error("io.short_read", "read past the end of the file", {.file = path_, .offset = offset});
    if (offset + n > bytes_.size()) {
      if (fetching_) throw NeedBytes{offset + n};
      throw Error("hub.header_cache", "the cached header ends before byte " + std::to_string(offset + n),
                  {.file = path_, .hint = "remove the header cache folder and run again"});
    }
    std::copy_n(bytes_.data() + offset, n, static_cast<char*>(buf));
  }

 private:
  std::string path_;
  uint64_t size_;
  const std::string& bytes_;
  bool fetching_;
};

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

std::string file_url(const HubEnv& env, const RepoRef& ref, const std::string& sha, const std::string& path) {
  return env.endpoint + "/" + ref.id + "/resolve/" + sha + "/" + percent_encode(path, true);
}

std::string display_path(const RepoRef& ref, const std::string& sha, const std::string& path) {
  return "hf://" + ref.id + "@" + sha + "/" + path;
}

std::string cache_dir(const HubEnv& env, const RepoRef& ref, const std::string& sha) {
  return env.header_cache + "/" + repo_folder_name(ref.id) + "/" + sha;
}

// Runs fn(i) for i in [0, n) on up to `threads` threads, each with its own HttpClient; the
// first exception is rethrown after all have stopped.
template <class Fn>
void parallel_fetch(size_t n, int threads, const HubEnv& env, HttpCounters& counters, Fn fn) {
  std::atomic<size_t> next{0};
  std::exception_ptr first;
  std::mutex m;
  auto work = [&] {
    HttpClient http(env, counters);
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(http, i);
      } catch (...) {
        std::lock_guard lock(m);
        if (!first) first = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t k = std::min<size_t>(n, size_t(std::max(1, threads)));
  for (size_t t = 1; t < k; ++t) pool.emplace_back(work);
  if (n) work();
  for (auto& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

struct Counted {
  HttpCounters counters;
  RemoteStats& stats;
  explicit Counted(RemoteStats& s) : stats(s) {}
  ~Counted() {
    stats.requests += counters.requests;
    stats.bytes += counters.bytes;
  }
};

std::string fetch_whole(HttpClient& http, const RepoRef& ref, const HubEnv& env, const std::string& sha, const std::string& path) {
  auto resp = http.get(file_url(env, ref, sha, path), std::nullopt, kMaxJson);
  check_response(resp, ref, env, path);
  return std::move(resp.body);
}

// The header bytes of one weight file: ranges from byte 0 until its reader parses.
std::string fetch_header(HttpClient& http, const RepoRef& ref, const HubEnv& env, const std::string& sha, const RemoteFile& f,
                         bool gguf) {
  std::string bytes;
  uint64_t want = std::min<uint64_t>(f.size, gguf ? kGgufFirst : kSafetensorsFirst);
  const std::string name = display_path(ref, sha, f.path);
  for (;;) {
    if (want > bytes.size()) {
      auto resp = http.get(file_url(env, ref, sha, f.path), std::pair<uint64_t, uint64_t>{bytes.size(), want - 1}, want - bytes.size());
      check_response(resp, ref, env, f.path);
      if (resp.status == 200 && !bytes.empty()) bytes.clear();  // the server ignored Range: the body starts at 0
      bytes += resp.body;
      if (bytes.size() < want && bytes.size() < f.size)
        throw Error("hub.short_read", "the Hub sent " + std::to_string(bytes.size()) + " bytes of the " +
                                          std::to_string(want) + " asked for", {.file = name});
    }
    try {
      PrefixSource src(name, f.size, bytes, true);
      if (gguf) read_gguf(src);
      else read_safetensors(src);
      return bytes;
    } catch (const NeedBytes& need) {
      if (need.end > kMaxHeaderBytes)
        throw Error("hub.header_too_large", "the header runs past " + std::to_string(kMaxHeaderBytes) + " bytes",
                    {.file = name});
      want = std::min<uint64_t>(f.size, gguf ? std::max<uint64_t>(need.end, 2 * bytes.size()) : need.end);
    }
  }
}

std::vector<std::string> shard_names(const std::string& index_text, const std::string& where) {
  const json doc = json::parse(index_text, nullptr, false);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object())
    throw Error("index.no_weight_map", "index has no \"weight_map\" object", {.file = where});
  std::set<std::string> names;
  for (const auto& [k, v] : doc["weight_map"].items())
    if (v.is_string()) names.insert(v.get<std::string>());
  return {names.begin(), names.end()};
}

// What the header cache holds for one commit (manifest.json): the weight files with
// sizes, and which file open starts from.
struct Manifest {
  std::string entry;  // "" = shards merged in order
  bool index = false, gguf = false;
  std::vector<RemoteFile> weights;
  bool config = false;
};

json to_json(const Manifest& m, const RepoRef& ref, const std::string& sha) {
  json files = json::array();
  for (const auto& f : m.weights) files.push_back({{"path", f.path}, {"size", f.size}});
  return {{"format_version", 1}, {"repo", ref.id}, {"sha", sha}, {"entry", m.entry}, {"index", m.index},
          {"gguf", m.gguf},      {"config", m.config}, {"weights", files}};
}

// One manifest per way of picking the weights (a commit of a GGUF repo holds many models).
std::string manifest_name(const RepoRef& ref) {
  if (!ref.file.empty()) return "manifest-file-" + percent_encode(ref.file, false) + ".json";
  if (!ref.quant.empty()) return "manifest-quant-" + ref.quant + ".json";
  return "manifest.json";
}

std::optional<Manifest> read_manifest(const std::string& dir, const RepoRef& ref) {
  std::error_code ec;
  const std::string path = dir + "/" + manifest_name(ref);
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  FileSource src(path);
  const auto bytes = src.read_vec(0, static_cast<size_t>(std::min<uint64_t>(src.size(), kMaxJson)));
  const json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (!j.is_object() || j.value("format_version", 0) != 1 || !j.contains("weights") || !j["weights"].is_array()) return std::nullopt;
  Manifest m;
  m.entry = j.value("entry", "");
  m.index = j.value("index", false);
  m.gguf = j.value("gguf", false);
  m.config = j.value("config", false);
  for (const auto& f : j["weights"])
    if (f.is_object() && f.contains("path") && f["path"].is_string() && f.contains("size") && f["size"].is_number_unsigned())
      m.weights.push_back({f["path"].get<std::string>(), f["size"].get<uint64_t>()});
  return m;
}

std::string read_text(const std::string& path) {
  FileSource src(path);
  const auto bytes = src.read_vec(0, static_cast<size_t>(src.size()));
  return {bytes.begin(), bytes.end()};
}

// The Checkpoint from a commit's cached headers: each weight file a PrefixSource.
Checkpoint checkpoint_from_cache(const RepoRef& ref, const std::string& sha, const std::string& dir, const Manifest& m) {
  std::map<std::string, std::pair<uint64_t, std::string>> held;  // display path -> size, bytes
  for (const auto& f : m.weights) held[display_path(ref, sha, f.path)] = {f.size, read_text(dir + "/headers/" + f.path)};
  if (m.index) {
    const std::string text = read_text(dir + "/" + m.entry);
    held[display_path(ref, sha, m.entry)] = {text.size(), text};
  }
  const SourceOpener open = [&](const std::string& path) -> std::unique_ptr<Source> {
    auto it = held.find(path);
    if (it == held.end()) return nullptr;
    return std::make_unique<PrefixSource>(path, it->second.first, it->second.second, false);
  };
  Checkpoint ck;
  if (m.index) {
    ck = read_index(display_path(ref, sha, m.entry), open);
  } else if (m.gguf) {
    ck = read_gguf_parts(display_path(ref, sha, m.entry), open);
  } else {
    for (size_t i = 0; i < m.weights.size(); ++i) {
      const auto src = open(display_path(ref, sha, m.weights[i].path));
      append_shard(ck, read_safetensors(*src), i == 0);
    }
  }
  std::stable_sort(ck.tensors.begin(), ck.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  ck.path = ref.display();
  if (m.config) ck.config_path = dir + "/config.json";
  return ck;
}

// A cache: whole-or-absent files (the rename), no fsync (a lost file is fetched again).
void write_cached(const std::string& path, std::string_view bytes) {
  AtomicOutput out(path, {.durable = false});
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), out.file()) != bytes.size())
    throw Error("io.write", "cannot write the header cache", {.file = path});
  out.commit();
}

void write_cache(const std::string& dir, const RepoRef& ref, const std::string& sha, const Manifest& m,
                 const std::map<std::string, std::string>& files, const HubEnv& env) {
  std::error_code ec;
  for (const auto& [path, bytes] : files) {
    const fs::path p = fs::path(dir) / path;
    fs::create_directories(p.parent_path(), ec);
    write_cached(p.string(), bytes);
  }
  write_cached(dir + "/" + manifest_name(ref), to_json(m, ref, sha).dump(1) + "\n");  // last: the commit is complete
  if (!is_commit_sha(ref.revision)) {
    const fs::path r = fs::path(env.header_cache) / repo_folder_name(ref.id) / "refs" / ref.revision;
    fs::create_directories(r.parent_path(), ec);
    write_cached(r.string(), sha);
  }
}

}  // namespace

RepoListing fetch_listing(const RepoRef& ref, const HubEnv& env, RemoteStats& stats) {
  Counted counted(stats);
  HttpClient http(env, counted.counters);
  auto resp = http.get(env.endpoint + "/api/models/" + ref.id + "/revision/" + percent_encode(ref.revision, false) + "?blobs=true",
                       std::nullopt, kMaxJson);
  check_response(resp, ref, env, "");
  const json j = json::parse(resp.body, nullptr, false);
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string() || !j.contains("siblings") || !j["siblings"].is_array())
    throw Error("hub.bad_listing", "the Hub's model info has no \"sha\" and \"siblings\"", {.file = resp.url});
  RepoListing l;
  l.sha = j["sha"].get<std::string>();
  if (!is_commit_sha(l.sha)) throw Error("hub.bad_listing", "the Hub's model info names no commit sha", {.file = resp.url});
  for (const auto& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
    RemoteFile f{s["rfilename"].get<std::string>()};
    if (s.contains("size") && s["size"].is_number_unsigned()) f.size = s["size"].get<uint64_t>();
    if (s.contains("lfs") && s["lfs"].is_object() && s["lfs"].contains("size") && s["lfs"]["size"].is_number_unsigned())
      f.size = s["lfs"]["size"].get<uint64_t>();
    l.files.push_back(std::move(f));
  }
  return l;
}

std::vector<std::string> remote_index_shards(const RepoRef& ref, const RepoListing& listing, const std::string& index,
                                             const HubEnv& env, RemoteStats& stats) {
  Counted counted(stats);
  HttpClient http(env, counted.counters);
  return shard_names(fetch_whole(http, ref, env, listing.sha, index), display_path(ref, listing.sha, index));
}

std::optional<Checkpoint> cached_remote_checkpoint(const RepoRef& ref, const HubEnv& env) {
  std::string sha = ref.revision;
  if (!is_commit_sha(sha)) {
    const std::string r = env.header_cache + "/" + repo_folder_name(ref.id) + "/refs/" + ref.revision;
    std::error_code ec;
    if (!fs::is_regular_file(r, ec)) return std::nullopt;
    sha = read_text(r);
  }
  if (!is_commit_sha(sha)) return std::nullopt;
  const std::string dir = cache_dir(env, ref, sha);
  const auto m = read_manifest(dir, ref);
  if (!m) return std::nullopt;
  return checkpoint_from_cache(ref, sha, dir, *m);
}

Checkpoint remote_checkpoint(const RepoRef& ref, const HubEnv& env, RemoteStats& stats) {
  // A commit sha names immutable files: the cache answers without a request.
  if (is_commit_sha(ref.revision))
    if (auto ck = cached_remote_checkpoint(ref, env)) {
      stats.header_cache = true;
      return std::move(*ck);
    }
  const RepoListing listing = fetch_listing(ref, env, stats);
  const std::string dir = cache_dir(env, ref, listing.sha);
  std::vector<std::string> names;
  for (const auto& f : listing.files) names.push_back(f.path);
  const WeightFiles w = choose_weights(names, ref, ref.page_url(env.endpoint));
  if (auto m = read_manifest(dir, ref); m && m->entry == w.entry) {
    stats.header_cache = true;
    return checkpoint_from_cache(ref, listing.sha, dir, *m);
  }
  if (!w.gguf && !w.entry.empty() && (ends_with(w.entry, ".bin") || w.entry == "pytorch_model.bin.index.json"))
    throw Error("hub.remote_pytorch", ref.display() + " has PyTorch .bin weights, whose tensor list is at the end of each zip",
                {.file = ref.page_url(env.endpoint), .hint = "download them first: " + download_command(ref, {})});

  Counted counted(stats);
  std::map<std::string, std::string> files;  // cache-relative path -> bytes
  Manifest m{w.entry, w.index, w.gguf, {}, false};
  // config.json and the index, whole.
  std::vector<std::string> whole;
  if (std::find(names.begin(), names.end(), "config.json") != names.end()) whole.push_back("config.json");
  if (w.index) whole.push_back(w.entry);
  std::vector<std::string> got(whole.size());
  parallel_fetch(whole.size(), env.parallel, env, counted.counters,
                 [&](HttpClient& http, size_t i) { got[i] = fetch_whole(http, ref, env, listing.sha, whole[i]); });
  for (size_t i = 0; i < whole.size(); ++i) files[whole[i]] = got[i];
  m.config = files.count("config.json") > 0;
  std::vector<std::string> weight_names = w.files;
  if (w.index) weight_names = shard_names(files[w.entry], display_path(ref, listing.sha, w.entry));
  for (const auto& n : weight_names) {
    auto it = std::find_if(listing.files.begin(), listing.files.end(), [&](const RemoteFile& f) { return f.path == n; });
    if (it == listing.files.end())
      throw Error("index.missing_shard", "shard \"" + n + "\" named by the index is not in the repo",
                  {.file = display_path(ref, listing.sha, w.entry)});
    m.weights.push_back(*it);
  }
  std::vector<std::string> headers(m.weights.size());
  std::mutex progress;
  size_t done = 0;
  parallel_fetch(m.weights.size(), env.parallel, env, counted.counters, [&](HttpClient& http, size_t i) {
    headers[i] = fetch_header(http, ref, env, listing.sha, m.weights[i], w.gguf);
    std::lock_guard lock(progress);
    if (env.on_header) env.on_header(++done, m.weights.size());
  });
  for (size_t i = 0; i < m.weights.size(); ++i) files["headers/" + m.weights[i].path] = headers[i];
  write_cache(dir, ref, listing.sha, m, files, env);
  log::info("{}: headers of {} files from {} ({} requests, {} bytes)", ref.display(), m.weights.size(), env.endpoint,
            counted.counters.requests.load(), counted.counters.bytes.load());
  return checkpoint_from_cache(ref, listing.sha, dir, m);
}

}  // namespace nunchaku::hub
