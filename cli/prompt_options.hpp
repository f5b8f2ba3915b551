// The prompt options shared by `run` and `tokenize` (the same flag means the same thing in
// both, and tokenize shows exactly the ids run feeds): --no-bos, --split-special, --system.
// run adds --raw (no chat template), tokenize --chat (the template, as run's default).
#pragma once

#include <CLI/CLI.hpp>

#include "batch/prompt.hpp"

namespace nunchaku::cli {

void add_prompt_options(CLI::App* cmd, PromptOptions& o);

}  // namespace nunchaku::cli
