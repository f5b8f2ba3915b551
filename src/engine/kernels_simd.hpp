// The SIMD kernels, written once over a vector type and included by each ISA's file
// (kernels_avx2.cpp: V = __m256, kernels_avx512.cpp: V = __m512), inside its anonymous
// namespace, after it has defined:
//   V; kW (floats per V); kSubVecs = 32 / kW; kGemmTileRows x kGemmTileBatch (the GEMM
//   register tile), kGemmWideRows x kGemmWideBatch (the tile from kGemmWideCols columns on;
//   the same tile where the ISA has no wide one), kGemmCols (the GEMM's column block);
//   kBatchRows, kBatchTile, kBlockBatchRows, kBlockBatchTile; vzero, vload (aligned),
//   vloadu, vstore (aligned), vstoreu, vset1, vfma(a, b, c) = a*b + c, vhsum, vhsum4 (four
//   vhsum at once); LoadF32 / LoadBF16 / LoadF16 (kElemBytes, load(row, i) -> V of kW
//   values from element i, one(row, i), addr(row, i); where the wide tile differs,
//   kWideTile: whether the GEMM takes it for this type);
//   BlockQ8_0, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ4_K, BlockQ5_K (kBytes,
//   kSubs sub-blocks of 32 values per block; one sub-block blocks: sub(blk, w), K types:
//   pair(blk, p, kscales, lo, hi) for sub-blocks 2p and 2p+1, see KScales, and
//   kUnrollPairs: whether decode unrolls the block's 4 pairs; each gives
//   kSubVecs vectors = the values gguf-py's dequantization gives, in order; kDecodeRows
//   weight rows per decode tile: as many as fit the ISA's registers with the
//   dequantizer's temporaries, 16 registers on AVX2).
// Every dot product is one kW-wide chain per (weight row, activation row) in column order,
// then vhsum and the scalar tail: the same sums in the same order on every path (decode
// tiles, small batches, the blocked GEMM), so results are batch-invariant within an ISA;
// AVX2 and AVX-512 differ from each other by the lane count (fp32 rounding, ~1e-7).
// Q6_K's fused kernel (AVX2) and store_f16 are 256-bit code.
// Internal: only kernels_<isa>.cpp include this.
#pragma once

#include <new>
#include <utility>
#include <type_traits>

