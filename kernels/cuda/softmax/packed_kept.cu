// Softmax ladder, rung 2i: "packed_kept" — packed_online with every exponential computed once and kept,
// in FP32, for the probabilities: half of the SFU's work, and far fewer instructions after the read. Paper §3.3: the exponentials, sums and normalization in FP32, the FP16 result rounded once.
//
// What changes from `packed_online` (same plan, same FP16 packs, same fold as the packs arrive):
//  1. The exponentials are kept. packed_online computes 2^(x log2e - h) twice per element: once for the
//     sum, once for the output. Nsight Compute on an H100 put it at 18.7 instructions per element, and
//     the SFU (MUFU.EX2, 16 results per clock per SM) then needs 8192 clocks per SM for a 65536-column
//     row, 4.1 us at 1.98 GHz, half of it after the row's last pack has arrived, where the SM has no
//     other row to work on (128x65536: one row per SM). Here the sum's exponentials are the output's:
//     each pack's 8 FP32 values go to shared memory (packs 0 .. P - 2: 224 KiB for a 65536-column row
//     in 1024 threads, 112 KiB for 32768 columns in 512), and the output is one multiply per element
//     (no EX2, no widening, no multiply-add). Only the last pack's exponentials are computed again,
//     from its FP16 values: registers are what runs out (kept_frames.h, kept_shared).
//  2. The frames are whole numbers. A kept exponential is relative to the frame its pack was
//     folded in, and the thread's frame moves when its maximum rises. With packed_online's shift h =
//     fl(m log2e), moving a kept value to another frame would cost a rounding and an exp2 per pack;
//     here the frame is the integer h = ceil(fl(m log2e)), so every change of frame is 2^(h - h'), an
//     exact power of two built from its bits (exp2_int), and the block merges the threads' (h, sum)
//     pairs with exact factors too (merge_frames). Each pack records how many frames it lies behind its
//     thread's (Lags, a byte per pack); its probabilities are kept * 2^(its frame - H) / S, for the
//     row's frame H and sum S.
//     The maximum element's exponential is 2^(M log2e - H), in (1/2, 2^(2^-8)]: the sums cannot overflow,
//     and no correction of the frame (packed_online's 2^-lo) is needed, since nothing is rounded in it.
//  3. FP16 probabilities only: log-softmax needs x, not its exponential (packed_online writes it), and
//     FP32 outputs keep subnormal results that the flushed EX2 and exp2_int do not (packed_online's
//     header, point 3). Both are declined with the reason.
//
// The cost: 32 bytes of shared memory written and read per thread per pack kept there (7 of 8 packs),
// which the LSU moves at 128 bytes per clock per SM: 1792 clocks per SM for the 65536-column row on
// the read's side (the stores overlap the read) and as many on the write's, against 3584 clocks of EX2
// saved on the write's side. And the shared memory decides the blocks per SM: one 65536-column row per
// SM, as before; two 32768-column rows per SM, as before.
//
// Error budget (the tests' bound, tests/kernels/softmax_reference.h): a term's exponent t = fl(x log2e -
// h) is off by at most u|t| with |t| <= (m - x) log2e + 1, MUFU.EX2 within 2 ulp; every change of frame
// and the merge's factors are exact; the sum S is a chain of FP32 additions, each off by at most u of the
// running sum (the tests' `chain` term); an output adds the rounding of 1/S and of the product (half an
// ulp each) before the FP16 rounding. So each probability is within (|x - M| log2e + 1) u + 3 ulp of FP32,
// plus S's relative error, before it is rounded to FP16, inside packed_online's budget.
//
// Status: written 2026-11-28 without a GPU; opt-in (kernels/registry.h) until its tests, compute-
// sanitizer and softmax_bench have run on one. The prediction: 128x65536 nearer the copy than
// packed_online's 13.09 us (70%), if the EX2s after the read are what holds it; no faster if the read
// and the write themselves are (kernels/cuda/softmax/README.md, step 12).
#include <cuda_fp16.h>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/softmax/kept_frames.h"
#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row::packed;  // packed_row's plan: the same threads and packs
namespace kf = kept_frames;

