#include "convert/verify.hpp"

#include <cstring>
#include <map>

#include <fmt/format.h>

#include "convert/stream.hpp"
#include "core/error.hpp"
#include "format/open.hpp"
#include "core/units.hpp"

namespace nunchaku::convert {

namespace {
[[noreturn]] void fail(const std::string& file, const std::string& tensor, std::optional<uint64_t> off,
                       const std::string& what) {
  throw Error("convert.verify_failed", what, {.file = file, .tensor = tensor, .offset = off}, Exit::Internal);
}
}  // namespace

void verify_output(const ConvertPlan& plan, const Checkpoint& in, const std::string& out_path, bool gguf,
                   uint64_t buffer_bytes) {
  const Checkpoint out = open_checkpoint(out_path);
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < out.tensors.size(); ++i) by_name[out.tensors[i].name] = i;
  if (out.tensors.size() != plan.tensors.size() + plan.generated.size())
    fail(out_path, "", std::nullopt,
         fmt::format("the output holds {}, {} were planned", plural(out.tensors.size(), "tensor"),
                     plan.tensors.size() + plan.generated.size()));
  for (const auto& g : plan.generated) {
    auto it = by_name.find(g.name);
    if (it == by_name.end()) fail(out_path, g.name, std::nullopt, "missing from the output");
    const TensorInfo& o = out.tensors[it->second];
    std::vector<float> v(g.values.size());
    if (o.dtype != DType::F32 || o.nbytes != v.size() * 4) fail(out.files[o.file].path, g.name, o.offset, "dtype or shape differs from the plan");
    File::open_read_only(out.files[o.file].path).read_at(o.offset, v.data(), o.nbytes);
    if (std::memcmp(v.data(), g.values.data(), o.nbytes) != 0) fail(out.files[o.file].path, g.name, o.offset, "bytes differ from the plan");
  }
  (void)gguf;
  TensorReader reader(in, buffer_bytes);
  std::vector<File> files;
  for (const auto& f : out.files) files.push_back(File::open_read_only(f.path));
  std::vector<uint8_t> got;
  for (const auto& t : plan.tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) fail(out_path, t.name, std::nullopt, "missing from the output");
    const TensorInfo& o = out.tensors[it->second];
    const std::string& file = out.files[o.file].path;
    if (o.dtype != t.dtype || o.shape != t.shape || o.nbytes != t.nbytes)
      fail(file, t.name, o.offset, "dtype or shape differs from the plan");
    uint64_t pos = 0;
    reader.read(in.tensors[t.src], t.dtype, [&](const uint8_t* want, size_t n) {
      got.resize(std::max(got.size(), n));
      files[o.file].read_at(o.offset + pos, got.data(), n);
      if (std::memcmp(got.data(), want, n) != 0) {
        size_t k = 0;
        while (got[k] == want[k]) ++k;
        fail(file, t.name, o.offset + pos + k, "bytes differ from the converted input");
      }
      pos += n;
    }, {t.qk_heads, t.qk_to_gguf});
  }
}

}  // namespace nunchaku::convert
