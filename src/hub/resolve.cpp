#include "hub/resolve.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/source.hpp"
#include "hub/hf_cache.hpp"
#include "hub/repo_files.hpp"
#include "hub/response.hpp"

namespace nunchaku::hub {
namespace fs = std::filesystem;

namespace {

bool has(const std::vector<std::string>& files, const std::string& f) {
  return std::find(files.begin(), files.end(), f) != files.end();
}

// The shards an index names (its weight_map values), or {} when it is unreadable (open
// reports that, with the byte offset).
std::vector<std::string> index_shard_names(const std::string& index_path) {
  try {
    FileSource src(index_path);
    if (src.size() > 100'000'000) return {};
    const auto bytes = src.read_vec(0, static_cast<size_t>(src.size()));
    return index_shards(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), index_path);
  } catch (const Error&) {
    return {};
  }
}

// The files of `need` that the snapshot lacks, given the weights chosen from its files.
std::vector<std::string> missing_in_snapshot(const Snapshot& snap, const std::vector<std::string>& files,
                                             const WeightFiles& w, Need need) {
  std::vector<std::string> want = need.weights || w.gguf ? w.files : std::vector<std::string>{};
  if (w.index && (need.weights || w.gguf))
    for (const auto& s : index_shard_names(snap.dir + "/" + w.entry)) want.push_back(s);
  if (need.tokenizer && !w.gguf) {
    want.push_back("config.json");
    want.push_back("tokenizer.json");
  }
  std::vector<std::string> missing;
  for (const auto& f : want)
    if (!has(files, f) && !has(missing, f)) missing.push_back(f);
  return missing;
}

// The folder when open_checkpoint picks the same weights from it (and run finds the
// tokenizer beside them); the file when it is one GGUF of several or named by --file.
std::string open_path(const Snapshot& snap, const WeightFiles& w, const RepoRef& ref, const std::vector<std::string>& files) {
  const bool other_gguf = std::any_of(files.begin(), files.end(), [](const std::string& f) {
    return f.size() > 5 && f.compare(f.size() - 5, 5, ".gguf") == 0;
  });
  if (w.entry.empty() || (!w.gguf && ref.file.empty() && !other_gguf)) return snap.dir;
  return snap.dir + "/" + w.entry;
}

[[noreturn]] void throw_not_cached(const RepoRef& ref, const std::string& looked_at, const HubEnv& env, const std::string& why) {
  throw Error("hub.not_cached", ref.display() + ": not a file or folder, and not in the local cache: " + looked_at,
              {.hint = why + "; fetch it with `" + download_command(ref, {}) + "` (HF cache: " + env.hub_cache + ")"});
}

[[noreturn]] void throw_incomplete(const RepoRef& ref, const std::string& dir, const std::vector<std::string>& missing) {
  std::string names;
  for (size_t i = 0; i < missing.size() && i < 6; ++i) names += (i ? ", " : "") + missing[i];
  if (missing.size() > 6) names += ", ... (" + std::to_string(missing.size() - 6) + " more)";
  throw Error("hub.incomplete", ref.display() + ": the local cache lacks " + std::to_string(missing.size()) +
                                    (missing.size() == 1 ? " file: " : " files: ") + names,
              {.file = dir, .hint = "fetch them with `" + download_command(ref, missing) + "`"});
}

// The files the command needs that the Hub has and the snapshot (or no snapshot) lacks.
std::vector<std::string> missing_from_listing(const RepoRef& ref, const RepoListing& listing, const std::vector<std::string>& local,
                                              Need need, RemoteStats& stats, const HubEnv& env) {
  std::vector<std::string> names;
  for (const auto& f : listing.files) names.push_back(f.path);
  const WeightFiles w = choose_weights(names, ref, ref.page_url(env.endpoint));
  if (need.tokenizer && !w.gguf && !has(names, "tokenizer.json"))  // downloading would not help
    throw Error("hub.no_tokenizer", ref.display() + " has no tokenizer.json, which nunchaku's tokenizer reads",
                {.file = ref.page_url(env.endpoint), .hint = "use a repo that ships tokenizer.json, or a GGUF with its vocabulary"});
  std::vector<std::string> want = need.weights || w.gguf ? w.files : std::vector<std::string>{};
  if (w.index && (need.weights || w.gguf))
    for (const auto& s : remote_index_shards(ref, listing, w.entry, env, stats)) want.push_back(s);
  for (const auto& f : side_files(names, need.tokenizer)) want.push_back(f);
  std::vector<std::string> missing;
  for (const auto& f : want)
    if (!has(local, f) && !has(missing, f)) missing.push_back(f);
  return missing;
}

}  // namespace

