#include "convert/sidecars.hpp"

#include <filesystem>

#include "convert/gguf_sidecars.hpp"
#include "core/error.hpp"

namespace nunchaku::convert {
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kSidecars[] = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "tokenizer.model", "added_tokens.json", "vocab.json", "merges.txt",
    "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
};
}  // namespace

std::string input_dir(const Checkpoint& ck) {
  std::error_code ec;
  fs::path dir = fs::is_directory(ck.path, ec) ? fs::path(ck.path) : fs::path(ck.path).parent_path();
  return dir.empty() ? "." : dir.string();
}

std::vector<std::string> write_sidecars(const Checkpoint& ck, const ModelLayout& layout, const StagedOutput& out,
                                        std::vector<std::string>& skipped) {
  if (ck.format == Format::GGUF) return write_gguf_sidecars(ck, layout, out, skipped);
  std::error_code ec;
  const fs::path dir = input_dir(ck);
  std::vector<std::string> names;
  for (auto name : kSidecars) {
    const fs::path src = dir / name;
    if (!fs::is_regular_file(src, ec)) continue;
    const std::string dst = out.path_for(std::string(name));
    if (!fs::copy_file(src, dst, fs::copy_options::none, ec))
      throw Error("io.write", "cannot copy " + src.string() + ": " + ec.message(), {.file = dst}, Exit::Internal);
    names.emplace_back(name);
  }
  return names;
}

}  // namespace nunchaku::convert
