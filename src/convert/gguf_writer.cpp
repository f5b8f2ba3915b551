#include "convert/gguf_writer.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "convert/output.hpp"
#include "convert/spec_fields.hpp"
#include "core/error.hpp"
#include "format/gguf.hpp"
#include "model/arch/record.hpp"
#include "core/source.hpp"

namespace nunchaku::convert {

namespace {

constexpr uint64_t kAlign = 32;

struct Bytes {
  std::string b;
  template <class T>
  void put(T v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(std::string_view s) { put<uint64_t>(s.size()), b.append(s); }
};

void put_value(Bytes& o, const GgufValue& v);

void put_array(Bytes& o, const GgufArray& a) {
  std::visit([&](const auto& vec) {
    using E = typename std::decay_t<decltype(vec)>::value_type;
    o.put<uint32_t>(uint32_t(a.index()));
    o.put<uint64_t>(vec.size());
    for (const auto& e : vec) {
      if constexpr (std::is_same_v<E, std::string_view>) o.str(e);
      else if constexpr (std::is_same_v<E, GgufValue>) put_value(o, e);  // nested: type + payload
      else if constexpr (std::is_same_v<E, bool>) o.put<uint8_t>(e ? 1 : 0);
      else o.put<E>(e);
    }
  }, a);
}

// The payload of a value (its type id already written by the caller, except nested arrays).
void put_payload(Bytes& o, const GgufValue& v) {
  std::visit([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, std::string>) o.str(x);
    else if constexpr (std::is_same_v<T, GgufArray>) put_array(o, x);
    else if constexpr (std::is_same_v<T, bool>) o.put<uint8_t>(x ? 1 : 0);
    else o.put<T>(x);
  }, v.data);
}

void put_value(Bytes& o, const GgufValue& v) {  // an element of a nested array: payload only
  put_payload(o, v);
}

void put_kv(Bytes& o, const std::string& key, const GgufValue& v) {
  o.str(key);
  o.put<uint32_t>(uint32_t(v.type()));
  put_payload(o, v);
}

int file_type_of(const ConvertPlan& plan) {
  // llama_ftype of the dominant (largest) matrix type: F32 0, F16 1, Q8_0 7, BF16 32.
  uint64_t best = 0;
  DType d = DType::F32;
  for (const auto& t : plan.tensors)
    if (t.shape.size() >= 2 && t.nbytes > best) best = t.nbytes, d = t.dtype;
  switch (d) {
    case DType::F16: return 1;
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    default: return 0;
  }
}

std::vector<std::pair<std::string, GgufValue>> metadata(const ConvertPlan& plan, const Checkpoint& ck,
                                                        const ModelLayout& layout,
                                                        const std::vector<std::pair<std::string, GgufValue>>& extra) {
  std::vector<std::pair<std::string, GgufValue>> kvs;
  if (ck.format == Format::GGUF) {
    FileSource src(ck.files[0].path);
    kvs = read_gguf_file(src).kvs;
    // One output file: a split input's split.* keys would make it claim to be a part.
    std::erase_if(kvs, [](const auto& kv) { return kv.first == "general.alignment" || kv.first.starts_with("split."); });
  } else if (layout.spec) {
    const ModelSpec& s = *layout.spec;
    // llama.cpp's name for the family (mistral and mixtral are "llama"), else the family's own.
    const ArchRecord* rec = find_record(s.architecture);
    const std::string a(rec && !rec->gguf_arch.empty() ? rec->gguf_arch : std::string_view(s.architecture));
    kvs.push_back({"general.architecture", {std::string(a)}});
    auto u32 = [&](const std::string& k, int64_t v) { if (v > 0) kvs.push_back({a + "." + k, {uint32_t(v)}}); };
    for (const SpecField& f : kSpecFields) u32(f.gguf, s.*f.value);
    u32("attention.value_length", s.head_dim);
    if (s.rope_theta > 0) u32("rope.dimension_count", s.head_dim);
    if (s.norm_eps > 0) kvs.push_back({a + ".attention.layer_norm_rms_epsilon", {float(s.norm_eps)}});
    if (s.rope_theta > 0) kvs.push_back({a + ".rope.freq_base", {float(s.rope_theta)}});
  }
  kvs.insert(kvs.end(), extra.begin(), extra.end());
  const GgufValue ft{uint32_t(file_type_of(plan))};
  auto it = std::find_if(kvs.begin(), kvs.end(), [](const auto& kv) { return kv.first == "general.file_type"; });
  if (it != kvs.end()) it->second = ft;
  else kvs.push_back({"general.file_type", ft});
  return kvs;
}

}  // namespace

void check_gguf_plan(const ConvertPlan& plan) {
  for (const auto& t : plan.tensors) {
    if (dtype_info(t.dtype).ggml_id < 0)
      throw Error("convert.unsupported_dtype", fmt::format("GGUF has no {} type", dtype_name(t.dtype)),
                  {.tensor = t.name, .hint = "pass --dtype fp32|fp16|bf16|q8_0"});
    if (t.name.size() > 63)
      throw Error("convert.name_too_long", "ggml truncates tensor names longer than 63 bytes",
                  {.tensor = t.name, .hint = "--names gguf maps HF names to llama.cpp's"});
    if (t.shape.size() > 4)
      throw Error("convert.too_many_dims", "GGUF tensors have at most 4 dimensions", {.tensor = t.name});
  }
}

uint64_t write_gguf(const std::string& tmp_path, const std::string& shown, const ConvertPlan& plan,
                    const Checkpoint& ck, const ModelLayout& layout, TensorReader& reader,
                    const std::vector<std::pair<std::string, GgufValue>>& extra_kvs,
                    const std::function<void(uint64_t)>& on_bytes) {
  std::vector<size_t> order(plan.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &sa = ck.tensors[plan.tensors[a].src], &sb = ck.tensors[plan.tensors[b].src];
    return sa.file != sb.file ? sa.file < sb.file : sa.offset < sb.offset;
  });
  const auto kvs = metadata(plan, ck, layout, extra_kvs);
  Bytes h;
  h.b = "GGUF";
  h.put<uint32_t>(3);
  h.put<uint64_t>(order.size() + plan.generated.size());
  h.put<uint64_t>(kvs.size());
  for (const auto& [k, v] : kvs) put_kv(h, k, v);
  uint64_t off = 0;
  for (size_t i : order) {
    const auto& t = plan.tensors[i];
    h.str(t.name);
    h.put<uint32_t>(uint32_t(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) h.put<uint64_t>(uint64_t(t.shape[d]));
    h.put<uint32_t>(uint32_t(dtype_info(t.dtype).ggml_id));
    h.put<uint64_t>(off);
    off += (t.nbytes + kAlign - 1) / kAlign * kAlign;
  }
  for (const auto& g : plan.generated) {  // F32 vectors
    h.str(g.name);
    h.put<uint32_t>(1);
    h.put<uint64_t>(g.values.size());
    h.put<uint32_t>(uint32_t(dtype_info(DType::F32).ggml_id));
    h.put<uint64_t>(off);
    off += (g.values.size() * 4 + kAlign - 1) / kAlign * kAlign;
  }
  h.b.append((kAlign - h.b.size() % kAlign) % kAlign, '\0');
  OutFile out(tmp_path, shown);
  out.write(h.b.data(), h.b.size());
  static const char zeros[kAlign] = {};
  for (size_t i : order) {
    const auto& t = plan.tensors[i];
    const TensorInfo& src = ck.tensors[t.src];
    reader.write_to(src, t.dtype, out, on_bytes, {t.qk_heads, t.qk_to_gguf});
    out.write(zeros, (kAlign - t.nbytes % kAlign) % kAlign);
  }
  for (const auto& g : plan.generated) {
    out.write(g.values.data(), g.values.size() * 4);
    out.write(zeros, (kAlign - g.values.size() * 4 % kAlign) % kAlign);
  }
  const uint64_t size = out.written();
  out.close();
  return size;
}

}  // namespace nunchaku::convert
