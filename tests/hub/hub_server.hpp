// A local HTTP server that answers as the Hugging Face Hub does, for the tests of src/hub
// (tests/test_hub_remote.cpp start one in-process) and, standalone (nunchaku_hub_server),
// for scripts/check_hub_server.py, which runs huggingface_hub's own hf_hub_download and
// get_safetensors_metadata against it so that it stays faithful. What it serves:
//   GET /api/models/{id}[/revision/{rev}][?blobs=true]   model info: sha, siblings (sizes, lfs)
//   GET /api/models/{id}/tree/{rev}[/{path}][?recursive=true]   the file list, paged by Link
//   GET|HEAD /{id}/resolve/{rev}/{path}     small files: 200 (Range: 206); LFS files (weights,
//                                           and anything >= 10 MiB): 302 to the file store
//   GET|HEAD /cdn/{id}/{sha}/{path}         the file store, on another host name (localhost
//                                           instead of 127.0.0.1): 200 / 206 with Range
// with the Hub's headers (X-Repo-Commit, X-Linked-Size, X-Linked-Etag, ETag) and errors
// (X-Error-Code GatedRepo 401/403, RepoNotFound 401/404, RevisionNotFound 404,
// EntryNotFound 404; 401 "Invalid credentials in Authorization header" for a token it
// does not know). HTTP/1.1 with keep-alive; a request in absolute form (through a proxy)
// is served too and counted. GET /_stats (and /_reset, which also zeroes them) returns the
// counters as JSON, not counting itself. Only for tests: no TLS, loopback only.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nunchaku::testhub {

struct Repo {
  std::string id;                           // "org/name"
  std::string dir;                          // every regular file under it is a repo file
  std::string sha;                          // the commit of every ref
  std::vector<std::string> branches{"main"};
  bool gated = false;                       // file reads need a token in `granted`
  bool is_private = false;                  // unknown to a request without a granted token
};

struct HubStats {
  uint64_t requests = 0;      // every request
  uint64_t bytes_sent = 0;    // bodies and headers
  uint64_t range_requests = 0;
  uint64_t store_requests = 0;       // to /cdn/
  uint64_t store_with_auth = 0;      // /cdn/ requests that carried an Authorization header
  uint64_t proxied = 0;              // requests in absolute form (from a proxy client)
  std::vector<std::string> targets;  // "METHOD target" of each request, in order
};

// A commit sha for a test repo: 40 hex digits derived from its id (stable across runs).
std::string hub_repo_sha(const std::string& id);

class HubServer {
 public:
  // Tokens: `granted` may read gated and private repos; `known` are valid tokens without
  // that access; any other token is refused with 401. Listens on 127.0.0.1:port (0: any free port).
  HubServer(std::vector<Repo> repos, std::vector<std::string> granted = {"hf_granted"},
            std::vector<std::string> known = {"hf_other"}, uint16_t port = 0);
  ~HubServer();
  HubServer(const HubServer&) = delete;
  HubServer& operator=(const HubServer&) = delete;

  uint16_t port() const;
  std::string endpoint() const;  // http://127.0.0.1:PORT
  HubStats stats() const;
  void reset_stats();
  // While set, every request is read and never answered (timeout tests).
  void set_stall(bool stall);
  // Entries per page of the tree API (the Hub's is 1000 for recursive listings).
  void set_tree_page(size_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nunchaku::testhub
