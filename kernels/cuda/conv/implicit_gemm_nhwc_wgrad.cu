// Convolution ladder, rung 4b: "implicit_gemm_nhwc_wgrad" — rung 4's NHWC operands and cp.async ring
// for the pass rung 4 leaves out, the weight gradient.
//
// What changes from rung 3's weight gradient (conv_implicit_gemm_wgrad_kernel, which rungs 3, 3b and 4
// all run): the loader. On an H200 that kernel runs VGG-small's weight gradients at 28-36 TFLOP/s,
// 23% of cuDNN on the 256 -> 256 layer (bench/results/gpu_short_nvidia_h200_2026-11-26.txt), for the
// reason rung 4 was written: in NCHW each of its tile values is a 2-byte gather with its own index
// arithmetic, staged through registers, one stage at a time. Here x and dY are first copied to NHWC
// (the copy rung 4 uses); then for one reduction index j = (n, p, q) the 128 output channels of an A
// tile row are 256 contiguous bytes of dY, and the 128 (r, s, c) columns of a B tile row are runs of
// C contiguous channels of x, one run per filter tap (implicit_gemm_nhwc_wgrad.h has the arithmetic).
// A thread's share of a stage is 2 + 2 cp.async copies of 16 bytes, with one bounds test each for the
// padding, fed into the GEMM ladder's 4-stage ring (global -> shared overlapped with the math). Its
// rows are the same in every stage, so their reduction indices are advanced from stage to stage as
// mixed-radix digits (RowCursor) instead of divided afresh: no division in the K loop.
//
// Both tiles are stored with the reduction index as their row, so the fragments read A col_major and
// B row_major (in rung 3 it is the other way round): the same WMMA FP16 products with FP32 accumulators
// (paper §3.3), 128 x 128 block tiles of 8 warps of 64 x 32.
//
// The output (K x R*S*C) is small and the reduction (N*P*Q, 131072 positions on VGG's first layers) is
// long, so the reduction is split across blocks (blockIdx.z, a count that fills whole waves:
// kernels/wave_split.h), each slice's FP32 partial tile written to the workspace, and a second kernel
// adds the slices in a fixed order (deterministic, no atomics), applies beta, reorders [k][r][s][c]
// into the framework's [k][c][r][s] and rounds once. The workspace holds the two NHWC copies and the partials (at most 42 MB on
// VGG-small at batch 128; more than 256 MiB is handed on).
//
// What it hands on, to rung 4 (implicit_gemm_nhwc, which computes forward and stride-1 backward_data
// and hands the rest to rungs 3b and 3): every pass but backward_weight; channel counts C or K that
// are not multiples of 8 (the first layers: C = 1 or 3); GPUs below compute capability 8.0 and builds
// without sm_80 code; sizes past its 32-bit indices; workspaces above 256 MiB. What it refuses, as
// rung 3 does: f32 inputs.
//
// Status: written in a session without a GPU (2026-11-26), its address arithmetic checked on the CPU
// by tests/kernels/test_conv_nhwc_wgrad_index.cpp. Its CUDA tests, memcheck, racecheck and conv_bench
// ran on an H100 on 2026-11-27, and it has been the default FP16 convolution since (priority 41,
// above rung 4; docs/gpu_status.md).
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <mutex>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv/implicit_gemm_nhwc.h"  // copy_nchw_to_nhwc: rung 4's layout change
#include "kernels/cuda/conv/implicit_gemm_nhwc_wgrad.h"
#include "kernels/cuda/conv/workspace.cuh"
#include "kernels/cuda/gemm/wmma_tile.cuh"  // copy16, cp_async_commit, cp_async_wait: the GEMM ladder's
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

namespace {

using namespace nhwc_wgrad;
using gemm_detail::copy16;
using gemm_detail::cp_async_commit;
using gemm_detail::cp_async_wait;

// One block: output channels [m0, m0 + 128) x columns [n0, n0 + 128) over the reduction slice
// blockIdx.z; its FP32 partial tile goes to partial[z][k][(r, s, c)].
__global__ void __launch_bounds__(kThreads)
    conv_nhwc_wgrad_kernel(Problem g, int slice, const __half* __restrict__ dyh, const __half* __restrict__ xh,
                           float* __restrict__ partial) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* const ring = reinterpret_cast<__half*>(smem);
  const auto a_stage = [&](int s) { return ring + s * kStageElems; };                // [kBK][kLdA]
  const auto b_stage = [&](int s) { return ring + s * kStageElems + kBK * kLdA; };  // [kBK][kLdB]

  const int warp = threadIdx.x / 32;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int j_begin = blockIdx.z * slice;
  const int j_end = min(j_begin + slice, g.npq());

