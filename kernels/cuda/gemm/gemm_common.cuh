// What every rung of the CUDA GEMM ladder shares, so that each rung's file shows only what that rung
// changes: the epilogue (alpha, beta, bias, ReLU, one rounding on the store), the argument checks
// the Tensor Core rungs make, and the device facts they depend on.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"
#include "kernels/gemm.h"
#include "kernels/gemm_split.h"
#include "kernels/runtime.h"

namespace hl::kernels::cuda::gemm_detail {

// C[m, n] = act(alpha * acc + beta * C[m, n] + bias[n]), rounded once into C's dtype (paper §3.3:
// FP32 accumulation, rounding to FP16 only on the memory write). With beta == 0 C is never read, so
// it may hold NaN. ReLU lets NaN through: an overflow must stay visible to the loss scaler. The
// caller checks m < M and n < N.
__device__ __forceinline__ void epilogue_store(const GemmArgs& g, int64_t m, int64_t n, float acc) {
  float v = g.alpha * acc;
  const int64_t c = m * g.ldc + n;
  if (g.beta != 0.0f) v += g.beta * load_float(g.C, g.c_type, c);
  if (g.bias != nullptr) v += load_float(g.bias, g.bias_type, n);
  if (g.relu) v = v > 0.0f || v != v ? v : 0.0f;
  store_float(g.C, g.c_type, c, v);
}

// The dtype checks every CUDA rung makes (what kernels/gemm.cpp lets through but no CUDA kernel
// computes); nullptr when the arguments are fine.
inline const char* unsupported_dtypes(const GemmArgs& g) {
  if (g.ab_type != DType::f16 && g.ab_type != DType::f32)
    return "the CUDA kernels take f16 or f32 inputs (f64 GEMMs run on the CPU, for gradient checks)";
  if (g.c_type != DType::f16 && g.c_type != DType::f32) return "the output C must be f16 or f32";
  if (g.bias != nullptr && g.bias_type != DType::f16 && g.bias_type != DType::f32) return "the bias must be f16 or f32";
  return nullptr;
}

// The Tensor Core rungs multiply FP16 fragments: f32 inputs go to smem_tiled_split_k (the registry
// falls back to it automatically), and a device older than Volta has no FP16 Tensor Cores.
inline const char* unsupported_wmma(const GemmArgs& g) {
  if (const char* why = unsupported_dtypes(g)) return why;
  if (g.ab_type != DType::f16)
    return "the Tensor Core rungs (wmma*, mma_sync, wgmma) take f16 inputs only (FP16 Tensor Core products); use "
           "smem_tiled or cublas for f32";
  const int cc = runtime::cuda_compute_capability();  // the probe is cached
  if (cc != 0 && cc < 70) return "the WMMA rungs need compute capability 7.0 or newer (FP16 Tensor Cores)";
  return nullptr;
}

// True when 8 consecutive halves of every row of a stored matrix can be moved as one 16-byte
// vector: the base pointer 16-byte aligned and the row stride a multiple of 8 halves. The WMMA rungs
// use this to choose, per matrix, between 128-bit loads and their scalar fallback.
inline bool vector_aligned(const void* p, int64_t ld) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 8 == 0;
}

// The most dynamic shared memory a block of this GPU may ask for (after cudaFuncSetAttribute), read
// once by the runtime's probe: a tile that needs more is refused with the numbers rather than failing
// to launch.
inline int max_shared_memory_per_block() { return runtime::cuda_max_shared_memory_per_block(); }

inline unsigned blocks_for(int64_t n, int64_t tile) { return static_cast<unsigned>((n + tile - 1) / tile); }

// Launch-size guard: gridDim.y is at most 65535, so M may not need more row tiles than that.
inline void check_grid_y(const GemmArgs& g, int64_t tile_m, const char* variant) {
  HL_CHECK((g.M + tile_m - 1) / tile_m <= 65535, "gemm ", variant, ": M=", g.M, " needs more than 65535 row tiles of ",
           tile_m, " (", g.describe(), ")");
}

// ---- split-K (kernels/gemm_split.h says when and why) ---------------------------------------------

// What a rung's kernel needs to compute one slice of K per blockIdx.z.
struct SplitK {
  int64_t k_len = 0;         // K values per slice (plan.k_len)
  float* partial = nullptr;  // slices x M x N FP32 partial sums, dense; slice z starts at z * M * N
};

// The GEMM this block computes: slice blockIdx.z of K (gemm_split.h, split_slice). A rung's kernel
// starts with `const GemmArgs g = slice_for_block(args, split)` and is otherwise unchanged.
__device__ __forceinline__ GemmArgs slice_for_block(const GemmArgs& whole, const SplitK& s) {
  return split_slice(whole, s.k_len, blockIdx.z, s.partial);
}

// The split-K workspace, shared by the rungs (one grow-only buffer: kernels/cuda/scratch.cuh), and the
// second pass: C = act(alpha * (partial_0 + ... + partial_{slices-1}) + beta * C + bias), the slices
// added in order (the same sum on every run). Defined in split_k.cu.
Scratch& split_k_workspace();
void split_k_reduce(const GemmArgs& g, const float* partial, int64_t slices);

// Runs a split GEMM: `launch_slices(SplitK)` queues the rung's kernel over a grid with gridDim.z =
// plan.slices, then the second pass adds the slices. The workspace lock is held until both are queued.
template <class LaunchSlices>
void run_split_k(const GemmArgs& g, const SplitKPlan& plan, LaunchSlices&& launch_slices) {
  HL_CHECK(plan.slices >= 2 && plan.slices <= 65535, "gemm split-K: ", plan.slices, " slices (", g.describe(), ")");
  Scratch& ws = split_k_workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);
  SplitK s;
  s.k_len = plan.k_len;
  s.partial = static_cast<float*>(ws.reserve(static_cast<size_t>(plan.slices * g.M * g.N) * sizeof(float)));
  launch_slices(s);
  split_k_reduce(g, s.partial, plan.slices);
}

}  // namespace hl::kernels::cuda::gemm_detail
