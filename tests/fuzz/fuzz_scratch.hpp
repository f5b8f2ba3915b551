// For fuzz targets whose code under test takes paths (open_checkpoint, the loader, shard and
// split merging): one private scratch directory per process (removed at exit), files
// written into it, and a tiny well-formed Llama (1 layer, hidden 8) to pair hostile inputs
// with. Header-only: each target is one .cpp (CMakeLists.txt globs tests/fuzz/fuzz_*.cpp).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace nunchaku::fuzz {

// The directory's name lives in a static char array: the atexit handler runs after static
// std::strings registered later (the one below) are destroyed, and must not read one.
inline char* scratch_path() {
  static char tmpl[] = "/tmp/nunchaku-fuzz-XXXXXX";
  return tmpl;
}

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    if (!::mkdtemp(scratch_path())) std::abort();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_path(), ec);
    });
    return std::string(scratch_path());
  }();
  return dir;
}

inline std::string scratch(const std::string& name) { return scratch_dir() + "/" + name; }

inline void put_file(const std::string& path, const void* data, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) std::abort();
    p += w, n -= size_t(w);
  }
  ::close(fd);
}
inline void put_file(const std::string& path, const std::string& text) { put_file(path, text.data(), text.size()); }

// A safetensors file of F32 tensors (zeros), names and shapes as given.
inline std::string safetensors_bytes(const std::vector<std::pair<std::string, std::vector<int>>>& tensors) {
  std::string header = "{";
  uint64_t off = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 4;
    std::string dims;
    for (int d : shape) n *= uint64_t(d), dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + ("\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + dims +
                                                "],\"data_offsets\":[" + std::to_string(off) + "," +
                                                std::to_string(off + n) + "]}");
    off += n;
  }
  header += "}";
  std::string out(8, '\0');
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((len >> (8 * i)) & 0xff);
  return out + header + std::string(size_t(off), '\0');
}

// The tensors of a 1-layer Llama: hidden 8, intermediate 16, vocabulary 16, 2 heads.
inline std::vector<std::pair<std::string, std::vector<int>>> tiny_llama_tensors() {
  const std::string l = "model.layers.0.";
  return {{"model.embed_tokens.weight", {16, 8}},      {l + "self_attn.q_proj.weight", {8, 8}},
          {l + "self_attn.k_proj.weight", {8, 8}},     {l + "self_attn.v_proj.weight", {8, 8}},
          {l + "self_attn.o_proj.weight", {8, 8}},     {l + "mlp.gate_proj.weight", {16, 8}},
          {l + "mlp.up_proj.weight", {16, 8}},         {l + "mlp.down_proj.weight", {8, 16}},
          {l + "input_layernorm.weight", {8}},         {l + "post_attention_layernorm.weight", {8}},
          {"model.norm.weight", {8}},                  {"lm_head.weight", {16, 8}}};
}

inline const char* tiny_llama_config() {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
 "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
 "vocab_size": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "torch_dtype": "float32"})";
}

// `dir` (created) holding the tiny Llama's model.safetensors, and its config.json unless `config` is false.
inline void write_tiny_llama(const std::string& dir, bool config = true) {
  std::filesystem::create_directories(dir);
  put_file(dir + "/model.safetensors", safetensors_bytes(tiny_llama_tensors()));
  if (config) put_file(dir + "/config.json", tiny_llama_config());
}

}  // namespace nunchaku::fuzz
