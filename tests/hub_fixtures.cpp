#include "tests/hub_fixtures.hpp"

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"

namespace nunchaku::test {
namespace fs = std::filesystem;

namespace {
const char* const kHubVariables[] = {"HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
                                     "HF_HUB_OFFLINE", "HF_ENDPOINT", "HF_HUB_DOWNLOAD_TIMEOUT", "XDG_CACHE_HOME",
                                     "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"};
}

HubEnvGuard::HubEnvGuard() {
  for (const char* v : kHubVariables) unset(v);
}

HubEnvGuard::~HubEnvGuard() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
    else ::unsetenv(it->first.c_str());
  }
}

void HubEnvGuard::remember(const std::string& name) {
  for (const auto& [n, v] : saved_)
    if (n == name) return;
  const char* v = std::getenv(name.c_str());
  saved_.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
}

void HubEnvGuard::set(const std::string& name, const std::string& value) {
  remember(name);
  ::setenv(name.c_str(), value.c_str(), 1);
}

void HubEnvGuard::unset(const std::string& name) {
  remember(name);
  ::unsetenv(name.c_str());
}

std::string put_in_hf_cache(const std::string& cache, const std::string& id, const std::string& sha, const std::string& src_dir,
                            const std::vector<std::string>& refs) {
  std::string folder = "models";
  for (size_t start = 0; start <= id.size();) {
    const size_t end = std::min(id.find('/', start), id.size());
    folder += "--" + id.substr(start, end - start);
    start = end + 1;
  }
  const fs::path repo = fs::path(cache) / folder;
  const fs::path snap = repo / "snapshots" / sha;
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(src_dir)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = e.path().lexically_relative(src_dir);
    const std::string blob = sha.substr(0, 8) + "blob" + std::to_string(n++);
    fs::copy_file(e.path(), repo / "blobs" / blob, fs::copy_options::overwrite_existing);
    fs::create_directories((snap / rel).parent_path());
    // ../../blobs/<hash>, one more ../ per folder of the file inside the repo
    fs::path target = "..";
    for (auto it = rel.begin(); std::next(it) != rel.end(); ++it) target /= "..";
    target = target / ".." / "blobs" / blob;
    fs::create_symlink(target, snap / rel);
  }
  for (const auto& r : refs) {
    fs::create_directories((repo / "refs" / r).parent_path());
    write_file((repo / "refs" / r).string(), sha);
  }
  return snap.string();
}

uint64_t write_sparse_sharded_llama(const std::string& dir, const std::string& config, int n) {
  const nlohmann::json c = read_json(config);
  write_file(dir + "/config.json", c.dump(2));
  const auto ts = llama_tensors(c);
  uint64_t params = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  const size_t per = (ts.size() + size_t(n) - 1) / size_t(n);
  uint64_t total = 0;
  for (int s = 0; s < n; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n);
    nlohmann::json hdr = {{"__metadata__", {{"format", "pt"}}}};
    uint64_t off = 0;
    for (size_t i = size_t(s) * per; i < ts.size() && i < size_t(s + 1) * per; ++i) {
      uint64_t numel = 1;
      for (auto d : ts[i].second) numel *= uint64_t(d);
      params += numel;
      hdr[ts[i].first] = {{"dtype", "BF16"}, {"shape", ts[i].second}, {"data_offsets", {off, off + 2 * numel}}};
      off += 2 * numel;
      weight_map[ts[i].first] = name;
    }
    total += off;
    write_sparse_safetensors(dir + "/" + name, hdr, off);
  }
  write_file(dir + "/model.safetensors.index.json",
             nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2));
  return params;
}

}  // namespace nunchaku::test
