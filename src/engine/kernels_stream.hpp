// The weight stream's software prefetch and the batch grouping, shared by the SIMD kernel
// headers (kernels_simd.hpp, kernels_q8_simd.hpp) of every ISA file; in an anonymous
// namespace like the kernels, so each ISA's copy stays in its file. Needs only SSE
// (_mm_prefetch) and <utility>.
// Internal: only kernels_<isa>.cpp include this.
#pragma once

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "engine/kernels_impl.hpp"

namespace nunchaku::engine {
namespace {

// A tile's prefetch of the weight stream: the tile `plan.ahead` tiles on (`tile_bytes` of
// contiguous rows each) as one sequential stream, `step_bytes` more of it per next() over
// the current tile's steps, each cache line once (the lines the stream's end has passed);
// plan.ahead == 0 or step_bytes == 0: nothing. (Before session 29 each step fetched its
// bytes rounded up to whole lines: Q4_0's 72-byte steps fetched 128, about 1.8 times the
// stream, and the to_l2 test ran per line.)
struct TilePrefetch {
  const char* line;  // the next line to fetch
  const char* end;   // the stream passed so far
  size_t step;
  bool to_l2;
  TilePrefetch(const uint8_t* row0, size_t tile_bytes, size_t step_bytes, PrefetchPlan plan)
      : end(reinterpret_cast<const char*>(row0 + size_t(plan.ahead) * tile_bytes)),
        step(plan.ahead > 0 ? step_bytes : 0),
        to_l2(plan.to_l2) {
    line = step ? reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(end) & ~uintptr_t(63)) : end;
  }
  void next() {
    end += step;
    if (to_l2)
      for (; line < end; line += 64) _mm_prefetch(line, _MM_HINT_T1);
    else
      for (; line < end; line += 64) _mm_prefetch(line, _MM_HINT_T0);
  }
};

// f(integral_constant<int, NB>, b) over activation rows [b, b + NB): groups of G, then
// the remainder.
template <int G, class F>
inline void by_groups(int64_t B, F&& f) {
  int64_t b = 0;
  for (; b + G <= B; b += G) f(std::integral_constant<int, G>{}, b);
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((B - b == I + 1 ? (f(std::integral_constant<int, I + 1>{}, b), 0) : 0), ...);
  }(std::make_integer_sequence<int, G - 1>{});
}

// fast_tiles' chunk: the activation rows of row_bytes each that fit in max_bytes, rounded
// down to whole groups of G, plus one group (so never fewer than G).
template <int G>
constexpr int64_t chunk_rows(size_t max_bytes, size_t row_bytes) {
  return int64_t(max_bytes / row_bytes) / G * G + G;
}

// The fast kernels' tiling (kernels_q8_simd.hpp, kernels_fast_bf16_avx512bf16.cpp) of weight
// rows [r0, r1) against B activation rows. B == 1 (decode): tiles of D rows, prefetching
// the stream ahead, then single rows. Else, per chunk of at most `chunk` activation rows
// (they stay in L2 while the weight rows pass): R weight rows at a time against the chunk's
// rows G at a time (the first chunk's first group prefetches), then single rows.
// tile(rows, nb, prefetch, r, b): rows and nb integral constants, prefetch a bool constant,
// r the first weight row, b the first activation row.
template <int D, int R, int G, class Tile>
inline void fast_tiles(int64_t B, int64_t r0, int64_t r1, int64_t chunk, Tile&& tile) {
  using One = std::integral_constant<int, 1>;
  int64_t r = r0;
  if (B == 1) {
    for (; r + D <= r1; r += D) tile(std::integral_constant<int, D>{}, One{}, std::true_type{}, r, 0);
    for (; r < r1; ++r) tile(One{}, One{}, std::false_type{}, r, 0);
    return;
  }
  for (int64_t t0 = 0; t0 < B; t0 += chunk) {
    const int64_t nt = B - t0 < chunk ? B - t0 : chunk;
    for (r = r0; r + R <= r1; r += R)
      by_groups<G>(nt, [&](auto nb, int64_t b) {
        if (t0 == 0 && b == 0) tile(std::integral_constant<int, R>{}, nb, std::true_type{}, r, t0 + b);
        else tile(std::integral_constant<int, R>{}, nb, std::false_type{}, r, t0 + b);
      });
    for (; r < r1; ++r)
      by_groups<G>(nt, [&](auto nb, int64_t b) { tile(One{}, nb, std::false_type{}, r, t0 + b); });
  }
}

// The block types' stream, one step per block: Q8_0 (a byte or more per weight) takes
// g_prefetch_wide, the 4-6-bit blocks g_prefetch_narrow.
template <class Q, int R>
inline TilePrefetch block_prefetch(const uint8_t* row0, size_t row_bytes, int64_t nblocks) {
  const PrefetchPlan plan = Q::kBytes >= 32 * Q::kSubs ? g_prefetch_wide : g_prefetch_narrow;
  return TilePrefetch(row0, R * row_bytes, nblocks > 0 ? R * row_bytes / size_t(nblocks) : 0, plan);
}

}  // namespace
}  // namespace nunchaku::engine
