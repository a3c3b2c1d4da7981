// Softmax ladder, rung 2f: "packed_row" — one block per row, the row kept in registers as the FP16
// packs it arrives in.
//
// What changes from `register_row`: that rung widens each value to FP32 as it loads it and keeps the
// FP32 values (and then their exponentials) in registers, 32 values in 32 registers per thread. Here a
// thread keeps the 16-byte FP16 packs themselves: 64 values in the same 32 registers (8 packs of 8).
// A 1024-thread block (64 registers per thread) then holds a row of 65536 columns, and a row of 32768
// needs only 512 threads, so an SM holds two such rows at once where register_row fits one. The price
// is arithmetic: the exponentials are not kept, so exp() runs twice per element, once for the sum and
// once for the output, where register_row runs it once. Everything else is register_row's: every load
// of a thread issued before the first value is used, the block's maximum, then the block's sum of
// exp(x - max) in the same order, the output written from the registers. So the two rungs give the
// same bits wherever their plans give a row the same threads (rows up to 1024 columns); longer rows
// get 8 packs per thread here and at most 4 there, twice the threads, and their sums part by an ulp. Paper §3.3: every value is widened to FP32 where it is used, max, sum,
// exp and the normalization are FP32, and the result is rounded once, on the store.
//
// Why: issue #6's two long-row shapes miss 80% of the copy bandwidth on an H200
// (bench/results/gpu_short_nvidia_h200_2026-11-26.txt). At 128x65536 a row is too long for
// register_row, and block_row reads it three times (47% of copy); at 1024x32768 register_row takes a
// whole SM per row, which idles during the block's reductions (64%). Here both rows are read once,
// and the 32768-column rows run two to an SM. Prediction, to be measured: both nearer the copy, as long
// as the second exp() hides behind the memory traffic (one exp per 4 bytes moved; the SFUs of an H200
// do about 4e12 per second, the memory about 4.8e12 bytes: for FP16 rows it should). Written in a
// session without a GPU, it was registered opt-in until its tests, the sanitizers and softmax_bench ran
// on an H100 (2026-11-27): 1024x32768 in 53.79 us (89% of the copy) against register_row's 58.50,
// 128x65536 in 15.11 us (62%) against block_row's 18.28. The chooser (kernels/softmax.cpp) now takes it
// for FP16 rows longer than 16384 columns.
//
// FP16 input rows of whole 16-byte packs in aligned buffers only (an FP32 row gains nothing: its
// packs are FP32 already), forward softmax and log-softmax only; the rest is declined with the reason
// (packed_block_unsupported, register_row.cuh).
#include <cuda_fp16.h>

#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row::packed;

constexpr int N = plan_ns::kWidth;  // FP16 values per 16-byte pack

// One block per row (rows step by the grid); P packs of 8 FP16 values per thread.
template <int P, class TY>
__global__ void __launch_bounds__(plan_ns::kMaxThreads)
    packed_row_forward_kernel(int64_t rows, int cols, const __half* x, TY* y, bool log) {
  const BlockGroup g;
  const int owned = packs_owned(cols / N, g.rank(), g.size());
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) packed_forward_row<P>(g, x + r * cols, y + r * cols, owned, log);
}

void run(const SoftmaxArgs& a) {
  const register_row::Plan p = plan_ns::plan(a.cols, path_width(a));
  HL_CHECK(p.threads > 0, "packed_row: no plan for ", a.describe());  // unsupported() rules this out
  const __half* x = static_cast<const __half*>(a.x);
  const unsigned grid = grid_of(a.rows);
  const int cols = static_cast<int>(a.cols);
  with_type(a.y_type, [&](auto ty) {
    using TY = decltype(ty);
    with_per_thread<plan_ns::compiled_for, N>("packed_row", p.per_thread, [&](auto pc) {
      constexpr int P = decltype(pc)::value;
      packed_row_forward_kernel<P, TY><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x, static_cast<TY*>(a.y),
                                                                         a.op == SoftmaxOp::log_softmax);
      HL_LAUNCH_CHECK("packed_row_forward_kernel");
    });
  });
}

}  // namespace

// Promoted after its H100 run (the header); the chooser in kernels/softmax.cpp decides where it runs.
HL_REGISTER_VARIANT(SoftmaxArgs, {"packed_row", DeviceType::cuda, 34,
                                  "one block per row, the row kept in registers as FP16 packs (up to 65536 "
                                  "columns), exp() twice per element",
                                  run, packed_block_unsupported});

}  // namespace hl::kernels::cuda
