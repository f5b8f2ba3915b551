#include "hub/repo_files.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/error.hpp"
#include "core/units.hpp"
#include "format/readers.hpp"

namespace nunchaku::hub {

namespace {

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

std::string base_name(const std::string& p) { return p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1); }

bool top_level(const std::string& p) { return p.find('/') == std::string::npos; }

bool has(const std::vector<std::string>& files, const std::string& f) {
  return std::find(files.begin(), files.end(), f) != files.end();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The GGUF weights of the list: projector files (mmproj-*) are a vision tower's, not the model.
std::vector<std::string> gguf_files(const std::vector<std::string>& files) {
  std::vector<std::string> out;
  for (const auto& f : files)
    if (ends_with(lower(f), ".gguf") && lower(base_name(f)).rfind("mmproj", 0) != 0) out.push_back(f);
  return out;
}

// One GGUF, or the parts of one split GGUF: its first part; "" otherwise.
std::string one_gguf(const std::vector<std::string>& ggufs) {
  if (ggufs.size() == 1) return ggufs[0];
  std::optional<GgufSplitName> first;
  for (const auto& f : ggufs) {
    const auto s = parse_gguf_split_name(f);
    if (!s || (first && (s->prefix != first->prefix || s->count != first->count))) return "";
    if (!first) first = s;
  }
  return first && ggufs.size() == first->count ? gguf_split_path(first->prefix, 1, first->count) : "";
}

// QUANT in a file name, not as part of a longer tag (Q4_K in Q4_K_M is not a match).
bool names_quant(const std::string& file, const std::string& quant) {
  const std::string name = lower(base_name(file)), q = lower(quant);
  for (size_t at = name.find(q); at != std::string::npos; at = name.find(q, at + 1)) {
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const size_t end = at + q.size();
    const bool right = end == name.size() || !(std::isalnum(static_cast<unsigned char>(name[end])) || name[end] == '_');
    if (left && right) return true;
  }
  return false;
}

std::string listed(const std::vector<std::string>& names, size_t max = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max) s += ", ... (" + std::to_string(names.size() - max) + " more)";
  return s;
}

WeightFiles gguf_choice(const std::string& first) {
  WeightFiles w;
  w.entry = first;
  w.gguf = true;
  w.files = gguf_parts(first);
  return w;
}

WeightFiles pick_quant(const std::vector<std::string>& files, const RepoRef& ref, const std::string& where) {
  const auto ggufs = gguf_files(files);
  std::vector<std::string> match;
  for (const auto& f : ggufs)
    if (names_quant(f, ref.quant)) match.push_back(f);
  if (match.empty())
    throw Error("hub.quant_not_found", "no GGUF file of " + ref.id + " is tagged " + ref.quant,
                {.file = where, .hint = ggufs.empty() ? "the repo has no GGUF files" : "its GGUF files: " + listed(ggufs)});
  const std::string first = one_gguf(match);
  if (first.empty())
    throw Error("hub.ambiguous_gguf", std::to_string(match.size()) + " GGUF files of " + ref.id + " are tagged " + ref.quant,
                {.file = where, .hint = "pick one with --file: " + listed(match)});
  return gguf_choice(first);
}

}  // namespace

std::vector<std::string> gguf_parts(const std::string& path) {
  const auto s = parse_gguf_split_name(path);
  if (!s) return {path};
  std::vector<std::string> out;
  for (uint32_t k = 1; k <= s->count; ++k) out.push_back(gguf_split_path(s->prefix, k, s->count));
  return out;
}

WeightFiles choose_weights(const std::vector<std::string>& files, const RepoRef& ref, const std::string& where) {
  if (!ref.file.empty()) {
    if (!has(files, ref.file))
      throw Error("hub.no_such_file", ref.id + " has no file " + ref.file, {.file = where,
                  .hint = gguf_files(files).empty() ? "" : "its GGUF files: " + listed(gguf_files(files))});
    if (ends_with(lower(ref.file), ".gguf")) {
      const auto s = parse_gguf_split_name(ref.file);
      return gguf_choice(s ? gguf_split_path(s->prefix, 1, s->count) : ref.file);
    }
    return {ref.file, ends_with(ref.file, ".index.json"), false, {ref.file}};
  }
  if (!ref.quant.empty()) return pick_quant(files, ref, where);
  if (has(files, "model.safetensors.index.json")) return {"model.safetensors.index.json", true, false, {"model.safetensors.index.json"}};
  std::vector<std::string> st, pt;
  for (const auto& f : files) {
    if (!top_level(f)) continue;
    if (ends_with(f, ".safetensors")) st.push_back(f);
    if (ends_with(f, ".bin") && (f.rfind("pytorch_model", 0) == 0 || f.rfind("model", 0) == 0)) pt.push_back(f);
  }
  if (st.size() == 1) return {st[0], false, false, st};
  if (!st.empty()) return {"", false, false, st};
  if (has(files, "pytorch_model.bin.index.json")) return {"pytorch_model.bin.index.json", true, false, {"pytorch_model.bin.index.json"}};
  if (pt.size() == 1) return {pt[0], false, false, pt};
  if (!pt.empty()) return {"", false, false, pt};
  const auto ggufs = gguf_files(files);
  if (!ggufs.empty()) {
    const std::string first = one_gguf(ggufs);
    if (first.empty())
      throw Error("hub.ambiguous_gguf", ref.id + " holds " + plural(ggufs.size(), "GGUF file") + " (" + listed(ggufs) + ")",
                  {.file = where, .hint = "name one: " + ref.id + ":Q4_K_M (a quantization tag) or --file NAME"});
    return gguf_choice(first);
  }
  throw Error("hub.no_weights", ref.id + " has no weights nunchaku reads", {.file = where,
              .hint = "expected model.safetensors(.index.json), pytorch_model.bin(.index.json) or *.gguf; found " +
                      (files.empty() ? std::string("no files") : listed(files))});
}

std::vector<std::string> side_files(const std::vector<std::string>& files, bool tokenizer) {
  std::vector<std::string> out;
  static const char* const kTokenizer[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                           "special_tokens_map.json", "tokenizer.model", "chat_template.jinja"};
  if (has(files, "config.json")) out.push_back("config.json");
  if (tokenizer)
    for (const char* f : kTokenizer)
      if (has(files, f)) out.push_back(f);
  return out;
}

std::string download_command(const RepoRef& ref, const std::vector<std::string>& missing) {
  auto word = [](const std::string& s) {
    const bool plain = std::all_of(s.begin(), s.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == '/' || c == '@' || c == ':';
    });
    if (plain && !s.empty()) return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = "hf download " + word(ref.id);
  if (ref.revision_given) cmd += " --revision " + word(ref.revision);
  for (const auto& m : missing) cmd += " --include " + word(m);
  return cmd;
}

}  // namespace nunchaku::hub
