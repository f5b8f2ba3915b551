// The one output writer: every file nunchaku writes appears whole or not at all.
//
// The bytes go to a temporary created beside the target (same directory, so the rename is
// atomic) under a random name with O_CREAT|O_EXCL|O_NOFOLLOW: a planted file or symlink
// is never opened, and two writers never share a temporary. commit() flushes, fsyncs and
// renames over the target, which keeps the permission bits of the file it replaces (a new
// file gets 0666 minus the umask). Concurrent writers to one target each rename whole
// files: the target is always one writer's complete output, and each reports its own
// outcome truthfully.
//
// A target that is one of the files the command reads (recorded with note_input_*,
// compared by device and inode, so hard links and symlinks count) is refused with
// Error("io.output_is_input", exit 2) before anything is created.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace nunchaku {

// Record an input: a regular file by its device and inode; a directory (a model folder)
// by every regular file directly inside it. Paths that do not exist are ignored.
void note_input_path(const std::string& path);
// Record the file behind a descriptor (stdin redirected from a file); pipes and ttys are ignored.
void note_input_fd(int fd);
// Forget every recorded input (tests).
void clear_noted_inputs();
// Error io.output_is_input when `path` exists and is a recorded input.
void check_not_input(const std::string& path);

struct AtomicOptions {
  // false: commit() skips the fsyncs and leaves writeback to the OS (convert, whose
  // multi-GB shards stay whole-or-absent through its staging directory's rename).
  bool durable = true;
};

class AtomicOutput {
 public:
  // Creates the temporary; Error io.output_is_input, or io.write naming `path`.
  explicit AtomicOutput(std::string path, AtomicOptions opts = {});
  ~AtomicOutput();  // not committed: closes and removes the temporary
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  std::FILE* file() const { return f_; }
  // The temporary's descriptor, for writers that bypass stdio (write(2), copy_file_range);
  // they must not mix it with buffered writes to file().
  int fd() const { return f_ ? ::fileno(f_) : -1; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  // Flushes, fsyncs, closes and renames over `path`; Error io.write if any step fails
  // (the temporary is removed and the old target left as it was).
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  AtomicOptions opts_;
};

// The whole of `text` to `path` through an AtomicOutput. A SIGINT/SIGTERM that arrives
// meanwhile stops it before the rename (Error "interrupted", exit 130/143).
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace nunchaku