constexpr int N = plan_ns::kWidth;  // FP16 values per 16-byte pack

using kf::kept_shared;
using kf::shared_bytes;
using kf::stride_for;

// The threads' pairs (kept_frames.h's FrameSum) merged: in a warp by shuffles, then the warps' results in
// warp 0 (BlockGroup::merge's shape), with kept_frames.h's exact combine.
__device__ __forceinline__ kf::FrameSum warp_combine(kf::FrameSum f) {
  for (int offset = 16; offset > 0; offset /= 2)
    f = kf::combine(f, {__shfl_xor_sync(0xFFFFFFFFu, f.h, offset), __shfl_xor_sync(0xFFFFFFFFu, f.s, offset)});
  return f;
}

__device__ __forceinline__ kf::FrameSum merge_frames(kf::FrameSum f) {
  __shared__ float sh[32], ss[32];
  static_assert(sizeof(sh) + sizeof(ss) == kf::kMergeBytes, "kept_frames.h counts this shared memory");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  f = warp_combine(f);
  __syncthreads();  // the previous row's use of sh/ss is over
  if (lane == 0) {
    sh[warp] = f.h;
    ss[warp] = f.s;
  }
  __syncthreads();
  if (warp == 0) {
    f = lane < warps ? kf::FrameSum{sh[lane], ss[lane]} : kf::FrameSum{-INFINITY, 0.0f};
    f = warp_combine(f);
    if (lane == 0) {
      sh[0] = f.h;
      ss[0] = f.s;
    }
  }
  __syncthreads();
  return {sh[0], ss[0]};
}

// The row body. kept: this thread's first kept float4 in the block's shared memory (stride_for).
template <int P, int STRIDE>
__device__ __forceinline__ void packed_kept_row(const BlockGroup& g, const __half* xr, __half* yr, int owned,
                                                float4* kept) {
  constexpr int KS = kept_shared(P);
  const int t = g.rank(), T = g.size();
  Pack<__half, N> raw[P];
  load_packs<P, N>(xr, t, T, owned, raw);
  static_assert(P <= kf::Lags::kPacks, "Lags holds 8 packs");
  kf::Fold f;  // the thread's (m, h, s) and how far each pack's frame lies behind h
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (i < owned) {
      f.enter(i, pack_max(raw[i]));
      float e[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        e[k] = ex2_ftz(fmaf(to_f32(raw[i].v[k]), kLog2e, -f.h));  // a NaN x poisons s
        f.s += e[k];
      }
      if constexpr (KS > 0) {
        if (i < KS) {
          kept[(2 * i) * STRIDE] = make_float4(e[0], e[1], e[2], e[3]);
          kept[(2 * i + 1) * STRIDE] = make_float4(e[4], e[5], e[6], e[7]);
        }
      }
    }
  }
  const kf::FrameSum row = merge_frames(f.pair());
  // No finite maximum (all -inf, or a +inf) makes the row NaN (finish_stats' convention); a NaN entry
  // already made the sum NaN.
  const float inv = isfinite(row.h) ? 1.0f / row.s : NAN;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (i < owned) {
      const float c = f.factor(i, row.h, inv);
      float e[N];
      if (i < KS) {
        const float4 lo = kept[(2 * i) * STRIDE], hi = kept[(2 * i + 1) * STRIDE];
        e[0] = lo.x, e[1] = lo.y, e[2] = lo.z, e[3] = lo.w, e[4] = hi.x, e[5] = hi.y, e[6] = hi.z, e[7] = hi.w;
      } else {  // the last pack, still in its registers: the same exponentials again, in its frame h
#pragma unroll
        for (int k = 0; k < N; ++k) e[k] = ex2_ftz(fmaf(to_f32(raw[i].v[k]), kLog2e, -f.h));
      }
      Pack<__half, N> q;
#pragma unroll
      for (int k = 0; k < N; ++k) q.v[k] = from_f32<__half>(e[k] * c);
      *reinterpret_cast<Pack<__half, N>*>(yr + (t + i * T) * N) = q;
    }
  }
}

