#include "io/atomic_output.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"

namespace nunchaku {

namespace {
Error write_error(const std::string& path, const std::string& why) {
  return Error("io.write", fmt::format("cannot write {}: {}", path, why), {.file = path});
}
}  // namespace

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp-nunchaku") {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw write_error(path_, std::strerror(errno));
}

AtomicOutput::~AtomicOutput() {
  if (!f_) return;
  std::fclose(f_);
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void AtomicOutput::commit() {
  std::FILE* f = f_;
  f_ = nullptr;
  const bool ok = std::fflush(f) == 0 && !std::ferror(f);
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
    throw write_error(path_, std::strerror(ok ? errno : err));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp_, ec);
    throw write_error(path_, why);
  }
}

void write_file_atomically(const std::string& path, std::string_view text) {
  AtomicOutput out(path);
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), out.file()) != text.size())
    throw write_error(path, std::strerror(errno));
  out.commit();
}

}  // namespace nunchaku
