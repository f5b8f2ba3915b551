// Each subcommand file adds itself to the app and sets `action` when chosen.
// An action returns the process exit code; errors are thrown as nunchaku::Error.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace nunchaku::cli {

using Action = std::function<int()>;

void add_inspect(CLI::App& app, Action& action);
void add_load(CLI::App& app, Action& action);
void add_estimate(CLI::App& app, Action& action);
void add_plan(CLI::App& app, Action& action);
void add_run(CLI::App& app, Action& action);
void add_bench(CLI::App& app, Action& action);
void add_tokenize(CLI::App& app, Action& action);
void add_convert(CLI::App& app, Action& action);
void add_trace(CLI::App& app, Action& action);
// Last: it lists the commands added before it.
void add_completion(CLI::App& app, Action& action);

}  // namespace nunchaku::cli
