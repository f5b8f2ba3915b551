// One GGUF v3 file: the metadata (a GGUF input's key-values copied, general.file_type
// updated; otherwise general.architecture and the hyper-parameters llama.cpp reads, from
// the model description, plus `extra_kvs`: the tokenizer of an HF input), the tensor
// infos (ggml dims order, offsets aligned to 32), the
// data, each tensor padded with zeros to the alignment.
#pragma once

#include <functional>
#include <string>

#include "convert/plan.hpp"
#include "convert/stream.hpp"
#include "format/gguf.hpp"
#include "model/model.hpp"

namespace nunchaku::convert {

// Refuses (exit 2) what a GGUF cannot hold: a dtype ggml lacks, a name ggml truncates.
void check_gguf_plan(const ConvertPlan& plan);

uint64_t write_gguf(const std::string& tmp_path, const std::string& shown, const ConvertPlan& plan,
                    const Checkpoint& ck, const ModelLayout& layout, TensorReader& reader,
                    const std::vector<std::pair<std::string, GgufValue>>& extra_kvs,
                    const std::function<void(uint64_t)>& on_bytes);

}  // namespace nunchaku::convert
