// What the Hub client makes of the Hub's answers, apart from the network: header lines, the
// body cap, redirects and where the token may go (http.cpp), the model-info listing, an
// index's shard names, the header cache's manifest, and a weight file's header read by
// Range requests (remote.cpp). Pure functions, so tests/fuzz/fuzz_hub.cpp feeds them
// hostile responses (headers, JSON, truncated and range-ignoring bodies) directly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/source.hpp"
#include "hub/http.hpp"

namespace nunchaku::hub {

// One header line as libcurl hands it ("Name: value\r\n"): stored under the lower-case name,
// the value without leading blanks and trailing blanks or CR/LF. A status line ("HTTP/...")
// starts a new response (after 100 Continue, a proxy's CONNECT): the headers so far are
// dropped. A line without ':' is ignored.
void parse_header_line(std::string_view line, std::map<std::string, std::string>& headers);

// Appends `data` to `body` unless the body would pass max_body bytes: false then, the body
// unchanged (the transfer is aborted: hub.too_large).
bool append_body(std::string& body, std::string_view data, uint64_t max_body);

// 301, 302, 303, 307, 308.
bool is_redirect(long status);
// Where a response sends the client next: its Location resolved against resp.url, for a
// redirect status with a non-empty Location; nullopt otherwise (the response is the answer).
std::optional<std::string> redirect_target(const HttpResponse& resp);
// Whether a request to `url` carries the token: only to the endpoint's origin (scheme, host,
// port), and only an http(s) one.
bool sends_token(std::string_view url, std::string_view endpoint);

struct RemoteFile {
  std::string path;   // in the repo, '/'-separated
  uint64_t size = 0;
  bool operator==(const RemoteFile&) const = default;
};

struct RepoListing {
  std::string sha;    // the commit the revision points at
  std::vector<RemoteFile> files;
};

// GET /api/models/{id}/revision/{rev}?blobs=true: "sha" (a commit sha) and "siblings" (each
// "rfilename", its size from "lfs" or "size"). Throws Error hub.bad_listing naming `url` when
// either is missing, the sha is not one, or a file name is not a valid_repo_path (it becomes a
// file under the header cache).
RepoListing parse_listing(std::string_view body, const std::string& url);

// The shards an index names: the distinct string values of its "weight_map", sorted. Throws
// Error index.no_weight_map naming `where` when the text is not JSON with that object.
std::vector<std::string> index_shards(std::string_view text, const std::string& where);

// What the header cache holds for one commit (manifest*.json): the weight files with sizes,
// and which file open starts from.
struct Manifest {
  std::string entry;  // "" = shards merged in order
  bool index = false, gguf = false;
  std::vector<RemoteFile> weights;
  bool config = false;
  bool operator==(const Manifest&) const = default;
};
// The manifest as written (format_version 1), with the repo id and commit for a reader.
std::string manifest_text(const Manifest& m, const std::string& repo_id, const std::string& sha);
// A manifest's text back; nullopt when it is not one of format_version 1 with well-typed
// fields and valid repo paths (the commit is then fetched again).
std::optional<Manifest> parse_manifest(std::string_view text);

// A remote file's first bytes, with its true size: the format readers parse headers from it
// as from the file itself. A read past the bytes held throws NeedBytes when `fetching` (the
// caller asks for more), else Error hub.header_cache (a cached header that got shorter).
struct NeedBytes {
  uint64_t end;
};
class PrefixSource final : public Source {
 public:
  PrefixSource(std::string path, uint64_t size, const std::string& bytes, bool fetching)
      : path_(std::move(path)), size_(size), bytes_(bytes), fetching_(fetching) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  void read_at(uint64_t offset, void* buf, size_t n) const override;

 private:
  std::string path_;
  uint64_t size_;
  const std::string& bytes_;
  bool fetching_;
};

// One Range request, bytes [first, last] of the file: a checked (2xx) response whose body
// is at most last - first + 1 bytes (206: the range, or less at the file's end; 200: a
// server that ignored Range, the file from byte 0).
using RangeGet = std::function<HttpResponse(uint64_t first, uint64_t last)>;
// The header bytes of a weight file of `size` bytes named `name`: ranges from byte 0 until
// its reader (GGUF or safetensors) parses them; safetensors bytes 0-100000 first, then up to
// what its header needs; GGUF 1 MiB, doubling. Throws Error: hub.short_read (fewer bytes than
// asked before the file's end), hub.header_too_large (past 256 MiB), or the reader's own.
std::string read_header_prefix(const std::string& name, uint64_t size, bool gguf, const RangeGet& get);

}  // namespace nunchaku::hub