#include "engine/kernels_stream.hpp"
#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {
namespace {

// L::load_decode where the loader has one (a form for the decode tile: AVX2 BF16), else L::load.
template <class L>
inline V decode_load(const uint8_t* row, int64_t i) {
  if constexpr (requires { L::load_decode(row, i); }) return L::load_decode(row, i);
  else return L::load(row, i);
}

// y[b*ldy + r] (+)= row_r . x_b for R weight rows (row_bytes apart) and NB activation
// rows: R*NB independent FMA chains, each weight vector loaded once for NB rows. Every
// (row, x) pair sums in the same order whatever R and NB are (one kW-wide chain, then the
// scalar tail), so a sequence's logits are bit-identical in any batch.
//
// Columns [k0, k1) only (k1 - k0 a multiple of kW): the blocked GEMM passes one column
// block at a time and keeps the R*NB vector accumulators in acc_buf (kW floats each)
// between blocks; the lanes see the same additions in the same order as one pass.
// `first`: start from zero (else from acc_buf); `last`: reduce, add the scalar tail
// [k1, n) and store (or add, Accumulate) to y (else save to acc_buf).
template <int R, int NB, class L, bool Accumulate = false, bool Prefetch = false>
inline void tile_k(const uint8_t* row0, size_t row_bytes, int64_t k0, int64_t k1, int64_t n, const float* x,
                   int64_t ldx, float* acc_buf, bool first, bool last, float* y, int64_t ldy) {
  // Every loop over R or NB is unrolled so acc[][] and w[] stay in registers (rolled, GCC 12
  // keeps them in memory: a store and a reload around every FMA).
  V acc[R][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = first ? vzero() : vload(acc_buf + (b * R + r) * kW);
  // Prefetch (decode and small batches: weights come from DRAM once per step): a tile
  // g_prefetch_16bit.ahead tiles on (R contiguous rows) is fetched ahead, for 16-bit weights as
  // one sequential stream spread evenly over this tile's steps (R short row streams train
  // the hardware prefetcher poorly: +12% single-thread bf16 on Ice Lake), for f32 row by
  // row, 2 tiles on into L1 (the sequential stream measured -15% there).
  TilePrefetch pf(row0, R * row_bytes, n >= kW ? R * row_bytes * kW / size_t(n) : 0, g_prefetch_16bit);
  // The loop is written twice, with and without the prefetch (not a test per step: where
  // the plan prefetches nothing, as for 16-bit weights on Zen 3, its branch and counters
  // cost registers the 8-row decode tile needs).
  auto steps = [&](auto prefetch) {
    for (int64_t i = k0; i < k1; i += kW) {
      if constexpr (NB == 1) {
        // One activation row (decode): each weight vector is FMA'd as it is loaded, so
        // R accumulators + x + one temporary are live (loading all R first spilled one of
        // 17 registers at R = 8 on AVX2). The same FMAs as below.
        V xv = vloadu(x + i);
        if constexpr (R > 1) asm("" : "+v"(xv));
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][0] = vfma(decode_load<L>(row0 + size_t(r) * row_bytes, i), xv, acc[r][0]);
      } else {
        V w[R];
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) w[r] = L::load(row0 + size_t(r) * row_bytes, i);
        #pragma GCC unroll 16
        for (int b = 0; b < NB; ++b) {
          V xv = vloadu(x + b * ldx + i);
          if constexpr (R > 1) asm("" : "+v"(xv));  // one load per x vector, not one per FMA (load ports)
          #pragma GCC unroll 16
          for (int r = 0; r < R; ++r) acc[r][b] = vfma(w[r], xv, acc[r][b]);
        }
      }
      if constexpr (decltype(prefetch)::value) {
        if constexpr (L::kElemBytes == 2) {
          pf.next();
        } else if ((i & 15) == 0) {  // f32 rows are long enough for the hardware; a nudge 2 tiles ahead
          #pragma GCC unroll 16
          for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(L::addr(row0 + size_t(r + 2 * R) * row_bytes, i)), _MM_HINT_T0);
        }
      }
    }
  };
  if constexpr (Prefetch) {
    if (L::kElemBytes != 2 || pf.step != 0) steps(std::true_type{});
    else steps(std::false_type{});
  } else {
    steps(std::false_type{});
  }
  if (!last) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) vstore(acc_buf + (b * R + r) * kW, acc[r][b]);
    return;
  }
  // The R*NB sums, four at a time (vhsum4: the same additions as vhsum), then the tail.
  constexpr int kN = R * NB;
  alignas(16) float sums[(kN + 3) / 4 * 4];
  #pragma GCC unroll 16
  for (int e = 0; e + 4 <= kN; e += 4)
    _mm_store_ps(sums + e, vhsum4(acc[e % R][e / R], acc[(e + 1) % R][(e + 1) / R], acc[(e + 2) % R][(e + 2) / R],
                                  acc[(e + 3) % R][(e + 3) / R]));
  #pragma GCC unroll 16
  for (int e = kN / 4 * 4; e < kN; ++e) sums[e] = vhsum(acc[e % R][e / R]);
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b)
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float s = sums[b * R + r];
      for (int64_t j = k1; j < n; ++j) s += L::one(row0 + size_t(r) * row_bytes, j) * x[b * ldx + j];
      if (Accumulate) y[b * ldy + r] += s;
      else y[b * ldy + r] = s;
    }
}

// All columns in one pass.
template <int R, int NB, class L, bool Accumulate = false, bool Prefetch = false>
inline void tile(const uint8_t* row0, size_t row_bytes, int64_t n, const float* x, int64_t ldx, float* y, int64_t ldy) {
  tile_k<R, NB, L, Accumulate, Prefetch>(row0, row_bytes, 0, n / kW * kW, n, x, ldx, nullptr, true, true, y, ldy);
}

// R weight rows against all B activation rows, in tiles of kBatchTile (the first tile
// prefetches the rows after next), then one tile of the remainder.
template <int R, class L, int NB = kBatchTile - 1>
inline void batch_rest(const uint8_t* row0, size_t row_bytes, int64_t n, const float* x, int64_t ldx, int64_t nb,
                       float* y, int64_t ldy) {
  if constexpr (NB >= 1) {
    if (nb == NB) return tile<R, NB, L>(row0, row_bytes, n, x, ldx, y, ldy);
    batch_rest<R, L, NB - 1>(row0, row_bytes, n, x, ldx, nb, y, ldy);
  }
}
template <int R, class L>
inline void rows_times_batch(const uint8_t* row0, size_t row_bytes, int64_t n, const float* x, int64_t ldx, int64_t B,
                             float* y, int64_t ldy) {
  int64_t b = 0;
  if (B >= kBatchTile) {
    tile<R, kBatchTile, L, false, true>(row0, row_bytes, n, x, ldx, y, ldy);
    b = kBatchTile;
  }
  for (; b + kBatchTile <= B; b += kBatchTile) tile<R, kBatchTile, L>(row0, row_bytes, n, x + b * ldx, ldx, y + b * ldy, ldy);
  batch_rest<R, L>(row0, row_bytes, n, x + b * ldx, ldx, B - b, y + b * ldy, ldy);
}

