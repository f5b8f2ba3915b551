#include "core/error.hpp"
#include "format/readers.hpp"
namespace nunchaku {
Checkpoint read_pytorch(const Source& src) { throw Error("todo", "pytorch reader not implemented", {.file = src.path()}, Exit::Internal); }
}
