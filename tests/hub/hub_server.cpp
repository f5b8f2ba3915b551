#include "tests/hub/hub_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

namespace nunchaku::testhub {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr uint64_t kLfsMin = 10u << 20;

struct Request {
  std::string method, target, path, query;
  std::map<std::string, std::string> headers;  // lower-case names
  bool absolute = false;                       // "GET http://host/path" (a proxy's form)
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // A file range to send after the headers instead of `body`.
  std::string file;
  uint64_t offset = 0, length = 0;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) && std::isxdigit((unsigned char)s[i + 2])) {
      out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string query_value(const std::string& query, const std::string& key) {
  std::stringstream ss(query);
  for (std::string kv; std::getline(ss, kv, '&');) {
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == key) return eq == std::string::npos ? "" : decode(kv.substr(eq + 1));
  }
  return "";
}

// A stable stand-in for a content hash (the tests need stable, distinct ids, not SHA-256).
std::string fake_hash(const std::string& text, size_t hex_digits) {
  std::string out;
  uint64_t h = 1469598103934665603ull;
  for (size_t round = 0; out.size() < hex_digits; ++round) {
    for (char c : text + std::to_string(round)) h = (h ^ uint8_t(c)) * 1099511628211ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    out += buf;
  }
  return out.substr(0, hex_digits);
}

struct RepoFileInfo {
  std::string path;
  uint64_t size;
  bool lfs;
};

bool is_lfs(const std::string& path, uint64_t size) {
  for (const char* ext : {".safetensors", ".gguf", ".bin", ".pt", ".pth", ".model"})
    if (path.size() > std::strlen(ext) && path.compare(path.size() - std::strlen(ext), std::strlen(ext), ext) == 0) return true;
  return size >= kLfsMin;
}

std::vector<RepoFileInfo> repo_files(const Repo& r) {
  std::vector<RepoFileInfo> out;
  for (const auto& e : fs::recursive_directory_iterator(r.dir)) {
    if (!e.is_regular_file()) continue;
    const std::string p = e.path().lexically_relative(r.dir).generic_string();
    out.push_back({p, uint64_t(e.file_size()), is_lfs(p, e.file_size())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return out;
}

std::string reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 302: return "Found";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 416: return "Range Not Satisfiable";
    default: return "Status";
  }
}

Response error(int status, const std::string& code, const std::string& message) {
  Response r;
  r.status = status;
  if (!code.empty()) r.headers.push_back({"X-Error-Code", code});
  r.headers.push_back({"X-Error-Message", message});
  r.headers.push_back({"Content-Type", "application/json"});
  r.body = json{{"error", message}}.dump();
  return r;
}

}  // namespace

struct HubServer::Impl {
  std::vector<Repo> repos;
  std::vector<std::string> granted, known;
  int listen_fd = -1;
  uint16_t port = 0;
  std::atomic<bool> stop{false}, stall{false};
  std::atomic<size_t> tree_page{1000};
  std::thread acceptor;
  std::mutex m;
  std::vector<std::thread> conns;
  HubStats stats;

  enum class Auth { None, Granted, Known, Invalid };
  Auth auth(const Request& q) const {
    auto it = q.headers.find("authorization");
    if (it == q.headers.end()) return Auth::None;
    const std::string v = it->second;
    const std::string token = v.rfind("Bearer ", 0) == 0 ? v.substr(7) : v;
    if (std::find(granted.begin(), granted.end(), token) != granted.end()) return Auth::Granted;
    if (std::find(known.begin(), known.end(), token) != known.end()) return Auth::Known;
    return Auth::Invalid;
  }

  const Repo* find_repo(const std::string& id) const {
    for (const auto& r : repos)
      if (r.id == id) return &r;
    return nullptr;
  }

