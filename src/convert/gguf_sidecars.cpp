#include "convert/gguf_sidecars.hpp"

#include <optional>

#include <filesystem>

#include "convert/sidecars.hpp"
#include "convert/spec_fields.hpp"
#include "core/error.hpp"
#include "core/source.hpp"
#include "format/gguf.hpp"
#include "io/atomic_output.hpp"
#include "model/arch/record.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"
#include "core/text.hpp"

namespace nunchaku::convert {

namespace {

using ojson = nlohmann::ordered_json;

void write_json(const StagedOutput& out, const std::string& name, const ojson& j) {
  write_file_atomically(out.path_for(name), dump_json(j, 2) + "\n");
}

}  // namespace

ojson hf_config_from_spec(const ModelSpec& s, int32_t bos, int32_t eos, int32_t unk, int32_t pad) {
  const ArchRecord* rec = find_record(s.architecture);
  if (!rec || rec->hf_class.empty()) return nullptr;
  ojson c = {{"architectures", {std::string(rec->hf_class)}}, {"model_type", s.architecture}};
  auto put = [&](const char* k, int64_t v) { if (v > 0) c[k] = v; };
  if (rec->write_hf_config) {  // the family's own key names (GPT2Config)
    rec->write_hf_config(s, c);
  } else {
    // head_dim: only where the class reads it (the record's hf_head_dim_key).
    for (const SpecField& f : kSpecFields)
      if (f.value != &ModelSpec::head_dim || rec->hf_head_dim_key) put(f.hf, s.*f.value);
    if (s.norm_eps > 0) c["rms_norm_eps"] = s.norm_eps;
    if (s.rope_theta > 0) c["rope_theta"] = s.rope_theta;
    if (s.rope_scaling.is_object()) c["rope_scaling"] = s.rope_scaling;
    put("num_local_experts", s.num_experts);
    put("num_experts_per_tok", s.num_experts_per_tok);
    put("sliding_window", s.sliding_window);
  }
  c["tie_word_embeddings"] = s.tie_word_embeddings;
  const std::pair<const char*, int32_t> ids[] = {{"bos_token_id", bos}, {"eos_token_id", eos}, {"unk_token_id", unk}, {"pad_token_id", pad}};
  for (const auto& [k, id] : ids)
    if (id >= 0) c[k] = id;
  return c;
}

std::vector<std::string> write_gguf_sidecars(const Checkpoint& ck, const ModelLayout& layout, const StagedOutput& out,
                                             std::vector<std::string>& skipped) {
  const GgufFile g = read_gguf_file(FileSource(ck.files[0].path));  // a split GGUF's first part holds the metadata
  std::optional<GgufVocab> vocab;
  std::string vocab_error;
  if (g.find("tokenizer.ggml.model")) {
    try {
      vocab = read_gguf_vocab(g);
    } catch (const Error& e) {
      vocab_error = e.what();
    }
  } else {
    vocab_error = "the GGUF has no tokenizer.ggml.* vocabulary";
  }
  std::vector<std::string> names;
  const ojson config = layout.spec ? hf_config_from_spec(*layout.spec, vocab ? vocab->bos : -1, vocab ? vocab->eos : -1,
                                                         vocab ? vocab->unk : -1, vocab ? vocab->pad : -1)
                                   : ojson(nullptr);
  ojson config_exact = config;
  if (const GgufValue* arch = g.find("general.architecture"); arch && arch->as_string() && config.is_object()) {
    // The float32 values exactly, as transformers reads them (the model description keeps
    // the shortest decimal: 1e-06 rather than 9.999999974752427e-07).
    const std::pair<const char*, const char*> exact[] = {{".attention.layer_norm_rms_epsilon", "rms_norm_eps"},
                                                         {".attention.layer_norm_epsilon", "layer_norm_epsilon"},
                                                         {".rope.freq_base", "rope_theta"}};
    for (const auto& [key, field] : exact)
      if (const GgufValue* x = g.find(*arch->as_string() + key); x && x->as_double() && config_exact.contains(field))
        config_exact[field] = *x->as_double();
    if (const GgufValue* x = g.find(*arch->as_string() + ".rope.scaling.original_context_length"); x && x->as_int())
      config_exact["original_max_position_embeddings"] = *x->as_int();
    // transformers ties the head when the file has no output.weight (a vocabulary-only file too).
    config_exact["tie_word_embeddings"] = g.find_tensor("output.weight") == nullptr;
  }
  if (config.is_null()) {
    skipped.push_back("config.json: no transformers config for architecture '" +
                      (layout.spec ? layout.spec->architecture : std::string("?")) + "'");
  } else {
    write_json(out, "config.json", config_exact);
    names.push_back("config.json");
  }
  if (!vocab) {
    skipped.push_back("tokenizer.json: " + vocab_error);
    return names;
  }
  try {
    write_json(out, "tokenizer.json", hf_tokenizer_json(*vocab, g.path));
  } catch (const Error& e) {
    if (e.code().rfind("tokenizer.", 0) != 0) throw;
    skipped.push_back(std::string("tokenizer.json: ") + e.what());
    return names;
  }
  write_json(out, "tokenizer_config.json", hf_tokenizer_config(*vocab));
  names.push_back("tokenizer.json");
  names.push_back("tokenizer_config.json");
  return names;
}

std::vector<std::pair<std::string, GgufValue>> hf_tokenizer_kvs(const Checkpoint& ck, std::vector<std::string>& skipped) {
  const std::string dir = input_dir(ck);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "tokenizer.json", ec)) {
    skipped.push_back("tokenizer.ggml.*: no tokenizer.json beside the input");
    return {};
  }
  try {
    return gguf_vocab_kvs(Tokenizer::from_hf_dir(dir).gguf_vocab());
  } catch (const Error& e) {
    if (e.code().rfind("tokenizer.", 0) != 0) throw;
    skipped.push_back(std::string("tokenizer.ggml.*: ") + e.what());
    return {};
  }
}

}  // namespace nunchaku::convert
