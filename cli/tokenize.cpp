// nunchaku tokenize MODEL [PROMPT]: the token ids and pieces the model sees for a prompt, as
// llama.cpp's llama-tokenize shows them. The ids are exactly what `run` feeds the engine for
// the same input and flags: the same request reader (batch/requests.hpp) and the same
// prompt path (batch/prompt.hpp: tokenizer, chat template, BOS, special-token text).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "batch/line_input.hpp"
#include "batch/prompt.hpp"
#include "batch/requests.hpp"
#include "batch/results.hpp"
#include "cli/model_source.hpp"
#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/prompt_options.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/text.hpp"
#include "core/units.hpp"

namespace nunchaku::cli {
namespace {

// A line longer than this is refused (exit 2) rather than held in memory.
constexpr size_t kMaxLineBytes = size_t(64) << 20;

struct TokenizeOptions {
  std::string path, given_path, file, text, prompt, input = "-", input_format = "auto";
  PromptOptions prompt_opts{.raw = true};
  bool chat = false, json = false, ids_only = false, quiet = false;
  bool has_text = false;  // PROMPT or --prompt given (even empty)
};

// Where an input came from: "prompt", or "line 3 (id \"a\")" of `source` (headers say
// "stdin line 3"; errors carry the file in their context, which main prints first).
std::string where(const BatchRequest& r, bool from_line) {
  if (!from_line) return "prompt";
  std::string s = fmt::format("line {}", r.line);
  if (!r.id.is_number_integer() || r.id.get<int64_t>() != int64_t(r.index))
    s += fmt::format(" ({} {})", r.custom_id ? "custom_id" : "id", printable(r.id.dump()));
  return s;
}

// One JSON object per input: exact ids and vocabulary strings; pieces as text (a piece that
// is part of a UTF-8 character has its invalid bytes as U+FFFD: the vocabulary string keeps them).
nlohmann::json input_json(const Tokenizer& tok, const BatchRequest& r, const std::vector<int32_t>& ids) {
  nlohmann::json tokens = nlohmann::json::array(), pieces = nlohmann::json::array();
  for (int32_t id : ids) {
    tokens.push_back(utf8_replace_invalid(tok.id_to_token(id)));
    pieces.push_back(utf8_replace_invalid(tok.decode_piece(id)));
  }
  return {{r.custom_id ? "custom_id" : "id", r.id}, {"prompt_tokens", ids.size()}, {"token_ids", ids}, {"tokens", tokens},
          {"pieces", pieces}};
}

// The text table: a header, then one row per token, "  ID  'piece'" with a note for special
// tokens and for pieces that are not UTF-8 by themselves (their bytes in hex).
std::string input_text(const Tokenizer& tok, const std::string& at, const std::vector<int32_t>& ids) {
  std::string out = fmt::format("{}: {}\n", at, plural(ids.size(), "token"));
  const size_t cap = output_width() > 40 ? output_width() - 30 : 10;
  for (int32_t id : ids) {
    const std::string piece = tok.decode_piece(id);
    std::string note;
    if (tok.is_special(id)) note = "  (special)";
    else if (first_invalid_utf8(piece) != std::string::npos) {
      note = "  (bytes";
      for (unsigned char c : piece) note += fmt::format(" {:02x}", c);
      note += ")";
    }
    out += fmt::format("{:>10}  '{}'{}\n", id, printable(piece, cap), note);
  }
  return out;
}

class Printer {
 public:
  Printer(const TokenizeOptions& o, const Tokenizer& tok) : o_(o), tok_(tok), out_(stdout, "stdout", true) {}

  void put(const std::string& source, const BatchRequest& r, bool from_line) {
    std::string err;
    const std::vector<int32_t> ids = prompt_ids(po(), tok_, r, err);
    if (!err.empty())
      throw Error("tokenize.bad_prompt", fmt::format("{}: {}", where(r, from_line), err), {.file = from_line ? source : ""});
    if (o_.json) {
      nlohmann::json j = input_json(tok_, r, ids);
      j["path"] = o_.given_path;
      out_.put(count_, stamp(j, "tokenize"));
    }
    else if (o_.ids_only) out_.write_line(dump_json(nlohmann::json(ids)) + "\n");
    else out_.write_line((count_ ? "\n" : "") + input_text(tok_, from_line ? source + " " + where(r, true) : where(r, false), ids));
    ++count_;
  }
  size_t count() const { return count_; }