  // The repo a request may see, or the Hub's error for it.
  const Repo* visible(const std::string& id, const Request& q, Response& err) const {
    const Auth a = auth(q);
    if (a == Auth::Invalid) {
      err = error(401, "", "Invalid credentials in Authorization header");
      return nullptr;
    }
    const Repo* r = find_repo(id);
    if (!r || (r->is_private && a != Auth::Granted)) {
      err = error(a == Auth::None ? 401 : 404, "RepoNotFound", "Repository not found");
      return nullptr;
    }
    return r;
  }

  std::optional<std::string> commit(const Repo& r, const std::string& rev) const {
    if (rev == r.sha || std::find(r.branches.begin(), r.branches.end(), rev) != r.branches.end()) return r.sha;
    return std::nullopt;
  }

  Response model_info(const Repo& r, const std::string& sha, bool blobs) const {
    json siblings = json::array();
    uint64_t total = 0;
    for (const auto& f : repo_files(r)) {
      json s = {{"rfilename", f.path}};
      total += f.size;
      if (blobs) {
        s["blobId"] = fake_hash(f.path + std::to_string(f.size), 40);
        s["size"] = f.size;
        if (f.lfs) s["lfs"] = {{"sha256", fake_hash(f.path + "lfs" + std::to_string(f.size), 64)}, {"size", f.size}, {"pointerSize", 134}};
      }
      siblings.push_back(s);
    }
    json j = {{"_id", fake_hash(r.id, 24)},
              {"id", r.id},
              {"modelId", r.id},
              {"author", r.id.substr(0, r.id.find('/'))},
              {"sha", sha},
              {"lastModified", "2025-01-01T00:00:00.000Z"},
              {"createdAt", "2025-01-01T00:00:00.000Z"},
              {"private", r.is_private},
              {"gated", r.gated ? json("manual") : json(false)},
              {"disabled", false},
              {"downloads", 0},
              {"likes", 0},
              {"tags", json::array()},
              {"siblings", siblings},
              {"usedStorage", total}};
    Response resp;
    resp.headers.push_back({"Content-Type", "application/json; charset=utf-8"});
    resp.body = j.dump();
    return resp;
  }