// Prefill GEMM (many activation rows). Blocks: kGemmRows weight rows x kGemmBatch
// activation rows x at most kGemmCols columns (equal column blocks, multiples of kW). Per
// column block, a group of NB activation rows stays in L1 while the block's weight rows
// come from L2 R at a time: the ISA's register tile R x NB (kGemmTileRows x
// kGemmTileBatch; AVX2 2 x 6: 2 weight loads and 6 L1 loads per 12 FMAs; AVX-512 4 x 6:
// 4 + 6 per 24), or kGemmWideRows x kGemmWideBatch for rows of kGemmWideCols columns or
// more (AVX2 3 x 4, for the loaders whose kWideTile says so). Whole rows of up to
// kGemmCols columns are one block: no accumulator traffic at all. The tile shape changes
// which sums run side by side, never a sum's order.
constexpr int64_t kGemmRows = 64, kGemmBatch = 48;
alignas(64) thread_local float g_gemm_acc[kGemmRows * kGemmBatch * kW];

// One GEMM tile, not inlined: inlined into the block loops, GCC 12 kept one of the 3 x 4
// F16 tile's accumulators on the stack (a store and a reload per iteration: 2x the cycles).
template <int R, int NB, class L>
__attribute__((noinline)) void gemm_tile(const uint8_t* row0, size_t row_bytes, int64_t k0, int64_t k1, int64_t n,
                                         const float* x, int64_t ldx, float* acc, bool first, bool last, float* y,
                                         int64_t ldy) {
  tile_k<R, NB, L>(row0, row_bytes, k0, k1, n, x, ldx, acc, first, last, y, ldy);
}

template <int R, class L, int NB>
inline void gemm_rows_group(const uint8_t* row0, size_t row_bytes, int64_t k0, int64_t k1, int64_t n, const float* x,
                            int64_t ldx, int64_t nb, float* acc, bool first, bool last, float* y, int64_t ldy) {
  if constexpr (NB > 1) {
    if (nb < NB) return gemm_rows_group<R, L, NB - 1>(row0, row_bytes, k0, k1, n, x, ldx, nb, acc, first, last, y, ldy);
  }
  gemm_tile<R, NB, L>(row0, row_bytes, k0, k1, n, x, ldx, acc, first, last, y, ldy);
}

template <class L, int R, int NB>
void gemm_tiled(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  constexpr int64_t kRows = kGemmRows / R * R;  // row blocks of whole tiles
  const size_t rb = w.row_bytes;
  const int64_t n = w.cols, n8 = n / kW * kW;
  const int64_t kblocks = (n8 + kGemmCols - 1) / kGemmCols;
  const int64_t kc = kblocks <= 1 ? kGemmCols : (n8 / kW + kblocks - 1) / kblocks * kW;
  float* acc = g_gemm_acc;
  for (int64_t rc = r0; rc < r1; rc += kRows) {
    const int64_t rce = rc + kRows < r1 ? rc + kRows : r1;
    for (int64_t bc = 0; bc < B; bc += kGemmBatch) {
      const int64_t bce = bc + kGemmBatch < B ? bc + kGemmBatch : B;
      for (int64_t k0 = 0; k0 < n8 || k0 == 0; k0 += kc) {
        const int64_t k1 = k0 + kc < n8 ? k0 + kc : n8;
        const bool first = k0 == 0, last = k1 == n8;
        for (int64_t b = bc; b < bce; b += NB) {
          const int64_t nb = bce - b < NB ? bce - b : NB;
          const float* xb = x + b * ldx;
          float* yb = y + b * ldy;
          float* ab = acc + (b - bc) * kGemmRows * kW;  // this group's accumulators: R*nb vectors per tile, in row order
          auto group = [&]<int G>(int64_t r) {
            gemm_rows_group<G, L, NB>(w.data + size_t(r) * rb, rb, k0, k1, n, xb, ldx, nb, ab + (r - rc) * nb * kW, first,
                                      last, yb + r, ldy);
          };
          int64_t r = rc;
          for (; r + R <= rce; r += R) group.template operator()<R>(r);
          if constexpr (R > 2)
            if (r + 2 <= rce) group.template operator()<2>(r), r += 2;
          for (; r < rce; ++r) group.template operator()<1>(r);
        }
        if (k1 == n8) break;
      }
    }
  }
}

