// Softmax ladder, rung 1: "naive" — one thread per row, three passes over the row.
//
// The first version anyone writes, kept as the baseline and as the plainest statement of the
// numerically safe algorithm (paper §3.3: softmax is a reduction, so it runs in FP32 even when the
// logits are FP16):
//   pass 1  m   = max_c x[c]
//   pass 2  s   = sum_c exp(x[c] - m)      every exp() is in [0, 1]: no overflow for any finite logit
//   pass 3  y[c] = exp(x[c] - m) / s        (log-softmax: (x[c] - m) - log(s))
// Without the subtraction of m, an FP16 exp(12) = 162754.8 is already past FP16's 65504 (see the
// naive_fp16_nomax teaching rung); with it, the sum is at most `cols` and FP32 holds it easily.
//
// What makes it slow is the lesson for the next rungs: neighbouring threads walk different rows, so
// a warp's 32 loads touch 32 different cache lines (no coalescing), and a batch of 128 rows keeps
// only 128 threads of a GPU with >100k thread slots busy. It also reads each row three times.
//
// It is also the one CUDA rung that accepts f64 (compute type double), so f64 tensors on the GPU keep
// working; it loads through the runtime-dtype helpers of common.cuh rather than typed pointers.
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;

// C: float for f16/f32 data, double when either side is f64.
template <class C>
__global__ void naive_forward_kernel(int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty,
                                     bool log) {
  for (int64_t r = global_thread_index(); r < rows; r += global_thread_count()) {
    const int64_t row = r * cols;
    C mx = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) mx = MaxOp{}(mx, load_as<C>(x, tx, row + c));
    C sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += math_exp(load_as<C>(x, tx, row + c) - mx);
    // No finite maximum (all -inf, or a +inf): the whole row is NaN (kernels/softmax.h).
    const bool finite = isfinite(mx);
    const C m = finite ? mx : C(NAN);
    const C log_sum = finite ? math_log(sum) : C(NAN);
    for (int64_t c = 0; c < cols; ++c) {
      const C lp = (load_as<C>(x, tx, row + c) - m) - log_sum;
      store_as<C>(y, ty, row + c, log ? lp : math_exp(lp));
    }
  }
}

// d/dx of log_softmax: gx = gy - exp(y) * sum(gy).
template <class C>
__global__ void naive_backward_kernel(int64_t rows, int64_t cols, const void* y, const void* gy, DType ty, void* gx,
                                      DType tgx) {
  for (int64_t r = global_thread_index(); r < rows; r += global_thread_count()) {
    const int64_t row = r * cols;
    C sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += load_as<C>(gy, ty, row + c);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = row + c;
      store_as<C>(gx, tgx, i, load_as<C>(gy, ty, i) - math_exp(load_as<C>(y, ty, i)) * sum);
    }
  }
}

void run(const SoftmaxArgs& a) {
  const bool wide = a.x_type == DType::f64 || a.y_type == DType::f64;
  constexpr int kThreads = 128;
  const unsigned grid = grid_for(a.rows, kThreads);
  if (a.op == SoftmaxOp::log_softmax_backward) {
    if (wide) {
      naive_backward_kernel<double><<<grid, kThreads, 0, stream()>>>(a.rows, a.cols, a.x, a.dy, a.x_type, a.y, a.y_type);
    } else {
      naive_backward_kernel<float><<<grid, kThreads, 0, stream()>>>(a.rows, a.cols, a.x, a.dy, a.x_type, a.y, a.y_type);
    }
    HL_LAUNCH_CHECK("naive_backward_kernel");
    return;
  }
  const bool log = a.op == SoftmaxOp::log_softmax;
  if (wide) {
    naive_forward_kernel<double><<<grid, kThreads, 0, stream()>>>(a.rows, a.cols, a.x, a.x_type, a.y, a.y_type, log);
  } else {
    naive_forward_kernel<float><<<grid, kThreads, 0, stream()>>>(a.rows, a.cols, a.x, a.x_type, a.y, a.y_type, log);
  }
  HL_LAUNCH_CHECK("naive_forward_kernel");
}

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "naive computes softmax and log-softmax (cross-entropy: fused_xent)";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"naive", DeviceType::cuda, 10,
                                  "one thread per row, three passes (max, sum of exp, normalize), FP32 math",
                                  run, unsupported});

}  // namespace hl::kernels::cuda
