#include "convert/convert.hpp"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "convert/gguf_sidecars.hpp"
#include "convert/gguf_writer.hpp"
#include "convert/output.hpp"
#include "convert/plan.hpp"
#include "convert/safetensors_writer.hpp"
#include "convert/sidecars.hpp"
#include "convert/stream.hpp"
#include "convert/verify.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "format/open.hpp"
#include "io/atomic_output.hpp"
#include "model/model.hpp"
#include "core/text.hpp"

namespace nunchaku::convert {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Refusals that depend on the options rather than on one tensor; all before writing.
void check_request(const ConvertOptions& o, const Checkpoint& ck, const ConvertPlan& plan, OutFormat fmt) {
  std::error_code ec;
  const fs::path out = fs::absolute(o.out, ec);
  auto under = [](const fs::path& a, const fs::path& dir) {  // a is dir or lies inside it
    const std::string as = a.lexically_normal().string(), ds = dir.lexically_normal().string();
    return as == ds || as.rfind(ds + (ds.ends_with("/") ? "" : "/"), 0) == 0;
  };
  for (const auto& f : ck.files)
    if (under(fs::absolute(f.path, ec), out))
      throw Error("convert.out_is_input", "OUT is or contains the input", {.file = o.out});
  if (fs::is_directory(o.in, ec) && under(out, fs::absolute(o.in, ec)))
    throw Error("convert.out_is_input", "OUT lies inside the input directory", {.file = o.out,
                .hint = "write the converted checkpoint beside the input, not into it"});
  if (o.dtype && !(*o.dtype == DType::F32 || *o.dtype == DType::F16 || *o.dtype == DType::BF16 ||
                   (*o.dtype == DType::Q8_0 && fmt == OutFormat::GGUF)))
    throw Error("usage.dtype", fmt::format("--dtype {} is not an output type here", dtype_name(*o.dtype)),
                {.hint = "bf16, fp16 or fp32 (q8_0 with --format gguf)"});
  for (const auto& t : plan.tensors) {
    const TensorInfo& s = ck.tensors[t.src];
    if (!s.strides.empty() && view_span_bytes(s) > o.buffer_bytes)
      throw Error("convert.view_too_large",
                  fmt::format("a strided view spanning {} bytes does not fit the {}-byte buffer", view_span_bytes(s),
                              o.buffer_bytes),
                  {.file = ck.files[s.file].path, .tensor = s.name, .offset = s.offset, .hint = "raise --buffer"});
  }
}

nlohmann::json index_json(const ConvertPlan& plan) {
  uint64_t total = 0, params = 0;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& sh : plan.shards)
    for (size_t i : sh.tensors) {
      const auto& t = plan.tensors[i];
      map[t.name] = sh.file, total += t.nbytes;
      uint64_t n = 1;
      for (auto d : t.shape) n *= uint64_t(d);
      params += n;
    }
  // As transformers 4.57 writes it (json.dumps(indent=2, sort_keys=True)).
  return {{"metadata", {{"total_parameters", params}, {"total_size", total}}}, {"weight_map", map}};
}

}  // namespace

// Names: docs/json.md; shape: docs/schema/convert.json.
nlohmann::json ConvertReport::to_json() const {
  nlohmann::json fj = nlohmann::json::array();
  for (const auto& f : files)  // a GGUF output is the one file OUT; safetensors files lie in the folder OUT
    fj.push_back({{"path", format == OutFormat::GGUF ? out : (fs::path(out) / f.name).string()},
                  {"size_bytes", f.bytes},
                  {"num_tensors", f.tensors}});
  nlohmann::json j = {{"out_path", out},
                      {"out_format", format == OutFormat::GGUF ? "gguf" : "safetensors"},
                      {"files", fj},
                      {"num_tensors", tensors},
                      {"read_bytes", bytes_in},
                      {"written_bytes", bytes_out},
                      {"wall_s", seconds},
                      {"gb_per_s", seconds > 0 ? double(bytes_in) / seconds / 1e9 : 0.0},
                      {"dropped_duplicates", dropped},
                      {"skipped", skipped},
                      {"sidecars", sidecars}};
  j["verified"] = verified ? nlohmann::json(*verified) : nlohmann::json(nullptr);
  return j;
}

