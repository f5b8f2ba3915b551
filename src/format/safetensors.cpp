#include "core/error.hpp"
#include "format/readers.hpp"
namespace nunchaku {
Checkpoint read_safetensors(const Source& src) { throw Error("todo", "safetensors reader not implemented", {.file = src.path()}, Exit::Internal); }
}