 private:
  PromptOptions po() const {
    PromptOptions p = o_.prompt_opts;
    p.raw = !o_.chat;
    return p;
  }
  const TokenizeOptions& o_;
  const Tokenizer& tok_;
  ResultWriter out_;
  size_t count_ = 0;
};

// Requests from -i FILE or stdin, one a line (plain text or JSONL, as run reads them); the
// first line that cannot be used is exit 2 naming the file and line.
void read_lines(const TokenizeOptions& o, Printer& p) {
  const std::string name = o.input == "-" ? "stdin" : o.input;
  int fd = STDIN_FILENO;
  if (o.input != "-" && (fd = ::open(o.input.c_str(), O_RDONLY | O_CLOEXEC)) < 0)
    throw Error("io.open", fmt::format("cannot read {}: {}", o.input, std::strerror(errno)), {.file = o.input});
  struct FdCloser {
    int fd;
    ~FdCloser() { if (fd != STDIN_FILENO) ::close(fd); }
  } closer{fd};
  if (fd == STDIN_FILENO && ::isatty(fd) && !o.quiet)
    fmt::print(stderr, "nunchaku tokenize: reading prompts from the terminal, one per line; Ctrl-D ends the input\n");
  const InputFormat fmt = parse_input_format(o.input_format);
  LineInput in(fd, name, kMaxLineBytes);
  InputLine line;
  for (size_t index = 0; in.next(/*wait=*/true, line) == LineStatus::Line; ++index) {
    if (line.too_long)
      throw Error("tokenize.line_too_long",
                  fmt::format("line {}: {}, more than the {} tokenize reads in one line", line.line_no,
                              plural(line.bytes, "byte"), format_bytes(kMaxLineBytes)),
                  {.file = name});
    BatchRequest r = parse_request(line.text, index, line.line_no, fmt);
    if (!r.error.empty()) throw Error("tokenize.bad_request", r.error, {.file = name});  // "line N: why"
    p.put(name, r, true);
  }
  if (interrupted()) throw interrupted_error(fmt::format("{} tokenized", plural(p.count(), "input")));
}

int tokenize(const TokenizeOptions& o) {
  parse_input_format(o.input_format);
  InterruptGuard guard;
  const Tokenizer tok = model_tokenizer(o.path);
  if (o.chat && !tok.chat_format())
    throw Error("tokenize.no_chat_template", "--chat: the model has no chat template nunchaku recognises",
                {.file = o.path, .hint = "without --chat the prompt is tokenized as it is (run does the same for this model)"});
  Printer p(o, tok);
  if (o.has_text) {
    BatchRequest r;
    r.prompt = o.text.empty() ? o.prompt : o.text;
    p.put("", r, false);
  } else {
    read_lines(o, p);
  }
  return 0;
}

}  // namespace

void add_tokenize(CLI::App& app, Action& action) {
  auto o = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "The token ids and pieces the model sees for a prompt, exactly as run feeds them");
  cmd->footer(
      "Input: PROMPT (or --prompt), else one prompt per line from -i FILE or stdin: plain text, or JSON\n"
      "lines as run reads them ({\"id\", \"prompt\"} or {\"id\", \"messages\": [...]}, OpenAI batch lines).\n"
      "Prompts are tokenized as they are, with BOS (run --raw); --chat renders a plain prompt through the\n"
      "model's chat template as a user turn first (run's default); \"messages\" always use the template.\n"
      "--no-bos, --split-special and --system mean what they mean for run.\n"
      "Output: per input, a header and one row per token: id, 'piece' (the bytes it stands for, escaped),\n"
      "(special) for control tokens, (bytes ..) for a piece that is part of a UTF-8 character.\n"
      "--json: one object per input, {\"command\", \"format_version\", \"path\", \"id\", \"prompt_tokens\", \"token_ids\", \"tokens\" (vocabulary strings),\n"
      "\"pieces\"}; --ids: one list of ids per input. See docs/tokenizer.md.\n"
      "Exit codes: 0 ok, 2 bad usage, a model or tokenizer that cannot be read, or an input line that\n"
      "cannot be used (the error names the file and line; inputs before it are printed), 1 write failure,\n"
      "130/143 interrupted.\n"
      "Examples:\n"
      "  nunchaku tokenize model.gguf 'Hello world'\n"
      "  nunchaku tokenize model/ --chat --system 'Be brief.' 'What is 2+2?'\n"
      "  nunchaku tokenize model/ --json -i prompts.jsonl");
  cmd->add_option("MODEL", o->path, "Model directory (tokenizer.json; the weights are not needed) or .gguf file, or a Hub id in the local HF cache")->required();
  add_file_option(cmd, o->file);
  auto* text = cmd->add_option("PROMPT", o->text, "Text to tokenize (else --prompt, else -i/stdin)");
  auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize (as PROMPT)")->group(kInput);
  text->excludes(prompt);
  cmd->add_option("-i,--input", o->input, "Prompts file, one a line ('-' = stdin)")->capture_default_str()->group(kInput);
  cmd->add_option("--input-format", o->input_format, "auto | lines | jsonl")->capture_default_str()->group(kInput);
  cmd->add_flag("--chat", o->chat, "Render the model's chat template first, as run does without --raw")->group(kInput);
  add_prompt_options(cmd, o->prompt_opts);
  auto* json = cmd->add_flag("--json", o->json, "One JSON object per input: id, prompt_tokens, token_ids, tokens, pieces")->group(kOutput);
  cmd->add_flag("--ids", o->ids_only, "Only the ids, one JSON list per input")->group(kOutput)->excludes(json);
  cmd->add_flag("-q,--quiet", o->quiet, "No note on stderr when reading from a terminal")->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, text, prompt, &action] {
    o->has_text = text->count() > 0 || prompt->count() > 0;
    action = [o] {
      o->given_path = o->path;
      o->path = local_model_path(o->path, o->file, true, false);
      return tokenize(*o);
    };
  });
}

}  // namespace nunchaku::cli