  Response tree(const Repo& r, const std::string& sha, const std::string& sub, const Request& q) const {
    const bool recursive = query_value(q.query, "recursive") == "true" || query_value(q.query, "recursive") == "True";
    json all = json::array();
    std::vector<std::string> dirs;
    for (const auto& f : repo_files(r)) {
      if (!sub.empty() && f.path.rfind(sub + "/", 0) != 0) continue;
      const std::string rel = sub.empty() ? f.path : f.path.substr(sub.size() + 1);
      const size_t slash = rel.find('/');
      if (slash != std::string::npos) {  // the folders on the way
        for (size_t at = slash; at != std::string::npos; at = recursive ? rel.find('/', at + 1) : std::string::npos) {
          const std::string d = (sub.empty() ? "" : sub + "/") + rel.substr(0, at);
          if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) {
            dirs.push_back(d);
            all.push_back({{"type", "directory"}, {"oid", fake_hash(d, 40)}, {"size", 0}, {"path", d}});
          }
        }
        if (!recursive) continue;
      }
      json e = {{"type", "file"}, {"oid", fake_hash(f.path + std::to_string(f.size), 40)}, {"size", f.size}, {"path", f.path}};
      if (f.lfs) e["lfs"] = {{"oid", fake_hash(f.path + "lfs" + std::to_string(f.size), 64)}, {"size", f.size}, {"pointerSize", 134}};
      all.push_back(e);
    }
    const size_t page = tree_page, start = size_t(std::atoll(query_value(q.query, "cursor").c_str()));
    json out = json::array();
    for (size_t i = start; i < all.size() && i < start + page; ++i) out.push_back(all[i]);
    Response resp;
    resp.headers.push_back({"Content-Type", "application/json; charset=utf-8"});
    if (start + page < all.size()) {
      std::string next = endpoint() + "/api/models/" + r.id + "/tree/" + sha + (sub.empty() ? "" : "/" + sub) + "?cursor=" +
                         std::to_string(start + page) + (recursive ? "&recursive=true" : "");
      resp.headers.push_back({"Link", "<" + next + ">; rel=\"next\""});
    }
    resp.body = out.dump();
    return resp;
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port); }

  // Bytes of a file, whole or by Range.
  Response file_bytes(const std::string& path, uint64_t size, const Request& q, Response resp) const {
    resp.file = path;
    resp.offset = 0;
    resp.length = size;
    resp.headers.push_back({"Accept-Ranges", "bytes"});
    auto it = q.headers.find("range");
    if (it != q.headers.end() && it->second.rfind("bytes=", 0) == 0) {
      const std::string spec = it->second.substr(6);
      const size_t dash = spec.find('-');
      if (dash == std::string::npos) return error(400, "", "bad range");
      const uint64_t first = std::stoull(spec.substr(0, dash));
      uint64_t last = dash + 1 < spec.size() ? std::stoull(spec.substr(dash + 1)) : size - 1;
      if (first >= size || last < first) {
        Response e = error(416, "", "range not satisfiable");
        e.headers.push_back({"Content-Range", "bytes */" + std::to_string(size)});
        return e;
      }
      last = std::min(last, size - 1);
      resp.status = 206;
      resp.offset = first;
      resp.length = last - first + 1;
      resp.headers.push_back({"Content-Range", "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(size)});
    }
    return resp;
  }

  Response resolve(const Repo& r, const std::string& rev, const std::string& path, const Request& q) const {
    const Auth a = auth(q);
    if (r.gated && a != Auth::Granted)
      return error(a == Auth::None ? 401 : 403, "GatedRepo",
                   a == Auth::None ? "Access to model " + r.id + " is restricted. You must have access to it and be authenticated to access it. Please log in."
                                   : "Access to model " + r.id + " is restricted and you are not in the authorized list. Visit " + endpoint() + "/" + r.id + " to ask for access.");
    const auto sha = commit(r, rev);
    if (!sha) return error(404, "RevisionNotFound", "Invalid rev id: " + rev);
    const fs::path file = fs::path(r.dir) / path;
    std::error_code ec;
    if (path.empty() || path.find("..") != std::string::npos || !fs::is_regular_file(file, ec))
      return error(404, "EntryNotFound", "Entry not found");
    const uint64_t size = fs::file_size(file);
    const std::string etag = "\"" + fake_hash(path + (is_lfs(path, size) ? "lfs" : "") + std::to_string(size), is_lfs(path, size) ? 64 : 40) + "\"";
    Response resp;
    resp.headers.push_back({"X-Repo-Commit", *sha});
    if (is_lfs(path, size)) {
      resp.status = 302;
      resp.headers.push_back({"Location", "http://localhost:" + std::to_string(port) + "/cdn/" + r.id + "/" + *sha + "/" + path});
      resp.headers.push_back({"X-Linked-Size", std::to_string(size)});
      resp.headers.push_back({"X-Linked-Etag", etag});
      resp.headers.push_back({"ETag", "\"" + fake_hash(path + "pointer", 40) + "\""});
      resp.body = "Found. Redirecting to the file store";
      return resp;
    }
    resp.headers.push_back({"ETag", etag});
    return file_bytes(file.string(), size, q, resp);
  }

  Response store(const std::string& rest, const Request& q) const {
    // {org}/{name}/{sha}/{path}
    size_t a = rest.find('/'), b = a == std::string::npos ? a : rest.find('/', a + 1), c = b == std::string::npos ? b : rest.find('/', b + 1);
    if (c == std::string::npos) return error(404, "", "not found");
    const Repo* r = find_repo(rest.substr(0, b));
    if (!r || rest.substr(b + 1, c - b - 1) != r->sha) return error(404, "", "not found");
    const fs::path file = fs::path(r->dir) / rest.substr(c + 1);
    std::error_code ec;
    if (rest.find("..") != std::string::npos || !fs::is_regular_file(file, ec)) return error(404, "", "not found");
    Response resp;
    resp.headers.push_back({"Content-Type", "binary/octet-stream"});
    return file_bytes(file.string(), fs::file_size(file), q, resp);
  }

  Response route(const Request& q) {
    const std::string& p = q.path;
    Response err;
    if (p.rfind("/cdn/", 0) == 0) {
      std::lock_guard lock(m);
      ++stats.store_requests;
      if (q.headers.count("authorization")) ++stats.store_with_auth;
    }
    if (p.rfind("/cdn/", 0) == 0) return store(p.substr(5), q);
    if (p == "/_stats" || p == "/_reset") {  // not the Hub's: the counters, for scripts/bench_hub.py
      std::lock_guard lock(m);
      Response resp;
      resp.headers.push_back({"Content-Type", "application/json"});
      resp.body = json{{"requests", stats.requests - 1}, {"bytes_sent", stats.bytes_sent}, {"range_requests", stats.range_requests},
                       {"store_requests", stats.store_requests}, {"store_with_auth", stats.store_with_auth}}.dump();
      if (p == "/_reset") stats = HubStats{};
      return resp;
    }
    if (p.rfind("/api/models/", 0) == 0) {
      std::string rest = p.substr(12);
      const size_t s1 = rest.find('/');
      if (s1 == std::string::npos) return error(404, "RepoNotFound", "Repository not found");
      const size_t s2 = rest.find('/', s1 + 1);
      const std::string id = rest.substr(0, s2);
      const Repo* r = visible(id, q, err);
      if (!r) return err;
      const std::string tail = s2 == std::string::npos ? "" : rest.substr(s2);
      const bool blobs = query_value(q.query, "blobs") == "true" || query_value(q.query, "blobs") == "True";
      if (tail.empty()) return model_info(*r, r->sha, blobs);
      if (tail.rfind("/revision/", 0) == 0) {
        const auto sha = commit(*r, decode(tail.substr(10)));
        if (!sha) return error(404, "RevisionNotFound", "Invalid rev id: " + decode(tail.substr(10)));
        return model_info(*r, *sha, blobs);
      }
      if (tail.rfind("/tree/", 0) == 0) {
        std::string t = tail.substr(6);
        const size_t slash = t.find('/');
        const std::string rev = decode(t.substr(0, slash));
        const auto sha = commit(*r, rev);
        if (!sha) return error(404, "RevisionNotFound", "Invalid rev id: " + rev);
        return tree(*r, *sha, slash == std::string::npos ? "" : decode(t.substr(slash + 1)), q);
      }
      return error(404, "", "not found");
    }
    // /{org}/{name}/resolve/{rev}/{path}
    const size_t res = p.find("/resolve/");
    if (res != std::string::npos && res > 1) {
      const std::string id = p.substr(1, res - 1);
      const Repo* r = visible(id, q, err);
      if (!r) return err;
      const std::string t = p.substr(res + 9);
      const size_t slash = t.find('/');
      if (slash == std::string::npos) return error(404, "EntryNotFound", "Entry not found");
      return resolve(*r, decode(t.substr(0, slash)), decode(t.substr(slash + 1)), q);
    }
    return error(404, "", "not found");
  }

  static bool read_request(int fd, std::string& buf, Request& q, const std::atomic<bool>& stop) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      pollfd pfd{fd, POLLIN, 0};
      const int rc = ::poll(&pfd, 1, 100);
      if (stop) return false;
      if (rc <= 0) continue;
      char tmp[8192];
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, size_t(n));
      if (buf.size() > (1u << 20)) return false;
    }
    std::stringstream ss(buf.substr(0, end));
    buf.erase(0, end + 4);
    std::string line, version;
    std::getline(ss, line);
    std::stringstream first(line);
    first >> q.method >> q.target >> version;
    while (std::getline(ss, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(' '));
      q.headers[lower(line.substr(0, colon))] = v;
    }
    std::string t = q.target;
    if (t.rfind("http://", 0) == 0) {  // absolute form: from a proxy client
      q.absolute = true;
      const size_t slash = t.find('/', 7);
      t = slash == std::string::npos ? "/" : t.substr(slash);
    }
    const size_t qm = t.find('?');
    q.path = t.substr(0, qm);
    q.query = qm == std::string::npos ? "" : t.substr(qm + 1);
    return true;
  }

  bool send_all(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      p += k, n -= size_t(k);
    }
    return true;
  }

  bool send(int fd, const Request& q, const Response& r) {
    const uint64_t length = r.file.empty() ? r.body.size() : r.length;
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    head += "Content-Length: " + std::to_string(length) + "\r\n\r\n";
    const bool body = q.method != "HEAD";
    {
      std::lock_guard lock(m);
      stats.bytes_sent += head.size() + (body ? length : 0);
    }
    if (!send_all(fd, head.data(), head.size())) return false;
    if (!body) return true;
    if (r.file.empty()) return send_all(fd, r.body.data(), r.body.size());
    std::ifstream f(r.file, std::ios::binary);
    f.seekg(std::streamoff(r.offset));
    std::vector<char> chunk(1 << 16);
    for (uint64_t left = r.length; left > 0;) {
      const size_t k = size_t(std::min<uint64_t>(left, chunk.size()));
      f.read(chunk.data(), std::streamsize(k));
      if (!send_all(fd, chunk.data(), k)) return false;
      left -= k;
    }
    return true;
  }

  void serve(int fd) {
    std::string buf;
    Request q;
    while (!stop && read_request(fd, buf, q, stop)) {
      {
        std::lock_guard lock(m);
        ++stats.requests;
        if (q.headers.count("range")) ++stats.range_requests;
        if (q.absolute) ++stats.proxied;
        stats.targets.push_back(q.method + " " + q.path + (q.query.empty() ? "" : "?" + q.query));
      }
      while (stall && !stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (stop) break;
      Response r;
      try {
        r = route(q);
      } catch (const std::exception& e) {
        r = error(400, "", e.what());
      }
      if (!send(fd, q, r)) break;
      auto c = q.headers.find("connection");
      if (c != q.headers.end() && lower(c->second) == "close") break;
      q = Request{};
    }
    ::close(fd);
  }

  void accept_loop() {
    while (!stop) {
      pollfd pfd{listen_fd, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) continue;
      std::lock_guard lock(m);
      conns.emplace_back([this, fd] { serve(fd); });
    }
  }
};

