#include "batch/requests.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

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

RequestParams read_params(const nlohmann::json& o) {
  RequestParams p;
  p.max_tokens = number<int64_t>(o, "max_tokens");
  if (!p.max_tokens) p.max_tokens = number<int64_t>(o, "max_completion_tokens");
  p.temperature = number<float>(o, "temperature");
  p.top_p = number<float>(o, "top_p");
  p.min_p = number<float>(o, "min_p");
  p.repetition_penalty = number<float>(o, "repetition_penalty");
  p.top_k = number<int>(o, "top_k");
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
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
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
      r.messages.push_back({m["role"].get<std::string>(), content_text(m["content"])});
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
    read_body(o.contains("body") ? o["body"] : o, r);
  } catch (const std::exception& e) {
    r.error = fmt::format("line {}: {}", line_no, e.what());
  }
  return r;
}

std::vector<BatchRequest> read_requests(std::istream& in, InputFormat fmt) {
  std::vector<BatchRequest> out;
  std::string line;
  size_t no = 0;
  while (std::getline(in, line)) {
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