// One block per row (rows step by the grid); P packs of 8 FP16 values per thread. Each thread reads back
// only the shared memory it wrote, so one row's use of it needs no barrier against the next row's.
template <int P, int STRIDE>
__global__ void __launch_bounds__(plan_ns::kMaxThreads)
    packed_kept_kernel(int64_t rows, int cols, const __half* x, __half* y) {
  extern __shared__ float4 kept[];
  const BlockGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    packed_kept_row<P, STRIDE>(g, x + r * cols, y + r * cols, owned, kept + g.rank());
}

const char* unsupported(const SoftmaxArgs& a) {
  if (const char* why = packed_block_unsupported(a)) return why;
  if (a.op != SoftmaxOp::softmax)
    return "this rung keeps the exponentials for the probabilities: softmax only (log-softmax: packed_online)";
  if (a.y_type != DType::f16) return "this rung writes FP16 probabilities (FP32 outputs: packed_online)";
  const register_row::Plan p = plan_ns::plan(a.cols, path_width(a));
  const int limit = runtime::cuda_max_shared_memory_per_block();  // 0: no GPU to ask, and none to run on
  if (a.cols > 0 && limit > 0 && kf::block_shared_bytes(p.threads, p.per_thread) > limit)
    return "this rung keeps a row's exponentials in shared memory: this row needs more than this GPU allows a "
           "block (packed_online keeps none)";
  return nullptr;
}

void run(const SoftmaxArgs& a) {
  const register_row::Plan p = plan_ns::plan(a.cols, path_width(a));
  HL_CHECK(p.threads > 0, "packed_kept: no plan for ", a.describe());  // unsupported() rules this out
  const __half* x = static_cast<const __half*>(a.x);
  __half* y = static_cast<__half*>(a.y);
  const int cols = static_cast<int>(a.cols);
  with_per_thread<plan_ns::compiled_for, N>("packed_kept", p.per_thread, [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    const auto launch = [&](auto stride) {
      constexpr int STRIDE = decltype(stride)::value;
      const auto kernel = packed_kept_kernel<P, STRIDE>;
      const int64_t bytes = shared_bytes(p.threads, P);  // dynamic: the kept values
      const int limit = runtime::cuda_max_shared_memory_per_block();
      HL_CHECK(kf::block_shared_bytes(p.threads, P) <= limit, "packed_kept: ", a.describe(), " needs ",
               kf::block_shared_bytes(p.threads, P), " bytes of shared memory per block (", bytes,
               " for the kept values, ", kf::kMergeBytes, " for the merge); this GPU allows ", limit);
      // More than 48 KiB must be allowed explicitly, once per kernel (its stride fixes its bytes).
      static std::once_flag opted_in;
      std::call_once(opted_in, [&] {
        HL_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      });
      kernel<<<grid_of(a.rows), p.threads, static_cast<size_t>(bytes), stream()>>>(a.rows, cols, x, y);
      HL_LAUNCH_CHECK("packed_kept_kernel");
    };
    switch (stride_for(p.threads)) {
      case 256: launch(std::integral_constant<int, 256>{}); break;
      case 512: launch(std::integral_constant<int, 512>{}); break;
      default: launch(std::integral_constant<int, 1024>{}); break;
    }
  });
}

}  // namespace

// Opt-in: written without a GPU (2026-11-28); the tests and softmax_bench run it by name.
HL_REGISTER_VARIANT(SoftmaxArgs, {"packed_kept", DeviceType::cuda, 31,
                                  "packed_online with each exponential computed once and kept in FP32 in shared "
                                  "memory for the FP16 probabilities (the last pack's recomputed); whole-number "
                                  "base-2 frames",
                                  run, unsupported, /*opt_in=*/true});

}  // namespace hl::kernels::cuda
