// What every backend shares.
#include "engine/backend.hpp"

#include "core/error.hpp"

namespace nunchaku::engine {

int64_t buf_width(const EngineDims& d, Buf b) {
  switch (b) {
    case Buf::Q: case Buf::Att: return d.q_dim();
    case Buf::K: case Buf::V: return d.kv_dim();
    case Buf::Gate: case Buf::Up: return d.inter;
    case Buf::QH: return d.mla_q_dim();
    case Buf::Lat: return d.mla_lat_dim();
    case Buf::Logits: return d.vocab;
    default: return d.hidden;  // X, XN, Tmp, Sel
  }
}

void Backend::matmul_heads(std::span<const WeightMatrix>, Buf, int64_t, Buf, int64_t) {
  throw Error("engine.unsupported_architecture", "this backend does not run multi-head latent attention", {}, Exit::Internal);
}
void Backend::mla_rope_cache(int64_t) {
  throw Error("engine.unsupported_architecture", "this backend does not run multi-head latent attention", {}, Exit::Internal);
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
    case Op::Mla: return "mla";
    case Op::ChunkedAttention: return "chunked_attention";
    case Op::AttnTemperature: return "attention_temperature";
    case Op::UnitNorm: return "unit_norm";
    case Op::NoRope: return "no_rope";
  }
  return "?";
}

}  // namespace nunchaku::engine