ConvertReport convert_checkpoint(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const OutFormat fmt = o.format.value_or(ends_with(o.out, ".gguf") ? OutFormat::GGUF : OutFormat::Safetensors);
  const Checkpoint ck = open_checkpoint(o.in);
  const ModelLayout layout = describe_model(ck);
  const std::vector<Rename> renames = map_names(ck, layout, o.names);
  ConvertPlan plan = plan_tensors(ck, layout, {.dtype = o.dtype, .gguf = fmt == OutFormat::GGUF, .renames = &renames});
  if (fmt == OutFormat::GGUF) plan.shards = {{.file = fs::path(o.out).filename().string()}};
  if (fmt == OutFormat::GGUF)
    for (size_t i = 0; i < plan.tensors.size(); ++i) plan.shards[0].tensors.push_back(i);
  else if (o.shard_by_layer) shard_by_module(plan, ck, layout);
  else shard_by_size(plan, o.shard_size, o.shard_by_name);
  std::vector<std::pair<std::string, GgufValue>> tokenizer_kvs;
  if (fmt == OutFormat::GGUF && !renames.empty() && o.names == Names::GGUF && layout.spec)
    if (auto f = llama3_rope_freqs(*layout.spec); !f.empty()) plan.generated.push_back({"rope_freqs.weight", std::move(f)});
  if (fmt == OutFormat::GGUF && ck.format != Format::GGUF) tokenizer_kvs = hf_tokenizer_kvs(ck, plan.skipped);
  check_request(o, ck, plan, fmt);
  if (fmt == OutFormat::GGUF) check_gguf_plan(plan);

  nunchaku::InterruptGuard guard;  // SIGINT/SIGTERM polled between chunks
  StagedOutput staged(o.out, fmt == OutFormat::Safetensors);
  TensorReader reader(ck, o.buffer_bytes);
  uint64_t total_in = 0;
  for (const auto& t : plan.tensors) total_in += ck.tensors[t.src].nbytes;
  auto tick = [&](uint64_t done) { if (o.progress) o.progress(done, total_in); };

  ConvertReport r;
  r.out = o.out;
  r.format = fmt;
  r.dropped = plan.dropped;
  r.tensors = plan.tensors.size() + plan.generated.size();
  if (fmt == OutFormat::GGUF) {
    const uint64_t size = write_gguf(staged.path_for(""), o.out, plan, ck, layout, reader, tokenizer_kvs, tick);
    r.files.push_back({plan.shards[0].file, size, plan.tensors.size() + plan.generated.size()});
  } else {
    for (const auto& sh : plan.shards) {
      const uint64_t size = write_safetensors(staged.path_for(sh.file), (fs::path(o.out) / sh.file).string(), plan,
                                              sh, ck, reader, tick);
      r.files.push_back({sh.file, size, sh.tensors.size()});
    }
    if (plan.shards.size() > 1) {
      const std::string text = dump_json(index_json(plan), 2, true) + "\n";
      write_file_atomically(staged.path_for("model.safetensors.index.json"), text);
      r.files.push_back({"model.safetensors.index.json", text.size(), 0});
    }
    r.sidecars = write_sidecars(ck, layout, staged, plan.skipped);
  }
  r.skipped = plan.skipped;
  check_interrupted();
  if (o.verify) {
    verify_output(plan, ck, staged.staging(), fmt == OutFormat::GGUF, o.buffer_bytes);
    r.verified = true;
  }
  staged.commit();
  r.bytes_in = reader.bytes_read();
  for (const auto& f : r.files) r.bytes_out += f.bytes;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace nunchaku::convert
