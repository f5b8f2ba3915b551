#include "format/zip.hpp"

#include <algorithm>
#include <array>
#include <cstdio>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace nunchaku::zip {
namespace {

constexpr uint32_t kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr uint32_t kDirSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr size_t kEndBytes = 22, kLocatorBytes = 20, kEnd64Bytes = 56, kDirBytes = 46, kLocalBytes = 30;

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zip stores it.
uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint64_t le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

std::string hex32(uint32_t v) {
  char b[11];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

}  // namespace

Archive::Archive(const Source& src) : src_(src) {
  const std::string& path = src.path();
  const uint64_t size = src.size();
  if (size < kEndBytes)
    throw Error("pytorch.not_zip", "too short for a zip archive (" + std::to_string(size) + " bytes)",
                {.file = path, .offset = 0, .hint = "the file is truncated"});

  // The end record sits in the last 22 + 65535 (max comment) bytes.
  const uint64_t tail_len = std::min<uint64_t>(size, kEndBytes + 0xFFFF);
  const uint64_t tail_start = size - tail_len;
  std::vector<uint8_t> tail = src.read_vec(tail_start, static_cast<size_t>(tail_len));
  std::optional<uint64_t> end_at;
  for (size_t i = tail.size() - kEndBytes + 1; i-- > 0;) {
    if (le(&tail[i], 4) == kEndSig && i + kEndBytes + le(&tail[i + 20], 2) <= tail.size()) {
      end_at = i;
      break;
    }
  }
  if (!end_at)
    throw Error("pytorch.not_zip", "no zip end-of-central-directory record",
                {.file = path, .offset = size, .hint = "the file is truncated or not a torch.save zip archive"});
  const uint8_t* e = &tail[*end_at];
  const uint64_t end_offset = tail_start + *end_at;
  uint64_t count = le(e + 10, 2), dir_size = le(e + 12, 4), dir_offset = le(e + 16, 4);

  // zip64: a locator right before the end record points at the zip64 end record.
  if (end_offset >= kLocatorBytes) {
    uint8_t loc[kLocatorBytes];
    src.read_at(end_offset - kLocatorBytes, loc, sizeof loc);
    if (le(loc, 4) == kLocator64Sig) {
      uint64_t at = le(loc + 8, 8);
      if (at > size || size - at < kEnd64Bytes)
        throw Error("pytorch.entry_out_of_file", "the zip64 end record lies outside the file",
                    {.file = path, .offset = end_offset - kLocatorBytes});
      uint8_t r[kEnd64Bytes];
      src.read_at(at, r, sizeof r);
      if (le(r, 4) != kEnd64Sig)
        throw Error("pytorch.bad_zip", "bad zip64 end record signature", {.file = path, .offset = at});
      count = le(r + 32, 8);
      dir_size = le(r + 40, 8);
      dir_offset = le(r + 48, 8);
    }
  }
  auto dir_end = checked_add(dir_offset, dir_size);
  if (!dir_end || *dir_end > size)
    throw Error("pytorch.entry_out_of_file",
                "the central directory (" + std::to_string(dir_size) + " bytes at " + std::to_string(dir_offset) +
                    ") extends past the end of the file (" + std::to_string(size) + " bytes)",
                {.file = path, .offset = end_offset, .hint = "the file is truncated"});
  if (dir_size > kMaxDirectoryBytes)
    throw Error("pytorch.bad_zip", "central directory of " + std::to_string(dir_size) + " bytes is too large",
                {.file = path, .offset = dir_offset});
  if (count > dir_size / kDirBytes)
    throw Error("pytorch.bad_zip",
                std::to_string(count) + " entries cannot fit in a central directory of " + std::to_string(dir_size) + " bytes",
                {.file = path, .offset = end_offset});

  const std::vector<uint8_t> dir = src.read_vec(dir_offset, static_cast<size_t>(dir_size));
  entries_.reserve(static_cast<size_t>(count));
  size_t p = 0;
  for (uint64_t n = 0; n < count; ++n) {
    const uint64_t at = dir_offset + p;
    if (dir.size() - p < kDirBytes || le(&dir[p], 4) != kDirSig)
      throw Error("pytorch.bad_zip", "bad central directory record", {.file = path, .offset = at});
    const uint8_t* d = &dir[p];
    Entry en;
    en.flags = static_cast<uint16_t>(le(d + 8, 2));
    en.method = static_cast<uint16_t>(le(d + 10, 2));
    en.crc32 = static_cast<uint32_t>(le(d + 16, 4));
    en.compressed = le(d + 20, 4);
    en.size = le(d + 24, 4);
    en.header_offset = le(d + 42, 4);
    en.directory_offset = at;
    const size_t nlen = le(d + 28, 2), xlen = le(d + 30, 2), clen = le(d + 32, 2);
    if (dir.size() - p - kDirBytes < nlen + xlen + clen)
      throw Error("pytorch.bad_zip", "central directory record runs past the directory", {.file = path, .offset = at});
    en.name.assign(reinterpret_cast<const char*>(d + kDirBytes), nlen);
    // zip64 extra field (id 1): only the fields saturated in the record, in this order.
    const uint8_t* x = d + kDirBytes + nlen;
    for (size_t q = 0; q + 4 <= xlen;) {
      const size_t id = le(x + q, 2), len = le(x + q + 2, 2);
      if (q + 4 + len > xlen) break;
      if (id == 1) {
        const uint8_t* f = x + q + 4;
        size_t left = len;
        auto take = [&](uint64_t& field) {
          if (field != 0xFFFFFFFFu) return;
          if (left < 8) throw Error("pytorch.bad_zip", "zip64 extra field too short", {.file = path, .offset = at});
          field = le(f, 8);
          f += 8;
          left -= 8;
        };
        take(en.size);
        take(en.compressed);
        take(en.header_offset);
      }
      q += 4 + len;
    }
    if (!by_name_.emplace(en.name, entries_.size()).second)
      throw Error("pytorch.duplicate_entry", "the archive holds two entries named '" + en.name + "'",
                  {.file = path, .offset = at, .hint = "the archive was tampered with or badly re-zipped"});
    entries_.push_back(std::move(en));
    p += kDirBytes + nlen + xlen + clen;
  }
}

const Entry* Archive::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

uint64_t Archive::data_offset(const Entry& e) const {
  const std::string& path = src_.path();
  if (e.header_offset > src_.size() || src_.size() - e.header_offset < kLocalBytes)
    throw Error("pytorch.entry_out_of_file", "local header of '" + e.name + "' lies outside the file",
                {.file = path, .offset = e.header_offset, .hint = "the file is truncated"});
  uint8_t h[kLocalBytes];
  src_.read_at(e.header_offset, h, sizeof h);
  if (le(h, 4) != kLocalSig)
    throw Error("pytorch.bad_zip", "bad local header signature for '" + e.name + "'", {.file = path, .offset = e.header_offset});
  const uint64_t start = e.header_offset + kLocalBytes + le(h + 26, 2) + le(h + 28, 2);
  auto end = checked_add(start, e.compressed);
  if (!end || *end > src_.size())
    throw Error("pytorch.entry_out_of_file",
                "entry '" + e.name + "' (" + std::to_string(e.compressed) + " bytes at " + std::to_string(start) +
                    ") extends past the end of the file (" + std::to_string(src_.size()) + " bytes)",
                {.file = path, .offset = e.header_offset, .hint = "the file is truncated"});
  return start;
}

uint64_t Archive::stored_data_offset(const Entry& e) const {
  const std::string& path = src_.path();
  if (e.method != 0)
    throw Error("pytorch.compressed_entry",
                "entry '" + e.name + "' is compressed (method " + std::to_string(e.method) + "); tensors cannot be mapped in place",
                {.file = path, .offset = e.header_offset,
                 .hint = "torch.save writes stored entries; re-save with torch.save or unzip and re-zip with -0"});
  if (e.flags & 1)
    throw Error("pytorch.bad_zip", "entry '" + e.name + "' is encrypted", {.file = path, .offset = e.header_offset});
  if (e.compressed != e.size)
    throw Error("pytorch.bad_zip", "stored entry '" + e.name + "' has different compressed and uncompressed sizes",
                {.file = path, .offset = e.directory_offset});
  return data_offset(e);
}

uint64_t Archive::verify_crc32() const {
  uint64_t total = 0;
  std::vector<uint8_t> buf(4u << 20);
  for (const Entry& e : entries_) {
    if (e.method != 0) continue;  // compressed entries are refused where they are used
    const uint64_t start = data_offset(e);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < e.compressed;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), e.compressed - done));
      src_.read_at(start + done, buf.data(), n);
      crc = crc32_update(crc, buf.data(), n);
      done += n;
    }
    total += e.compressed;
    if (crc != e.crc32)
      throw Error("pytorch.bad_crc",
                  "entry '" + e.name + "' has CRC-32 " + hex32(crc) + " but the directory records " + hex32(e.crc32),
                  {.file = src_.path(), .offset = start, .hint = "the file is corrupt; re-download it"});
  }
  return total;
}

}  // namespace nunchaku::zip
