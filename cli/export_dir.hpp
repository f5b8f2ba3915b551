// `plan -o DIR`: an export of several files (DeepSpeed's ds_config.json + hostfile + launch
// lines, vLLM's launch scripts over nodes) written into one directory.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace nunchaku::cli {

// -o names a directory: one that exists, or a path ending in '/'.
bool is_output_dir(const std::string& output);

// Each (name, text) to DIR/name through the one atomic writer (DIR created when absent; a
// name that is a recorded input is refused). Returns the paths written, in order.
std::vector<std::string> write_export_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace nunchaku::cli
