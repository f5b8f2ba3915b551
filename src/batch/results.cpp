#include "batch/results.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku {
namespace {

nlohmann::json usage_json(const Completion& c) {
  const int64_t n = int64_t(c.token_ids.size());
  return {{"prompt_tokens", c.prompt_tokens}, {"completion_tokens", n}, {"total_tokens", c.prompt_tokens + n}};
}

// -inf (a token the model rules out) as vLLM writes it: JSON has no infinities.
double finite_logprob(float v) { return std::max(double(v), -9999.0); }

nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json b = nlohmann::json::array();
  for (unsigned char ch : s) b.push_back(int(ch));
  return b;
}

// Chat's shape (and nunchaku's own): a list of entries with their top alternatives.
nlohmann::json chat_logprobs(const std::vector<LogprobEntry>& lp) {
  nlohmann::json content = nlohmann::json::array();
  for (const auto& e : lp) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [t, v] : e.top) top.push_back({{"token", t}, {"logprob", finite_logprob(v)}, {"bytes", bytes_of(t)}});
    content.push_back({{"token", e.token}, {"logprob", finite_logprob(e.logprob)}, {"bytes", bytes_of(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// The completions shape: parallel lists; each top_logprobs entry maps token text to its
// logprob for the top alternatives and the sampled token (as vLLM).
nlohmann::json completion_logprobs(const std::vector<LogprobEntry>& lp) {
  nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array(), tops = nlohmann::json::array(),
                 offsets = nlohmann::json::array();
  size_t offset = 0;
  for (const auto& e : lp) {
    tokens.push_back(e.token);
    values.push_back(finite_logprob(e.logprob));
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [t, v] : e.top) top[t] = finite_logprob(v);
    if (!top.contains(e.token)) top[e.token] = finite_logprob(e.logprob);
    tops.push_back(top);
    offsets.push_back(offset);
    offset += e.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

nlohmann::json own_shape(const BatchRequest& r, const Completion* c, const std::string& error) {
  nlohmann::json j;
  j[r.custom_id ? "custom_id" : "id"] = r.id;
  if (!c) {
    j["finish_reason"] = "error";
    j["error"] = {{"message", error}};
    return j;
  }
  j["text"] = c->text;
  j["finish_reason"] = c->finish_reason;
  j["token_ids"] = c->token_ids;
  if (c->logprobs) j["logprobs"] = chat_logprobs(*c->logprobs);
  j["usage"] = usage_json(*c);
  const size_t n = c->token_ids.size();
  const double tps = c->decode_s > 0 && n > 1 ? double(n - 1) / c->decode_s : 0;
  j["timings"] = {{"prefill_s", c->prefill_s}, {"decode_s", c->decode_s}, {"decode_tokens_per_s", tps}};
  return j;
}

nlohmann::json openai_choice(const BatchRequest& r, const Completion& c, size_t index) {
  nlohmann::json choice = {{"index", index}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
  if (c.logprobs) choice["logprobs"] = r.completion ? completion_logprobs(*c.logprobs) : chat_logprobs(*c.logprobs);
  if (r.completion) choice["text"] = c.text;
  else choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  return choice;
}

// `choices` empty: the request failed with `error`.
nlohmann::json openai_shape(const BatchRequest& r, const std::vector<const Completion*>& choices, const std::string& error,
                            const ResultContext& ctx) {
  nlohmann::json body;
  int status = 200;
  if (choices.empty()) {
    status = 400;
    body = {{"error", {{"message", error}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}};
  } else {
    nlohmann::json list = nlohmann::json::array();
    int64_t generated = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      list.push_back(openai_choice(r, *choices[i], i));
      generated += int64_t(choices[i]->token_ids.size());
    }
    const int64_t prompt = choices[0]->prompt_tokens;
    body = {{"id", fmt::format("{}-{}", r.completion ? "cmpl" : "chatcmpl", r.index)},
            {"object", r.completion ? "text_completion" : "chat.completion"},
            {"created", ctx.created},
            {"model", ctx.model},
            {"choices", list},
            {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", generated}, {"total_tokens", prompt + generated}}}};
  }
  return {{"id", fmt::format("batch_req_{}", r.index)},
          {"custom_id", r.custom_id ? r.id : nlohmann::json(nullptr)},
          {"response", {{"status_code", status}, {"request_id", fmt::format("req_{}", r.index)}, {"body", body}}},
          {"error", nullptr}};
}

}  // namespace

nlohmann::json result_json(const BatchRequest& r, const Completion* c, const std::string& error, const ResultContext& ctx) {
  if (!r.openai) return own_shape(r, c, error);
  return openai_shape(r, c ? std::vector<const Completion*>{c} : std::vector<const Completion*>{}, error, ctx);
}

nlohmann::json result_json(const BatchRequest& r, const std::vector<Completion>& choices, const ResultContext& ctx) {
  std::vector<const Completion*> p;
  for (const auto& c : choices) p.push_back(&c);
  return openai_shape(r, p, "", ctx);
}

void ResultWriter::write_line(const std::string& line) {
  if (broken_) return;
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0) {
    ++written_;
    return;
  }
  broken_ = true;
  const int err = errno ? errno : EIO;
  const Exit code = err == EPIPE ? static_cast<Exit>(141) : err == EBADF ? Exit::BadInput : Exit::Internal;
  throw Error("io.write", fmt::format("cannot write {}: {}", name_, std::strerror(err)), {.file = name_}, code);
}

void ResultWriter::put(size_t index, const nlohmann::json& result) {
  std::string line = dump_json(result) + "\n";
  if (!ordered_) return write_line(line);
  held_.emplace(index, std::move(line));
  while (!held_.empty() && held_.begin()->first == next_) {
    auto node = held_.extract(held_.begin());
    ++next_;
    write_line(node.mapped());
  }
}

void ResultWriter::write_held() {
  while (!held_.empty()) {
    auto node = held_.extract(held_.begin());
    write_line(node.mapped());
  }
}

}  // namespace nunchaku
