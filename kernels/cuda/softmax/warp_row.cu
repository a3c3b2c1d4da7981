// Softmax ladder, rung 2b: "warp_row" — one warp per row, register-shuffle reductions, 128-bit loads.
//
// What changes from `block_row`: a row belongs to a single warp (8 rows per 256-thread block), so both
// reductions are five __shfl_xor_sync steps in registers: no shared memory and no __syncthreads().
// Loads are the same 16-byte packs (scalar path when a row is not a whole number of packs or a buffer
// is misaligned).
//
// Why: most softmax rows in training are short — the 10-class heads of MNIST and CIFAR-10, attention
// rows of a few hundred to a thousand keys. A 512-thread block on a 10-wide row leaves 502 threads
// idle and pays for barriers; a warp wastes at most 22 lanes and no barriers, and eight rows share a
// block, so the GPU fills with far fewer, fuller blocks. For very long rows the balance flips: 32
// threads cannot keep enough loads in flight for a 64K-wide row, and block_row / online win (the
// default picks by shape: kernels/softmax.cpp). Paper §3.3: all of it in FP32, rounded on the store.
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;

constexpr int kWarpsPerBlock = 8;

using Rows = WarpRows<kWarpsPerBlock>;

template <bool VEC, class TX, class TY>
__global__ void warp_row_forward_kernel(int64_t rows, int64_t cols, const TX* x, TY* y, bool log) {
  const WarpGroup g;
  for (int64_t r = Rows::first(); r < rows; r += Rows::step()) three_pass_row<VEC>(g, x + r * cols, y + r * cols, cols, log);
}

template <bool VEC, class TY, class TG>
__global__ void warp_row_backward_kernel(int64_t rows, int64_t cols, const TY* y, const TY* dy, TG* gx) {
  const WarpGroup g;
  for (int64_t r = Rows::first(); r < rows; r += Rows::step())
    backward_row<VEC>(g, y + r * cols, dy + r * cols, gx + r * cols, cols);
}

void run(const SoftmaxArgs& a) {
  with_type(a.x_type, [&](auto tx) {
    with_type(a.y_type, [&](auto ty) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      const TX* x = static_cast<const TX*>(a.x);
      TY* y = static_cast<TY*>(a.y);
      const unsigned grid = grid_of((a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
      constexpr int block = 32 * kWarpsPerBlock;
      if (a.op == SoftmaxOp::log_softmax_backward) {
        const TX* dy = static_cast<const TX*>(a.dy);
        if (can_vectorize<TX, TY>(a.cols, x, y, dy)) {
          warp_row_backward_kernel<true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, dy, y);
        } else {
          warp_row_backward_kernel<false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, dy, y);
        }
        HL_LAUNCH_CHECK("warp_row_backward_kernel");
        return;
      }
      const bool log = a.op == SoftmaxOp::log_softmax;
      if (can_vectorize<TX, TY>(a.cols, x, y)) {
        warp_row_forward_kernel<true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, y, log);
      } else {
        warp_row_forward_kernel<false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, y, log);
      }
      HL_LAUNCH_CHECK("warp_row_forward_kernel");
    });
  });
}

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "warp_row computes softmax and log-softmax (cross-entropy: fused_xent)";
  return unsupported_types(a);
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"warp_row", DeviceType::cuda, 40,
                                  "one warp per row, shuffle reductions, no barriers, 128-bit loads", run,
                                  unsupported});

}  // namespace hl::kernels::cuda