  // This thread's tile columns: the same vector in every copy (tile_vec), decomposed once.
  const int vec = tile_vec(threadIdx.x, 0).vec;
  const Column col = make_column(g, n0 + 8 * vec);
  const int m = m0 + 8 * vec;
  // And its rows: the same rows of every stage, so their reduction indices are decomposed once here
  // and then advanced by kBK per stage without a division (RowCursor).
  RowCursor cursor[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) cursor[i] = cursor_at(g, j_begin + tile_vec(threadIdx.x, i).row);
  const Stride stride = stride_of(g, kBK);

  // One stage, the next one in order (stages are loaded exactly once each, first to last): reduction
  // rows [k0, k0 + kBK) of both tiles, 16 bytes per copy, zeros where there is nothing to read (padding
  // taps, columns or channels past the edge, rows past the slice).
  const auto load_stage = [&](int s) {
    __half* as = a_stage(s);
    __half* bs = b_stage(s);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const TileVec t = tile_vec(threadIdx.x, i);
      const Row row = row_at(g, cursor[i], j_end);
      advance(g, stride, cursor[i]);
      __half* adst = as + t.row * kLdA + 8 * t.vec;
      const int64_t a_idx = dy_index(g, row, m);
      if (a_idx >= 0) {
        copy16<true>(adst, dyh + a_idx);
      } else {
        *reinterpret_cast<uint4*>(adst) = make_uint4(0, 0, 0, 0);
      }
      __half* bdst = bs + t.row * kLdB + 8 * t.vec;
      const int64_t b_idx = x_index(g, row, col);
      if (b_idx >= 0) {
        copy16<true>(bdst, xh + b_idx);
      } else {
        *reinterpret_cast<uint4*>(bdst) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  const int wm = (warp / kWarpsN) * 64, wn = (warp % kWarpsN) * 32;  // this warp's 64 x 32 of the tile
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // The ring, as in rung 4: kStages - 1 steps in flight, one commit group per step (empty groups past
  // the end keep the count right).
  const int steps = (j_end - j_begin + kBK - 1) / kBK;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage(s);
    cp_async_commit();
  }
  for (int t = 0; t < steps; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step t is visible to every warp; every warp is done with step t - 1's buffer
    const int next = t + kStages - 1;
    if (next < steps) load_stage(next % kStages);
    cp_async_commit();

    const __half* as = a_stage(t % kStages);
    const __half* bs = b_stage(t % kStages);
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      // A stored [j][m]: element (m, j) at j * kLdA + m, a col_major matrix_a. B stored [j][n]:
      // element (j, n) at j * kLdB + n, a row_major matrix_b.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> af[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bf[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(af[i], as + ks * kLdA + wm + 16 * i, kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], bs + ks * kLdB + wn + 16 * j, kLdB);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring: it becomes the epilogue's staging tile

  float* Cs = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm + 16 * i) * kLdC + wn + 16 * j, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  // This slice's partial tile, in 16-byte stores along the columns: R*S*C is a multiple of 8, so a
  // 4-column group is wholly inside or wholly past the edge, and every row starts 16-byte aligned.
  const int rsc = g.rsc();
  float* out = partial + static_cast<int64_t>(blockIdx.z) * g.K * rsc;
  constexpr int kGroups = kBN / 4;
  for (int e = threadIdx.x; e < kBM * kGroups; e += kThreads) {
    const int mi = e / kGroups, ni = 4 * (e % kGroups);
    const int row = m0 + mi, c = n0 + ni;
    if (row < g.K && c < rsc) {
      *reinterpret_cast<float4*>(out + static_cast<int64_t>(row) * rsc + c) =
          *reinterpret_cast<const float4*>(Cs + mi * kLdC + ni);
    }
  }
#endif
}

// dw[kcrs_index(i)] = the slices' partials of element i added in slice order (deterministic),
// + beta * dw, rounded once. Reads run along the partials (coalesced); the reordered writes are one
// per weight, a small part of the traffic.
__global__ void conv_nhwc_wgrad_reduce_kernel(ConvArgs a, Problem g, const float* __restrict__ partial, int splits,
                                              int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    float v = 0.0f;
    for (int z = 0; z < splits; ++z) v += partial[z * n + i];
    const int64_t o = kcrs_index(g, i);
    if (a.beta != 0.0f) v += a.beta * load_float(a.dw, a.out_type, o);  // beta == 0: dw is not read
    store_float(a.dw, a.out_type, o, v);
  }
}

// ---- host ------------------------------------------------------------------------------------------------

