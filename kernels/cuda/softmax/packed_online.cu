// Softmax ladder, rung 2h: "packed_online" — packed_row with each thread's statistics folded pack by
// pack as its packs arrive, in base 2, so that the exponentials of the sum run while the rest of the row
// is still on its way, with about half of packed_row's instructions per element (Nsight Compute on an
// H100: 18.7 against 34).
//
// What changes from `packed_row` (same plan, same FP16 packs in the same registers, same capacity):
//  1. Where the sum's exponentials run. packed_row reduces the block's maximum first, a barrier that
//     every warp waits at until the last pack of the row has arrived, and only then runs its first
//     exp() per element. Here each thread keeps an online pair (Milakov & Gimelshein 2018, the `online`
//     rung's idea) and folds each of its packs in as soon as that pack is in: a pack that raises the
//     thread's maximum rescales the running sum once (one exponential per pack, not per element). A
//     thread's packs lie across the whole row (pack i of thread t is pack t + i * threads) and are asked
//     for in order, so the first ones arrive while later ones are still in flight. The block merges the
//     pairs once (BlockGroup::merge).
//  2. Exponentials in base 2, against a shift h that is itself a rounded number. exp(x - m) is
//     2^(x log2e - m log2e). With h = fl(m log2e) (rounded once, by __fmul_rn, so that the compiler
//     cannot fuse it into a later operation), every term is 2^fl(x log2e - h): one fused multiply-add
//     and one MUFU.EX2, where packed_row's expf(x - m) is a subtraction and an accurate range reduction
//     around the MUFU. h is not m log2e: it differs by lo = m log2e - h, which fmaf(m, log2e, -h) gives
//     exactly, and which multiplies every term of the thread by the same 2^lo. A rescale from h to h'
//     is exactly 2^(h - h'), so the pair stays consistent; before the merge the thread's sum is
//     multiplied by 2^-lo, which brings it back to sum(exp(x - m)), and the block merges the pairs with
//     the online rung's own merge (expf). Outputs: 2^fl(x log2e - H) * (2^-lo_H / S), H = fl(M log2e)
//     for the row's maximum M and sum S. (Folding m into the multiply-add without lo, as a fast softmax
//     may, would be off by up to 0.4% for logits near FP16's 65504: lo is up to u |m log2e|.)
//  3. The SFU's exp2 with subnormal results flushed (ex2.approx.ftz.f32) for the sums and FP16 outputs.
//     Without -ftz, CUDA's exp2 wraps each MUFU.EX2 in a test and two multiplies that keep subnormal
//     results, three instructions per exponential that neither use can see: a sum holds its maximum's
//     2^0 = 1, so a term below 2^-126 is below its last bit, and an FP16 output below 2^-126 rounds to 0.
//     FP32 outputs keep them (exp2f: the same MUFU with the subnormal handling), because a subnormal FP32
//     probability is a result the tests check.
//  4. The local maximum is taken on the FP16 pairs (max.f16x2, NaN ignored as fmaxf does) before any
//     value is widened: half the instructions of a maximum taken in FP32.
//  5. Softmax and log-softmax are two kernels (a template flag), not a branch per pack.
//
// Measured, and why it changed (H100, 2026-11-27): the first version of this rung took each thread's
// maximum over all its packs before its first exponential (so it too waited for the thread's last pack)
// and used __expf(x - m). It gave 128x65536 in 14.85 us against packed_row's 15.29 (63% of the copy's
// 9.43 us; bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27_seventh.txt). Nsight Compute
// (gpu_ncu_packed_online_nvidia_h100_80gb_hbm3_2026-11-27.txt): 7.33 million warp instructions for 8.39
// million elements, 28 per element; the SMs issued in 39% of their cycles, and 38% of each warp's
// stalls were waits for loads: one row per SM, so nothing hides the instructions that follow the read.
// By the PTX (nvcc -O3 -ptx, sm_90, moves left out), the 65536-column FP16 softmax kernel has 19.6
// instructions per element in this version against 21.4 in the first; the difference that counts is
// in the machine code, where each of the first version's 128 exponentials was ex2.approx.f32 without
// ftz (FSETP and two predicated FMULs around the MUFU.EX2) and each of this one's is ex2.approx.ftz.f32:
// per element HADD2.F32, FFMA, MUFU.EX2 and FADD for the sum, and HADD2.F32, FFMA, MUFU.EX2, FMUL and
// half an F2FP pack for an FP16 output (scripts/sass.sh with a disassembler).
// This version on the same H100 model (commit 52b2024, gpu_short_…_seventh_b.txt): 128x65536 in 13.09 us
// (70% of the copy) against packed_row's 15.04, 1024x32768 in 50.41 us (95%) against 53.88; Nsight
// Compute (gpu_ncu_packed_online_v2_…): 18.7 instructions per element, issue slots 29% busy, and 46%
// of each warp's stalls waiting for loads. The read of one row per SM is what remains
// (kernels/cuda/softmax/README.md, step 11).
//
// Error budget (the tests' bound, tests/kernels/softmax_reference.h, allows 4u|x - max| + (3 chain +
// 20)u in a log-probability, u = 2^-24). A term's exponent t = fl(x log2e - h) is off by at most u|t|
// (one rounding of the multiply-add), a relative error of u|t| ln 2 = u|x - m| + u|lo| ln 2 in the term,
// and |lo| ln 2 <= 2^-24 |m| < 0.004 for FP16 logits, so that part is below 1 ulp of the term; MUFU.EX2
// is within 2 ulp (PTX ISA, ex2.approx). A rescale factor 2^(h - h') adds 2 ulp and u|m - m'|; along a
// thread's packs those add up to at most u|x - m_t| and 2 ulp per rescale (at most 7), and 2^-lo adds 2
// ulp more: each term within 2u|x - M| + 20u, inside the bound's 4u|x - max| + 20u. The merge's
// expf(m_t - M) adds 2 ulp and u|m_t - M| to a thread's share. A sum's relative error is its terms'
// errors averaged with the terms as weights, inside the bound's chain term, as for the rungs that use
// expf(). An output adds its own exponent's u|x - M|, 2 ulp of EX2, 2 ulp of 2^-lo_H, and the division
// and the product (half an ulp each). Paper §3.3: every value is widened to FP32 where it is used, the
// maximum is exact in FP16, sums and normalization are FP32, and the result is rounded once, on the store.
//
// Why: issue #6's last shape short of 80% of the copy bandwidth is 128x65536 (packed_row 62% of the copy
// on an H100). One row per SM, so nothing hides one block's phases behind another block's; what is left
// to cut is the instructions after the read and the read that the first exponentials wait for.
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
// The shift of the base-2 frame for a maximum m: fl(m * log2e), rounded here and nowhere else
// (__fmul_rn is never fused into a later add, so every use sees the same number); 0 for m = -inf
// (a thread that has seen only -inf), whose terms are all 2^-inf = 0.
__device__ __forceinline__ float shift_for(float m) { return m == -INFINITY ? 0.0f : __fmul_rn(m, kLog2e); }

