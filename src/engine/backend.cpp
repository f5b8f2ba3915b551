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

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Embed: return "embed";
    case Op::Matmul: return "matmul";
    case Op::Norm: return "norm";
    case Op::ActMul: return "act_mul";
    case Op::Scale: return "scale";
    case Op::Softcap: return "softcap";
    case Op::Add: return "add";
    case Op::Rope: return "rope";
    case Op::Attention: return "attention";
    case Op::Moe: return "moe";
  }
  return "?";
}

}  // namespace nunchaku::engine
