#include "batch/requests.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku {
namespace {

template <class T>
std::optional<T> number(const nlohmann::json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw std::runtime_error(fmt::format("\"{}\" must be a number", key));
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() && !it->is_number_unsigned()) throw std::runtime_error(fmt::format("\"{}\" must be an integer", key));
    if (std::is_unsigned_v<T> && it->is_number_integer() && it->get<int64_t>() < 0)
      throw std::runtime_error(fmt::format("\"{}\" must not be negative", key));
  }
  return it->get<T>();
}

// number() checked against param_ranges() (under the name the table knows it by).
template <class T>
std::optional<T> ranged(const nlohmann::json& o, const char* key, const char* field) {
  std::optional<double> v;
  if constexpr (std::is_integral_v<T>) {
    if (auto x = number<int64_t>(o, key)) v = double(*x);
  } else {
    v = number<double>(o, key);
  }
  if (!v) return std::nullopt;
  std::string why = param_error(field, *v);
  // Checked again as the type it is kept in (1e300 is a finite double but an infinite float).
  if (why.empty() && std::abs(*v) <= double(std::numeric_limits<T>::max())) why = param_error(field, double(T(*v)));
  else if (why.empty()) why = param_error(field, std::numeric_limits<double>::infinity());
  if (!why.empty()) throw std::runtime_error(fmt::format("\"{}\" {}", key, why));
  return T(*v);
}

// "logprobs": k (completions) | true/false (chat, with "top_logprobs": k) | null.
std::optional<int> read_logprobs(const nlohmann::json& o) {
  auto top = [&](const char* key, int64_t k) {
    if (k < 0 || k > 20) throw std::runtime_error(fmt::format("\"{}\" must be in [0, 20], not {}", key, k));
    return int(k);
  };
  auto lp = o.find("logprobs");
  const auto tl = number<int64_t>(o, "top_logprobs");
  const bool on = lp != o.end() && !lp->is_null() && !(lp->is_boolean() && !lp->get<bool>());
  if (tl && !(on && lp->is_boolean())) throw std::runtime_error("\"top_logprobs\" needs \"logprobs\": true");
  if (!on) return std::nullopt;
  if (lp->is_boolean()) return top("top_logprobs", tl.value_or(0));
  if (!lp->is_number_integer() && !lp->is_number_unsigned())
    throw std::runtime_error("\"logprobs\" must be an integer (completions) or true/false (chat)");
  return top("logprobs", lp->is_number_unsigned() ? int64_t(std::min<uint64_t>(lp->get<uint64_t>(), 1000)) : lp->get<int64_t>());
}

// OpenAI fields that would change the answer and are not implemented: a request carrying
// one (with a value other than its default) is refused, never answered as if it were absent.
void refuse_unsupported(const nlohmann::json& o) {
  struct Field { const char* key; nlohmann::json off; };  // off: the value that means "not used"
  static const Field fields[] = {{"echo", false}, {"best_of", 1}, {"logit_bias", nlohmann::json::object()},
                                 {"suffix", ""}, {"presence_penalty", 0}, {"frequency_penalty", 0},
                                 {"stream", false}, {"tools", nlohmann::json::array()},
                                 {"functions", nlohmann::json::array()}, {"function_call", "none"},
                                 {"response_format", {{"type", "text"}}}, {"guided_json", nullptr},
                                 {"guided_regex", nullptr}, {"guided_choice", nullptr}, {"guided_grammar", nullptr}};
  for (const auto& f : fields)
    if (auto it = o.find(f.key); it != o.end() && !it->is_null() && *it != f.off)
      throw std::runtime_error(fmt::format("\"{}\" is not supported", f.key));
}

RequestParams read_params(const nlohmann::json& o) {
  refuse_unsupported(o);
  RequestParams p;
  p.logprobs = read_logprobs(o);
  if (auto n = o.find("n"); n != o.end() && !n->is_null()) {  // choices per request, each sampled on its own
    if (!n->is_number_integer() && !n->is_number_unsigned()) throw std::runtime_error("\"n\" must be an integer");
    const int64_t v = n->is_number_unsigned() ? int64_t(std::min<uint64_t>(n->get<uint64_t>(), 1u << 20)) : n->get<int64_t>();
    if (v < 1 || v > kMaxChoices) throw std::runtime_error(fmt::format("\"n\" must be in [1, {}], not {}", kMaxChoices, n->dump()));
    p.n = int(v);
  }
  p.max_tokens = ranged<int64_t>(o, "max_tokens", "max_tokens");
  if (!p.max_tokens) p.max_tokens = ranged<int64_t>(o, "max_completion_tokens", "max_tokens");
  p.temperature = ranged<float>(o, "temperature", "temperature");
  p.top_p = ranged<float>(o, "top_p", "top_p");
  p.min_p = ranged<float>(o, "min_p", "min_p");
  p.repetition_penalty = ranged<float>(o, "repetition_penalty", "repetition_penalty");
  p.top_k = ranged<int>(o, "top_k", "top_k");
  p.seed = number<uint64_t>(o, "seed");
  if (auto it = o.find("stop"); it != o.end() && !it->is_null()) {
    std::vector<std::string> s;
    if (it->is_string()) s.push_back(it->get<std::string>());
    else if (it->is_array())
      for (const auto& x : *it) {
        if (!x.is_string()) throw std::runtime_error("\"stop\" must be a string or a list of strings");
        s.push_back(x.get<std::string>());
      }
    else throw std::runtime_error("\"stop\" must be a string or a list of strings");
    p.stop = s;
  }
  return p;
}

