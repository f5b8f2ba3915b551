// Prompt ids as run feeds them (prompt.hpp).
#include "batch/prompt.hpp"

#include <filesystem>
#include <new>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/source.hpp"
#include "format/gguf.hpp"
#include "format/open.hpp"

namespace nunchaku {
namespace fs = std::filesystem;

namespace {

bool has_gguf(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".gguf") return true;
  return false;
}

}  // namespace

Tokenizer model_tokenizer(const Checkpoint& ck, const std::string& path) {
  if (ck.format == Format::GGUF) {
    FileSource src(ck.files.front().path);  // the first part of a split GGUF holds the vocabulary
    return Tokenizer::from_gguf(read_gguf_file(src));
  }
  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  if (!fs::exists(dir / "tokenizer.json"))
    throw Error("run.no_tokenizer", "no tokenizer.json beside the weights",
                {.file = dir.string(), .hint = "copy the model's tokenizer.json (and tokenizer_config.json) into that directory"});
  return Tokenizer::from_hf_dir(dir.string());
}

Tokenizer model_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec) && fs::exists(fs::path(path) / "tokenizer.json", ec) && !has_gguf(path))
    return Tokenizer::from_hf_dir(path);
  return model_tokenizer(open_checkpoint(path), path);
}

bool uses_chat_template(const PromptOptions& o, const Tokenizer& tok, const BatchRequest& r) {
  return r.chat || (!o.raw && !r.completion && tok.chat_format());
}

std::string prompt_text(const PromptOptions& o, const Tokenizer& tok, const BatchRequest& r, std::string& error) {
  if (!uses_chat_template(o, tok, r)) return r.prompt;
  const auto fmt = tok.chat_format();
  if (!fmt) {
    error = "\"messages\" given, but the model has no chat template nunchaku recognises; send \"prompt\" instead";
    return {};
  }
  std::vector<ChatMessage> msgs = r.chat ? r.messages : std::vector<ChatMessage>{{"user", r.prompt}};
  if (!o.system.empty() && (msgs.empty() || msgs.front().role != "system")) msgs.insert(msgs.begin(), {"system", o.system});
  return tok.apply_chat(*fmt, msgs, true);
}

std::vector<int32_t> prompt_ids(const PromptOptions& o, const Tokenizer& tok, const BatchRequest& r, std::string& error) {
  try {
    const std::string text = prompt_text(o, tok, r, error);
    if (!error.empty()) return {};
    // The rendered template spells its special tokens (and BOS, when it has one) as text.
    if (uses_chat_template(o, tok, r)) return tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
    return tok.encode(text, /*add_special=*/o.add_bos, /*parse_special=*/!o.split_special);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    error = fmt::format("cannot tokenize the prompt: {}", e.what());
    return {};
  }
}

}  // namespace nunchaku
