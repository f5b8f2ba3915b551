// A Hub repo's checkpoint index from its headers, before any download, as hf-mem and
// huggingface_hub's get_safetensors_metadata read them:
//   1 request   GET /api/models/{id}/revision/{rev}?blobs=true   commit sha, files, sizes
//   then        config.json and the safetensors index (whole), and each weight file's
//               first bytes by HTTP Range, at most HubEnv::parallel at once:
//               safetensors bytes 0-100000 (a second range when the header is longer),
//               GGUF 1 MiB, doubling until the header parses.
// Everything read is kept under HubEnv::header_cache/models--org--name/<sha>/, so a second
// call costs the one listing request (none for a commit sha, or with HF_HUB_OFFLINE=1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "hub/hub_env.hpp"
#include "hub/repo_ref.hpp"
#include "hub/response.hpp"

namespace nunchaku::hub {

struct RemoteStats {
  uint64_t requests = 0;        // HTTP requests (each redirect hop counts)
  uint64_t bytes = 0;           // bytes received, headers included
  bool header_cache = false;    // the headers came from HubEnv::header_cache
};

// The repo's files at ref.revision. Throws Error (exit 2) naming what to do on 401/403
// (gated or private: HF_TOKEN and the repo's page), 404 (repo or revision) and network failures.
RepoListing fetch_listing(const RepoRef& ref, const HubEnv& env, RemoteStats& stats);

// The shards an index in the repo names (fetches the index).
std::vector<std::string> remote_index_shards(const RepoRef& ref, const RepoListing& listing, const std::string& index,
                                             const HubEnv& env, RemoteStats& stats);

// The checkpoint of ref from the header cache or the Hub. Its files are named
// hf://org/name@sha/path and hold no tensor data here (headers only); config_path is the
// cached config.json.
Checkpoint remote_checkpoint(const RepoRef& ref, const HubEnv& env, RemoteStats& stats);

// The same from the header cache alone (HF_HUB_OFFLINE), or nullopt.
std::optional<Checkpoint> cached_remote_checkpoint(const RepoRef& ref, const HubEnv& env);

}  // namespace nunchaku::hub
