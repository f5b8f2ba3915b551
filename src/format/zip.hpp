// A minimal read-only zip reader for torch.save archives: the central
// directory (zip64 end records and extra fields included) gives each entry's
// sizes and local header offset; the data offset comes from the LOCAL header
// (torch pads it with an extra field to align storages to 64 bytes). Only
// what an index needs: no decompression, never reads entry data (verify_crc32 does,
// for `inspect --verify`). Two entries with one name are refused (which one a
// reader would take is up to the reader).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/source.hpp"

namespace nunchaku::zip {

// Caps on what a central directory may make us allocate.
inline constexpr uint64_t kMaxDirectoryBytes = 256ull << 20;

struct Entry {
  std::string name;
  uint16_t method = 0;        // 0 = stored; anything else is compressed
  uint16_t flags = 0;
  uint32_t crc32 = 0;         // of the uncompressed data, from the central directory
  uint64_t compressed = 0;    // bytes in the file
  uint64_t size = 0;          // uncompressed bytes
  uint64_t header_offset = 0; // local file header
  uint64_t directory_offset = 0;  // this entry's central directory record (for errors)
};

class Archive {
 public:
  // Reads the end record and the central directory. Throws Error with codes
  // pytorch.not_zip (no end record), pytorch.bad_zip (inconsistent records),
  // pytorch.entry_out_of_file (directory or a header outside the file),
  // pytorch.duplicate_entry (two entries with one name).
  explicit Archive(const Source& src);

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(std::string_view name) const;  // exact name; nullptr if absent

  // Absolute offset of the entry's data, from its local header; checks that the
  // header and [offset, offset + compressed) lie inside the file.
  uint64_t data_offset(const Entry& e) const;
  // data_offset() plus: the entry must be stored (pytorch.compressed_entry),
  // not encrypted, and compressed == size.
  uint64_t stored_data_offset(const Entry& e) const;

  // Reads every stored entry whole and compares its CRC-32 with the directory's;
  // throws Error("pytorch.bad_crc", exit 2) naming the entry and its data offset.
  // Returns the bytes read.
  uint64_t verify_crc32() const;

 private:
  const Source& src_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace nunchaku::zip