template <class L>
void gemm_plain(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  if constexpr (kGemmWideRows != kGemmTileRows || kGemmWideBatch != kGemmTileBatch)  // then L::kWideTile is defined
    if (L::kWideTile && w.cols >= kGemmWideCols) return gemm_tiled<L, kGemmWideRows, kGemmWideBatch>(w, x, ldx, B, y, ldy, r0, r1);
  gemm_tiled<L, kGemmTileRows, kGemmTileBatch>(w, x, ldx, B, y, ldy, r0, r1);
}

// Prefill over block-quantized weights: kPanelRows weight rows at a time are dequantized
// into a per-thread f32 panel (grown on demand, freed when its thread ends), then the F32
// GEMM runs on it: each weight dequantized once per panel instead of once per group of 6
// activation rows. The panel holds exactly the floats the decode path computes, so the
// sums are the same.
constexpr int64_t kPanelRows = kCpuGemmPanelRows;  // memory/cpu_kernel_buffers.hpp: engine_memory() charges it
struct Panel {  // 64-byte aligned: a 512-bit load that splits a cache line costs two
  float* data = nullptr;
  size_t floats = 0;
  float* get(size_t n) {
    if (floats < n) {
      release();
      data = static_cast<float*>(::operator new(n * sizeof(float), std::align_val_t(64)));
      floats = n;
    }
    return data;
  }
  void release() {
    if (data) ::operator delete(data, std::align_val_t(64));
    data = nullptr;
  }
  ~Panel() { release(); }
};
thread_local Panel g_panel;

// to_f32(row, out): one weight row as w.cols floats.
template <class ToF32>
void gemm_panel(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                int64_t r1, ToF32&& to_f32) {
  float* panel_data = g_panel.get(size_t(kPanelRows) * size_t(w.cols));
  for (int64_t rc = r0; rc < r1; rc += kPanelRows) {
    const int64_t rows = rc + kPanelRows < r1 ? kPanelRows : r1 - rc;
    for (int64_t r = 0; r < rows; ++r)
      to_f32(w.data + size_t(rc + r) * w.row_bytes, panel_data + size_t(r) * size_t(w.cols));
    WeightMatrix panel{reinterpret_cast<const uint8_t*>(panel_data), DType::F32, rows, w.cols, size_t(w.cols) * 4, {}};
    gemm_plain<LoadF32>(panel, x, ldx, B, y + rc, ldy, 0, rows);
  }
}

template <class L>
void matmul_plain(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  // 16-bit weights are converted in the tile's loop, once per group of activation rows,
  // not through an f32 panel: the conversion is cheaper than twice the bytes from L2
  // (bench_kernels batch 128, session 15: 18-25% fewer cycles on AVX2, 5-18% on AVX-512).
  if (B >= kMatmulGemmBatch) return gemm_plain<L>(w, x, ldx, B, y, ldy, r0, r1);
  int64_t r = r0;
  const size_t rb = w.row_bytes;
  if (B == 1)  // decode: 8 rows at a time, 8 independent chains
    for (; r + 8 <= r1; r += 8) tile<8, 1, L, false, true>(w.data + size_t(r) * rb, rb, w.cols, x, ldx, y + r, ldy);
  for (; r + kBatchRows <= r1; r += kBatchRows)
    rows_times_batch<kBatchRows, L>(w.data + size_t(r) * rb, rb, w.cols, x, ldx, B, y + r, ldy);
  for (; r < r1; ++r) rows_times_batch<1, L>(w.data + size_t(r) * rb, rb, w.cols, x, ldx, B, y + r, ldy);
}

// Block-quantized types (the Block* policies): each 32-value sub-block becomes kSubVecs
// vectors of the exactly dequantized values, FMA'd like F32 weights; the prefill GEMM
// dequantizes a panel of rows once and runs the F32 GEMM on it. The values are exact in
// f32 or rounded once, the same way on every path (see the policies), so all paths give
// bit-identical results.
// A block's values in column order, kSubVecs vectors per 32-value sub-block: f(s, w) for
// s = 0 .. kSubs-1. K types decode two sub-blocks at a time (Q::pair: sub-blocks 2p and
// 2p+1 share their code bytes, low and high nibbles: one load and widening for both);
// k: the block's k_scales (K types only).
template <class Q, class F>
inline void for_each_sub(const uint8_t* blk, const KScales& k, F&& f) {
  if constexpr (Q::kSubs == 1) {
    V w[kSubVecs];
    Q::sub(blk, w);
    f(0, w);
  } else {
    #pragma GCC unroll 4
    for (int p = 0; p < Q::kSubs / 2; ++p) {
      V lo[kSubVecs], hi[kSubVecs];
      Q::pair(blk, p, k, lo, hi);
      f(2 * p, lo);
      f(2 * p + 1, hi);
    }
  }
}
template <class Q>
inline void prepare(const uint8_t* blk, KScales& k) {
  if constexpr (Q::kSubs > 1) Q::scales(blk, k);
}

