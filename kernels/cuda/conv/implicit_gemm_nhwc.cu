// Convolution ladder, rung 4: "implicit_gemm_nhwc" — the implicit GEMM with its operands in NHWC order,
// so that the tile loader moves 16-byte vectors with cp.async instead of gathering halves one by one.
//
// What changes from rung 3 (implicit_gemm_wmma): the memory layout the loader reads. On an H200 rung 3
// runs every VGG-small layer at about 30 TFLOP/s (22-54% of cuDNN), and counting its instructions says
// why: in NCHW the reduction index (c, r, s) walks across channel planes, so the 32 values of one
// column of a K step are 32 scattered halves, each found with its own index arithmetic and loaded
// alone (kernels/cuda/conv/README.md, "NCHW vs NHWC"). Here the layer's input is first copied into
// NHWC order (a pass over the input, which the 3x3 kernel then reads 9 times), and the weights into
// [K][R][S][C]; the reduction index becomes (r, s, c) with c fastest, and when C is a multiple of 32 a
// K step of 32 is one filter tap and 32 consecutive channels: for each output position, 64 contiguous
// bytes of the input. A thread's share of a stage is then 2 + 2 cp.async copies of 16 bytes, with one
// bounds test each for the padding (a tap outside the image is a vector of zeros), and the rest of the
// kernel is the GEMM ladder's pipelined rung: a 4-stage cp.async ring (global -> shared overlapped with
// the math), 128 x 128 block tiles of 8 warps of 64 x 32, WMMA FP16 products with FP32 accumulation
// (paper §3.3), and the FP32 result rounded once on the store after a fused epilogue (beta, bias, ReLU
// with NaN passing through) that writes NCHW, the framework's layout.
//
// The passes (implicit_gemm_nhwc.h has the index arithmetic, checked on the CPU by
// tests/kernels/test_conv_nhwc_index.cpp):
//   forward          y = conv(x, w): x copied to NHWC, w to KRSC; any stride and padding.
//   backward_data    stride 1: dx = conv(dy, w flipped and transposed) with padding R-1-ph, S-1-pw:
//                    dy copied to NHWC, w to [C][R][S][K] with the taps reversed; the same kernel.
// The copies take a workspace of N*H*W*C + K*C*R*S halves per call (kernels/cuda/conv/workspace.cuh).
// The input's copy is one thread per element by default; nchw_to_nhwc_tiled_kernel below does it as a
// transpose through shared memory (written 2026-11-28 without a GPU, opt-in until one has run it:
// implicit_gemm_nhwc.h, kTiledLayoutChangeIsDefault).
//
// What it hands on, to rung 3b (implicit_gemm_table) where the tap table takes the call and to rung 3
// (implicit_gemm_wmma) where it does not (by calling kernels::conv2d(.., name), so that a pinned
// --conv implicit_gemm_nhwc still trains a whole network; 3b computes rung 3's bits exactly, and is
// faster on the first layers' forward: LeNet conv1 0.028 vs 0.041 ms, VGG's 3->64 0.043 vs 0.065 ms on
// an H200): backward_weight; backward_data with a stride
// above 1 or a padding past R-1 / S-1; a gathered channel count that is not a multiple of 32 (the first
// layers: C = 1 or 3); GPUs below compute capability 8.0 (cp.async, and the ring's 80 KiB of shared
// memory); tensors too large for its 32-bit per-image sizes, or whose NHWC copies would take more
// than 256 MiB (hand_off_reason in the header decides). What it refuses, as rung 3 does: f32 inputs.
//
// Status: written in a session without a GPU; verified on an H200 on 2026-11-26 (the CUDA tests,
// memcheck, racecheck) and measured there with conv_bench at batch 128
// (bench/results/gpu_short_nvidia_h200_2026-11-26.txt): on VGG-small's 3x3 layers with C >= 64 its
// forward and backward_data run at 91% to 164% of cuDNN, against 28% to 56% for rung 3. It was the
// default f16 convolution from then until rung 4b (implicit_gemm_nhwc_wgrad.cu, priority 41) took its
// place on 2026-11-27; it now computes the forward and stride-1 backward_data passes rung 4b hands on.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv/implicit_gemm_nhwc.h"
#include "kernels/cuda/conv/workspace.cuh"
#include "kernels/cuda/gemm/wmma_tile.cuh"  // copy16, cp_async_commit, cp_async_wait: the GEMM ladder's
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

