// What a format reader parses from: a sized byte source with positional reads.
// FileSource wraps a read-only File; MemorySource wraps bytes (tests, fuzzers).
// Readers must check every length against size() before allocating.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/file.hpp"

namespace nunchaku {

class Source {
 public:
  virtual ~Source() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;
  // Exactly n bytes at offset or throws Error("io.short_read") naming path() and offset.
  virtual void read_at(uint64_t offset, void* buf, size_t n) const = 0;

  // Convenience: bytes [offset, offset+n) as a vector (n is checked against size() first).
  std::vector<uint8_t> read_vec(uint64_t offset, size_t n) const;
};

class FileSource final : public Source {
 public:
  explicit FileSource(const std::string& path) : file_(File::open_read_only(path)) {}
  const std::string& path() const override { return file_.path(); }
  uint64_t size() const override { return file_.size(); }
  void read_at(uint64_t offset, void* buf, size_t n) const override { file_.read_at(offset, buf, n); }
  const File& file() const { return file_; }

 private:
  File file_;
};

class MemorySource final : public Source {
 public:
  MemorySource(std::span<const uint8_t> bytes, std::string name)
      : bytes_(bytes.begin(), bytes.end()), name_(std::move(name)) {}
  const std::string& path() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  void read_at(uint64_t offset, void* buf, size_t n) const override;

 private:
  std::vector<uint8_t> bytes_;
  std::string name_;
};

}  // namespace nunchaku
