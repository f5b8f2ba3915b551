// `nunchaku convert IN OUT`: any checkpoint inspect opens, streamed into sharded
// safetensors (a directory, as transformers' save_pretrained writes it) or one GGUF file,
// through a bounded buffer, written under a temporary name and renamed into place.
// docs/convert.md has the rules; plan.hpp decides what is written before anything is.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert/names.hpp"
#include "format/dtype.hpp"

namespace nunchaku::convert {

enum class OutFormat { Safetensors, GGUF };

struct ConvertOptions {
  std::string in, out;
  std::optional<DType> dtype;               // F32/F16/BF16 (and Q8_0 for GGUF); nullopt keeps
  uint64_t shard_size = 5000000000ull;      // transformers' default max_shard_size "5GB"
  bool shard_by_layer = false;
  bool shard_by_name = false;               // --shard-order name: fill shards in name order (transformers 5.x)
  std::optional<OutFormat> format;          // nullopt: GGUF when OUT ends in .gguf
  uint64_t buffer_bytes = 256ull << 20;
  bool verify = false;                      // re-read the output and compare with the input
  Names names = Names::Keep;                // --names hf|gguf (names.hpp)
  // Called after each chunk with the input bytes done and the total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct ConvertReport {
  std::string out;
  OutFormat format = OutFormat::Safetensors;
  struct OutputFile { std::string name; uint64_t bytes; size_t tensors; };
  std::vector<OutputFile> files;
  size_t tensors = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  std::vector<std::string> skipped;   // "name: why" (--names: tensors the other side recomputes)
  std::vector<std::string> dropped;   // "duplicate=kept"
  std::vector<std::string> sidecars;  // files copied or derived
  std::optional<bool> verified;       // set when asked; false never returns (verify throws)

  nlohmann::json to_json() const;
};

// Throws nunchaku::Error; on any error or interruption nothing is left at OUT.
ConvertReport convert_checkpoint(const ConvertOptions& o);

}  // namespace nunchaku::convert
