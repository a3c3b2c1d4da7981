// Softmax ladder, rung 2g: "packed_warp" — one warp per row, the row kept in registers as the FP16
// packs it arrives in.
//
// What changes from `register_warp`: that rung keeps a lane's share of the row as FP32 values (and
// then their exponentials), 32 of them in 32 registers, so a warp holds rows of at most 1024 columns;
// longer rows go to `register_row`, a block per row with two block-wide barriers per row. Here a lane
// keeps packed_row's 16-byte FP16 packs instead (packed_forward_row in register_row.cuh): up to 16
// packs, 128 values in 64 registers, so a warp holds a row of 4096 columns, with the warp's five
// register shuffles per reduction and no barrier. The price, as in packed_row: exp() runs twice per
// element. Paper §3.3: every value is widened to FP32 where it is used, max, sum, exp and the
// normalization are FP32, and the result is rounded once, on the store.
//
// Why: issue #6's 4096x4096 shape stands at 68% of the copy bandwidth on an H200 with register_row
// (27.57 us; bench/results/gpu_short_nvidia_h200_2026-11-26.txt), where register_warp reached 92% at
// 4096x1024. The difference between the two shapes is the group: an 8-KiB row per 256-thread block,
// whose loads stop while the block meets at its barriers, against a warp per row. With a warp per
// 4096-column row, two 8-warp blocks per SM (the 16-pack kernels' __launch_bounds__: 128 registers)
// keep 16 rows, 128 KiB, in flight per SM, and no warp waits for another. Prediction, to be measured:
// 4096x4096 nearer the copy bandwidth than register_row, as long as the second exp() hides behind the
// memory traffic (as argued in packed_row.cu). Written in a session without a GPU, registered opt-in
// until it ran on one. On an H100 (2026-11-27) its tests and memcheck passed, and the prediction failed:
// 4096x4096 in 37.95 us against register_row's 29.63 (26.37 with register_row's plan since), so it
// stays opt-in (chosen only by name), a lesson.
//
// FP16 input rows of whole 16-byte packs in aligned buffers only, up to 4096 columns, forward softmax
// and log-softmax only; the rest is declined with the reason. Where register_warp runs with the same
// packs per lane (rows of whole packs up to 1024 columns), the two give the same bits: the same
// packs, the same order, the same warp reductions.
#include <cuda_fp16.h>

#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row::packed_warp;

constexpr int N = plan_ns::kWidth;  // FP16 values per 16-byte pack
constexpr int kWarps = plan_ns::kWarpsPerBlock;
constexpr int kThreads = 32 * kWarps;

using Rows = WarpRows<kWarps>;  // a warp per row (softmax_common.cuh)

// Resident blocks per SM the kernel with P packs per lane is compiled for (__launch_bounds__): 16 packs
// (64 registers of data) get 2 (128 registers per thread), fewer get 4 (64), as register_warp's do.
constexpr int min_blocks(int P) { return P >= 16 ? 2 : 4; }

template <int P, class TY>
__global__ void __launch_bounds__(kThreads, min_blocks(P))
    packed_warp_forward_kernel(int64_t rows, int cols, const __half* x, TY* y, bool log) {
  const WarpGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());
  for (int64_t r = Rows::first(); r < rows; r += Rows::step()) packed_forward_row<P>(g, x + r * cols, y + r * cols, owned, log);
}

void run(const SoftmaxArgs& a) {
  const int per_lane = plan_ns::per_lane(a.cols, path_width(a));
  HL_CHECK(per_lane > 0, "packed_warp: no plan for ", a.describe());  // unsupported() rules this out
  const __half* x = static_cast<const __half*>(a.x);
  const unsigned grid = grid_of((a.rows + kWarps - 1) / kWarps);
  const int cols = static_cast<int>(a.cols);
  with_type(a.y_type, [&](auto ty) {
    using TY = decltype(ty);
    with_per_thread<plan_ns::compiled_for, N>("packed_warp", per_lane, [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      packed_warp_forward_kernel<P, TY><<<grid, kThreads, 0, stream()>>>(a.rows, cols, x, static_cast<TY*>(a.y),
                                                                         a.op == SoftmaxOp::log_softmax);
      HL_LAUNCH_CHECK("packed_warp_forward_kernel");
    });
  });
}

static_assert(plan_ns::kMaxCols == 4096, "update the message below");

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax)
    return "packed_warp computes the forward softmax and log-softmax (backward: register_warp, register_row; "
           "cross-entropy: fused_xent)";
  if (const char* why = unsupported_types(a)) return why;
  if (a.x_type != DType::f16) return "packed_warp keeps FP16 rows as their packs (FP32 rows: register_warp, register_row)";
  // An empty row has nothing to do (softmax() returns before running any variant): not refused here.
  if (a.cols > 0 && plan_ns::per_lane(a.cols, path_width(a)) == 0)
    return "packed_warp keeps a row in the registers of one warp as 16-byte FP16 packs: at most 4096 columns, "
           "rows of whole packs (a multiple of 8 columns) in 16-byte-aligned buffers; other rows run in "
           "register_warp, register_row or block_row";
  return nullptr;
}

}  // namespace

// opt_in: verified on an H100 and slower than the chooser's rung where timed (the header).
HL_REGISTER_VARIANT(SoftmaxArgs, {"packed_warp", DeviceType::cuda, 36,
                                  "one warp per row, the row kept in registers as FP16 packs (up to 4096 "
                                  "columns), exp() twice per element",
                                  run, unsupported, /*opt_in=*/true});

}  // namespace hl::kernels::cuda
