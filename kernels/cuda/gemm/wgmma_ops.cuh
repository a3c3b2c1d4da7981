// The Hopper instructions the wgmma rungs share (wgmma.cu, rung 7; wgmma_tma.cu, rung 8), as inline
// PTX: wgmma.mma_async and its fences, commit and wait, and the proxy fence that makes ordinary
// shared-memory writes visible to it. Device code for the sm_90a target only: every definition sits
// under __CUDA_ARCH_FEAT_SM90_ALL, so the files include this unconditionally and guard their kernels'
// bodies the same way.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"  // to_f32, from_f32, Pack, aligned_to
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/wgmma_layout.h"

namespace hl::kernels::cuda::wgmma_ops {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- the instructions ----------------------------------------------------------------------------------

// This thread's shared-memory writes (cp.async's, once awaited, and ordinary stores) become visible to
// the async proxy, through which wgmma reads; a barrier must follow before another thread's wgmma.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Orders this warpgroup's earlier register and shared-memory accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The accumulators are written by the Tensor Cores after the instruction that names them has issued;
// the compiler must not read them (or move them) before wgmma_wait. An empty asm that "modifies" each
// one, placed after the wait (volatile asm keeps its order), pins every later read behind it.
template <int N>
__device__ __forceinline__ void pin_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x N, FP32, in the registers of the warpgroup's 128 threads) += A (64 x 16) * B (16 x N), both
// f16 in shared memory as the descriptors say. kTransA / kTransB: 0 for a K-major operand, 1 for an
// M- or N-major one. The first operand of the predicate is 1: D is always accumulated into (it starts
// at zero). The operand lists are long because the instruction names every accumulator register.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, accumulate, 1, 1, %35, %36;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB));
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, accumulate, 1, 1, %67, %68;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB));
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, accumulate, 1, 1, %131, %132;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransA), "n"(kTransB));
}

// m64nBNk16 for the three N this rung uses.
template <int BN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (BN == 64) {
    wgmma_m64n64k16<kTransA, kTransB>(d, desc_a, desc_b);
  } else if constexpr (BN == 128) {
    wgmma_m64n128k16<kTransA, kTransB>(d, desc_a, desc_b);
  } else {
    static_assert(BN == 256, "wgmma.cu instantiates N = 64, 128 and 256");
    wgmma_m64n256k16<kTransA, kTransB>(d, desc_a, desc_b);
  }
}


// ---- the epilogue ----------------------------------------------------------------------------------------

// The accumulators' places are known (accumulator_pos), so a warpgroup's go to the block's 128 x BN
// FP32 staging tile Cs (rows padded to staging_ld(BN) floats) as pairs: 8-byte stores. wg: the
// warpgroup's index among those computing (its 64 rows), t: the thread's index in it.
template <int BN>
__device__ __forceinline__ void stage_accumulators(float* Cs, const float (&acc)[BN / 2], int wg, int t) {
  constexpr int kLdC = wgmma_layout::staging_ld(BN);
#pragma unroll
  for (int i = 0; i < BN / 2; i += 2) {
    const wgmma_layout::TilePos p = wgmma_layout::accumulator_pos(t, i);
    *reinterpret_cast<float2*>(Cs + (wg * wgmma_layout::kWgRows + p.row) * kLdC + p.col) = make_float2(acc[i], acc[i + 1]);
  }
}

// The common epilogue (gemm_common.cuh, epilogue_store) for 8 consecutive columns n .. n + 7 of row m:
// the same operations on each value in the same order (alpha * acc, + beta * C, + bias, ReLU, one
// rounding into C's type), with C read and written, and the bias read, as whole 16- or 32-byte runs.
// TB = void: no bias.
template <class TC, class TB>
__device__ __forceinline__ void epilogue_store8(const GemmArgs& g, int64_t m, int64_t n, const float (&acc)[8]) {
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = g.alpha * acc[j];
  Pack<TC, 8>* c = reinterpret_cast<Pack<TC, 8>*>(static_cast<TC*>(g.C) + m * g.ldc + n);
  if (g.beta != 0.0f) {
    const Pack<TC, 8> old = *c;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] += g.beta * to_f32(old.v[j]);
  }
  if constexpr (!std::is_void_v<TB>) {
    const Pack<TB, 8> b = *reinterpret_cast<const Pack<TB, 8>*>(static_cast<const TB*>(g.bias) + n);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] += to_f32(b.v[j]);
  }
  if (g.relu) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] > 0.0f || v[j] != v[j] ? v[j] : 0.0f;
  }
  Pack<TC, 8> out;
