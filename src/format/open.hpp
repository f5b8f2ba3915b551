// Entry point: turn whatever path the user gave into a Checkpoint index.
//   file:      format sniffed from magic bytes (GGUF, zip, tar, pickle, safetensors);
//              a part of a split GGUF (-0000K-of-0000N.gguf) opens every part
//   directory: model.safetensors.index.json > *.safetensors > pytorch_model.bin.index.json
//              > *.bin/*.pt/*.pth > a single *.gguf or the parts of one split GGUF;
//              GGUF beside safetensors or PyTorch files is exit 2 (open.mixed_formats)
//              naming both and the path that opens each; safetensors beside PyTorch
//              weights reads the safetensors (as transformers) with a warning
//   *.index.json: that index
// config.json beside the weights is recorded in Checkpoint::config_path.
#pragma once

#include <string>

#include "format/checkpoint.hpp"

namespace nunchaku {

enum class SniffedFormat { Safetensors, GGUF, PyTorchZip, PyTorchLegacy, PyTorchTar, Unknown };

// Looks at the first bytes of a file (no other reads).
SniffedFormat sniff_format(const std::string& path);

// Throws nunchaku::Error (exit 2) when the path is missing, empty or unreadable.
Checkpoint open_checkpoint(const std::string& path);

}  // namespace nunchaku
