// libFuzzer: what the Hub client makes of hostile answers (src/hub/response.hpp, the same
// functions http.cpp and remote.cpp call). The first byte picks what the rest is:
//   0  a response's header lines (status from 2 bytes): names lower case, values trimmed;
//      a redirect resolves only from a redirect status with a Location, a relative one
//      keeps the origin, the token goes only to the endpoint's origin; check_response
//      returns for 2xx only, else Error with exit 2
//   1  the model-info listing JSON: a commit sha and repo paths (nothing outside the
//      header cache), then which weights choose_weights picks from it
//   2  an index's JSON: its shard names sorted and distinct
//   3  a header-cache manifest: parse_manifest(manifest_text(m)) == m
//   4  a weight file served by Range requests, faithfully or not (Range ignored, bodies
//      cut short, network errors): read_header_prefix returns a prefix of the file that
//      its reader parses alone, or Error; served faithfully, it succeeds exactly when the
//      reader succeeds on the whole file, with the same tensors
//   5  a base URL and a Location (one line each), percent coding: resolve_location keeps
//      the base's origin for a relative Location; decode(encode(s)) == s
//   6  a model reference as typed: an accepted one has a valid id and repo paths
//   7  body chunks under a cap: append_body keeps exactly what fits
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/source.hpp"
#include "format/readers.hpp"
#include "hub/hub_errors.hpp"
#include "hub/repo_files.hpp"
#include "hub/repo_ref.hpp"
#include "hub/response.hpp"
#include "hub/url.hpp"

namespace {

using namespace nunchaku;
using namespace nunchaku::hub;

constexpr const char* kEndpoint = "https://huggingface.co";
constexpr const char* kSha = "0123456789abcdef0123456789abcdef01234567";

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void must_be_bad_input(const Error& e) { check(e.exit_code() == 2 && !e.code().empty()); }

std::vector<std::string_view> lines(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const size_t nl = s.find('\n');
    out.push_back(s.substr(0, nl == std::string_view::npos ? s.size() : nl + 1));
    s.remove_prefix(out.back().size());
  }
  return out;
}

bool relative(std::string_view location) { return url_origin(location).scheme.empty() && location.substr(0, 2) != "//"; }

void headers(std::string_view in) {
  if (in.size() < 3) return;
  HttpResponse resp;
  resp.status = 100 + long((uint8_t(in[0]) | uint8_t(in[1]) << 8) % 500);
  const uint8_t flags = uint8_t(in[2]);
  resp.url = std::string(kEndpoint) + "/org/name/resolve/main/model.safetensors";
  for (auto line : lines(in.substr(3))) parse_header_line(line, resp.headers);
  for (const auto& [name, value] : resp.headers) {
    for (unsigned char c : name) check(c != ':' && !(c >= 'A' && c <= 'Z'));
    if (!value.empty()) {
      check(value.front() != ' ' && value.front() != '\t');
      const char b = value.back();
      check(b != ' ' && b != '\t' && b != '\r' && b != '\n');
    }
  }
  const auto next = redirect_target(resp);
  const std::string location = resp.header("location");
  check(next.has_value() == (is_redirect(resp.status) && !location.empty()));
  if (next) {
    if (relative(location)) check(url_origin(*next) == url_origin(resp.url));
    else if (location.substr(0, 2) == "//") check(url_origin(*next).scheme == "https");
    else check(*next == location);
    if (sends_token(*next, kEndpoint)) check(url_origin(*next) == url_origin(kEndpoint));
  }
  HubEnv env;
  env.endpoint = kEndpoint;
  if (flags & 1) env.token = "hf_x", env.token_source = "HF_TOKEN";
  RepoRef ref{.id = "org/name"};
  try {
    check_response(resp, ref, env, flags & 2 ? "model.safetensors" : "");
    check(resp.status >= 200 && resp.status < 300);
  } catch (const Error& e) {
    check(resp.status < 200 || resp.status >= 300);
    must_be_bad_input(e);
  }
}

void listing(std::string_view in) {
  RepoListing l;
  try {
    l = parse_listing(in, "https://huggingface.co/api/models/org/name/revision/main");
  } catch (const Error& e) {
    must_be_bad_input(e);
    return;
  }
  check(is_commit_sha(l.sha));
  std::vector<std::string> names;
  for (const auto& f : l.files) check(valid_repo_path(f.path)), names.push_back(f.path);
  RepoRef plain{.id = "org/name"}, quant{.id = "org/name", .quant = "Q4_K_M"}, file{.id = "org/name"};
  if (!names.empty()) file.file = names.front();
  for (const RepoRef* ref : {&plain, &quant, &file}) {
    try {
      const WeightFiles w = choose_weights(names, *ref, "org/name");
      for (const auto& f : w.files) check(valid_repo_path(f));
      if (!w.entry.empty()) check(valid_repo_path(w.entry));
      (void)side_files(names, true);
    } catch (const Error& e) {
      must_be_bad_input(e);
    }
  }
}

void index_json(std::string_view in) {
  try {
    const auto shards = index_shards(in, "model.safetensors.index.json");
    for (size_t i = 1; i < shards.size(); ++i) check(shards[i - 1] < shards[i]);
  } catch (const Error& e) {
    must_be_bad_input(e);
  }
}

void manifest(std::string_view in) {
  const auto m = parse_manifest(in);
  if (!m) return;
  if (!m->entry.empty()) check(valid_repo_path(m->entry));
  for (const auto& f : m->weights) check(valid_repo_path(f.path));
  const auto back = parse_manifest(manifest_text(*m, "org/name", kSha));
  check(back && *back == *m);
}

