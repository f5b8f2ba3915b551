#include "hub/response.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/text.hpp"
#include "format/readers.hpp"
#include "hub/repo_ref.hpp"
#include "hub/url.hpp"

namespace nunchaku::hub {
using json = nlohmann::json;

namespace {

constexpr uint64_t kSafetensorsFirst = 100'001;   // bytes=0-100000, as huggingface_hub and hf-mem
constexpr uint64_t kGgufFirst = 1u << 20;         // 1 MiB, doubling
constexpr uint64_t kMaxHeaderBytes = 256u << 20;  // no header is read past this

json parse_json(std::string_view text) { return json::parse(text.begin(), text.end(), nullptr, false); }

bool is_string(const json& j, const char* key) { return j.contains(key) && j[key].is_string(); }
bool is_bool(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean(); }

}  // namespace

void parse_header_line(std::string_view line, std::map<std::string, std::string>& headers) {
  if (line.substr(0, 5) == "HTTP/") {
    headers.clear();
    return;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ' || value.back() == '\t'))
    value.remove_suffix(1);
  headers[name] = std::string(value);
}

bool append_body(std::string& body, std::string_view data, uint64_t max_body) {
  if (data.size() > max_body || body.size() > max_body - data.size()) return false;
  body.append(data);
  return true;
}

bool is_redirect(long status) { return status == 301 || status == 302 || status == 303 || status == 307 || status == 308; }

std::optional<std::string> redirect_target(const HttpResponse& resp) {
  const std::string location = resp.header("location");
  if (!is_redirect(resp.status) || location.empty()) return std::nullopt;
  return resolve_location(resp.url, location);
}

bool sends_token(std::string_view url, std::string_view endpoint) {
  const Origin o = url_origin(url);
  return !o.scheme.empty() && o == url_origin(endpoint);
}

RepoListing parse_listing(std::string_view body, const std::string& url) {
  const json j = parse_json(body);
  if (!j.is_object() || !is_string(j, "sha") || !j.contains("siblings") || !j["siblings"].is_array())
    throw Error("hub.bad_listing", "the Hub's model info has no \"sha\" and \"siblings\"", {.file = url});
  RepoListing l;
  l.sha = j["sha"].get<std::string>();
  if (!is_commit_sha(l.sha)) throw Error("hub.bad_listing", "the Hub's model info names no commit sha", {.file = url});
  for (const auto& s : j["siblings"]) {
    if (!s.is_object() || !is_string(s, "rfilename")) continue;
    RemoteFile f{s["rfilename"].get<std::string>()};
    if (!valid_repo_path(f.path))
      throw Error("hub.bad_listing", "the Hub's model info names a file outside the repo: \"" + f.path + "\"", {.file = url});
    if (s.contains("size") && s["size"].is_number_unsigned()) f.size = s["size"].get<uint64_t>();
    if (s.contains("lfs") && s["lfs"].is_object() && s["lfs"].contains("size") && s["lfs"]["size"].is_number_unsigned())
      f.size = s["lfs"]["size"].get<uint64_t>();
    l.files.push_back(std::move(f));
  }
  return l;
}

std::vector<std::string> index_shards(std::string_view text, const std::string& where) {
  const json doc = parse_json(text);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object())
    throw Error("index.no_weight_map", "index has no \"weight_map\" object", {.file = where});
  std::set<std::string> names;
  for (const auto& [k, v] : doc["weight_map"].items())
    if (v.is_string()) names.insert(v.get<std::string>());
  return {names.begin(), names.end()};
}

std::string manifest_text(const Manifest& m, const std::string& repo_id, const std::string& sha) {
  json files = json::array();
  for (const auto& f : m.weights) files.push_back({{"path", f.path}, {"size", f.size}});
  const json j = {{"format_version", 1}, {"repo", repo_id}, {"sha", sha},        {"entry", m.entry}, {"index", m.index},
                  {"gguf", m.gguf},      {"config", m.config}, {"weights", files}};
  return dump_json(j, 1) + "\n";
}

std::optional<Manifest> parse_manifest(std::string_view text) {
  const json j = parse_json(text);
  if (!j.is_object() || !j.contains("format_version") || j["format_version"] != 1 || !is_string(j, "entry") ||
      !is_bool(j, "index") || !is_bool(j, "gguf") || !is_bool(j, "config") || !j.contains("weights") ||
      !j["weights"].is_array())
    return std::nullopt;
  Manifest m;
  m.entry = j["entry"].get<std::string>();
  m.index = j["index"].get<bool>();
  m.gguf = j["gguf"].get<bool>();
  m.config = j["config"].get<bool>();
  if (!m.entry.empty() && !valid_repo_path(m.entry)) return std::nullopt;
  if ((m.index || m.gguf) && m.entry.empty()) return std::nullopt;
  for (const auto& f : j["weights"]) {
    if (!f.is_object() || !is_string(f, "path") || !f.contains("size") || !f["size"].is_number_unsigned()) return std::nullopt;
    m.weights.push_back({f["path"].get<std::string>(), f["size"].get<uint64_t>()});
    if (!valid_repo_path(m.weights.back().path)) return std::nullopt;
  }
  return m;
}

void PrefixSource::read_at(uint64_t offset, void* buf, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    throw Error("io.short_read", "read past the end of the file", {.file = path_, .offset = offset});
  if (offset + n > bytes_.size()) {
    if (fetching_) throw NeedBytes{offset + n};
    throw Error("hub.header_cache", "the cached header ends before byte " + std::to_string(offset + n),
                {.file = path_, .hint = "remove the header cache folder and run again"});
  }
  std::copy_n(bytes_.data() + offset, n, static_cast<char*>(buf));
}

std::string read_header_prefix(const std::string& name, uint64_t size, bool gguf, const RangeGet& get) {
  std::string bytes;
  uint64_t want = std::min<uint64_t>(size, gguf ? kGgufFirst : kSafetensorsFirst);
  for (;;) {
    if (want > bytes.size()) {
      const HttpResponse resp = get(bytes.size(), want - 1);
      if (resp.status == 200 && !bytes.empty()) bytes.clear();  // the server ignored Range: the body starts at 0
      bytes += resp.body;
      if (bytes.size() < want && bytes.size() < size)
        throw Error("hub.short_read", "the Hub sent " + std::to_string(bytes.size()) + " bytes of the " +
                                          std::to_string(want) + " asked for", {.file = name});
    }
    try {
      PrefixSource src(name, size, bytes, true);
      if (gguf) (void)read_gguf(src);
      else (void)read_safetensors(src);
      return bytes;
    } catch (const NeedBytes& need) {
      if (need.end > kMaxHeaderBytes)
        throw Error("hub.header_too_large", "the header runs past " + std::to_string(kMaxHeaderBytes) + " bytes",
                    {.file = name});
      want = std::min<uint64_t>(size, gguf ? std::max<uint64_t>(need.end, 2 * bytes.size()) : need.end);
    }
  }
}

}  // namespace nunchaku::hub
