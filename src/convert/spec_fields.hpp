// The model sizes convert writes from a ModelSpec, each with its name in a transformers
// config.json and in GGUF metadata (after "<architecture>."), in config.json's order: one
// table for the two writers (gguf_sidecars.cpp, gguf_writer.cpp).
#pragma once

#include <cstdint>

#include "model/model.hpp"

namespace nunchaku::convert {

struct SpecField {
  int64_t ModelSpec::*value;
  const char* hf;
  const char* gguf;
};

inline constexpr SpecField kSpecFields[] = {
    {&ModelSpec::hidden_size, "hidden_size", "embedding_length"},
    {&ModelSpec::intermediate_size, "intermediate_size", "feed_forward_length"},
    {&ModelSpec::max_context, "max_position_embeddings", "context_length"},
    {&ModelSpec::num_heads, "num_attention_heads", "attention.head_count"},
    {&ModelSpec::num_layers, "num_hidden_layers", "block_count"},
    {&ModelSpec::num_kv_heads, "num_key_value_heads", "attention.head_count_kv"},
    {&ModelSpec::head_dim, "head_dim", "attention.key_length"},
    {&ModelSpec::vocab_size, "vocab_size", "vocab_size"},
};

}  // namespace nunchaku::convert