// The tensors of a checkpoint as comparable values.
std::vector<std::tuple<std::string, uint64_t, uint64_t>> tensors(const Checkpoint& ck) {
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> out;
  for (const auto& t : ck.tensors) out.emplace_back(t.name, t.offset, t.nbytes);
  return out;
}

void ranges(std::string_view in) {
  if (in.size() < 10) return;
  const bool gguf = in[0] & 1;
  const int size_kind = (uint8_t(in[0]) >> 1) & 3;
  const uint64_t delta = uint8_t(in[1]);
  const std::string_view acts = in.substr(2, 8);
  const std::string content(in.substr(10));
  const uint64_t size = size_kind == 0   ? content.size()
                        : size_kind == 1 ? content.size() + delta + 1
                        : size_kind == 2 ? content.size() - std::min<uint64_t>(content.size(), delta + 1)
                                         : (uint64_t(1) << 62) + delta;
  int requests = 0;
  bool faithful = size == content.size();
  const RangeGet get = [&](uint64_t first, uint64_t last) {
    check(first <= last && last < size);
    const uint8_t act = requests < 8 ? uint8_t(acts[size_t(requests)]) : 0;
    ++requests;
    check(requests <= 40);  // 1 MiB doubling to 256 MiB is 9; safetensors needs 2
    HttpResponse r;
    r.status = 206;
    const uint64_t cap = last - first + 1;  // what http.get keeps (max_body)
    switch (act % 8) {
      case 4:  // Range ignored: the whole file, status 200
        faithful = false;
        r.status = 200;
        if (content.size() > cap) throw Error("hub.too_large", "the response is larger than expected");
        r.body = content;
        return r;
      case 5: {  // cut short
        faithful = false;
        const uint64_t end = std::min<uint64_t>(content.size(), last + 1);
        const uint64_t cut = std::min<uint64_t>(end - std::min(end, first), (act >> 3) + 1);
        if (first < end) r.body = content.substr(first, end - first - cut);
        return r;
      }
      case 6:
        faithful = false;
        throw Error("hub.network", "network failure");
      default:
        if (first < content.size()) r.body = content.substr(first, std::min<uint64_t>(cap, content.size() - first));
        return r;
    }
  };
  std::optional<std::string> prefix;
  try {
    prefix = read_header_prefix("hf://org/name@" + std::string(kSha) + "/m", size, gguf, get);
  } catch (const Error& e) {
    must_be_bad_input(e);
  }
  std::optional<Checkpoint> from_prefix;
  if (prefix) {
    check(content.compare(0, prefix->size(), *prefix) == 0 && prefix->size() <= content.size());
    PrefixSource src("m", size, *prefix, false);  // the header cache's reading: no more bytes
    from_prefix = gguf ? read_gguf(src) : read_safetensors(src);
  }
  if (!faithful) return;
  std::optional<Checkpoint> whole;
  try {
    MemorySource src(std::span(reinterpret_cast<const uint8_t*>(content.data()), content.size()), "m");
    whole = gguf ? read_gguf(src) : read_safetensors(src);
  } catch (const Error&) {
  }
  check(whole.has_value() == from_prefix.has_value());
  if (whole) check(tensors(*whole) == tensors(*from_prefix));
}

void urls(std::string_view in) {
  for (bool keep : {false, true}) {
    const std::string enc = percent_encode(in, keep);
    for (unsigned char c : enc)
      check((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' ||
            c == '_' || c == '~' || c == '%' || (keep && c == '/'));
    check(percent_decode(enc) == in);
  }
  const size_t nl = in.find('\n');
  const std::string_view base = in.substr(0, nl), location = nl == std::string_view::npos ? "" : in.substr(nl + 1);
  const Origin o = url_origin(base);
  if (!o.scheme.empty()) check(o.scheme == "http" || o.scheme == "https");  // port 0 when written so
  const std::string next = resolve_location(base, location);
  if (!o.scheme.empty()) {
    if (relative(location)) check(url_origin(next) == o);
    else if (location.substr(0, 2) == "//") check(url_origin(next).scheme == o.scheme);
    else check(next == location);
  }
}

void reference(std::string_view in) {
  const auto r = parse_repo_ref(in, "http://localhost:8080/");
  if (!r) return;
  check(valid_repo_id(r->id) && r->id.find('/') != std::string::npos);
  check(valid_repo_path(r->revision));
  if (!r->file.empty()) check(valid_repo_path(r->file));
  check(r->file.empty() || r->quant.empty());
  (void)r->display();
  (void)repo_folder_name(r->id);
}

void bodies(std::string_view in) {
  if (in.empty()) return;
  const uint64_t max = uint8_t(in[0]) * 4;
  std::string body, all;
  bool stopped = false;
  for (auto chunk : lines(in.substr(1))) {
    const bool ok = append_body(body, chunk, max);
    check(ok == (all.size() + chunk.size() <= max));
    if (!ok) {
      stopped = true;
      break;
    }
    all += chunk;
    check(body == all);
  }
  check(body.size() <= max);
  (void)stopped;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0: headers(in); break;
    case 1: listing(in); break;
    case 2: index_json(in); break;
    case 3: manifest(in); break;
    case 4: ranges(in); break;
    case 5: urls(in); break;
    case 6: reference(in); break;
    default: bodies(in); break;
  }
  return 0;
}