// R weight rows x NB activation rows (small batches): each x vector is loaded once for
// the R rows (one row at a time, every FMA needs its own x load: the load ports, not the
// FMA units, were the limit). Each (row, activation) chain sees the same FMAs in the same
// order as the decode path's.
template <int R, int NB>
inline void blockq_fma(V (&acc)[R][NB], const V (&w)[R][kSubVecs], const float* x, int64_t ldx) {
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b)
    #pragma GCC unroll 16
    for (int j = 0; j < kSubVecs; ++j) {
      V xv = vloadu(x + b * ldx + kW * j);
      if constexpr (R > 1) asm("" : "+v"(xv));  // one load per x vector, not one per FMA
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][b] = vfma(w[r][j], xv, acc[r][b]);
    }
}
// Prefetch: the first group of activation rows (the weights come from DRAM once per step)
// fetches the rows `ahead` tiles on as blockq_rows does; later groups find them in cache.
template <int R, int NB, class Q, bool Prefetch = false>
inline void blockq_tile(const uint8_t* row0, size_t row_bytes, int64_t nblocks, const float* x, int64_t ldx, float* y,
                        int64_t ldy) {
  V acc[R][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = vzero();
  TilePrefetch pf = block_prefetch<Q, R>(row0, row_bytes, nblocks);
  KScales ks[R];
  for (int64_t k = 0; k < nblocks; ++k) {
    if constexpr (Prefetch) pf.next();
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) prepare<Q>(row0 + size_t(r) * row_bytes + k * Q::kBytes, ks[r]);
    if constexpr (Q::kSubs == 1) {
      V w[R][kSubVecs];
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) Q::sub(row0 + size_t(r) * row_bytes + k * Q::kBytes, w[r]);
      blockq_fma<R, NB>(acc, w, x + k * 32, ldx);
    } else {
      #pragma GCC unroll 1
      for (int p = 0; p < Q::kSubs / 2; ++p) {
        V lo[R][kSubVecs], hi[R][kSubVecs];
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) Q::pair(row0 + size_t(r) * row_bytes + k * Q::kBytes, p, ks[r], lo[r], hi[r]);
        const float* xs = x + (k * Q::kSubs + 2 * p) * 32;
        blockq_fma<R, NB>(acc, lo, xs, ldx);
        blockq_fma<R, NB>(acc, hi, xs + 32, ldx);
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = vhsum(acc[r][b]);
}

// Decode (one activation row): R weight rows at once for R independent chains (more rows
// than the registers hold spill the accumulators: Q4_1 on AVX2 with 8 rows, -12%); a tile
// `ahead` tiles on (R contiguous rows) is prefetched as one sequential stream spread over
// the blocks of this one (Q8_0: g_prefetch_wide, the others g_prefetch_narrow).
template <int R, class Q>
inline void blockq_rows(const uint8_t* row0, size_t row_bytes, int64_t nblocks, const float* x, float* y) {
  V acc[R];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = vzero();
  TilePrefetch pf = block_prefetch<Q, R>(row0, row_bytes, nblocks);
  KScales ks[R];
  for (int64_t k = 0; k < nblocks; ++k) {
    if constexpr (R > 1) pf.next();
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) prepare<Q>(row0 + size_t(r) * row_bytes + k * Q::kBytes, ks[r]);
    // Unrolled, so acc[] stays in registers: a rolled loop indexes it in memory (GCC 12
    // does not unroll it alone), a store and a reload around every FMA.
    if constexpr (Q::kSubs == 1) {
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        V w[kSubVecs];
        Q::sub(row0 + size_t(r) * row_bytes + k * Q::kBytes, w);
        #pragma GCC unroll 16
        for (int j = 0; j < kSubVecs; ++j) acc[r] = vfma(w[j], vloadu(x + k * 32 + kW * j), acc[r]);
      }
    } else {
      const auto pair_step = [&](int p) {
        const float* xs = x + (k * Q::kSubs + 2 * p) * 32;
        #pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          V lo[kSubVecs], hi[kSubVecs];
          Q::pair(row0 + size_t(r) * row_bytes + k * Q::kBytes, p, ks[r], lo, hi);
          #pragma GCC unroll 16
          for (int j = 0; j < kSubVecs; ++j) acc[r] = vfma(lo[j], vloadu(xs + kW * j), acc[r]);
          #pragma GCC unroll 16
          for (int j = 0; j < kSubVecs; ++j) acc[r] = vfma(hi[j], vloadu(xs + 32 + kW * j), acc[r]);
        }
      };
      // The block's pairs in a loop, or unrolled where that is faster (Q5_K: bench_kernels
      // batch 1, 2048x2048, AVX2 3.29 -> 3.76 macs/tsc, AVX-512 4.64 -> 4.82; Q4_K and Q6_K
      // lose 4-14% unrolled). The same FMAs in the same order either way.
      if constexpr (Q::kUnrollPairs) {
        #pragma GCC unroll 4
        for (int p = 0; p < Q::kSubs / 2; ++p) pair_step(p);
      } else {
        #pragma GCC unroll 1
        for (int p = 0; p < Q::kSubs / 2; ++p) pair_step(p);
      }
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) y[r] = vhsum(acc[r]);
}