namespace {

using namespace nhwc;
using gemm_detail::copy16;
using gemm_detail::cp_async_commit;
using gemm_detail::cp_async_wait;

// ---- the layout changes ---------------------------------------------------------------------------------

// dst (NHWC) = src (NCHW [N, C, H, W]), one thread per destination element: the writes are coalesced,
// the reads are strided by H * W. The default until the tiled copy below has run on a GPU.
__global__ void nchw_to_nhwc_kernel(const __half* __restrict__ src, __half* __restrict__ dst, int64_t n, int C, int H,
                                    int W) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) dst[i] = src[nhwc_source(i, C, H, W)];
}

// The same copy as a transpose through shared memory, one 32 x 32 tile of an image per block and step
// of the loop over images (implicit_gemm_nhwc.h, "the tiled layout change", has the why and the
// thread-to-element maps, which tests/kernels/test_conv_nhwc_index.cpp walks on the CPU). Opt-in:
// written without a GPU.
__global__ void __launch_bounds__(kLayoutTile* kLayoutRows)
    nchw_to_nhwc_tiled_kernel(const __half* __restrict__ src, __half* __restrict__ dst, int64_t N, int C, int64_t HW) {
  __shared__ __half tile[kLayoutTile][kLayoutPitch];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t plane = static_cast<int64_t>(C) * HW;  // elements per image, in either layout
  for (int64_t n = blockIdx.z; n < N; n += gridDim.z) {
    const __half* s = src + n * plane;  // [C][HW]
    __half* d = dst + n * plane;        // [HW][C]
#pragma unroll
    for (int k = 0; k < kLayoutSteps; ++k) {
      const LayoutStep e = layout_read(blockIdx.x, blockIdx.y, tx, ty, k);
      if (e.c < C && e.p < HW) tile[e.row][e.col] = s[static_cast<int64_t>(e.c) * HW + e.p];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kLayoutSteps; ++k) {
      const LayoutStep e = layout_write(blockIdx.x, blockIdx.y, tx, ty, k);
      if (e.c < C && e.p < HW) d[e.p * C + e.c] = tile[e.row][e.col];
    }
    __syncthreads();  // every warp has read the tile before the next image overwrites it
  }
}

template <bool kBackwardData>
__global__ void weights_to_krsc_kernel(const __half* __restrict__ w, __half* __restrict__ wt, int64_t n, Problem g) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count())
    wt[i] = w[weight_source<kBackwardData>(i, g)];
}

// ---- the implicit GEMM ----------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    conv_nhwc_kernel(ConvArgs a, Problem g, const __half* __restrict__ in, const __half* __restrict__ wt, void* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* const ring = reinterpret_cast<__half*>(smem);
  const auto a_stage = [&](int s) { return ring + s * kStageElems; };            // [kBM][kLdA]
  const auto b_stage = [&](int s) { return ring + s * kStageElems + kBM * kLdA; };  // [kBN][kLdB]

  const int warp = threadIdx.x / 32;
  const int m0 = blockIdx.y * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;

  // This thread's B columns (output positions), decomposed once.
  Column cols[kBVecs];
