// Rotary embedding frequencies as the model's config defines them (HF computes them in
// float32; so do we, for matching logits), and the pairing style its weights expect.
#pragma once

#include <span>
#include <vector>

#include "engine/backend.hpp"
#include "model/model.hpp"
#include "model/recipe.hpp"

namespace nunchaku::engine {

// GGUF llama/mistral files have Q/K rows permuted for interleaved pairs; the rest NeoX.
RopeStyle default_rope_style(const ModelSpec& spec, Naming naming);
// inv_freq[i] = theta^(-2i/dims) for i < dims/2 (dims: the table's rotated values per head)
// with the table's scaling (none, linear, llama3, longrope: its short factors, or its long
// ones when the run holds more than the pre-training context `max_context`; yarn), each divided
// by divisors[i] when given (llama.cpp's rope_freqs tensor).
// Throws engine.unsupported_rope for other scaling types.
std::vector<float> rope_inv_freq(const RopeRecipe& rope, int64_t head_dim, std::span<const float> divisors,
                                 int64_t max_context);

}  // namespace nunchaku::engine