template <class Q>
void matmul_blockq(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                   int64_t r1) {
  const int64_t nblocks = w.cols / (32 * Q::kSubs);
  if (B >= kMatmulGemmBatch)
    return gemm_panel(w, x, ldx, B, y, ldy, r0, r1, [nblocks](const uint8_t* row, float* out) {
      KScales ks;
      for (int64_t k = 0; k < nblocks; ++k) {
        prepare<Q>(row + k * Q::kBytes, ks);
        for_each_sub<Q>(row + k * Q::kBytes, ks, [&](int s, const V* v) {
          #pragma GCC unroll 16
          for (int j = 0; j < kSubVecs; ++j) vstoreu(out + (k * Q::kSubs + s) * 32 + kW * j, v[j]);
        });
      }
    });
  if (B == 1) {
    int64_t r = r0;
    constexpr int R = Q::kDecodeRows;
    for (; r + R <= r1; r += R) blockq_rows<R, Q>(w.data + size_t(r) * w.row_bytes, w.row_bytes, nblocks, x, y + r);
    for (; r < r1; ++r) blockq_rows<1, Q>(w.data + size_t(r) * w.row_bytes, w.row_bytes, nblocks, x, y + r);
    return;
  }
  const size_t rb = w.row_bytes;
  int64_t r = r0;
  for (; r + kBlockBatchRows <= r1; r += kBlockBatchRows)
    by_groups<kBlockBatchTile>(B, [&](auto nb, int64_t b) {
      const uint8_t* rows = w.data + size_t(r) * rb;
      if (b == 0)
        blockq_tile<kBlockBatchRows, decltype(nb)::value, Q, true>(rows, rb, nblocks, x, ldx, y + r, ldy);
      else
        blockq_tile<kBlockBatchRows, decltype(nb)::value, Q>(rows, rb, nblocks, x + b * ldx, ldx, y + b * ldy + r, ldy);
    });
  for (; r < r1; ++r)
    by_groups<kBlockBatchTile>(B, [&](auto nb, int64_t b) {
      blockq_tile<1, decltype(nb)::value, Q>(w.data + size_t(r) * rb, rb, nblocks, x + b * ldx, ldx, y + b * ldy + r, ldy);
    });
}


