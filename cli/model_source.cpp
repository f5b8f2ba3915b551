#include "cli/model_source.hpp"

#include "cli/help.hpp"
#include "cli/progress.hpp"
#include "core/log.hpp"
#include "format/open.hpp"
#include "hub/resolve.hpp"

namespace nunchaku::cli {

void add_file_option(CLI::App* cmd, std::string& file) {
  cmd->add_option("--file", file, "With a Hub id as PATH: the repo's file to open (a GGUF of a GGUF repo)")
      ->type_name("NAME")
      ->group(kInput);
}

Checkpoint open_model(const std::string& path, const std::string& file) {
  hub::HubEnv env = hub::hub_env();
  Progress progress("reading headers");  // drawn only on a terminal
  env.on_header = [&](size_t done, size_t total) { progress.count(fmt::format("{} of {} weight files", done, total)); };
  auto r = hub::resolve_model(path, file, {}, env);
  progress.clear();
  if (r.remote) {
    log::info("{}: {} HTTP requests, {} bytes{}", path, r.stats.requests, r.stats.bytes,
              r.stats.header_cache ? " (headers from the header cache)" : "");
    return std::move(*r.remote);
  }
  return open_checkpoint(r.path);
}

std::string local_model_path(const std::string& path, const std::string& file, bool tokenizer, bool weights) {
  return hub::resolve_model(path, file, {.data = true, .tokenizer = tokenizer, .weights = weights}, hub::hub_env()).path;
}

}  // namespace nunchaku::cli
