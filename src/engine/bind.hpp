// Binding a model's weights to the engine by role: which module holds the embedding, the
// final norm, the head and each layer, where each role sits among a module's tensors, and
// the checks that a tensor is what the engine needs (shape, dtype, memory the backend reads).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend.hpp"
#include "engine/weights.hpp"
#include "model/model.hpp"
#include "model/recipe.hpp"

namespace nunchaku::engine {

using RoleSlots = std::array<int16_t, kRoleCount>;  // role -> index among the module's tensors, -1 absent

struct ModelBinding {
  size_t embed = SIZE_MAX, final_norm = SIZE_MAX, head = SIZE_MAX;  // head SIZE_MAX: tied to the embedding
  int16_t embed_at = -1, final_norm_at = -1, head_at = -1;
  struct LayerModule {
    size_t module = 0;
    RoleSlots at{};
  };
  std::vector<LayerModule> layers;  // in layer order
};

// Throws engine.unsupported_architecture / engine.bad_spec for what the engine cannot run.
void check_supported(const ModelSpec& spec, const BlockRecipe& recipe);
// Throws engine.missing_tensor naming the module and role when one the family's recipe
// (recipe_for(*layout.spec)) needs is absent.
ModelBinding bind_modules(const ModelLayout& layout);
// The first module holding a tensor of role `r`, SIZE_MAX if none.
size_t find_role(const ModelLayout& layout, Role r);

// A matrix view of `t` (data unset until acquired); throws engine.bad_shape /
// engine.unsupported_dtype / engine.not_contiguous / engine.not_readable (by `backend`, or,
// when null, on the host).
WeightMatrix matrix(const TensorView& t, int64_t rows, int64_t cols, const Backend* backend);
// An expert weight as `rows` x `cols` (a stacked tensor already seen as its E x rows rows):
// matrix() for the types it reads, and ggml's MXFP4 blocks (GGUF gpt-oss), which only the
// expert kernels read (matmul_expert_rows).
WeightMatrix expert_rows(const TensorView& t, int64_t rows, int64_t cols, const Backend& backend);
// gpt-oss's stacked experts as one matrix of experts x rows output rows of `cols` inputs:
// `t` input-major [experts, cols, rows] of F32/F16/BF16 (WeightMatrix::input_major, `rows`
// x `cols` with experts x cols stored rows), or, when `t` is U8, MXFP4 blocks [experts, rows,
// cols / 32, 16] with `scales` [experts, rows, cols / 32] U8 (required then). Throws
// engine.bad_shape / engine.unsupported_dtype / engine.missing_tensor / engine.not_readable.
WeightMatrix expert_matrix(const TensorView& t, const TensorView* scales, int64_t experts, int64_t rows, int64_t cols,
                           const Backend& backend);
// `t` (a stacked [n, r, c] tensor, or already 2-D) viewed as `rows` x `cols` when its elements
// and last dimension allow; else unchanged (matrix() then reports its shape).
TensorView as_rows(const TensorView& t, int64_t rows, int64_t cols);
// Checks a norm/bias vector: n elements of F32/F16/BF16, readable by the backend.
void check_vector(const TensorView& t, int64_t n, const Backend& backend);
// The vector at index `at` of acquired views (empty VecRef when at < 0).
VecRef vector_ref(std::span<const TensorView> views, int16_t at);
// A host vector's values as fp32 (rope_freqs).
std::vector<float> read_vector(const TensorView& t, int64_t n);

}  // namespace nunchaku::engine
