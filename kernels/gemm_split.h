// Split-K: when to cut a GEMM's reduction into slices, and how long each slice is.
//
// A CUDA GEMM rung gives each block one output tile and lets it walk the whole reduction. When the
// output has few tiles and K is long, most of the GPU idles while a handful of blocks do all the work:
// the weight gradient of a convolution as an im2col GEMM (LeNet's conv1: a 32 x 25 output, K = N*P*Q
// = 100352) makes one tile for 132 SMs. Split-K gives the reduction to `slices` blocks per tile
// instead (blockIdx.z picks a slice of K), each writing its FP32 partial tile to a workspace, and a
// second kernel adds the slices in a fixed order (deterministic: no atomics) and applies the epilogue
// (alpha, beta, bias, ReLU, one rounding into C's dtype, paper §3.3).
//
// The price is the partial tiles' traffic (slices x M x N FP32 values, written and read back) and a
// second launch, so it only pays where the reduction is long: K must be at least kMinSplitK, each
// slice but the last keeps at least kMinSliceK values of it (the last keeps what is left, which may be
// a single value: the slice length is rounded up to the K step), and GEMMs with enough tiles to fill
// the GPU are left alone.
//
// Plain C++ (host and device functions, no CUDA headers), so that the decision and the slicing are
// tested on any machine (tests/kernels/test_gemm_split.cpp); kernels/cuda/gemm/gemm_common.cuh holds
// the rest of the device side.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/gemm.h"
#include "kernels/half.h"

namespace hl::kernels {

struct SplitKPlan {
  int64_t slices = 1;  // blocks per output tile along K (1: no split)
  int64_t k_len = 0;   // K values per slice (the last slice may be shorter); a multiple of the K step
};

inline constexpr int64_t kMinSplitK = 1024;  // a shorter K loop takes a few microseconds: what the second launch costs
inline constexpr int64_t kMinSliceK = 256;   // shorter slices would move more partial sums than they save
inline constexpr int64_t kMaxSlices = 256;  // bounds the workspace: slices x M x N floats

// The plan for a GEMM of `tiles` output tiles and reduction length K on a GPU with `sms` SMs, for a
// kernel that walks K in steps of `k_step` (slices start on a step, so that 16-byte vector loads stay
// aligned: k_step must be a multiple of 8). Aims at about two blocks per SM.
inline SplitKPlan plan_split_k(int64_t tiles, int64_t K, int64_t sms, int64_t k_step) {
  SplitKPlan p{1, K};
  if (tiles <= 0 || K < kMinSplitK || tiles * 2 > sms) return p;  // short sum, or half the GPU busy already
  const int64_t want = (2 * sms + tiles - 1) / tiles;
  const int64_t slices = std::min({want, K / kMinSliceK, kMaxSlices});
  if (slices < 2) return p;
  const int64_t len = ((K + slices - 1) / slices + k_step - 1) / k_step * k_step;
  p.k_len = len;
  p.slices = (K + len - 1) / len;  // rounding len up may leave the last slices empty: drop them
  if (p.slices < 2) return SplitKPlan{1, K};
  return p;
}

// The GEMM that slice z of a split computes: K values [z * k_len, z * k_len + K') of the same operands
// (the pointers move along K, the leading dimensions stay), summed into its own dense M x N FP32
// partial matrix at partial + z * M * N, with no epilogue: alpha, beta, bias and ReLU belong to the
// whole sum and are applied once, by the second pass. A rung's kernel runs this slice instead of the
// whole GEMM and is otherwise unchanged: each slice is just a smaller GEMM.
HL_HOST_DEVICE GemmArgs split_slice(const GemmArgs& whole, int64_t k_len, int64_t z, float* partial) {
  const int64_t k0 = z * k_len;
  const int64_t elem = whole.ab_type == DType::f16 ? 2 : 4;  // the CUDA rungs take f16 or f32 inputs
  GemmArgs g = whole;
  g.K = k_len < whole.K - k0 ? k_len : whole.K - k0;  // >= 1: a plan leaves no slice empty
  g.A = static_cast<const char*>(whole.A) + (whole.op_a == Op::N ? k0 : k0 * whole.lda) * elem;
  g.B = static_cast<const char*>(whole.B) + (whole.op_b == Op::N ? k0 * whole.ldb : k0) * elem;
  g.C = partial + z * whole.M * whole.N;
  g.ldc = whole.N;
  g.c_type = DType::f32;
  g.alpha = 1.0f;
  g.beta = 0.0f;
  g.bias = nullptr;
  g.relu = false;
  return g;
}

// The second pass's sum of element i over the slices' partial matrices (each `total` floats apart):
// slice 0 first, then one addition per slice in slice order, which fixes the bits (a split GEMM gives
// the same result on every run). The loads of kSumBatch slices are issued before their additions,
// so that a thread waits for memory about twice per batch instead of once every three slices: with a
// few hundred slices and an output of a few hundred elements (LeNet conv1's weight gradient as a GEMM:
// 32 x 25, 242 slices) the pass is a few hundred threads each walking its column of partials, and
// written as one loop nvcc kept about three loads in flight. In the sm_90 machine code of this form,
// 11 of a batch's 16 loads are issued before its first addition waits, and the other 5 during the
// additions (bench/results/sass_split_k_reduce_2026-11-26.txt). The order of the additions is the
// plain loop's, so the result is the same float, bit for bit (tests/kernels/test_gemm_split.cpp).
inline constexpr int kSumBatch = 16;
HL_HOST_DEVICE float sum_slices(const float* partial, int64_t total, int64_t i, int64_t slices) {
  float sum = partial[i];  // not 0 + partial: a lone slice's -0 must stay -0, as in an unsplit rung
  int64_t z = 1;
  for (; z + kSumBatch <= slices; z += kSumBatch) {
    float v[kSumBatch];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int b = 0; b < kSumBatch; ++b) v[b] = partial[(z + b) * total + i];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int b = 0; b < kSumBatch; ++b) sum += v[b];
  }
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
  for (; z < slices; ++z) sum += partial[z * total + i];  // the last slices, fewer than a batch
  return sum;
}

}  // namespace hl::kernels