// Q6_K, fused (no GEMM): per 128 values, four groups of 32, each dotted with x as
// integers-as-floats and scaled per 16-value sub-block. Same order for every batch size.
// The codes go through memory: vpmovsxbd from memory widens 2 per cycle on Zen 3, from a
// register 0.77, and needs no vextracti128 / vpsrldq (bench_ports avx2, session 28: batch 1
// 2.47 -> 2.71 weights per cycle). R weight rows at once: R independent sums (batch 1
// takes 2; one row's sum is a chain of two FMAs per 32 values, 4 weights per cycle at
// most). Each (row, x) pair's sum is the same whatever R and NB are.
template <int R, int NB>
inline void q6k_tile(const uint8_t* row0, size_t row_bytes, int64_t nblocks, const float* x, int64_t ldx, float* y,
                     int64_t ldy) {
  __m256 acc[R][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  // Two of each buffer: a half's codes (and a block's scales) are made one half ahead of
  // their use, so the widening loads read stores long since done, not ones still in flight.
  alignas(32) int8_t codes[2][R][128];
  alignas(32) float dsc[2][R][16];  // d * scale of a block's 16 sub-blocks, per row
  // The 16 products d * s (q6_scale_products: vectors, the same f32 products as one scalar
  // multiply each) through memory, so each sub-block's is one vbroadcastss m32 (a load, no
  // FP pipe; per value movsx + vcvtsi2ss + vmulss + vbroadcastss took about 4 FP-pipe slots).
  const auto scales = [&](int64_t k, float (&d16)[R][16]) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) q6_scale_products(row0 + size_t(r) * row_bytes + k * 210, d16[r]);
  };
  const auto make_codes = [&](int64_t k, int half, int8_t (&c)[R][128]) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = row0 + size_t(r) * row_bytes + k * 210;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * half));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * half + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * half));
      const __m256i q[4] = {
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)), off),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql1, m4),
                                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)), off),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)), off),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)), off)};
      #pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(c[r] + 32 * g), q[g]);
    }
  };
  const auto use = [&](int64_t k, int half, const int8_t (&c)[R][128], const float (&d16)[R][16]) {
    #pragma GCC unroll 16
    for (int g = 0; g < 4; ++g) {  // values [32g, 32g+32) of this half; sub-block scales s[2g], s[2g+1]
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        __m256 f[4];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; ++j)
          f[j] = _mm256_cvtepi32_ps(
              _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c[r] + 32 * g + 8 * j))));
        const float* s = d16[r] + 8 * half;
        const __m256 da = _mm256_broadcast_ss(s + 2 * g), db = _mm256_broadcast_ss(s + 2 * g + 1);
        #pragma GCC unroll 16
        for (int b = 0; b < NB; ++b) {
          const float* xb = x + b * ldx + k * 256 + half * 128 + g * 32;
          __m256 ta = _mm256_fmadd_ps(f[1], _mm256_loadu_ps(xb + 8), _mm256_mul_ps(f[0], _mm256_loadu_ps(xb)));
          __m256 tb = _mm256_fmadd_ps(f[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(f[2], _mm256_loadu_ps(xb + 16)));
          acc[r][b] = _mm256_fmadd_ps(da, ta, acc[r][b]);
          acc[r][b] = _mm256_fmadd_ps(db, tb, acc[r][b]);
        }
      }
    }
  };
  if (nblocks > 0) {
    scales(0, dsc[0]);
    make_codes(0, 0, codes[0]);
  }
  for (int64_t k = 0; k < nblocks; ++k) {
    // half 0 of block k (codes[0], made one half before), then half 1 (codes[1]).
    make_codes(k, 1, codes[1]);
    asm("" : "+m"(codes), "+m"(dsc));  // keep the stores and the widening loads (GCC would shuffle instead)
    use(k, 0, codes[0], dsc[k & 1]);
    if (k + 1 < nblocks) {
      scales(k + 1, dsc[(k + 1) & 1]);
      make_codes(k + 1, 0, codes[0]);
    }
    asm("" : "+m"(codes), "+m"(dsc));
    use(k, 1, codes[1], dsc[k & 1]);
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = hsum8(acc[r][b]);
}

inline void matmul_q6k(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  const int64_t nblocks = w.cols / 256;
  int64_t r = r0;
  if (B == 1)
    for (; r + 2 <= r1; r += 2) q6k_tile<2, 1>(w.data + size_t(r) * w.row_bytes, w.row_bytes, nblocks, x, ldx, y + r, ldy);
  for (; r < r1; ++r) {
    const uint8_t* row = w.data + size_t(r) * w.row_bytes;
    by_groups<8>(B, [&](auto nb, int64_t b) {
      q6k_tile<1, decltype(nb)::value>(row, w.row_bytes, nblocks, x + b * ldx, ldx, y + b * ldy + r, ldy);
    });
  }
}

// Q6_K: through the block policy where the ISA has one (AVX-512); the fused kernel above
// where it is void (AVX2: the exact dequantized values cost one more multiply per value on
// ports 0/1, +23% decode cycles; the fused kernel has no GEMM: a weight row at a time (2
// at batch 1) against 8 activation rows at a time (4 until session 15: 2-5% more cycles at batch 128),
// over chunks of at most 512 KiB of activation rows, which stay in L2 while the weight rows
// pass: 32 rows up to 4096 columns, 16 at 8192 (32 rows of 8192 columns, 1 MiB, fill L2:
// bench_kernels batch 128, 2048x8192, 19.8 -> 16.7 tsc/B with 16).
// Each (row, x) pair's sum does not depend on the chunking.
template <class Q6 = BlockQ6_K>
void matmul_q6(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
               int64_t r1) {
  if constexpr (!std::is_void_v<Q6>) {
    matmul_blockq<Q6>(w, x, ldx, B, y, ldy, r0, r1);
  } else {
    constexpr int64_t kChunkBytes = 512 << 10;
    const int64_t by_bytes = kChunkBytes / (4 * (w.cols > 0 ? w.cols : 1)) / 8 * 8;
    const int64_t chunk = by_bytes < 8 ? 8 : by_bytes > 32 ? 32 : by_bytes;
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t nb = B - b0 < chunk ? B - b0 : chunk;
      matmul_q6k(w, x + b0 * ldx, ldx, nb, y + b0 * ldy, ldy, r0, r1);
    }
  }
}