Resolved resolve_model(const std::string& arg, const std::string& file, Need need, const HubEnv& env) {
  Resolved r;
  std::error_code ec;
  if (fs::exists(arg, ec) || arg.empty()) {
    if (!file.empty())
      throw Error("usage.file", "--file picks a file of a Hub repo; " + arg + " is a path on disk",
                  {.hint = "pass the file's path instead: " + (fs::path(arg) / file).string()});
    r.path = arg;
    return r;
  }
  auto ref = parse_repo_ref(arg, env.endpoint);
  if (!ref) {  // not a Hub id either: open reports the missing path
    r.path = arg;
    return r;
  }
  if (!file.empty()) {
    if (!ref->file.empty() || !ref->quant.empty())
      throw Error("usage.file", "--file and a file or quantization tag in " + arg + " both pick the file; give one");
    ref->file = file;
  }
  r.ref = ref;
  std::string looked_at;
  const auto snap = find_snapshot(env.hub_cache, *ref, looked_at);
  std::vector<std::string> local;
  if (snap) {
    local = snapshot_files(snap->dir);
    std::optional<WeightFiles> w;
    try {
      w = choose_weights(local, *ref, snap->dir);
    } catch (const Error& e) {
      if (e.code() != "hub.no_weights") throw;  // no weights yet: maybe on the Hub
      looked_at = snap->dir + " (no weights)";
      if (!need.weights && has(local, "tokenizer.json")) {  // tokenize: the tokenizer is enough
        r.path = snap->dir;
        return r;
      }
    }
    if (w) {
      const auto missing = missing_in_snapshot(*snap, local, *w, need);
      if (missing.empty()) {
        r.path = open_path(*snap, *w, *ref, local);
        log::info("{}: {} in the local cache", ref->display(), r.path);
        return r;
      }
      if (env.offline || need.data) throw_incomplete(*ref, snap->dir, missing);
      looked_at = snap->dir + " (incomplete)";
    }
  }
  if (env.offline && !need.data)
    if (auto ck = cached_remote_checkpoint(*ref, env)) {  // headers read by an earlier call
      r.remote = std::move(*ck);
      r.stats.header_cache = true;
      return r;
    }
  if (env.offline)
    throw_not_cached(*ref, looked_at, env, "HF_HUB_OFFLINE is set, so the Hub was not asked");
  if (need.data) {
    // Name exactly what is missing: the Hub's listing says which files the model has.
    RepoListing listing;
    try {
      listing = fetch_listing(*ref, env, r.stats);
    } catch (const Error& e) {
      if (e.code() != "hub.network") throw;
      throw_not_cached(*ref, looked_at, env, "the Hub could not be reached (" + e.message() + ")");
    }
    const auto missing = missing_from_listing(*ref, listing, local, need, r.stats, env);
    if (missing.empty()) throw_not_cached(*ref, looked_at, env, "the Hub lists every file it needs, but the local cache does not hold them");
    throw_incomplete(*ref, snap ? snap->dir : looked_at, missing);
  }
  r.remote = remote_checkpoint(*ref, env, r.stats);
  return r;
}

}  // namespace nunchaku::hub
