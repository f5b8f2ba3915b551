// nunchaku completion bash|zsh: a shell completion script made from the app's own commands
// and options (so it cannot drift from them). zsh runs the bash function via bashcompinit.
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "core/error.hpp"

namespace nunchaku::cli {
namespace {

std::string option_words(const CLI::App& app) {
  std::string out;
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional()) continue;
    for (const auto& l : o->get_lnames()) out += (out.empty() ? "--" : " --") + l;
    for (const auto& s : o->get_snames()) out += (out.empty() ? "-" : " -") + s;
  }
  return out;
}

std::string bash_script(const CLI::App& app) {
  std::string commands, cases;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands += (commands.empty() ? "" : " ") + sub->get_name();
    cases += fmt::format("    {}) opts=\"{}\" ;;\n", sub->get_name(), option_words(*sub));
  }
  return fmt::format(R"SH(# nunchaku completion (bash): eval "$(nunchaku completion bash)"
_nunchaku() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" opts=""
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "help {} {}" -- "$cur"))
    return
  fi
  case "${{COMP_WORDS[1]}}" in
{}    help) COMPREPLY=($(compgen -W "{}" -- "$cur")); return ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _nunchaku nunchaku
)SH",
                     commands, option_words(app), cases, commands);
}

}  // namespace

void add_completion(CLI::App& app, Action& action) {
  auto shell = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("completion", "Print a shell completion script (bash or zsh)");
  cmd->footer(
      "Exit codes: 0 ok, 2 unknown shell.\n"
      "Examples:\n"
      "  eval \"$(nunchaku completion bash)\"     # in ~/.bashrc\n"
      "  eval \"$(nunchaku completion zsh)\"      # in ~/.zshrc");
  cmd->add_option("SHELL", *shell, "bash or zsh")->required();
  finish_help(cmd);
  cmd->callback([shell, &app, &action] {
    action = [shell, &app] {
      if (*shell != "bash" && *shell != "zsh")
        throw Error("usage.shell", "completion: unknown shell '" + *shell + "'", {.hint = "bash or zsh"});
      if (*shell == "zsh") fmt::print("autoload -U +X bashcompinit && bashcompinit\n");
      fmt::print("{}", bash_script(app));
      return 0;
    };
  });
}

}  // namespace nunchaku::cli
