// Softmax ladder, rung 3: "online" — one block per row, the maximum and the sum of exponentials in a
// single pass (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax").
//
// What changes from `block_row`: passes 1 and 2 become one. Each thread keeps a running pair (m, d):
// m the largest value seen so far and d = sum(exp(x - m)) over those values; a new maximum rescales d
// by exp(m_old - m_new). Pairs merge the same way — across a warp with shuffles, across the block
// through shared memory (softmax_common.cuh online_merge). The row is then read once more to write
// the output: two reads and one write per element instead of three reads and one write.
//
// Why: for rows too long to stay on chip (a 64K-wide FP32 row is 256 KB, and a GPU runs hundreds of
// rows at once), each extra pass is a real trip to DRAM; saving one of three reads is up to a third
// of the traffic. The price is a second exp() per new maximum; the arithmetic is free next to the
// memory. Paper §3.3: the pair is FP32 whatever the storage, so the rescaling never overflows or
// flushes — d stays in [1, cols] — and an FP16 logit of 65504 is as safe as one of 1.
//
// The log-softmax backward needs only one reduction (sum of dy), so it is block_row's.
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;

// Long rows: 1024 threads keep enough 16-byte loads in flight per row. Declared to the compiler, so
// that it keeps to the 64 registers per thread a block of 1024 can have (else the launch could fail
// with "too many resources requested").
constexpr int kMaxThreads = 1024;

template <bool VEC, class TX, class TY>
__global__ void __launch_bounds__(kMaxThreads) online_forward_kernel(int64_t rows, int64_t cols, const TX* x, TY* y, bool log) {
  const BlockGroup g;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TX* xr = x + r * cols;
    MaxSum s{-INFINITY, 0.0f};
    row_for_each<VEC>(xr, cols, g.rank(), g.size(), [&](int64_t, float v) { online_add(s, v); });
    s = g.merge(s);
    const RowStats st = finish_stats(s.m, s.d);
    if (log) {
      row_map<VEC>(xr, y + r * cols, cols, g.rank(), g.size(), [&](int64_t, float v) { return log_prob(v, st); });
    } else {
      row_map<VEC>(xr, y + r * cols, cols, g.rank(), g.size(), [&](int64_t, float v) { return prob(v, st); });
    }
  }
}

template <bool VEC, class TY, class TG>
__global__ void __launch_bounds__(kMaxThreads) online_backward_kernel(int64_t rows, int64_t cols, const TY* y, const TY* dy, TG* gx) {
  const BlockGroup g;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    backward_row<VEC>(g, y + r * cols, dy + r * cols, gx + r * cols, cols);
}

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
          online_backward_kernel<true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, dy, y);
        } else {
          online_backward_kernel<false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, dy, y);
        }
        HL_LAUNCH_CHECK("online_backward_kernel");
        return;
      }
      const bool log = a.op == SoftmaxOp::log_softmax;
      if (can_vectorize<TX, TY>(a.cols, x, y)) {
        online_forward_kernel<true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, y, log);
      } else {
        online_forward_kernel<false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, y, log);
      }
      HL_LAUNCH_CHECK("online_forward_kernel");
    });
  });
}

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "online computes softmax and log-softmax (cross-entropy: fused_xent)";
  return unsupported_types(a);
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"online", DeviceType::cuda, 20,
                                  "one block per row, single-pass running max and rescaled sum, then write",
                                  run, unsupported});

}  // namespace hl::kernels::cuda
