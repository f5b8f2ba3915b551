// Output files written whole or not at all: the bytes go to a temporary file next to the
// target, renamed into place by commit(). A failure before that (an exception, a bad
// request that aborts the run) removes the temporary and leaves any old file untouched.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace nunchaku {

class AtomicOutput {
 public:
  // Opens `path` + ".tmp-nunchaku" for writing; Error("io.write") naming `path` if it cannot.
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();  // not committed: closes and removes the temporary
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  std::FILE* file() const { return f_; }
  // Flushes, closes and renames over `path`; Error("io.write") if any step fails.
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

// The whole of `text` to `path` through an AtomicOutput.
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace nunchaku
