#include "hub/remote.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/source.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "format/source_readers.hpp"
#include "hub/hub_errors.hpp"
#include "hub/http.hpp"
#include "hub/repo_files.hpp"
#include "hub/response.hpp"
#include "hub/url.hpp"
#include "io/atomic_output.hpp"

namespace nunchaku::hub {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxJson = 100'000'000;        // config.json, the index

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
  return read_header_prefix(display_path(ref, sha, f.path), f.size, gguf, [&](uint64_t first, uint64_t last) {
    auto resp = http.get(file_url(env, ref, sha, f.path), std::pair<uint64_t, uint64_t>{first, last}, last - first + 1);
    check_response(resp, ref, env, f.path);
    return resp;
  });
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
  return parse_manifest(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
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
  write_cached(dir + "/" + manifest_name(ref), manifest_text(m, ref.id, sha));  // last: the commit is complete
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
  return parse_listing(resp.body, resp.url);
}

std::vector<std::string> remote_index_shards(const RepoRef& ref, const RepoListing& listing, const std::string& index,
                                             const HubEnv& env, RemoteStats& stats) {
  Counted counted(stats);
  HttpClient http(env, counted.counters);
  return index_shards(fetch_whole(http, ref, env, listing.sha, index), display_path(ref, listing.sha, index));
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
  if (w.index) weight_names = index_shards(files[w.entry], display_path(ref, listing.sha, w.entry));
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
