// Where `convert` writes: everything goes under a temporary name in OUT's parent
// (".NAME.nunchaku-<random>", a directory or a file this process creates exclusively) and
// is renamed to OUT, without replacing anything, only when complete; nothing this process
// did not create is ever removed. Until then a failure, an exception or SIGINT /
// SIGTERM (checked between chunks) removes the temporary; IN is never opened for writing.
// A second signal exits at once after unlinking the file being written (core/interrupt.hpp);
// an output directory's other finished files then stay under the temporary name.
#pragma once

#include <cstdint>
#include <string>

#include "io/atomic_output.hpp"

namespace nunchaku::convert {

class StagedOutput {
 public:
  // Refuses (exit 2) when `out` exists or its parent directory does not.
  StagedOutput(std::string out, bool directory);
  ~StagedOutput();
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  const std::string& out() const { return out_; }
  // The temporary path of file `name` in the output directory (or of the output file).
  std::string path_for(const std::string& name) const;
  const std::string& staging() const { return tmp_; }
  // Renames the temporary to `out` (fails, exit 2, if `out` appeared meanwhile).
  void commit();

 private:
  std::string out_, tmp_;
  bool dir_ = false, committed_ = false, created_ = false;
};

// A new file written sequentially through the one output writer (io/atomic_output: a
// temporary beside `path`, removed on failure or a second signal, renamed to `path` by
// close()); write errors name the final file and its offset. ENOSPC/EDQUOT give
// Error("convert.disk_full", exit 1). No fsync: the staging directory's rename is what
// makes the output appear whole.
class OutFile {
 public:
  OutFile(const std::string& path, std::string shown_path);
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void write(const void* data, size_t n);
  // Bytes the kernel appended through fd() (copy_file_range).
  void note_copied(uint64_t n) { off_ += n; }
  // Throws the error write() would for errno `e`.
  [[noreturn]] void fail_write(int e) const;
  uint64_t written() const { return off_; }
  int fd() const { return out_.fd(); }
  void close();  // renames the temporary to `path`

 private:
  std::string shown_;
  AtomicOutput out_;
  uint64_t off_ = 0;
};

// Throws the Error of core/interrupt.hpp (exit 130 / 143) once SIGINT / SIGTERM arrived
// under an InterruptGuard (convert_checkpoint holds one).
void check_interrupted();

}  // namespace nunchaku::convert
