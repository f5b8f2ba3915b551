#include "core/error.hpp"

#include "core/text.hpp"

namespace nunchaku {

std::string format_error(const std::string& message, const ErrorContext& ctx) {
  // Every part may hold bytes from a file or the command line: escaped and capped, so
  // the line stays one line and cannot drive the terminal.
  std::string out;
  if (!ctx.file.empty()) out += printable(ctx.file, kMessageShown) + ": ";
  if (!ctx.tensor.empty()) out += "tensor '" + printable(ctx.tensor) + "': ";
  if (ctx.offset) out += "at byte " + std::to_string(*ctx.offset) + ": ";
  out += printable(message, kMessageShown);
  if (!ctx.hint.empty()) out += " (hint: " + printable(ctx.hint, kMessageShown) + ")";
  return out;
}

Error::Error(std::string code, const std::string& message, ErrorContext ctx, Exit exit)
    : std::runtime_error(format_error(message, ctx)),
      code_(std::move(code)),
      message_(message),
      ctx_(std::move(ctx)),
      exit_(exit) {}

Error Error::with_defaults(const ErrorContext& outer) const {
  ErrorContext c = ctx_;
  if (c.file.empty()) c.file = outer.file;
  if (c.tensor.empty()) c.tensor = outer.tensor;
  if (!c.offset) c.offset = outer.offset;
  if (c.hint.empty()) c.hint = outer.hint;
  return Error(code_, message_, c, exit_);
}

}  // namespace nunchaku