std::string hub_repo_sha(const std::string& id) { return fake_hash("commit:" + id, 40); }

HubServer::HubServer(std::vector<Repo> repos, std::vector<std::string> granted, std::vector<std::string> known, uint16_t port)
    : impl_(std::make_unique<Impl>()) {
  impl_->repos = std::move(repos);
  impl_->granted = std::move(granted);
  impl_->known = std::move(known);
  impl_->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(impl_->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(impl_->listen_fd, 64) != 0)
    throw std::runtime_error(std::string("hub server: cannot listen: ") + std::strerror(errno));
  socklen_t len = sizeof addr;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl_->port = ntohs(addr.sin_port);
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
}

HubServer::~HubServer() {
  impl_->stop = true;
  impl_->acceptor.join();
  std::vector<std::thread> conns;
  {
    std::lock_guard lock(impl_->m);
    conns.swap(impl_->conns);
  }
  for (auto& t : conns) t.join();
  ::close(impl_->listen_fd);
}

uint16_t HubServer::port() const { return impl_->port; }
std::string HubServer::endpoint() const { return impl_->endpoint(); }
HubStats HubServer::stats() const {
  std::lock_guard lock(impl_->m);
  return impl_->stats;
}
void HubServer::reset_stats() {
  std::lock_guard lock(impl_->m);
  impl_->stats = HubStats{};
}
void HubServer::set_stall(bool stall) { impl_->stall = stall; }
void HubServer::set_tree_page(size_t n) { impl_->tree_page = n; }

}  // namespace nunchaku::testhub
