#include "cli/commands.hpp"
#include "format/open.hpp"
#include <fmt/format.h>
namespace nunchaku::cli {
void add_inspect(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("inspect", "What is in a checkpoint");
  static std::string path;
  cmd->add_option("PATH", path)->required();
  cmd->callback([&action] { action = [] { auto ck = open_checkpoint(path); fmt::print("{} tensors\n", ck.tensors.size()); return 0; }; });
}
}