// The kernel's 68 KiB of dynamic shared memory, allowed once (before any launch or occupancy query).
void opt_in_shared_memory() {
  static std::once_flag opted_in;
  std::call_once(opted_in, [] {
    HL_CUDA_CHECK(
        cudaFuncSetAttribute(conv_nhwc_wgrad_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  });
}

// The blocks of conv_nhwc_wgrad_kernel this GPU holds at once (split_for's slots): its SMs times the
// blocks one SM holds (registers and shared memory decide; two on an H100), asked once.
int64_t slots() {
  static const int64_t n = [] {
    opt_in_shared_memory();
    return blocks_at_once(conv_nhwc_wgrad_kernel, kThreads, kSmemBytes);
  }();
  return n;
}

// Why this call is handed on (nullptr: this rung computes it): hand_off_reason with this GPU.
const char* handed_on(const ConvArgs& a) {
  const int cc = runtime::cuda_compute_capability();  // cached; 0 without a GPU
  if (cc == 0) return hand_off_reason(a, 0, 0, 1);     // no GPU: nothing to ask (the run fails later, clearly)
  // ptxVersion of the code the driver loaded for this GPU, asked once.
  static const int loaded_arch = loaded_ptx_version(conv_nhwc_wgrad_kernel);
  return hand_off_reason(a, cc, loaded_arch, slots());
}

void run(const ConvArgs& a) {
  if (handed_on(a) != nullptr) {
    conv2d(a, "implicit_gemm_nhwc");
    return;
  }
  const Problem g = problem_for(a);
  const Split sp = split_for(g, slots());
  const int64_t x_elems = static_cast<int64_t>(g.N) * g.H * g.W * g.C;
  const int64_t dy_elems = static_cast<int64_t>(g.N) * g.P * g.Q * g.K;
  const int64_t n = static_cast<int64_t>(g.K) * g.rsc();
  opt_in_shared_memory();

  // The copies and the partials live in the workspace, held until every kernel of the call is queued.
  Scratch& ws = conv_detail::workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);
  auto* base = static_cast<unsigned char*>(ws.reserve(static_cast<size_t>(workspace_bytes(g, sp))));
  // dY first: its N*P*Q*K halves keep x's copy 16-byte aligned because K is a multiple of 8.
  __half* dyh = reinterpret_cast<__half*>(base);
  __half* xh = dyh + dy_elems;
  float* partial = reinterpret_cast<float*>(base + copies_bytes(g));
  nhwc::copy_nchw_to_nhwc(static_cast<const __half*>(a.dy), dyh, dy_elems, g.K, g.P, g.Q);
  nhwc::copy_nchw_to_nhwc(static_cast<const __half*>(a.x), xh, x_elems, g.C, g.H, g.W);
  const dim3 grid(static_cast<unsigned>((g.rsc() + kBN - 1) / kBN), static_cast<unsigned>((g.K + kBM - 1) / kBM),
                  static_cast<unsigned>(sp.splits));
  conv_nhwc_wgrad_kernel<<<grid, kThreads, kSmemBytes, stream()>>>(g, sp.slice, dyh, xh, partial);
  HL_LAUNCH_CHECK("conv_nhwc_wgrad_kernel");
  conv_nhwc_wgrad_reduce_kernel<<<grid_for(n), kBlock, 0, stream()>>>(a, g, partial, sp.splits, n);
  HL_LAUNCH_CHECK("conv_nhwc_wgrad_reduce_kernel");
  calls_computed().fetch_add(1, std::memory_order_relaxed);
}

// Every call this rung takes runs here or in rung 4, so rung 4's answer is this rung's (it refuses f32
// inputs and otherwise gives rung 3's conditions), with the f16-only refusal naming this rung.
const char* unsupported(const ConvArgs& a) {
  if (a.in_type != DType::f16) {
    return "implicit_gemm_nhwc_wgrad takes f16 inputs only (FP16 Tensor Core products); direct and im2col_gemm "
           "compute f32 convolutions";
  }
  const auto* rung4 = ConvRegistry::instance().find("implicit_gemm_nhwc", DeviceType::cuda);
  if (rung4 == nullptr) return "implicit_gemm_nhwc, which takes the calls this rung hands on, is not registered";
  return rung4->unsupported(a);
}

}  // namespace

// Priority 41, above rung 4: the default for every pass (it hands forward and backward_data to rung 4).
// Written without a GPU and opt-in until its tests, the sanitizers and conv_bench ran on an H100
// (2026-11-27, bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt): VGG-small's weight
// gradients at batch 128 in 0.2103, 0.1129 and 0.1176 ms on the 64, 128 and 256-channel layers, against
// 0.2955, 0.2720 and 0.3560 for rung 3's kernel, which the default ran before (256->256: 85% of cuDNN).
HL_REGISTER_VARIANT(ConvArgs, {"implicit_gemm_nhwc_wgrad", DeviceType::cuda, 41,
                               "rung 4's NHWC copies and cp.async ring for the weight gradient too: split-K over "
                               "128x128 tiles, a deterministic second pass (other passes run implicit_gemm_nhwc)",
                               run, unsupported});

}  // namespace hl::kernels::cuda