void simd_matmul_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::F32: return matmul_plain<LoadF32>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::BF16: return matmul_plain<LoadBF16>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::F16: return matmul_plain<LoadF16>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q8_0: return matmul_blockq<BlockQ8_0>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q4_0: return matmul_blockq<BlockQ4_0>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q4_K: return matmul_blockq<BlockQ4_K>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q4_1: return matmul_blockq<BlockQ4_1>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q5_0: return matmul_blockq<BlockQ5_0>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q5_1: return matmul_blockq<BlockQ5_1>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q5_K: return matmul_blockq<BlockQ5_K>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::Q6_K: return matmul_q6(w, x, ldx, B, y, ldy, r0, r1);
    default: break;
  }
}

// Attention: 4 cache rows at a time against one query (4 independent FMA chains).
template <class L>
void attn_scores_impl(const float* q, const uint8_t* rows, size_t row_bytes, int64_t n, int64_t d, float scale, float* out) {
  int64_t p = 0;
  for (; p + 4 <= n; p += 4) {
    float s[4];
    // The rows of one kv head are contiguous (the CPU backend's cache layout): both the
    // f32 row-by-row prefetch and the 16-bit sequential stream fetch the rows ahead.
    tile<4, 1, L, false, true>(rows + size_t(p) * row_bytes, row_bytes, d, q, 0, s, 0);
    for (int r = 0; r < 4; ++r) out[p + r] = scale * s[r];
  }
  for (; p < n; ++p) {
    float s;
    tile<1, 1, L, false>(rows + size_t(p) * row_bytes, row_bytes, d, q, 0, &s, 0);
    out[p] = scale * s;
  }
}

// sum_p w[p] * row_p over NV*8 output values [c, c + 8*NV), held in registers across all rows.
template <int NV, class L>
inline void attn_mix_chunk(const float* w, const uint8_t* rows, size_t row_bytes, int64_t n, int64_t c, float* out) {
  V acc[NV];
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) acc[j] = vzero();
  for (int64_t p = 0; p < n; ++p) {
    const V wv = vset1(w[p]);
    const uint8_t* row = rows + size_t(p) * row_bytes;
    // The row 8 on (decode: the cache comes from DRAM, the layers in between evicted it).
    const char* ahead = reinterpret_cast<const char*>(L::addr(row + 8 * row_bytes, c));
#pragma GCC unroll 8
    for (int j = 0; j < NV * kW * L::kElemBytes; j += 64) _mm_prefetch(ahead + j, _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[j] = vfma(wv, L::load(row, c + kW * j), acc[j]);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) vstoreu(out + c + kW * j, acc[j]);
}

template <class L>
void attn_mix_impl(const float* w, const uint8_t* rows, size_t row_bytes, int64_t n, int64_t d, float* out) {
  int64_t c = 0;
  for (; c + 8 * kW <= d; c += 8 * kW) attn_mix_chunk<8, L>(w, rows, row_bytes, n, c, out);
  switch ((d - c) / kW) {  // the rest of the whole vectors in one pass over the rows
    case 7: attn_mix_chunk<7, L>(w, rows, row_bytes, n, c, out); break;
    case 6: attn_mix_chunk<6, L>(w, rows, row_bytes, n, c, out); break;
    case 5: attn_mix_chunk<5, L>(w, rows, row_bytes, n, c, out); break;
    case 4: attn_mix_chunk<4, L>(w, rows, row_bytes, n, c, out); break;
    case 3: attn_mix_chunk<3, L>(w, rows, row_bytes, n, c, out); break;
    case 2: attn_mix_chunk<2, L>(w, rows, row_bytes, n, c, out); break;
    case 1: attn_mix_chunk<1, L>(w, rows, row_bytes, n, c, out); break;
    default: break;
  }
  c += (d - c) / kW * kW;
  for (; c < d; ++c) {
    float acc = 0;
    for (int64_t p = 0; p < n; ++p) acc += w[p] * L::one(rows + size_t(p) * row_bytes, c);
    out[c] = acc;
  }
}

void simd_attn_scores(const float* q, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float scale,
                      float* out) {
  const uint8_t* r = static_cast<const uint8_t*>(rows);
  if (half) attn_scores_impl<LoadF16>(q, r, size_t(stride) * 2, n, d, scale, out);
  else attn_scores_impl<LoadF32>(q, r, size_t(stride) * 4, n, d, scale, out);
}
void simd_attn_mix(const float* w, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float* out) {
  const uint8_t* r = static_cast<const uint8_t*>(rows);
  if (half) attn_mix_impl<LoadF16>(w, r, size_t(stride) * 2, n, d, out);
  else attn_mix_impl<LoadF32>(w, r, size_t(stride) * 4, n, d, out);
}
void simd_store_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = uint16_t(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace
}  // namespace nunchaku::engine
