// Prompt options (prompt_options.hpp).
#include "cli/prompt_options.hpp"

#include "cli/help.hpp"

namespace nunchaku::cli {

void add_prompt_options(CLI::App* cmd, PromptOptions& o) {
  cmd->add_flag_callback("--no-bos", [&o] { o.add_bos = false; },
                         "Raw prompts without the BOS (or other tokens) the tokenizer adds to text; a chat "
                         "template writes its own")
      ->group(kInput);
  cmd->add_flag("--split-special", o.split_special,
                "Text of a special token in a raw prompt (\"<|endoftext|>\") stays text; by default it becomes the token")
      ->group(kInput);
  cmd->add_option("--system", o.system, "System message for chat prompts that have none")->group(kInput);
}

}  // namespace nunchaku::cli
