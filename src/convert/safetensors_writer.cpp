#include "convert/safetensors_writer.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "convert/output.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku::convert {

namespace {
uint32_t align_of(DType t) {
  const auto& d = dtype_info(t);
  return d.block_elems == 1 ? d.block_bytes : 1;
}
}  // namespace

std::vector<size_t> safetensors_layout(const ConvertPlan& plan, const Shard& shard, const Checkpoint& ck) {
  std::vector<size_t> order = shard.tensors;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &ta = plan.tensors[a], &tb = plan.tensors[b];
    const uint32_t aa = align_of(ta.dtype), ab = align_of(tb.dtype);
    if (aa != ab) return aa > ab;
    const auto &sa = ck.tensors[ta.src], &sb = ck.tensors[tb.src];
    return sa.file != sb.file ? sa.file < sb.file : sa.offset < sb.offset;
  });
  return order;
}

uint64_t write_safetensors(const std::string& tmp_path, const std::string& shown, const ConvertPlan& plan,
                           const Shard& shard, const Checkpoint& ck, TensorReader& reader,
                           const std::function<void(uint64_t)>& on_bytes) {
  const auto order = safetensors_layout(plan, shard, ck);
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (size_t i : order) {
    const auto& t = plan.tensors[i];
    if (dtype_info(t.dtype).block_elems != 1)
      throw Error("convert.unsupported_dtype", std::string("safetensors cannot hold ") + std::string(dtype_name(t.dtype)),
                  {.tensor = t.name, .hint = "pass --dtype bf16|fp16|fp32 or --format gguf"});
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  std::string text = dump_json(header, -1, true);
  text.append((8 - text.size() % 8) % 8, ' ');
  OutFile out(tmp_path, shown);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (size_t i : order) {
    const auto& t = plan.tensors[i];
    const TensorInfo& src = ck.tensors[t.src];
    const uint64_t start = out.written();
    reader.write_to(src, t.dtype, out, on_bytes, {t.qk_heads, t.qk_to_gguf});
    if (out.written() - start != t.nbytes)
      throw Error("convert.internal", "wrote " + std::to_string(out.written() - start) + " bytes for " +
                  std::to_string(t.nbytes), {.file = shown, .tensor = t.name}, Exit::Internal);
  }
  const uint64_t size = out.written();
  out.close();
  return size;
}

}  // namespace nunchaku::convert
