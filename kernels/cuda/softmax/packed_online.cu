// Softmax ladder, rung 2h: "packed_online" — packed_row with each thread's statistics taken before the
// block meets, so that the first exp() of every element runs while the rest of the row is still arriving.
//
// What changes from `packed_row` (same plan, same FP16 packs in the same registers, same capacity):
//  1. Where the exponentials of the sum run. packed_row reduces the block's maximum first, a barrier that
//     every warp waits at until the last pack of the row has arrived, and only then runs its first exp()
//     per element: the SFU work (65536 exp() on one SM, about 2 us on an H100) comes after the whole
//     read. Here each thread reduces its own packs to an online pair (Milakov & Gimelshein 2018, the
//     `online` rung's MaxSum): its maximum m_t and s_t = sum(exp(x - m_t)), which it can compute as soon
//     as its own packs are in. Warps whose packs arrive early work while later packs are still on their
//     way, and the block merges the 1024 pairs once (BlockGroup::merge: one barrier-separated reduction
//     where packed_row has two).
//  2. How exp() is computed. packed_row's expf() is about eight instructions (an accurate range
//     reduction around one MUFU.EX2); with two per element, Nsight Compute counted 34 instructions per
//     element at 128x65536 (bench/results/gpu_ncu_nvidia_h100_80gb_hbm3_2026-11-27.txt). Here
//     exp(d) = __expf(d) after the subtraction d = x - m: a multiply by log2(e) and the MUFU.EX2, for
//     the sums and for FP16 outputs. Subnormal results flush to zero, which neither use can see: a sum
//     holds its thread's maximum's exp(0) = 1, and an FP16 output below 2^-126 rounds to 0 anyway. FP32
//     outputs keep expf() for their second exp(), because their subnormals are results the tests check.
//  3. The local maximum is taken on the FP16 pairs (max.f16x2, NaN ignored as fmaxf does) before any
//     value is widened: half the instructions of a maximum taken in FP32.
//  4. Softmax and log-softmax are two kernels (a template flag), not a branch per pack.
//
// Error budget (the tests' bound, tests/kernels/softmax_reference.h, allows 4u|x - max| + (3 chain +
// 20)u in a log-probability, u = 2^-24): d = x - m rounds by at most u|d|, and __expf(d) is within
// 2 + floor(1.173|d|) ulp (CUDA C Programming Guide, intrinsic functions), at most (4 + 2.35|d|)u; so
// each exponential is within 3.35u|d| + 4u, inside the bound's 4u|x - max| + 20u (|x - m_t| <= |x - M|:
// a thread's maximum is at most the row's). The merge's expf(m_t - M) adds 2 ulp and u|m_t - M| to a
// thread's share. A sum's relative error is its terms' errors averaged with the terms as weights, inside
// the bound's chain term, as for the rungs that use expf(). Paper §3.3: every value is widened to FP32
// where it is used, the maximum is exact in FP16, sums and normalization are FP32, and the result is
// rounded once, on the store.
//
// Why: issue #6's last shape short of 80% of the copy bandwidth is 128x65536 (packed_row 62% on an H100,
// 15.11 us against the copy's 9.31). One row per SM, so nothing hides one block's phases behind another
// block's. Prediction, to be measured (written 2026-11-27 without a GPU, so opt-in until its tests,
// compute-sanitizer and softmax_bench have run on one): the read and the first exp() overlap, the
// instructions per element fall (PTX of the 65536-column FP16 softmax kernel, moves left out: 18 per
// element against packed_row's 30), and 128x65536 reaches 80% of the copy (11.6 us on that H100). If it
// does not, the SFU is the next suspect: two MUFU.EX2 per element are 8192 cycles of one SM's SFUs per
// 65536-column row, about 4.2 us, which only overlap with the memory traffic hides.
//
// FP16 input rows of whole 16-byte packs in aligned buffers only, forward softmax and log-softmax only
// (what packed_row takes); the rest is declined with the reason (packed_block_unsupported,
// register_row.cuh).
#include <cuda_fp16.h>

#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row::packed;  // packed_row's plan: the same threads and packs

constexpr int N = plan_ns::kWidth;  // FP16 values per 16-byte pack

// exp(d) for d <= 0: __expf, a multiply by log2(e) and the SFU's exp2 (the header's points 2 and error
// budget).
__device__ __forceinline__ float exp_fast(float d) { return __expf(d); }