// Chat message content: a string, or OpenAI's list of parts ({"type": "text", "text": ...}).
std::string content_text(const nlohmann::json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string out;
    for (const auto& part : c) {
      const std::string type = part.is_object() && part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "";
      if (type == "image_url" || type == "image" || type == "input_image")
        throw std::runtime_error(fmt::format("a \"{}\" content part: run takes text only (a multimodal model's language model "
                                             "runs; its vision tower is not loaded)", type));
      if (!part.is_object() || type != "text" || !part.contains("text") || !part["text"].is_string())
        throw std::runtime_error("only text content parts are supported");
      out += part["text"].get<std::string>();
    }
    return out;
  }
  throw std::runtime_error("message \"content\" must be a string");
}

void read_body(const nlohmann::json& body, BatchRequest& r) {
  if (!body.is_object()) throw std::runtime_error("request must be a JSON object");
  if (auto it = body.find("messages"); it != body.end()) {
    if (!it->is_array() || it->empty()) throw std::runtime_error("\"messages\" must be a non-empty list");
    for (const auto& m : *it) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
        throw std::runtime_error("each message needs \"role\" and \"content\"");
      const std::string role = m["role"].get<std::string>();
      // The chat templates render these three; another role would be dropped or printed
      // as it is, so the model would see a conversation the caller did not send.
      if (role != "system" && role != "user" && role != "assistant")
        throw std::runtime_error(fmt::format("message {}: \"role\" must be system, user or assistant, not \"{}\"",
                                             r.messages.size() + 1, printable(role)));
      r.messages.push_back({role, content_text(m["content"])});
    }
    r.chat = true;
  } else if (auto p = body.find("prompt"); p != body.end()) {
    if (!p->is_string()) throw std::runtime_error("\"prompt\" must be a string");
    r.prompt = p->get<std::string>();
  } else {
    throw std::runtime_error("no \"prompt\" or \"messages\"");
  }
  r.params = read_params(body);
}

}  // namespace

InputFormat parse_input_format(std::string_view s) {
  if (s == "auto") return InputFormat::Auto;
  if (s == "lines") return InputFormat::Lines;
  if (s == "jsonl") return InputFormat::Jsonl;
  throw Error("usage.input_format", fmt::format("--input-format: unknown format '{}'", s), {.hint = "auto, lines, jsonl"});
}

BatchRequest parse_request(std::string_view line, size_t index, size_t line_no, InputFormat fmt) {
  BatchRequest r;
  r.index = index;
  r.line = line_no;
  r.id = index;
  const bool json = fmt == InputFormat::Jsonl || (fmt == InputFormat::Auto && !line.empty() && line.front() == '{');
  if (!json) {
    r.prompt = std::string(line);
    return r;
  }
  try {
    auto o = nlohmann::json::parse(line);
    if (!o.is_object()) throw std::runtime_error("request must be a JSON object");
    if (o.contains("custom_id")) r.id = o["custom_id"], r.custom_id = true;
    else if (o.contains("id")) r.id = o["id"];
    r.openai = o.contains("body");
    const std::string url = r.openai && o.contains("url") && o["url"].is_string() ? o["url"].get<std::string>() : "";
    if (!url.empty() && url != "/v1/chat/completions" && url != "/v1/completions")
      throw std::runtime_error(fmt::format("url \"{}\" is not supported (/v1/chat/completions or /v1/completions)", printable(url)));
    read_body(r.openai ? o["body"] : o, r);
    if (!r.openai && r.params.n > 1)
      throw std::runtime_error("\"n\" above 1 is answered in the OpenAI batch shape ({\"custom_id\", \"body\": {...}}), "
                               "whose body holds a list of choices");
    if (r.openai) {
      if (url == "/v1/chat/completions" && !r.chat) throw std::runtime_error("/v1/chat/completions needs \"messages\"");
      if (url == "/v1/completions" && r.chat) throw std::runtime_error("/v1/completions needs \"prompt\", not \"messages\"");
      r.completion = !r.chat;
    }
  } catch (const std::exception& e) {
    r.error = fmt::format("line {}: {}", line_no, json_error_message(e));
  }
  return r;
}

const std::vector<ParamRange>& param_ranges() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<ParamRange> table = {
      {"max_tokens", 1, inf, false, true, true},
      {"temperature", 0, inf, false, true, false},
      {"top_k", 0, double(std::numeric_limits<int>::max()), false, false, true},
      {"top_p", 0, 1, true, false, false},
      {"min_p", 0, 1, false, false, false},
      {"repetition_penalty", 0, inf, true, true, false},
  };
  return table;
}

std::string param_error(std::string_view field, double v) {
  for (const auto& r : param_ranges()) {
    if (field != r.field) continue;
    const bool ok = std::isfinite(v) && (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi) &&
                    (!r.integer || v == std::floor(v));
    if (ok) return "";
    const std::string hi = std::isinf(r.hi) ? "inf" : fmt::format("{}", r.hi);
    return fmt::format("must be {}in {}{}, {}{}, not {}", r.integer ? "an integer " : "a finite number ", r.lo_open ? "(" : "[",
                       r.lo, hi, r.hi_open ? ")" : "]", v);
  }
  return "";
}

size_t prompt_bytes(const BatchRequest& r) {
  size_t n = r.prompt.size();
  for (const auto& m : r.messages) n += m.content.size();
  return n;
}

std::vector<BatchRequest> read_requests(std::istream& in, InputFormat fmt) {
  std::vector<BatchRequest> out;
  std::string line;
  size_t no = 0;
  while (std::getline(in, line)) {
    if (no == 0 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    out.push_back(parse_request(line, out.size(), no, fmt));
  }
  return out;
}

size_t find_stop(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = std::string_view::npos;
  for (const auto& s : stops) {
    if (s.empty()) continue;
    size_t p = text.find(s);
    if (p < best) best = p;
  }
  return best;
}

}  // namespace nunchaku
