// convert --names hf|gguf: each tensor of a model the engine runs (llama, mistral, qwen2,
// qwen3) renamed between Hugging Face and llama.cpp names through the one architecture
// table (model/arch_table: a tensor's role in its module gives its name in the other
// naming). For llama and mistral, convert_hf_to_gguf permutes the rows of Q and K (and
// their biases) inside each head for llama.cpp's interleaved RoPE; HF -> GGUF applies that
// permutation, GGUF -> HF reverses it, so either output runs in nunchaku, transformers and
// llama.cpp. Tensors the other side recomputes are not written (HF's rotary_emb.inv_freq,
// GGUF's rope_freqs); HF -> GGUF generates rope_freqs for llama3 rope scaling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku::convert {

enum class Names { Keep, HF, GGUF };

struct Rename {
  std::string name;      // output name; "" when the tensor is not written
  std::string skipped;   // why it is not written ("" when it is)
  int64_t qk_heads = 0;  // > 0: rows permuted within each of this many heads
  bool to_gguf = false;  // direction of that permutation
};

// One Rename per tensor of `ck` (empty for Names::Keep or when the checkpoint already has
// the asked naming). Throws Error("convert.names_*", exit 2) naming the tensor it cannot map.
std::vector<Rename> map_names(const Checkpoint& ck, const ModelLayout& layout, Names to);

// llama.cpp's rope_freqs tensor for llama3 rope scaling (convert_hf_to_gguf writes it
// with llama.cpp names; transformers computes it from rope_scaling): one factor per
// frequency, head_dim/2 values. Empty when the model has no llama3 rope scaling.
std::vector<float> llama3_rope_freqs(const ModelSpec& spec);

// Row permutation within one head of `head_dim` rows: the input row that output row `r`
// comes from. HF -> GGUF (convert_hf_to_gguf's permute): output (i, j) <- input (j, i)
// where an HF head is 2 x head_dim/2 rows and a GGUF head head_dim/2 x 2.
uint64_t qk_source_row(uint64_t r, uint64_t head_dim, bool to_gguf);

}  // namespace nunchaku::convert
