// The one output writer: every regular file nunchaku writes appears whole or not at all.
//
// What the target is decides how it is written (once, when the writer is created):
// - "-": standard output, written in place (streamed, no temporary, no rename).
// - an existing character device or FIFO (/dev/null, a named pipe, /proc/self/fd/1 of a
//   pipe), directly or through symlinks: opened O_WRONLY and written in place, like a
//   shell's `>`; the node itself is never replaced. Block devices, sockets and directories
//   are refused (io.write, exit 2).
// - a regular file or a new name: a symlink at the path is resolved once (dangling ones
//   too: the name they point to is created) and that final name is the target. The bytes
//   go to a temporary created beside it (same directory, so the rename is atomic) under a
//   random name with O_CREAT|O_EXCL|O_NOFOLLOW: a planted file or symlink is never opened,
//   and two writers never share a temporary. commit() flushes, fsyncs and renames over the
//   target, which keeps the permission bits of the file it replaces (a new file gets 0666
//   minus the umask); a new name is created with RENAME_NOREPLACE, and nothing is ever
//   renamed over a non-regular file that appeared meanwhile. Concurrent writers to one
//   target each rename whole files: the target is always one writer's complete output,
//   and each reports its own outcome truthfully. Only the temporary this writer created
//   is ever removed.
// Every mode checks the write, flush and close: a failure is Error io.write naming the
// path with the OS's message (exit 1), never a silent success.
//
// A target that is one of the files the command reads (recorded with note_input_*,
// compared by device and inode, so hard links and symlinks count) is refused with
// Error("io.output_is_input", exit 2) before anything is created.
#pragma once

#include <sys/types.h>

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
  // Creates the temporary (or opens the device / FIFO / stdout); Error io.output_is_input
  // (exit 2), or io.write naming `path` (a directory, a block device, a symlink loop: exit 2).
  explicit AtomicOutput(std::string path, AtomicOptions opts = {});
  ~AtomicOutput();  // not committed: closes and removes the temporary (in place: closes)
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  std::FILE* file() const { return f_; }
  // The temporary's descriptor, for writers that bypass stdio (write(2), copy_file_range);
  // they must not mix it with buffered writes to file().
  int fd() const { return f_ ? ::fileno(f_) : -1; }
  const std::string& path() const { return path_; }
  // The name renamed over: `path` with its symlinks resolved ("" when written in place).
  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return tmp_; }  // "" when written in place
  bool in_place() const { return tmp_.empty(); }
  // Flushes, fsyncs, closes and renames over the target (in place: flushes and closes);
  // Error io.write (exit 1) if any step fails (the temporary is removed and the old
  // target left as it was).
  void commit();

 private:
  void open_in_place(const std::string& shown);
  void create_temporary(bool replacing, mode_t mode);
  void rename_into_place();

  std::string path_, target_, tmp_;
  std::FILE* f_ = nullptr;
  bool replacing_ = false;  // the target was an existing regular file
  AtomicOptions opts_;
};

// ".NAME.nunchaku-<12 random hex digits>" beside `target` (same directory): the one
// scheme for temporary names (convert's staging directory uses it too). Not created here.
std::string temp_name_beside(const std::string& target);

// The whole of `text` to `path` through an AtomicOutput. A SIGINT/SIGTERM that arrives
// meanwhile stops it before the rename (Error "interrupted", exit 130/143).
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace nunchaku
