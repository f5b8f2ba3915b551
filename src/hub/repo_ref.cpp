#include "hub/repo_ref.hpp"

#include <cctype>

#include "hub/url.hpp"

namespace nunchaku::hub {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool valid_part(std::string_view p) {
  if (p.empty() || p.size() > 96) return false;
  for (unsigned char c : p)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  if (p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.') return false;
  return p.find("--") == std::string_view::npos && p.find("..") == std::string_view::npos;
}

bool valid_quant(std::string_view q) {
  if (q.empty() || q.size() > 32) return false;
  for (unsigned char c : q)
    if (!std::isalnum(c) && c != '_') return false;
  return true;
}

// "org/name" at the front of `s`; the rest after it in `rest`.
std::optional<std::string> take_id(std::string_view s, std::string_view stops, std::string_view& rest) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const size_t end = std::min(s.find_first_of(stops, slash + 1), s.size());
  const std::string_view org = s.substr(0, slash), name = s.substr(slash + 1, end - slash - 1);
  if (!valid_part(org) || !valid_part(name)) return std::nullopt;
  rest = s.substr(end);
  return std::string(s.substr(0, end));
}

// "@revision" at the front of `rest`, up to `stop` (kept in `rest`); false when it is empty.
bool take_revision(std::string_view& rest, char stop, bool decode, RepoRef& r) {
  if (!starts_with(rest, "@")) return true;
  const size_t end = rest.find(stop);
  const std::string_view rev = rest.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1);
  r.revision = decode ? percent_decode(rev) : std::string(rev);
  if (!valid_repo_path(r.revision)) return false;  // it names refs/REVISION in the caches
  r.revision_given = true;
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  return true;
}

// org/name[@revision][:QUANT]: the revision may hold '/' (refs/pr/1), not ':'.
std::optional<RepoRef> parse_plain(std::string_view s) {
  RepoRef r;
  std::string_view rest;
  auto id = take_id(s, "@:", rest);
  if (!id) return std::nullopt;
  r.id = *id;
  if (!take_revision(rest, ':', false, r)) return std::nullopt;
  if (starts_with(rest, ":")) {
    if (!valid_quant(rest.substr(1))) return std::nullopt;
    r.quant = std::string(rest.substr(1));
    rest = {};
  }
  if (!rest.empty()) return std::nullopt;
  return r;
}

// hf://org/name[@revision][/path]: a revision with '/' is written %2F, as HfFileSystem does.
std::optional<RepoRef> parse_hf(std::string_view s) {
  RepoRef r;
  std::string_view rest;
  auto id = take_id(s, "@/", rest);
  if (!id) return std::nullopt;
  r.id = *id;
  if (!take_revision(rest, '/', true, r)) return std::nullopt;
  if (starts_with(rest, "/") && rest.size() > 1) {
    r.file = percent_decode(rest.substr(1));
    if (!valid_repo_path(r.file)) return std::nullopt;
  } else if (!rest.empty() && rest != "/") {
    return std::nullopt;
  }
  return r;
}

// A page or file URL: org/name[/tree/REV[/folder]], org/name/blob|resolve/REV/path.
std::optional<RepoRef> parse_url(std::string_view s) {
  s = s.substr(0, s.find_first_of("?#"));
  RepoRef r;
  std::string_view rest;
  auto id = take_id(s, "/", rest);
  if (!id) return std::nullopt;
  r.id = *id;
  if (rest.empty() || rest == "/") return r;
  for (std::string_view kind : {"/tree/", "/blob/", "/resolve/"}) {
    if (!starts_with(rest, kind)) continue;
    rest = rest.substr(kind.size());
    const size_t slash = rest.find('/');
    r.revision = percent_decode(rest.substr(0, slash));
    if (!valid_repo_path(r.revision)) return std::nullopt;
    r.revision_given = true;
    const std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (kind == "/tree/") return r;  // a folder view: the whole model
    r.file = percent_decode(path);
    if (!valid_repo_path(r.file)) return std::nullopt;
    return r;
  }
  return std::nullopt;
}

}  // namespace

std::string RepoRef::display() const {
  std::string s = id;
  if (revision_given) s += "@" + revision;
  if (!quant.empty()) s += ":" + quant;
  if (!file.empty()) s += "/" + file;
  return s;
}

std::string RepoRef::page_url(const std::string& endpoint) const { return endpoint + "/" + id; }

bool valid_repo_id(std::string_view id) {
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos) return valid_part(id);
  return valid_part(id.substr(0, slash)) && valid_part(id.substr(slash + 1));
}

bool valid_repo_path(std::string_view p) {
  if (p.empty() || p.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

bool is_commit_sha(std::string_view rev) {
  if (rev.size() != 40) return false;
  for (unsigned char c : rev)
    if (!std::isxdigit(c) || std::isupper(c)) return false;
  return true;
}

std::string repo_folder_name(const std::string& id) {
  std::string out = "models";
  size_t start = 0;
  while (start <= id.size()) {
    const size_t end = std::min(id.find('/', start), id.size());
    out += "--" + id.substr(start, end - start);
    start = end + 1;
  }
  return out;
}

std::optional<RepoRef> parse_repo_ref(std::string_view text, std::string_view endpoint) {
  if (starts_with(text, "hf://")) return parse_hf(text.substr(5));
  std::string ep(endpoint);
  while (!ep.empty() && ep.back() == '/') ep.pop_back();
  for (std::string_view prefix : {std::string_view("https://huggingface.co/"), std::string_view("https://hf.co/"),
                                  std::string_view("huggingface.co/"), std::string_view("http://huggingface.co/")}) {
    if (starts_with(text, prefix)) return parse_url(text.substr(prefix.size()));
  }
  if (!ep.empty() && starts_with(text, ep + "/")) return parse_url(text.substr(ep.size() + 1));
  return parse_plain(text);
}

}  // namespace nunchaku::hub
