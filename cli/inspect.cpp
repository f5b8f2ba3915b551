// nunchaku inspect PATH: what is in a checkpoint. Thin adapter over
// open_checkpoint -> describe_model -> (verify_checkpoint) -> text or JSON.
#include <cerrno>
#include <cstdio>
#include <system_error>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/model_source.hpp"
#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/progress.hpp"
#include "cli/table.hpp"
#include "cli/json_doc.hpp"
#include <algorithm>
#include "core/text.hpp"
#include "format/open.hpp"
#include "format/verify.hpp"
#include "core/units.hpp"
#include "model/model.hpp"
#include "model/report.hpp"

namespace nunchaku::cli {
namespace {

struct InspectOptions {
  std::string path, file;
  bool json = false;
  bool tensors = false;
  bool verify = false;
  bool metadata = false;
  std::string filter;
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string with_commas(uint64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// Consecutive layer modules with the same tensor count, parameters and bytes
// collapse into one row ("model.layers.0-79  x80"), so an 80-layer model stays readable.
void print_modules(const ModelLayout& layout) {
  if (layout.modules.empty()) return;
  std::vector<std::vector<std::string>> rows;
  const auto& ms = layout.modules;
  for (size_t i = 0; i < ms.size();) {
    size_t j = i + 1;
    if (ms[i].kind == ModuleKind::Layer) {
      while (j < ms.size() && ms[j].kind == ModuleKind::Layer && ms[j].layer == ms[j - 1].layer + 1 &&
             ms[j].tensors.size() == ms[i].tensors.size() && ms[j].parameters == ms[i].parameters &&
             ms[j].bytes == ms[i].bytes)
        ++j;
    }
    std::string name = ms[i].name;
    if (j - i > 1) {  // "model.layers.3" -> "model.layers.0-79"
      const auto dot = name.rfind('.');
      name = (dot == std::string::npos ? name : name.substr(0, dot + 1)) + std::to_string(ms[i].layer) + "-" + std::to_string(ms[j - 1].layer);
    }
    rows.push_back({printable(name), std::to_string(ms[i].tensors.size()), format_count(ms[i].parameters), format_bytes(ms[i].bytes),
                    j - i > 1 ? fmt::format("each, x{}", j - i) : ""});
    i = j;
  }
  fmt::print("\n{}", layout_table({{"module", true}, {"tensors"}, {"parameters"}, {"bytes"}, {"", true}}, rows, output_width()).text);
}

// A dimension the files do not give (0) prints as "unknown", never as a value.
std::string dim(int64_t v) { return v > 0 ? std::to_string(v) : "unknown"; }

void print_spec(const ModelSpec& s) {
  const std::string source = s.source == "inferred" ? "inferred from tensor names and shapes" : "from " + s.source;
  fmt::print("architecture {}{} ({})\n", printable(s.architecture), s.hf_class.empty() ? "" : " / " + printable(s.hf_class),
             printable(source, kMessageShown));
  fmt::print("  {}\n", wrap(fmt::format("hidden {}, layers {}, heads {} (kv {}, head_dim {}), intermediate {}, vocab {}", dim(s.hidden_size),
                                       dim(s.num_layers), dim(s.num_heads), dim(s.num_kv_heads), dim(s.head_dim),
                                       dim(s.intermediate_size), dim(s.vocab_size)),
                           output_width(), 2));
  std::string extra = fmt::format("context {}, tied embeddings {}", dim(s.max_context), s.tie_word_embeddings ? "yes" : "no");
  if (!s.dtype.empty()) extra += ", dtype " + printable(s.dtype);
  if (s.rope_theta > 0) extra += fmt::format(", rope_theta {:g}", s.rope_theta);
  if (s.num_experts > 0) extra += fmt::format(", experts {} (top {})", s.num_experts, s.num_experts_per_tok);
  if (s.sliding_window > 0) extra += fmt::format(", sliding window {}", s.sliding_window);
  if (s.kv_lora_rank > 0) extra += fmt::format(", MLA kv_lora_rank {}", s.kv_lora_rank);
  fmt::print("  {}\n", wrap(extra, output_width(), 2));
}

// One row per tensor, under a line naming its file each time the file changes (tensors are
// in file order); sizes human, offsets exact (the byte an error message would name).
void print_tensors(const Checkpoint& ck, const std::string& filter) {
  std::vector<std::string> shapes(ck.tensors.size());
  size_t name_w = 4, shape_w = 5;
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    const auto& t = ck.tensors[i];
    if (!glob_match(filter, t.name)) continue;
    shapes[i] = shape_str(t.shape) + (t.strides.empty() ? "" : " strides " + shape_str(t.strides));
    name_w = std::max(name_w, printable(t.name).size());
    shape_w = std::max(shape_w, shapes[i].size());
  }
  // Name column: what the width leaves after dtype (8), shape, size (10), offset (12) and gaps.
  const size_t rest = 8 + shape_w + 10 + 12 + 4;
  name_w = std::min(name_w, output_width() > rest + 20 ? output_width() - rest : 20);
  size_t file = SIZE_MAX;
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    const auto& t = ck.tensors[i];
    if (!glob_match(filter, t.name)) continue;
    if (t.file != file) {
      file = t.file;
      fmt::print("\n{}:\n{:<{}} {:<8} {:<{}} {:>10} {:>12}\n", printable(ck.files.at(file).path, kMessageShown), "name", name_w,
                 "dtype", "shape", shape_w, "size", "offset");
    }
    fmt::print("{:<{}} {:<8} {:<{}} {:>10} {:>12}\n", printable(t.name), name_w, dtype_name(t.dtype), shapes[i], shape_w,
               format_bytes(t.nbytes), t.offset);
  }
}

// GGUF arrays over 1024 elements are kept as {"array": TYPE, "length": N} (docs/inspect-json.md).
bool is_array_summary(const nlohmann::json& v) {
  return v.is_object() && v.size() == 2 && v.contains("array") && v["array"].is_string() && v.contains("length") &&
         v["length"].is_number_unsigned();
}

// One metadata value as text of at most `cap` bytes: strings as they are, arrays as their
// first elements and the count, everything through printable() (the one escaping function).
std::string metadata_value(const nlohmann::json& v, size_t cap) {
  if (v.is_string()) return printable(v.get_ref<const std::string&>(), cap);
  if (is_array_summary(v))
    return fmt::format("{} (not kept in memory)", plural(v["length"].get<uint64_t>(), printable(v["array"].get<std::string>()) + " value"));
  if (!v.is_array()) return printable(dump_json(v), cap);
  const std::string count = fmt::format(" ({})", plural(v.size(), "item"));
  std::string items;
  size_t shown = 0;
  for (const auto& e : v) {
    const std::string piece = (shown ? ", " : "") + (e.is_array() ? metadata_value(e, cap) : printable(dump_json(e), cap));
    if (items.size() + piece.size() + 1 + 5 + count.size() > cap) break;
    items += piece;
    ++shown;
  }
  if (shown == v.size()) return "[" + items + "]";
  return "[" + items + (shown ? ", ...]" : "...]") + count;
}

// `key  value` rows, keys in order, the value cut to what the width leaves.
void print_metadata(const nlohmann::json& md) {
  if (md.empty()) {
    fmt::print("\nmetadata: none\n");
    return;
  }
  fmt::print("\nmetadata ({}):\n", plural(md.size(), "key"));
  size_t key_w = 0;
  for (const auto& [k, _] : md.items()) key_w = std::max(key_w, printable(k).size());
  key_w = std::min<size_t>(key_w, 40);
  // A row is "  KEY  VALUE"; printable() may add "..." past its cap.
  const size_t cap = std::max<size_t>(output_width() > key_w + 7 ? output_width() - key_w - 7 : 0, 30);
  for (const auto& [k, v] : md.items()) {
    const std::string key = printable(k);
    fmt::print("  {:<{}}  {}\n", key, key_w, metadata_value(v, key.size() > key_w ? std::max<size_t>(30, cap + key_w - key.size()) : cap));
  }
}

void print_text(const Checkpoint& ck, const ModelLayout& layout, const InspectOptions& o) {
  uint64_t file_bytes = 0;
  for (const auto& f : ck.files) file_bytes += f.bytes;
  // "PATH: format, N files, size"; a path too long for the terminal puts the rest on the
  // next line (the path itself is never broken: it stays one piece to copy).
  const std::string shown = printable(ck.path, kMessageShown);
  const std::string summary = fmt::format("{}, {} file{}, {}", format_name(ck.format), ck.files.size(),
                                          ck.files.size() == 1 ? "" : "s", format_bytes(file_bytes));
  const bool one_line = shown.size() + 2 + summary.size() <= output_width();
  fmt::print("{}:{}{}\n", shown, one_line ? " " : "\n  ", summary);
  auto totals = dtype_totals(ck, o.filter);
  uint64_t n = 0, params = 0, bytes = 0;
  for (const auto& [_, d] : totals) {
    n += d.tensors;
    params += d.parameters;
    bytes += d.bytes;
  }
  if (!o.filter.empty()) fmt::print("filter       {}\n", printable(o.filter));
  fmt::print("tensors      {}\n", n);
  fmt::print("parameters   {} ({})\n", with_commas(params), format_count(params));
  if (o.filter.empty() && layout.spec && (layout.num_parameters != params || layout.num_active_parameters != params))
    fmt::print("model        {}\n",
               wrap(fmt::format("{} ({}) logical parameters{}", with_commas(layout.num_parameters), format_count(layout.num_parameters),
                                layout.num_active_parameters != layout.num_parameters
                                    ? fmt::format(", {} ({}) active per token", with_commas(layout.num_active_parameters),
                                                  format_count(layout.num_active_parameters))
                                    : ""),
                    output_width(), 13));
  fmt::print("tensor bytes {} ({})\n", with_commas(bytes), format_bytes(bytes));
  for (const auto& [name, d] : totals)
    fmt::print("  {:<9} {:>6} tensor{:<1} {:>10} params {:>12}\n", printable(name), d.tensors, d.tensors == 1 ? "" : "s",
               format_count(d.parameters), format_bytes(d.bytes));
  if (layout.spec)
    print_spec(*layout.spec);
  else
    fmt::print("architecture unknown (no config.json and nothing in the metadata)\n");
  if (!o.metadata && !ck.metadata.empty())
    fmt::print("metadata     {} (--metadata shows them)\n", plural(ck.metadata.size(), "key"));
  if (o.filter.empty()) print_modules(layout);
  if (!layout.tied.empty()) fmt::print("\ntied: {}\n", printable(fmt::format("{}", fmt::join(layout.tied, ", ")), kMessageShown));
  for (const auto& w : ck.warnings) fmt::print("warning: {}\n", printable(w, kMessageShown));
  for (const auto& w : layout.warnings) fmt::print("warning: {}\n", printable(w, kMessageShown));

  if (o.metadata) print_metadata(ck.metadata);
  if (o.tensors) print_tensors(ck, o.filter);
}

nlohmann::json verify_json(const Checkpoint& ck, const VerifyReport& r) {
  nlohmann::json j = {{"read_bytes", r.bytes_read},
                      {"wall_s", r.seconds},
                      {"gb_per_s", r.seconds > 0 ? r.bytes_read / r.seconds / 1e9 : 0.0},
                      {"num_tensors_with_nan", r.tensors_with_nan},
                      {"num_tensors_with_inf", r.tensors_with_inf},
                      {"nonzero_padding_bytes", r.nonzero_padding_bytes},
                      {"problems", r.problems}};
  nlohmann::json bad = nlohmann::json::array();
  for (const auto& tc : r.tensors)
    if (tc.nan || tc.inf) bad.push_back({{"name", ck.tensors[tc.tensor].name}, {"num_nan", tc.nan}, {"num_inf", tc.inf}});
  j["nonfinite"] = bad;
  j["ok"] = r.problems.empty();
  return j;
}

int run_inspect(const InspectOptions& o) {
  // --verify reads every byte: local files only; else headers, from the Hub if need be.
  Checkpoint ck = o.verify ? open_checkpoint(local_model_path(o.path, o.file, false)) : open_model(o.path, o.file);
  ModelLayout layout = describe_model(ck);
  std::optional<VerifyReport> vr;
  if (o.verify) {
    Progress progress("verifying");
    vr = verify_checkpoint(ck, [&](uint64_t done, uint64_t total) { progress.bytes(done, total); });
    progress.clear();
  }
  if (o.json) {
    auto j = inspect_json(ck, layout, o.filter, false);
    j["verify"] = vr ? verify_json(ck, *vr) : nlohmann::json(nullptr);
    std::string text = dump_inspect_json(stamp(j, "inspect"), ck, o.filter);
    text += '\n';
    // 100k tensors make ~30 MB: no second copy. A refused write is main's "cannot write
    // stdout", with the OS's reason from here (later calls may change errno).
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size())
      throw std::system_error(errno, std::generic_category(), "cannot write stdout");
  } else {
    print_text(ck, layout, o);
    if (vr) {
      fmt::print("\nverify: read {} in {:.2f} s ({:.2f} GB/s); {} with NaN, {} with Inf", format_bytes(vr->bytes_read),
                 vr->seconds, vr->seconds > 0 ? vr->bytes_read / vr->seconds / 1e9 : 0.0, plural(vr->tensors_with_nan, "tensor"),
                 vr->tensors_with_inf);
      if (ck.format == Format::GGUF) fmt::print(", {} non-zero padding bytes", vr->nonzero_padding_bytes);
      fmt::print("\n");
      for (const auto& p : vr->problems) fmt::print("  {}\n", printable(p, kMessageShown));
    }
  }
  return 0;
}

}  // namespace

