// nunchaku convert IN OUT: reshard and convert checkpoints in a stream. Thin adapter over
// convert_checkpoint (src/convert/): options in, a summary (or one JSON object) out.
#include <chrono>
#include <cstdio>
#include <memory>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/model_source.hpp"
#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/progress.hpp"
#include "convert/convert.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "core/text.hpp"

namespace nunchaku::cli {
namespace {

struct CliOptions {
  std::string in, file, out, dtype, shard_size, shard_by, shard_order, format, names, buffer = "256M";
  bool verify = false, json = false, quiet = false;
};

convert::ConvertOptions to_options(const CliOptions& c) {
  convert::ConvertOptions o;
  o.in = c.in;
  o.out = c.out;
  if (!c.dtype.empty()) {
    const auto d = dtype_from_user(c.dtype);
    const bool q8 = c.dtype == "q8_0" || c.dtype == "Q8_0";
    if (!d && !q8)
      throw Error("usage.dtype", "unknown --dtype '" + c.dtype + "'", {.hint = "bf16, fp16, fp32 or q8_0 (gguf)"});
    o.dtype = q8 ? DType::Q8_0 : *d;
  }
  if (!c.shard_size.empty() && !c.shard_by.empty())
    throw Error("usage.shard", "--shard-size and --shard-by exclude each other");
  if (!c.shard_size.empty()) {
    o.shard_size = parse_size_or_throw(c.shard_size, "--shard-size");
    if (o.shard_size == 0) throw Error("usage.size", "--shard-size must be more than 0");
  }
  if (c.shard_order == "name") o.shard_by_name = true;
  else if (!c.shard_order.empty() && c.shard_order != "model")
    throw Error("usage.shard", "--shard-order takes model or name");
  if (!c.shard_order.empty() && !c.shard_by.empty())
    throw Error("usage.shard", "--shard-order applies to --shard-size, not --shard-by");
  if (!c.shard_by.empty()) {
    if (c.shard_by != "layer") throw Error("usage.shard", "--shard-by takes 'layer'");
    o.shard_by_layer = true;
  }
  if (c.format == "gguf") o.format = convert::OutFormat::GGUF;
  else if (c.format == "safetensors") o.format = convert::OutFormat::Safetensors;
  else if (!c.format.empty()) throw Error("usage.format", "--format takes safetensors or gguf");
  o.buffer_bytes = parse_size_or_throw(c.buffer, "--buffer");
  if (o.buffer_bytes < (1u << 20)) throw Error("usage.size", "--buffer must be at least 1M");
  o.verify = c.verify;
  if (c.names == "hf") o.names = convert::Names::HF;
  else if (c.names == "gguf") o.names = convert::Names::GGUF;
  else if (!c.names.empty()) throw Error("usage.names", "--names takes hf or gguf");
  return o;
}

void print_summary(const convert::ConvertReport& r) {
  fmt::print("wrote {} ({}): {}, {} in {}\n", r.out, r.format == convert::OutFormat::GGUF ? "gguf" : "safetensors",
             plural(r.tensors, "tensor"), format_bytes(r.bytes_out), plural(r.files.size(), "file"));
  for (const auto& f : r.files)
    fmt::print("  {:<40} {:>12}{}\n", f.name, format_bytes(f.bytes), f.tensors ? "  " + plural(f.tensors, "tensor") : "");
  for (const auto& d : r.dropped) {
    const auto eq = d.find('=');
    fmt::print("shared storage: {} written once as {}\n", d.substr(0, eq), d.substr(eq + 1));
  }
  for (const auto& s : r.skipped) fmt::print("not written: {}\n", s);
  if (!r.sidecars.empty()) fmt::print("sidecars: {}\n", fmt::join(r.sidecars, ", "));
  fmt::print("read {} in {:.2f} s ({:.2f} GB/s){}\n", format_bytes(r.bytes_in), r.seconds,
             r.seconds > 0 ? r.bytes_in / r.seconds / 1e9 : 0.0, r.verified ? "; verified" : "");
}

int run_convert(const CliOptions& c) {
  auto o = to_options(c);
  Progress progress("converting", !c.quiet && !c.json);
  if (progress.on()) o.progress = [&progress](uint64_t done, uint64_t total) { progress.bytes(done, total); };
  const auto r = convert::convert_checkpoint(o);
  progress.clear();
  if (c.json) {
    auto j = r.to_json();
    j["path"] = c.in;
    fmt::print("{}\n", dump_json(stamp(j, "convert"), 2));
  }
  else if (!c.quiet) print_summary(r);
  return 0;
}

}  // namespace

void add_convert(CLI::App& app, Action& action) {
  auto o = std::make_shared<CliOptions>();
  auto* cmd = app.add_subcommand("convert", "Reshard / convert a checkpoint to safetensors or GGUF in a stream");
  cmd->footer(
      "OUT is written through a temporary and renamed at the end: nothing half written is left behind.\n"
      "Exit codes: 0 ok, 2 bad input or usage (also a dtype the output cannot hold), 1 write failure or\n"
      "--verify mismatch, 130/143 interrupted.\n"
      "Examples:\n"
      "  nunchaku convert model/ out/ --shard-size 2GB\n"
      "  nunchaku convert model/ model-bf16/ --dtype bf16 --verify\n"
      "  nunchaku convert model/ model-q8_0.gguf --dtype q8_0");
  cmd->add_option("IN", o->in, "Checkpoint file or directory (anything inspect opens), or a Hub id in the local HF cache")->required();
  add_file_option(cmd, o->file);
  cmd->add_option("OUT", o->out, "Output directory (safetensors) or .gguf file; must not exist")->required();
  cmd->add_option("--dtype", o->dtype, "Cast float tensors: bf16, fp16, fp32 (q8_0 for GGUF output)")->group(kConversion);
  cmd->add_option("--shard-size", o->shard_size, "Max bytes per safetensors shard, as transformers (default 5GB)")->group(kConversion);
  cmd->add_option("--shard-order", o->shard_order,
                  "Tensor order --shard-size fills shards in: model (transformers 4.x) or name (5.x)")->group(kConversion);
  cmd->add_option("--shard-by", o->shard_by, "'layer': one file per module (embedding, each layer, norm, head)")->group(kConversion);
  cmd->add_option("--format", o->format, "safetensors or gguf (default: gguf when OUT ends in .gguf)")->group(kConversion);
  cmd->add_option("--names", o->names, "Rename tensors: hf (transformers) or gguf (llama.cpp), Q/K rows permuted as convert_hf_to_gguf")
      ->group(kConversion);
  cmd->add_option("--buffer", o->buffer, "Streaming buffer size (default 256M)")->group(kConversion);
  cmd->add_flag("--verify", o->verify, "Re-read the output and compare every tensor with the input")->group(kOutput);
  cmd->add_flag("--json", o->json, "Print the summary as one JSON object")->group(kOutput);
  cmd->add_flag("-q,--quiet", o->quiet, "No summary, no progress")->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, &action] { action = [o] {
    o->in = local_model_path(o->in, o->file, false);
    return run_convert(*o);
  }; });
}

}  // namespace nunchaku::cli

