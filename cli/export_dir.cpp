// plan -o DIR (export_dir.hpp).
#include "cli/export_dir.hpp"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/atomic_output.hpp"

namespace nunchaku::cli {

bool is_output_dir(const std::string& output) {
  if (output.empty() || output == "-") return false;
  std::error_code ec;
  return output.back() == '/' || std::filesystem::is_directory(output, ec);
}

std::vector<std::string> write_export_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("io.write", fmt::format("-o {}: cannot create the directory: {}", dir, ec.message()), {.file = dir});
  std::vector<std::string> paths;
  for (const auto& [name, text] : files) paths.push_back((std::filesystem::path(dir) / name).string());
  for (const auto& p : paths) check_not_input(p);  // all refused before any is written
  for (size_t i = 0; i < files.size(); ++i) write_file_atomically(paths[i], files[i].second);
  return paths;
}

}  // namespace nunchaku::cli
