// Softmax ladder, rung 2d: "register_warp" — one warp per row, the row read once into registers.
//
// What changes from `register_row`: the same register-resident row (register_row.cuh: each thread
// loads its share once as FP32, the maximum and the sum are reduced from the registers, the output is
// written from them), but a row belongs to one warp, as in `warp_row`, and eight rows share a
// 256-thread block. Both reductions are five register shuffles: no shared memory, no __syncthreads().
// A lane keeps up to 32 FP32 values (4 FP16 packs of 16 bytes, 8 FP32 packs, or 32 single values on
// the scalar path), so rows of up to 1024 columns fit; the count per lane is a template parameter
// chosen by the row length (register_row_plan.h, namespace warp).
//
// Why: at 4096x1024 the H200 run (bench/results/softmax_register_row_nvidia_h200_2026-11-23.txt)
// had its best rung at 55% of the copy bandwidth: `warp_row` (8.2 us) reads each row three times,
// and `register_row` (8.7 us) reads it once but gives a 1024-column row a 128-thread block with two
// block-wide barriers. With a warp per row the 4096 rows are 4096 warps: on 132 SMs at 32 resident
// warps each (4 blocks of 8, the kernels' __launch_bounds__), every row is in flight at once, each
// lane with 4 loads of 16 bytes issued before the first is used, and no warp waits at a barrier for
// another. Prediction, before it ran: faster than both at 1024 columns (towards the 80% of copy of
// issue #6), and than `warp_row` on the 10-class heads by a little (one read instead of three of a row
// that is one load per lane). Measured on an H200 (2026-11-26, after its tests and the sanitizers
// passed; bench/results/gpu_short_nvidia_h200_2026-11-26.txt): 4096x1024 f16 in 6.05 us, 92% of the
// copy bandwidth, against 8.25 us for warp_row and 8.72 for register_row, as predicted; the 10-class
// heads 4.64-4.67 us against warp_row's 4.40-4.70, no gain (launch-bound). So the chooser
// (kernels/softmax.cpp) gives it rows of 33 to 1024 columns.
//
// Paper §3.3: FP32 math on FP16 storage: every value is widened to FP32 on load, max, sum, exp and the
// normalization are FP32, and the result is rounded once, on the store.
#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row::warp;

constexpr int kWarps = plan_ns::kWarpsPerBlock;
constexpr int kThreads = 32 * kWarps;

using Rows = WarpRows<kWarps>;  // a warp per row (softmax_common.cuh)

// Resident blocks per SM that a forward kernel with P x N values per lane is compiled for
// (__launch_bounds__): 4, which caps it at 64 registers per thread and gives 32 warps per SM, so that
// 4096 rows of 1024 FP16 values are all in flight at once on 132 SMs. Where the 32 values arrive as
// FP32 packs or as single values, 64 registers spill (ptxas -v: 64 to 92 bytes), so those take 2
// blocks (128 registers). The backward kernels keep dy in its storage type and fit 64 registers
// without spilling in every instantiation: 4 blocks.
constexpr int min_blocks(int P, int N) { return P * N >= 32 && N != 8 ? 2 : 4; }

// P packs of N values per lane (N = 8 or 4 on the packed path, 1 on the scalar path).
template <int P, int N, class TX, class TY>
__global__ void __launch_bounds__(kThreads, min_blocks(P, N))
    register_warp_forward_kernel(int64_t rows, int cols, const TX* x, TY* y, bool log) {
  const WarpGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());  // the packed path needs cols % N == 0
  for (int64_t r = Rows::first(); r < rows; r += Rows::step())
    register_forward_row<P, N>(g, x + r * cols, y + r * cols, owned, log);
}

template <int P, int N, class TY, class TG>
__global__ void __launch_bounds__(kThreads, 4)
    register_warp_backward_kernel(int64_t rows, int cols, const TY* y, const TY* dy, TG* gx) {
  const WarpGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());
  for (int64_t r = Rows::first(); r < rows; r += Rows::step())
    register_backward_row<P, N>(g, y + r * cols, dy + r * cols, gx + r * cols, owned);
}

// Launch with N values per access (kVec<TX> on the packed path, 1 on the scalar path).
template <int N, class TX, class TY>
void launch(const SoftmaxArgs& a, const TX* x, TY* y) {
  const int per_lane = plan_ns::per_lane(a.cols, N);
  HL_CHECK(per_lane > 0, "register_warp: no plan for ", a.describe());  // unsupported() rules this out
  const unsigned grid = grid_of((a.rows + kWarps - 1) / kWarps);
  const int cols = static_cast<int>(a.cols);
  with_per_thread<plan_ns::compiled_for, N>("register_warp", per_lane, [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    if (a.op == SoftmaxOp::log_softmax_backward) {
      register_warp_backward_kernel<P, N><<<grid, kThreads, 0, stream()>>>(a.rows, cols, x,
                                                                           static_cast<const TX*>(a.dy), y);
      HL_LAUNCH_CHECK("register_warp_backward_kernel");
    } else {
      register_warp_forward_kernel<P, N><<<grid, kThreads, 0, stream()>>>(a.rows, cols, x, y,
                                                                          a.op == SoftmaxOp::log_softmax);
      HL_LAUNCH_CHECK("register_warp_forward_kernel");
    }
  });
}

void run(const SoftmaxArgs& a) {
  run_by_width(a, [&](auto n, const auto* x, auto* y) { launch<decltype(n)::value>(a, x, y); });
}

static_assert(plan_ns::kMaxCols == 1024, "update the message below");

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "register_warp computes softmax and log-softmax (cross-entropy: fused_xent)";
  if (const char* why = unsupported_types(a)) return why;
  if (a.cols > plan_ns::kMaxCols)
    return "register_warp keeps a row in the registers of one warp: at most 1024 columns (32 values per lane); "
           "longer rows run in register_row";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"register_warp", DeviceType::cuda, 37,
                                  "one warp per row, the row read once into registers (up to 1024 columns)", run,
                                  unsupported});

}  // namespace hl::kernels::cuda
