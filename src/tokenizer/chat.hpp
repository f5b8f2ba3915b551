// Chat templates without a Jinja interpreter: the template string from
// tokenizer_config.json (or GGUF tokenizer.chat_template) is recognised as one of a few
// common families by its markers, and apply_chat renders exactly what transformers'
// apply_chat_template gives for the real templates of those families (checked against
// testdata/tokenizers/*/expected.json, written by scripts/make_tokenizer_fixtures.py).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nunchaku {

enum class ChatFamily {
  Llama2,   // <s>[INST] <<SYS>>\n..\n<</SYS>>\n\nuser [/INST] answer </s>
  Llama3,   // <|start_header_id|>role<|end_header_id|>\n\n..<|eot_id|>
  ChatML,   // <|im_start|>role\n..<|im_end|>\n  (Qwen, SmolLM, many fine-tunes)
  Mistral,  // <s>[INST] user [/INST]answer</s>  (system folded into the first user turn)
  Zephyr,   // <|user|>\n..</s>\n  (Zephyr, TinyLlama-Chat)
  Phi3,     // <|user|>\n..<|end|>\n
  Gemma,    // <start_of_turn>user\n..<end_of_turn>\n, assistant is "model"
};

// Family plus the few variant switches seen in the real templates of that family.
struct ChatFormat {
  ChatFamily family = ChatFamily::ChatML;
  // The template renders an assistant header for add_generation_prompt (some, like
  // Llama-2's or plain ChatML ones, ignore the flag).
  bool generation_prompt = true;
  // ChatML: a system turn inserted when the conversation has none (Qwen2: "You are a
  // helpful assistant."), read from the template's own literal; empty otherwise.
  std::string default_system;
  // ChatML as Phi-4 writes it: "<|im_start|>role<|im_sep|>text<|im_end|>", no newlines.
  bool chatml_im_sep = false;
  // Llama-3.1+: the system header always carries "Cutting Knowledge Date"/"Today Date".
  bool llama3_dated_system = false;
  std::string date_string = "26 Jul 2024";  // the templates' fallback when no date is given
  // Mistral: v0.2+ templates write " [INST] " and " " before answers; v0.1 "[INST] " and none.
  bool mistral_spaced = false;
  // Phi-3: the template starts with bos_token; ends with eos_token when no generation
  // prompt; or (medium / llama.cpp variant) puts "<|assistant|>\n" after every user turn
  // and ignores system messages.
  bool phi3_bos = false;
  bool phi3_eos_without_prompt = false;
  bool phi3_assistant_after_user = false;
  // Phi-3 puts a newline after each role tag and <|end|>; Phi-4-mini writes
  // "<|role|>text<|end|>" for every role, without newlines.
  bool phi3_newline = true;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// nullopt when the template matches no known family (callers fall back to raw prompts).
std::optional<ChatFormat> detect_chat_format(std::string_view chat_template);
std::string_view chat_family_name(ChatFamily f);

// Renders `msgs` as the family's template would; bos/eos are the token texts the template
// refers to as bos_token / eos_token.
std::string apply_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs,
                       bool add_generation_prompt, std::string_view bos_token,
                       std::string_view eos_token);

}  // namespace nunchaku
