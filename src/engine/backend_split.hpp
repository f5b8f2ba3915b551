// A Backend made of several backends, each running some of the layers with their own part
// of the run state (activations, and the KV cache of its layers only): several GPUs by
// layer ranges, as a plan with more than one cuda device says. The residual stream (Buf::X,
// hidden x tokens) moves from one part to the next through the host when consecutive layers
// run on different parts; every other op runs where its layer is. The embedding runs on
// `embed_part`, the final norm and the head on `head_part`, mixtures of experts on `moe_part`.
//
// The parts are whole backends, so the arithmetic is theirs: a split over parts of one kind
// gives the logits one such backend gives, bit for bit (tests/test_split_backend.cpp).
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.hpp"

namespace nunchaku::engine {

struct SplitLayout {
  std::vector<int> layer_part;  // [layers]: the part that runs each layer
  int embed_part = 0;
  int head_part = 0;            // final norm, selected rows, head, logits
  int stream_part = -1;         // the part whose device receives streamed weights (charged there), -1 none
  // The part that runs every layer's mixture of experts (-1: the layer's own part): the CPU
  // beside GPUs that run attention (KTransformers' split). The layer's normed input (XN) moves
  // to it and the experts' output (Tmp) back, through the host; the weights the moe op reads
  // must be in memory that part reads (Backend::moe_can_read).
  int moe_part = -1;
};

// Throws Error engine.bad_split when the layout names a part that does not exist or leaves a
// part without work.
std::unique_ptr<Backend> make_split_backend(std::vector<std::unique_ptr<Backend>> parts, SplitLayout layout);

}  // namespace nunchaku::engine