#pragma unroll
  for (int j = 0; j < 8; ++j) out.v[j] = from_f32<TC>(v[j]);
  *c = out;
}

// The staged tile to C, 8 columns per thread per step: consecutive threads take consecutive runs of a
// row (coalesced), each reads its 8 staged values as two 16-byte loads and stores C with one 16-byte
// (f16) or 32-byte (f32) access. A run that C's last column cuts goes value by value.
template <int BN, class TC, class TB>
__device__ __forceinline__ void store_staged_runs(const GemmArgs& g, const float* Cs, int64_t m0, int64_t n0,
                                                  int first, int threads) {
  constexpr int kLdC = wgmma_layout::staging_ld(BN), kRuns = BN / 8;
  for (int e = first; e < wgmma_layout::kBM * kRuns; e += threads) {
    const int mi = e / kRuns, ni = (e % kRuns) * 8;
    const int64_t m = m0 + mi, n = n0 + ni;
    if (m >= g.M || n >= g.N) continue;
    const float* src = Cs + mi * kLdC + ni;  // 32-byte aligned: kLdC and ni are multiples of 8
    if (n + 8 <= g.N) {
      const float4 lo = *reinterpret_cast<const float4*>(src), hi = *reinterpret_cast<const float4*>(src + 4);
      const float acc[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      epilogue_store8<TC, TB>(g, m, n, acc);
    } else {
#pragma unroll 1
      for (int j = 0; n + j < g.N; ++j) gemm_detail::epilogue_store(g, m, n + j, src[j]);
    }
  }
}

// Then, after a barrier, `threads` threads (this one is `first`) write the staged tile to C through the
// common epilogue (alpha, beta, bias, ReLU, one rounding). Where C's rows (and the bias) allow 8-value
// runs (C's row stride a multiple of 8, C and the bias aligned to 8 values: what a dense C from
// cudaMalloc with N a multiple of 8 has), a thread stores 8 columns at once: for an output-bound
// GEMM (K = 64, one K step) the epilogue is most of the work, and one access per 8 values instead of
// 8 is the difference. Otherwise a value at a time, consecutive threads on consecutive columns.
template <int BN>
__device__ __forceinline__ void store_staged(const GemmArgs& g, const float* Cs, int64_t m0, int64_t n0, int first,
                                             int threads) {
  // Pack<T, 8> (common.cuh): 8 consecutive values of C or of the bias, 16 bytes of halves, 32 of floats.
  const auto aligned = [](const void* p, DType t) { return aligned_to(p, 8 * (t == DType::f16 ? 2 : 4)); };
  if (g.ldc % 8 == 0 && aligned(g.C, g.c_type) && (g.bias == nullptr || aligned(g.bias, g.bias_type))) {
    // The CUDA rungs take f16 or f32 for C and the bias (gemm_common.cuh, unsupported_dtypes).
    const auto with_bias = [&](auto c) {
      using TC = decltype(c);
      if (g.bias == nullptr) {
        store_staged_runs<BN, TC, void>(g, Cs, m0, n0, first, threads);
      } else if (g.bias_type == DType::f16) {
        store_staged_runs<BN, TC, __half>(g, Cs, m0, n0, first, threads);
      } else {
        store_staged_runs<BN, TC, float>(g, Cs, m0, n0, first, threads);
      }
    };
    if (g.c_type == DType::f16) {
      with_bias(__half{});
    } else {
      with_bias(float{});
    }
    return;
  }
  constexpr int kLdC = wgmma_layout::staging_ld(BN);
#pragma unroll 1
  for (int e = first; e < wgmma_layout::kBM * BN; e += threads) {
    const int mi = e / BN, ni = e % BN;
    const int64_t m = m0 + mi, n = n0 + ni;
    if (m < g.M && n < g.N) gemm_detail::epilogue_store(g, m, n, Cs[mi * kLdC + ni]);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace hl::kernels::cuda::wgmma_ops
