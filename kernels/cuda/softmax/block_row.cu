// Softmax ladder, rung 2a: "block_row" — one thread block per row, shared-memory reductions,
// 128-bit loads.
//
// What changes from `naive`: a whole block (32..512 threads) works on one row. Consecutive threads
// read consecutive 16-byte packs (8 FP16 or 4 FP32 values per load instruction), so every warp access
// is one fully used 512-byte transaction, and the row maximum and the sum of exponentials are
// reduced across the block: shuffles inside each warp, then one value per warp through shared memory
// (common.cuh block_reduce). A batch of 128 rows now occupies 128 blocks instead of 128 threads.
// When a row is not a whole number of packs, or a buffer is not 16-byte aligned, a scalar path runs
// the same arithmetic one element at a time.
//
// Why: softmax moves far more bytes than it computes on, so speed is set by memory traffic. Passes 2
// and 3 re-read the row the block has just read, mostly from L1/L2, so DRAM sees close to one read and
// one write per element. Paper §3.3: every reduction is FP32 whatever the storage type; the result is
// rounded once, on the store.
//
// What is still left: each row costs three block-wide barriers per reduction, and a short row (10
// classes) leaves most of a block idle — the next rung, warp_row, gives short rows a warp instead.
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;

template <bool VEC, class TX, class TY>
__global__ void block_row_forward_kernel(int64_t rows, int64_t cols, const TX* x, TY* y, bool log) {
  const BlockGroup g;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) three_pass_row<VEC>(g, x + r * cols, y + r * cols, cols, log);
}

template <bool VEC, class TY, class TG>
__global__ void block_row_backward_kernel(int64_t rows, int64_t cols, const TY* y, const TY* dy, TG* gx) {
  const BlockGroup g;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    backward_row<VEC>(g, y + r * cols, dy + r * cols, gx + r * cols, cols);
}

constexpr int kMaxThreads = 512;

void run(const SoftmaxArgs& a) {
  with_type(a.x_type, [&](auto tx) {
    with_type(a.y_type, [&](auto ty) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      const TX* x = static_cast<const TX*>(a.x);
      TY* y = static_cast<TY*>(a.y);
      const int block = block_for_row(a.cols, kVec<TX>, kMaxThreads);
      const unsigned grid = grid_of(a.rows);
      if (a.op == SoftmaxOp::log_softmax_backward) {
        const TX* dy = static_cast<const TX*>(a.dy);
        if (can_vectorize<TX, TY>(a.cols, x, y, dy)) {
          block_row_backward_kernel<true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, dy, y);
        } else {
          block_row_backward_kernel<false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, dy, y);
        }
        HL_LAUNCH_CHECK("block_row_backward_kernel");
        return;
      }
      const bool log = a.op == SoftmaxOp::log_softmax;
      if (can_vectorize<TX, TY>(a.cols, x, y)) {
        block_row_forward_kernel<true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, y, log);
      } else {
        block_row_forward_kernel<false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, y, log);
      }
      HL_LAUNCH_CHECK("block_row_forward_kernel");
    });
  });
}

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "block_row computes softmax and log-softmax (cross-entropy: fused_xent)";
  return unsupported_types(a);
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"block_row", DeviceType::cuda, 30,
                                  "one block per row, shared-memory reductions, 128-bit loads", run, unsupported});

}  // namespace hl::kernels::cuda
