// Rotary embedding frequencies as the model's config defines them (HF computes them in
// float32; so do we, for matching logits), and the pairing style its weights expect.
#pragma once

#include <span>
#include <vector>

#include "engine/backend.hpp"
#include "model/model.hpp"

namespace nunchaku::engine {

// GGUF llama/mistral files have Q/K rows permuted for interleaved pairs; the rest NeoX.
RopeStyle default_rope_style(const ModelSpec& spec, Naming naming);
// inv_freq[i] = theta^(-2i/head_dim) with the config's rope scaling (none, linear, llama3),
// each divided by divisors[i] when given (llama.cpp's rope_freqs tensor).
// Throws engine.unsupported_rope for other scaling types.
std::vector<float> rope_inv_freq(const ModelSpec& spec, int64_t head_dim, std::span<const float> divisors);

}  // namespace nunchaku::engine
