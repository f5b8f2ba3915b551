// Errors are values with context. Every failure that reaches the user is an
// nunchaku::Error carrying a stable code (one per broken rule, e.g.
// "safetensors.header_too_large"), the file, the tensor and the byte offset
// where it was found, and a hint when there is an obvious fix. main() has the
// only catch; it prints what() on one line and exits with exit_code().
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace nunchaku {

// Process exit codes, shared by every subcommand.
enum class Exit : int {
  Ok = 0,
  Internal = 1,  // a bug or an environment failure (not the user's input)
  BadInput = 2,  // bad file, bad option, unreadable checkpoint
  OutOfMemory = 3,  // predicted (estimate/plan) or actual (load/run) OOM
};

struct ErrorContext {
  std::string file;                 // path of the file at fault, if any
  std::string tensor;               // tensor name, if any
  std::optional<uint64_t> offset;   // absolute byte offset in `file`, if known
  std::string hint;                 // what the user can do about it
};

class Error : public std::runtime_error {
 public:
  Error(std::string code, const std::string& message, ErrorContext ctx = {},
        Exit exit = Exit::BadInput);

  const std::string& code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const ErrorContext& context() const noexcept { return ctx_; }
  int exit_code() const noexcept { return static_cast<int>(exit_); }

  // Returns a copy with fields of `outer` filled in where this one has none
  // (used when a shard reader's error is re-thrown with the shard path).
  Error with_defaults(const ErrorContext& outer) const;

 private:
  std::string code_;
  std::string message_;
  ErrorContext ctx_;
  Exit exit_;
};

// "file: tensor 'x': at byte N: message (hint: ...)" — the single line main prints;
// every part passed through printable() (core/text.hpp). message() stays exact.
std::string format_error(const std::string& message, const ErrorContext& ctx);

}  // namespace nunchaku