void add_inspect(CLI::App& app, Action& action) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "What is in a checkpoint: tensors, dtypes, parameters, layers, metadata");
  cmd->footer(
      "PATH is a .safetensors/.gguf/.bin/.pt/.pth file, a *.index.json, or a directory\n"
      "(sharded safetensors with or without index, pytorch_model.bin shards, a GGUF or split GGUF parts).\n"
      "Indexing reads headers only; --verify reads every byte.\n"
      "Exit codes: 0 ok (--verify reports NaN/Inf counts and problems in its output), 2 unreadable or\n"
      "malformed checkpoint (the error names the file and byte offset), 130/143 interrupted.\n"
      "Examples:\n"
      "  nunchaku inspect model/\n"
      "  nunchaku inspect model.gguf --tensors --filter 'blk.0.*'\n"
      "  nunchaku inspect model.gguf --metadata\n"
      "  nunchaku inspect model/ --json | jq .num_parameters");
  cmd->add_option("PATH", o->path, "Checkpoint file or directory, or a Hub id (org/name[@rev][:QUANT])")->required();
  add_file_option(cmd, o->file);
  cmd->add_flag("--json", o->json, "Print one JSON document (schema: docs/inspect-json.md)")->group(kOutput);
  cmd->add_flag("--tensors", o->tensors, "List every tensor by file: name, dtype, shape, size, offset (exact bytes in --json)")->group(kOutput);
  cmd->add_flag("--metadata", o->metadata,
                "Show the format's metadata: GGUF keys, safetensors __metadata__, PyTorch non-tensor values (always in --json)")
      ->group(kOutput);
  cmd->add_option("--filter", o->filter, "Only tensors whose name matches this glob (e.g. '*.layers.0.*')")->group(kOutput);
  cmd->add_flag("--verify", o->verify,
                "Also read all tensor data: every byte range readable, NaN/Inf counts, GGUF padding, throughput")->group(kInput);
  finish_help(cmd);
  cmd->callback([o, &action] { action = [o] { return run_inspect(*o); }; });
}

}  // namespace nunchaku::cli

