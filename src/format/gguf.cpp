#include "core/error.hpp"
#include "format/readers.hpp"
namespace nunchaku {
Checkpoint read_gguf(const Source& src) { throw Error("todo", "gguf reader not implemented", {.file = src.path()}, Exit::Internal); }
}
