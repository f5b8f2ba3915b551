// What every backend shares.
#include "engine/backend.hpp"

namespace nunchaku::engine {

int64_t buf_width(const EngineDims& d, Buf b) {
  switch (b) {
    case Buf::Q: case Buf::Att: return d.q_dim();
    case Buf::K: case Buf::V: return d.kv_dim();
    case Buf::Gate: case Buf::Up: return d.inter;
    case Buf::Logits: return d.vocab;
    default: return d.hidden;  // X, XN, Tmp, Sel
  }
}

}  // namespace nunchaku::engine