#pragma unroll
  for (int j = 0; j < kBVecs; ++j) cols[j] = make_column(g, n0 + tile_vec(threadIdx.x, j).row);

  // One stage: the A tile (weights of kBM output channels) and the B tile (kBN positions' gathered
  // inputs) of the K step starting at k0, 16 bytes per copy, zeros where there is nothing to read.
  const auto load_stage = [&](int s, int k0) {
    __half* as = a_stage(s);
    __half* bs = b_stage(s);
#pragma unroll
    for (int j = 0; j < kAVecs; ++j) {
      const TileVec t = tile_vec(threadIdx.x, j);
      __half* dst = as + t.row * kLdA + 8 * t.vec;
      const int64_t idx = weight_index(g, m0 + t.row, k0, t.vec);
      if (idx >= 0) {
        copy16<true>(dst, wt + idx);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    const Step st = make_step(g, k0);
#pragma unroll
    for (int j = 0; j < kBVecs; ++j) {
      const TileVec t = tile_vec(threadIdx.x, j);
      __half* dst = bs + t.row * kLdB + 8 * t.vec;
      const int64_t idx = gather_index(g, cols[j], st, t.vec);
      if (idx >= 0) {
        copy16<true>(dst, in + idx);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  const int wm = (warp / kWarpsN) * 64, wn = (warp % kWarpsN) * 32;  // this warp's 64 x 32 of the tile
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // The ring, as in the GEMM ladder's wmma_pipelined: kStages - 1 steps in flight, one commit group per
  // step (empty groups past the end keep the count right).
  const int steps = g.kred() / kBK;  // C is a multiple of kBK (unsupported_here)
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage(s, s * kBK);
    cp_async_commit();
  }
  for (int t = 0; t < steps; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step t is visible to every warp; every warp is done with step t - 1's buffer
    const int next = t + kStages - 1;
    if (next < steps) load_stage(next % kStages, next * kBK);
    cp_async_commit();

    const __half* as = a_stage(t % kStages);
    const __half* bs = b_stage(t % kStages);
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      // A stored [m][k]: row_major. B stored [n][k] (each position's channels contiguous): element
      // (k, n) at n * kLdB + k, which is what a col_major matrix_b fragment reads.
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> af[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(af[i], as + (wm + 16 * i) * kLdA + ks, kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], bs + (wn + 16 * j) * kLdB + ks, kLdB);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring: it becomes the epilogue's staging tile

  // Epilogue: accumulators -> an FP32 tile in shared memory, then thread t keeps column t % kBN (one
  // output position, whose NCHW place is computed once) and walks rows t / kBN, + 2, ...: consecutive
  // threads write consecutive positions of one channel plane.
  float* Cs = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm + 16 * i) * kLdC + wn + 16 * j, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  static_assert(kThreads % kBN == 0, "each thread keeps one column in the epilogue");
  const int ni = threadIdx.x % kBN;
  const Column col = make_column(g, n0 + ni);
  if (!col.ok) return;
  for (int mi = threadIdx.x / kBN; mi < kBM; mi += kThreads / kBN) {
    const int m = m0 + mi;
    if (m >= g.M) break;
    const int64_t idx = output_index(g, col, m);
    float v = Cs[mi * kLdC + ni];
    if (a.beta != 0.0f) v += a.beta * load_float(out, a.out_type, idx);  // beta == 0: out is not read
    if (a.bias != nullptr) v += load_float(a.bias, a.bias_type, m);
    if (a.relu) v = v > 0.0f || v != v ? v : 0.0f;  // NaN stays NaN: an overflow must stay visible
    store_float(out, a.out_type, idx, v);
  }
#endif
}

// ---- host ------------------------------------------------------------------------------------------------

// Why this call is handed on (nullptr: this rung computes it): hand_off_reason with this GPU.
const char* handed_on(const ConvArgs& a) {
  const int cc = runtime::cuda_compute_capability();  // cached; 0 without a GPU
  // ptxVersion of the code the driver loaded for this GPU (0 when unknown), asked once.
  static const int loaded_arch = cc != 0 ? loaded_ptx_version(conv_nhwc_kernel) : 0;
  return hand_off_reason(a, cc, loaded_arch);
}

// Where a handed-on call goes: rung 3b when its tap table takes the call (the same bits as rung 3,
// sooner), else rung 3, whose conditions are this rung's (unsupported below).
const char* hand_on_to(const ConvArgs& a) {
  const auto* table = ConvRegistry::instance().find("implicit_gemm_table", DeviceType::cuda);
  const bool table_takes = table != nullptr && (table->unsupported == nullptr || table->unsupported(a) == nullptr);
  return table_takes ? "implicit_gemm_table" : "implicit_gemm_wmma";
}

void run(const ConvArgs& a) {
  if (handed_on(a) != nullptr) {
    conv2d(a, hand_on_to(a));
    return;
  }
  const bool bwd = a.pass == ConvPass::backward_data;
  const Problem g = problem_for(a);
  const int64_t in_elems = static_cast<int64_t>(g.N) * g.H * g.W * g.C;
  const int64_t w_elems = static_cast<int64_t>(g.M) * g.kred();

  static std::once_flag opted_in;  // 80 KiB of dynamic shared memory: allowed once
  std::call_once(opted_in, [] {
    HL_CUDA_CHECK(cudaFuncSetAttribute(conv_nhwc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  });

  // The NHWC copies live in the workspace, held until every kernel of the call is queued.
  Scratch& ws = conv_detail::workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);
  // The weights first: in_elems * 2 bytes keeps the input copy 16-byte aligned after them only if
  // w_elems is a multiple of 8, which C % 32 == 0 guarantees (kred = R * S * C).
  __half* wt = static_cast<__half*>(ws.reserve(static_cast<size_t>(w_elems + in_elems) * sizeof(__half)));
  __half* in = wt + w_elems;
  const __half* src = static_cast<const __half*>(bwd ? a.dy : a.x);
  nhwc::copy_nchw_to_nhwc(src, in, in_elems, g.C, g.H, g.W);
  if (bwd) {
    weights_to_krsc_kernel<true><<<grid_for(w_elems), kBlock, 0, stream()>>>(static_cast<const __half*>(a.w), wt,
                                                                             w_elems, g);
  } else {
    weights_to_krsc_kernel<false><<<grid_for(w_elems), kBlock, 0, stream()>>>(static_cast<const __half*>(a.w), wt,
                                                                              w_elems, g);
  }
  HL_LAUNCH_CHECK("weights_to_krsc_kernel");
  const dim3 grid(static_cast<unsigned>((g.cols() + kBN - 1) / kBN), static_cast<unsigned>((g.M + kBM - 1) / kBM));
  conv_nhwc_kernel<<<grid, kThreads, kSmemBytes, stream()>>>(a, g, in, wt, bwd ? a.dx : a.y);
  HL_LAUNCH_CHECK("conv_nhwc_kernel");
  calls_computed().fetch_add(1, std::memory_order_relaxed);
}

// Every call this rung takes runs here, in implicit_gemm_table or in implicit_gemm_wmma. Rung 3's
// conditions (f16 or f32 output and bias, compute capability 7.0, 32-bit per-image sizes) include
// those of the calls it runs itself, and rung 3b is asked only for calls it takes: so rung 3's answer
// is this rung's, except that the f16-only refusal names this rung.
const char* unsupported(const ConvArgs& a) {
  if (a.in_type != DType::f16) {
    return "implicit_gemm_nhwc takes f16 inputs only (FP16 Tensor Core products); direct and im2col_gemm compute "
           "f32 convolutions";
  }
  const auto* rung3 = ConvRegistry::instance().find("implicit_gemm_wmma", DeviceType::cuda);
  if (rung3 == nullptr) return "implicit_gemm_wmma, which takes the calls this rung hands on, is not registered";
  return rung3->unsupported(a);
}

}  // namespace

// The layout change on its own, for rung 4b (implicit_gemm_nhwc_wgrad.cu), which copies x and dY with it:
// tiled when chosen (tiled_layout_change_chosen) and the tiles fit a grid, else one thread per element.
void nhwc::copy_nchw_to_nhwc(const __half* src, __half* dst, int64_t n, int C, int H, int W) {
  const int64_t HW = static_cast<int64_t>(H) * W, N = n / (static_cast<int64_t>(C) * HW);
  const LayoutGrid t = layout_grid(N, C, HW);
  if (tiled_layout_change_chosen() && t.x > 0) {
    const dim3 grid(static_cast<unsigned>(t.x), static_cast<unsigned>(t.y), static_cast<unsigned>(t.z));
    nchw_to_nhwc_tiled_kernel<<<grid, dim3(kLayoutTile, kLayoutRows), 0, stream()>>>(src, dst, N, C, HW);
    HL_LAUNCH_CHECK("nchw_to_nhwc_tiled_kernel");
    return;
  }
  nchw_to_nhwc_kernel<<<grid_for(n), kBlock, 0, stream()>>>(src, dst, n, C, H, W);
  HL_LAUNCH_CHECK("nchw_to_nhwc_kernel");
}

// Priority 40, above rungs 3b and 3, below rung 4b (41), which hands it forward and stride-1 backward_data.
HL_REGISTER_VARIANT(ConvArgs, {"implicit_gemm_nhwc", DeviceType::cuda, 40,
                               "implicit GEMM over NHWC copies of the operands: 16-byte cp.async gathers, a 4-stage "
                               "ring, 128x128 tiles (backward_weight and C % 32 != 0 run implicit_gemm_table or "
                               "implicit_gemm_wmma)",
                               run, unsupported});

}  // namespace hl::kernels::cuda
