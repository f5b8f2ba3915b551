// The local Hugging Face cache as huggingface_hub writes it:
//   <cache>/models--org--name/refs/<revision>      the commit sha a branch or tag points at
//   <cache>/models--org--name/snapshots/<sha>/...  the repo's files at that commit, symbolic
//                                                 links into ../../blobs/<etag>
// Read only; nothing here touches the network.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hub/repo_ref.hpp"

namespace nunchaku::hub {

struct Snapshot {
  std::string commit;  // 40 hex digits
  std::string dir;     // <cache>/models--org--name/snapshots/<commit>
};

// The snapshot `ref.revision` names (a commit sha, or refs/<revision>), or nullopt with
// `looked_at` set to the path that was missing.
std::optional<Snapshot> find_snapshot(const std::string& cache, const RepoRef& ref, std::string& looked_at);

// The files of a snapshot, '/'-separated paths relative to it, sorted; a link whose blob
// is missing (an interrupted download) is left out.
std::vector<std::string> snapshot_files(const std::string& dir);

}  // namespace nunchaku::hub
