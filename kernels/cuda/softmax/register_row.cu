// Softmax ladder, rung 2c: "register_row" — one block per row, the row read once into registers.
//
// What changes from `block_row` / `warp_row`: those read a row three times (max pass, sum pass,
// normalize pass: `three_pass_row` in softmax_common.cuh). Here each thread loads its share of the row
// once, as FP32, into a register array: up to 4 FP16 packs of 16 bytes (32 values) or 4 FP32 packs
// (16 values), all loads issued before the first is used. The maximum and the sum of exponentials
// are reduced from those registers (warp shuffles, then one value per warp through shared memory:
// BlockGroup), and the output is written from them. The row body is in register_row.cuh, shared with
// `register_warp` (the same row owned by one warp). The array is indexed only with compile-time
// constants (the loops over it are fully unrolled), so it stays in registers; the number of packs per
// thread is a template parameter, and the block size (a multiple of 32, up to 1024) is chosen per row
// length at run time (register_row_plan.h). Rows that are not whole packs, or misaligned buffers, take
// the same kernel with one value per "pack".
//
// Why: bytes. block_row moves 3 reads + 1 write per element; passes 2 and 3 hit L1/L2 for short rows,
// but a block's row of 4K..32K FP16 values, times the blocks resident on an SM, no longer stays in
// L1, and the H200 run (bench/results/softmax_nvidia_h200_2026-11-23.txt) shows block_row and
// warp_row at ~55% of the copy bandwidth for 1024..32768 columns. One read + one write per element is
// what a copy moves. Predicted: ~1.4x over block_row for rows that leave L1, towards the issue's 80%
// of copy; measured on an H200: 1.21x at 4096x4096 (27.38 against 33.07 us) and 1.14x at 1024x32768
// (54.29 against 62.05; bench/results/softmax_register_row_nvidia_h200_2026-11-23.txt). Softmax keeps exp(x - max) from the sum in the registers and multiplies it by 1/sum, so it
// also evaluates one exp() per element instead of two. The log-softmax backward caches dy (one read
// for the sum and the write) and reads y once: 2 reads + 1 write, down from block_row's 3 + 1.
// Paper §3.3: FP32 math on FP16 storage: every value is widened to FP32 on load, max, sum, exp and
// the normalization are FP32, and the result is rounded once, on the store.
//
// What is still left: a row must fit in the registers of one block: 1024 threads x 32 values = 32768
// columns for FP16 packs, 16384 for FP32 packs and the scalar path (more values per thread spill to
// local memory: register_row_plan.h). Longer rows are declined (unsupported() says why) and go to
// packed_online or packed_row (FP16 packs), block_row or online (kernels/softmax.cpp). At that size one
// block fills an SM's register file, so the SM idles during the two block reductions; a row split
// across a cluster of blocks (cluster_row.cu, distributed shared memory) was written to lift both
// limits, and measured slower on every shape timed.
#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row;

constexpr int kMaxThreads = plan_ns::kMaxThreads;

// One block per row (rows step by the grid). P packs of N values per thread (N = 8 or 4 on the packed
// path, 1 on the scalar path); the row body is register_forward_row (register_row.cuh).
template <int P, int N, class TX, class TY>
__global__ void __launch_bounds__(kMaxThreads) register_row_forward_kernel(int64_t rows, int cols, const TX* x, TY* y,
                                                                           bool log) {
  const BlockGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());  // the packed path needs cols % N == 0
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    register_forward_row<P, N>(g, x + r * cols, y + r * cols, owned, log);
}

// log-softmax backward: register_backward_row (register_row.cuh) per row.
template <int P, int N, class TY, class TG>
__global__ void __launch_bounds__(kMaxThreads) register_row_backward_kernel(int64_t rows, int cols, const TY* y,
                                                                            const TY* dy, TG* gx) {
  const BlockGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    register_backward_row<P, N>(g, y + r * cols, dy + r * cols, gx + r * cols, owned);
}

// Launch with N values per access (kVec<TX> on the packed path, 1 on the scalar path).
template <int N, class TX, class TY>
void launch(const SoftmaxArgs& a, const TX* x, TY* y) {
  const plan_ns::Plan p = plan_ns::launch_plan(a.cols, N);
  HL_CHECK(p.threads > 0, "register_row: no plan for ", a.describe());  // unsupported() rules this out
  const unsigned grid = grid_of(a.rows);
  const int cols = static_cast<int>(a.cols);
  with_per_thread<plan_ns::compiled_for, N>("register_row", p.per_thread, [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    if (a.op == SoftmaxOp::log_softmax_backward) {
      register_row_backward_kernel<P, N><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x,
                                                                            static_cast<const TX*>(a.dy), y);
      HL_LAUNCH_CHECK("register_row_backward_kernel");
    } else {
      register_row_forward_kernel<P, N><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x, y,
                                                                           a.op == SoftmaxOp::log_softmax);
      HL_LAUNCH_CHECK("register_row_forward_kernel");
    }
  });
}

void run(const SoftmaxArgs& a) {
  run_by_width(a, [&](auto n, const auto* x, auto* y) { launch<decltype(n)::value>(a, x, y); });
}

static_assert(plan_ns::max_cols(8) == 32768 && plan_ns::max_cols(4) == 16384 && plan_ns::max_cols(1) == 16384,
              "update the message below");

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "register_row computes softmax and log-softmax (cross-entropy: fused_xent)";
  if (const char* why = unsupported_types(a)) return why;
  if (a.cols > plan_ns::max_cols(path_width(a)))
    return "register_row keeps a row in the registers of one block: at most 32768 columns for FP16 rows of whole "
           "16-byte packs, 16384 for FP32 rows and for the scalar path (rows not a whole number of packs, "
           "misaligned buffers); longer rows run in block_row or online";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"register_row", DeviceType::cuda, 35,
                                  "one block per row, the row read once into registers (up to 32768 columns)", run,
                                  unsupported});

}  // namespace hl::kernels::cuda
