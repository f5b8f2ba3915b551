#include "hub/hf_cache.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace nunchaku::hub {
namespace fs = std::filesystem;

std::optional<Snapshot> find_snapshot(const std::string& cache, const RepoRef& ref, std::string& looked_at) {
  const fs::path repo = fs::path(cache) / repo_folder_name(ref.id);
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) {
    looked_at = repo.string();
    return std::nullopt;
  }
  std::string commit;
  if (is_commit_sha(ref.revision)) {
    commit = ref.revision;
  } else {
    const fs::path r = repo / "refs" / ref.revision;
    std::ifstream f(r);
    std::stringstream ss;
    ss << f.rdbuf();
    commit = ss.str();
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
    if (!f || !is_commit_sha(commit)) {
      looked_at = r.string();
      return std::nullopt;
    }
  }
  const fs::path snap = repo / "snapshots" / commit;
  if (!fs::is_directory(snap, ec)) {
    looked_at = snap.string();
    return std::nullopt;
  }
  return Snapshot{commit, snap.string()};
}

std::vector<std::string> snapshot_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code st;
    if (fs::is_regular_file(it->path(), st))  // follows the link into blobs/
      out.push_back(it->path().lexically_relative(dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace nunchaku::hub
