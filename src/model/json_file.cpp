#include "model/json_file.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku {

namespace {
constexpr uint64_t kMaxJsonFileBytes = 16u << 20;
}  // namespace

nlohmann::json read_json_file(const std::string& path) {
  using nlohmann::json;
  const std::string name = std::filesystem::path(path).filename().string();
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error("config.unreadable", fmt::format("cannot read {}: {}", name, ec.message()), {.file = path});
  if (size > kMaxJsonFileBytes)
    throw Error("config.too_large", fmt::format("{} is {} bytes (limit {})", name, size, kMaxJsonFileBytes), {.file = path});
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size)))
    throw Error("config.unreadable", fmt::format("cannot read {}", name), {.file = path});
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error("config.bad_json", fmt::format("{} is not valid JSON: {}", name, json_error_message(e)),
                {.file = path, .offset = e.byte > 0 ? e.byte - 1 : 0});
  } catch (const json::exception& e) {  // out_of_range 406: a number beyond double range (fuzz_config)
    throw Error("config.bad_json", fmt::format("{} is not valid JSON: {}", name, json_error_message(e)), {.file = path});
  }
}

}  // namespace nunchaku