// 2^-lo for a finite maximum m and its shift h = shift_for(m), lo = m log2e - h (exact: fmaf rounds
// once, and the difference is a float): the factor that takes a sum in h's frame back to exp(x - m).
__device__ __forceinline__ float unshift(float m, float h) { return ex2_ftz(-fmaf(m, kLog2e, -h)); }

// The row body: packed_row's loads and stores; the thread's online pair folded pack by pack in the base-2
// frame (the header's points 1 and 2), brought back to exp(x - m) for the block's merge.
template <int P, bool LOG, class TY>
__device__ __forceinline__ void packed_online_row(const BlockGroup& g, const __half* xr, TY* yr, int owned) {
  Pack<__half, N> raw[P];
  load_packs<P, N>(xr, g.rank(), g.size(), owned, raw);
  // s = sum over the packs so far of 2^fl(x log2e - h), h = shift_for(m), m their maximum.
  float m = -INFINITY, h = 0.0f, s = 0.0f;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (i < owned) {
      const float m_new = fmaxf(m, pack_max(raw[i]));
      const float h_new = shift_for(m_new);
      // A new maximum rescales the sum by exactly 2^(h - h_new); none from -inf (2^(0 - h_new) may
      // overflow): s is then 0, or NaN if a pack of -inf held a NaN, and must stay so. (Until 2026-11-28
      // it was set to 0 there, which dropped such a NaN from the row when a finite pack followed.) An
      // unchanged maximum leaves s as it is (2^0 = 1 would too, at the cost of an EX2).
      if (m_new != m && m != -INFINITY) s *= ex2_ftz(h - h_new);
      m = m_new;
      h = h_new;
#pragma unroll
      for (int k = 0; k < N; ++k) s += ex2_ftz(fmaf(to_f32(raw[i].v[k]), kLog2e, -h));  // a NaN x poisons s
    }
  }
  // Every term carries 2^lo: unshift brings the sum to sum(exp(x - m)). m = -inf: s is 0; m = +inf: s is
  // already NaN.
  if (isfinite(m)) s *= unshift(m, h);
  const MaxSum row = g.merge(MaxSum{m, s});
  if constexpr (LOG) {
    const RowStats st = finish_stats(row.m, row.d);
    store_from_packs<P>(yr, g.rank(), g.size(), owned, raw, [&](float x) { return log_prob(x, st); });
  } else {
    // y = 2^fl(x log2e - H) * 2^-lo_H / S. The NaN convention of finish_stats: no finite maximum (all
    // -inf, or a +inf) makes the row NaN; a NaN entry already made S NaN.
    const float H = __fmul_rn(row.m, kLog2e);
    const float scale = isfinite(row.m) ? unshift(row.m, H) / row.d : NAN;
    store_from_packs<P>(yr, g.rank(), g.size(), owned, raw, [&](float x) {
      const float t = fmaf(x, kLog2e, -H);
      if constexpr (std::is_same_v<TY, __half>) {
        return ex2_ftz(t) * scale;
      } else {
        return exp2f(t) * scale;  // FP32 output: subnormal results kept (the header's point 3)
      }
    });
  }
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

// Chosen by kernels/softmax.cpp before packed_row (not opt-in) since this version's H100 run
// (2026-11-27): its tests, memcheck and racecheck passed, and it was faster than packed_row on both
// shapes of its range (128x65536 13.09 us against 15.04, 1024x32768 50.41 against 53.88).
HL_REGISTER_VARIANT(SoftmaxArgs, {"packed_online", DeviceType::cuda, 32,
                                  "packed_row with each thread's (max, sum) pair folded pack by pack as the "
                                  "packs arrive, exponentials in base 2 (one FMA and one EX2 per element)",
                                  run, packed_block_unsupported});

}  // namespace hl::kernels::cuda