// The largest value of the thread's owned packs, NaN ignored as fmaxf ignores it (__hmax2: "if either
// of inputs is NaN, the other input is returned", cuda_fp16.h; one max.f16x2 per two values from
// sm_80); -inf when the thread owns nothing or sees only -inf.
template <int P>
__device__ __forceinline__ float packs_max(const Pack<__half, N> (&raw)[P], int owned) {
  __half2 m2 = __half2half2(__ushort_as_half(0xFC00u));  // -inf in both halves
#pragma unroll
  for (int i = 0; i < P; ++i)
#pragma unroll
    for (int k = 0; k < N; k += 2)
      if (i < owned) m2 = __hmax2(m2, __halves2half2(raw[i].v[k], raw[i].v[k + 1]));
  return fmaxf(__low2float(m2), __high2float(m2));
}

// The row body: packed_row's loads and stores, with the thread's online pair taken before the block's.
template <int P, bool LOG, class TY>
__device__ __forceinline__ void packed_online_row(const BlockGroup& g, const __half* xr, TY* yr, int owned) {
  Pack<__half, N> raw[P];
  load_packs<P, N>(xr, g.rank(), g.size(), owned, raw);
  // This thread's pair. A thread whose values are all -inf (a masked share, or none owned) has m_t =
  // -inf and sums against 0 instead, so its -inf entries give exp(-inf) = 0, not exp(-inf - -inf) =
  // NaN; a NaN entry still makes the sum NaN (the convention of finish_stats), and a +inf one makes
  // x - m_t NaN for itself, and the row's maximum +inf, which finish_stats turns into NaN statistics.
  const float m_t = packs_max<P>(raw, owned);
  const float base = m_t == -INFINITY ? 0.0f : m_t;
  float s_t = 0.0f;
#pragma unroll
  for (int i = 0; i < P; ++i)
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (i < owned) s_t += exp_fast(to_f32(raw[i].v[k]) - base);
  // The block's pair: each thread's sum rescaled to the row's maximum (online_merge: a share that saw
  // only -inf has s_t = 0 and adds nothing).
  const MaxSum row = g.merge(MaxSum{m_t, s_t});
  const RowStats st = finish_stats(row.m, row.d);
  const float inv = isnan(st.log_sum) ? NAN : 1.0f / row.d;
  store_from_packs<P>(yr, g.rank(), g.size(), owned, raw, [&](float x) {
    if constexpr (LOG) {
      return log_prob(x, st);
    } else if constexpr (std::is_same_v<TY, __half>) {
      return exp_fast(x - row.m) * inv;  // the second exp(), for an FP16 output
    } else {
      return expf(x - row.m) * inv;  // FP32 output: expf's subnormals (the header, point 2)
    }
  });
}

// One block per row (rows step by the grid); P packs of 8 FP16 values per thread.
template <int P, bool LOG, class TY>
__global__ void __launch_bounds__(plan_ns::kMaxThreads)
    packed_online_forward_kernel(int64_t rows, int cols, const __half* x, TY* y) {
  const BlockGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) packed_online_row<P, LOG>(g, x + r * cols, y + r * cols, owned);
}

void run(const SoftmaxArgs& a) {
  const register_row::Plan p = plan_ns::plan(a.cols, path_width(a));
  HL_CHECK(p.threads > 0, "packed_online: no plan for ", a.describe());  // unsupported() rules this out
  const __half* x = static_cast<const __half*>(a.x);
  const unsigned grid = grid_of(a.rows);
  const int cols = static_cast<int>(a.cols);
  const bool log = a.op == SoftmaxOp::log_softmax;
  with_type(a.y_type, [&](auto ty) {
    using TY = decltype(ty);
    with_per_thread<plan_ns::compiled_for, N>("packed_online", p.per_thread, [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      TY* y = static_cast<TY*>(a.y);
      if (log) {
        packed_online_forward_kernel<P, true, TY><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x, y);
      } else {
        packed_online_forward_kernel<P, false, TY><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x, y);
      }
      HL_LAUNCH_CHECK("packed_online_forward_kernel");
    });
  });
}

}  // namespace

// opt_in: written without a GPU (2026-11-27); not yet run on one (docs/gpu_status.md). Promote it
// (clear opt_in, put it before packed_row in kernels/softmax.cpp's chooser) only for the shapes where its
// tests, compute-sanitizer and bench/softmax_bench have shown it right and faster.
HL_REGISTER_VARIANT(SoftmaxArgs, {"packed_online", DeviceType::cuda, 32,
                                  "packed_row with each thread's (max, sum) pair taken before the block's "
                                  "reduction (the sum's exp() overlaps the read), __expf for the sums and FP16 results",
                                  run, packed_block_unsupported, /*opt_in=*/true});

}  // namespace hl::kernels::cuda
