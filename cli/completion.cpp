// nunchaku completion bash|zsh|fish: a shell completion script made from the app's own
// commands and options (so it cannot drift from them). zsh runs the bash function via
// bashcompinit; fish gets one `complete -c nunchaku ...` line per command and option.
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

// A fish single-quoted string: only \\ and \' are special inside.
std::string fish_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "'";
}

// What fish shows beside a candidate: the description's first sentence, at most 80 bytes
// (cut at a space).
std::string fish_description(const std::string& d) {
  std::string s = d.substr(0, d.find(". "));
  if (s.size() > 80) {
    const size_t space = s.rfind(' ', 76);
    s = s.substr(0, space == std::string::npos ? 0 : space) + "...";
  }
  return fish_quote(s);
}

// One line per option of `cmd`, shown when `condition` holds ("" = always).
std::string fish_options(const CLI::App& cmd, const std::string& condition) {
  std::string out;
  for (const CLI::Option* o : cmd.get_options()) {
    if (!o->nonpositional()) continue;
    std::string line = "complete -c nunchaku";
    if (!condition.empty()) line += " -n " + fish_quote(condition);
    for (const auto& s : o->get_snames()) line += " -s " + s;
    for (const auto& l : o->get_lnames()) line += " -l " + l;
    if (o->get_type_size() != 0 && !o->get_type_name().empty()) line += " -r";  // takes a value
    out += line + " -d " + fish_description(o->get_description()) + "\n";
  }
  return out;
}

std::string fish_script(const CLI::App& app) {
  std::string commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    commands += (commands.empty() ? "" : " ") + sub->get_name();
  std::string out = "# nunchaku completion (fish): nunchaku completion fish | source\n"
                    "complete -c nunchaku -f\n";
  const std::string none = "not __fish_seen_subcommand_from help " + commands;
  out += "complete -c nunchaku -n " + fish_quote(none) + " -a help -d 'Show a command\\'s options'\n";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    out += "complete -c nunchaku -n " + fish_quote(none) + " -a " + sub->get_name() + " -d " +
           fish_description(sub->get_description()) + "\n";
  out += fish_options(app, none);
  out += "complete -c nunchaku -n " + fish_quote("__fish_seen_subcommand_from help") + " -a " + fish_quote(commands) + "\n";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string in = "__fish_seen_subcommand_from " + sub->get_name();
    // Arguments are paths, except completion's shell.
    out += "complete -c nunchaku -n " + fish_quote(in) + (sub->get_name() == "completion" ? " -a 'bash zsh fish'\n" : " -F\n");
    out += fish_options(*sub, in);
  }
  return out;
}

}  // namespace

void add_completion(CLI::App& app, Action& action) {
  auto shell = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("completion", "Print a shell completion script (bash, zsh or fish)");
  cmd->footer(
      "Exit codes: 0 ok, 2 unknown shell.\n"
      "Examples:\n"
      "  eval \"$(nunchaku completion bash)\"     # in ~/.bashrc\n"
      "  eval \"$(nunchaku completion zsh)\"      # in ~/.zshrc\n"
      "  nunchaku completion fish > ~/.config/fish/completions/nunchaku.fish");
  cmd->add_option("SHELL", *shell, "bash, zsh or fish")->required();
  finish_help(cmd);
  cmd->callback([shell, &app, &action] {
    action = [shell, &app] {
      if (*shell != "bash" && *shell != "zsh" && *shell != "fish")
        throw Error("usage.shell", "completion: unknown shell '" + *shell + "'", {.hint = "bash, zsh or fish"});
      if (*shell == "fish") {
        fmt::print("{}", fish_script(app));
        return 0;
      }
      if (*shell == "zsh") fmt::print("autoload -U +X bashcompinit && bashcompinit\n");
      fmt::print("{}", bash_script(app));
      return 0;
    };
  });
}

}  // namespace nunchaku::cli
