// Chat template families, recognised by markers in the template text and rendered the
// way their real Jinja templates render (whitespace and BOS/EOS placement included).
#include "tokenizer/chat.hpp"

namespace nunchaku {

namespace {

bool has(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }

// Python's str.strip() / Jinja's trim for the whitespace that occurs in practice.
std::string trim(std::string_view s) {
  auto ws = [](unsigned char c) { return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F); };
  size_t b = 0, e = s.size();
  while (b < e && ws(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && ws(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// ChatML templates that add a default system turn spell it as a literal:
//   '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'
// (with "\n" as the two characters backslash-n inside the Jinja string, or a real newline).
std::string chatml_default_system(std::string_view t) {
  const std::string_view head = "<|im_start|>system";
  for (size_t pos = t.find(head); pos != std::string_view::npos; pos = t.find(head, pos + 1)) {
    size_t p = pos + head.size();
    if (t.compare(p, 2, "\\n") == 0) p += 2;
    else if (p < t.size() && t[p] == '\n') p += 1;
    else continue;
    size_t end = t.find("<|im_end|>", p);
    if (end == std::string_view::npos) continue;
    std::string_view lit = t.substr(p, end - p);
    if (lit.empty() || lit.find_first_of("'\"{}+") != std::string_view::npos) continue;  // an expression, not a literal
    std::string out;
    for (size_t i = 0; i < lit.size(); ++i) {
      if (lit[i] == '\\' && i + 1 < lit.size() && lit[i + 1] == 'n') {
        out += '\n';
        ++i;
      } else {
        out += lit[i];
      }
    }
    return out;
  }
  return {};
}

}  // namespace

std::string_view chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::Llama2: return "llama2";
    case ChatFamily::Llama3: return "llama3";
    case ChatFamily::ChatML: return "chatml";
    case ChatFamily::Mistral: return "mistral";
    case ChatFamily::Zephyr: return "zephyr";
    case ChatFamily::Phi3: return "phi3";
    case ChatFamily::Gemma: return "gemma";
  }
  return "?";
}

std::optional<ChatFormat> detect_chat_format(std::string_view t) {
  if (t.empty()) return std::nullopt;
  ChatFormat f;
  f.generation_prompt = has(t, "add_generation_prompt");
  if (has(t, "<|start_header_id|>")) {
    f.family = ChatFamily::Llama3;
    f.llama3_dated_system = has(t, "Cutting Knowledge Date");
    return f;
  }
  if (has(t, "<|im_start|>")) {
    f.family = ChatFamily::ChatML;
    f.default_system = chatml_default_system(t);
    f.chatml_im_sep = has(t, "<|im_sep|>");
    return f;
  }
  if (has(t, "<start_of_turn>")) {
    f.family = ChatFamily::Gemma;
    return f;
  }
  if (has(t, "[INST]")) {
    if (has(t, "<<SYS>>")) {
      f.family = ChatFamily::Llama2;
    } else {
      f.family = ChatFamily::Mistral;
      f.mistral_spaced = has(t, "' [INST] '");
    }
    return f;
  }
  // Phi-4-mini spells the role tags as '<|' + role + '|>', so only <|assistant|> is literal.
  if (has(t, "<|user|>") || (has(t, "<|assistant|>") && has(t, "<|end|>"))) {
    if (has(t, "<|end|>")) {
      f.family = ChatFamily::Phi3;
      f.phi3_bos = has(t, "bos_token");
      f.phi3_assistant_after_user = has(t, "{{message['content'] + '<|end|>'");
      f.phi3_eos_without_prompt = has(t, "eos_token");
      f.phi3_newline = has(t, "|>\n") || has(t, "|>\\n") || has(t, "'\n'") || has(t, "'\\n'");
    } else {
      f.family = ChatFamily::Zephyr;
    }
    return f;
  }
  return std::nullopt;
}

std::string apply_chat(const ChatFormat& f, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                       std::string_view bos, std::string_view eos) {
  std::string out;
  add_generation_prompt = add_generation_prompt && f.generation_prompt;
  const bool has_system = !msgs.empty() && msgs[0].role == "system";
  switch (f.family) {
    case ChatFamily::Llama2: {
      // System text goes into the first turn inside <<SYS>>; each user turn starts with BOS.
      size_t first = has_system ? 1 : 0;
      for (size_t i = first; i < msgs.size(); ++i) {
        std::string content = msgs[i].content;
        if (i == first && has_system) content = "<<SYS>>\n" + msgs[0].content + "\n<</SYS>>\n\n" + content;
        if (msgs[i].role == "user") out += std::string(bos) + "[INST] " + trim(content) + " [/INST]";
        else if (msgs[i].role == "assistant") out += " " + trim(content) + " " + std::string(eos);
      }
      break;
    }
    case ChatFamily::Llama3: {
      size_t first = 0;
      if (f.llama3_dated_system) {
        std::string sys = has_system ? trim(msgs[0].content) : "";
        first = has_system ? 1 : 0;
        out += std::string(bos) + "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: " +
               f.date_string + "\n\n" + sys + "<|eot_id|>";
      }
      for (size_t i = first; i < msgs.size(); ++i) {
        if (i == 0 && !f.llama3_dated_system) out += bos;
        out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n" + trim(msgs[i].content) + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatFamily::ChatML: {
      if (!f.default_system.empty() && !has_system) out += "<|im_start|>system\n" + f.default_system + "<|im_end|>\n";
      // Phi-4: "<|im_sep|>" ends the role and nothing follows "<|im_end|>".
      const std::string sep = f.chatml_im_sep ? "<|im_sep|>" : "\n", end = f.chatml_im_sep ? "<|im_end|>" : "<|im_end|>\n";
      for (const auto& m : msgs) out += "<|im_start|>" + m.role + sep + m.content + end;
      if (add_generation_prompt) out += "<|im_start|>assistant" + sep;
      break;
    }
    case ChatFamily::Mistral: {
      out += bos;
      size_t first = has_system ? 1 : 0;
      for (size_t i = first; i < msgs.size(); ++i) {
        std::string content = msgs[i].content;
        if (i == first && has_system) content = msgs[0].content + "\n\n" + content;
        if (msgs[i].role == "user") out += (f.mistral_spaced ? " [INST] " : "[INST] ") + content + " [/INST]";
        else if (msgs[i].role == "assistant") out += (f.mistral_spaced ? " " : "") + content + std::string(eos);
      }
      break;
    }
    case ChatFamily::Zephyr: {
      for (size_t i = 0; i < msgs.size(); ++i) {
        const auto& m = msgs[i];
        if (m.role == "user" || m.role == "system" || m.role == "assistant") out += "<|" + m.role + "|>\n" + m.content + std::string(eos) + "\n";
        if (i + 1 == msgs.size() && add_generation_prompt) out += "<|assistant|>\n";
      }
      break;
    }
    case ChatFamily::Phi3: {
      if (f.phi3_bos) out += bos;
      for (const auto& m : msgs) {
        if (f.phi3_assistant_after_user) {
          if (m.role == "user") out += "<|user|>\n" + m.content + "<|end|>\n<|assistant|>\n";
          else if (m.role == "assistant") out += m.content + "<|end|>\n";
        } else if (!f.phi3_newline) {  // Phi-4-mini: every role, no newlines
          out += "<|" + m.role + "|>" + m.content + "<|end|>";
        } else if (m.role == "system" || m.role == "user" || m.role == "assistant") {
          out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
        }
      }
      if (!f.phi3_assistant_after_user) {
        if (add_generation_prompt) out += f.phi3_newline ? "<|assistant|>\n" : "<|assistant|>";
        else if (f.phi3_eos_without_prompt) out += eos;
      }
      break;
    }
    case ChatFamily::Gemma: {
      out += bos;
      // Gemma 1/2 templates reject a system turn; Gemma 3 puts its text (untrimmed) and a
      // blank line in front of the first turn's trimmed text.
      size_t first = has_system ? 1 : 0;
      for (size_t i = first; i < msgs.size(); ++i) {
        std::string prefix = i == first && has_system ? msgs[0].content + "\n\n" : "";
        std::string role = msgs[i].role == "assistant" ? "model" : msgs[i].role;
        out += "<start_of_turn>" + role + "\n" + prefix + trim(msgs[i].content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }
  }
  return out;
}

}  // namespace nunchaku
