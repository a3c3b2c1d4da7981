// CUDA negative log-likelihood: the pick that follows log_softmax in the unfused cross-entropy path
// (framework nll_loss, and cross_entropy when the chosen softmax rung has no fused loss). The
// log-softmax itself lives in the softmax ladder next to this file; fused_xent.cu replaces both.
//
// Paper §3.3: the log-probabilities are f32 (f64 in gradient checks); the pick and its gradient are
// exact (a negation), so nothing here rounds.
#include "kernels/backends.h"
#include "kernels/cuda/common.cuh"
#include "kernels/softmax.h"

namespace hl::kernels::cuda {

namespace {

// One thread per row: pick the log-probability of the label.
template <class C>
__global__ void nll_forward_kernel(int64_t rows, int64_t cols, const void* logp, DType t, const int32_t* labels,
                                   void* loss) {
  for (int64_t r = global_thread_index(); r < rows; r += global_thread_count()) {
    const int32_t label = labels[r];
    const C v = (label < 0 || label >= cols) ? C(NAN) : -load_as<C>(logp, t, r * cols + label);
    store_as<C>(loss, t, r, v);
  }
}

// One thread per element of glogp: -gloss[r] at the label, 0 elsewhere. A bad label gives a NaN row,
// as the forward gives a NaN loss and fused_xent a NaN gradient row: the loss scaler's check reads the
// gradients, so a zero row would let the step through (kernels/softmax.h).
template <class C>
__global__ void nll_backward_kernel(int64_t rows, int64_t cols, const int32_t* labels, const void* gloss,
                                    void* glogp, DType t) {
  const int64_t n = rows * cols;
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    const int64_t r = i / cols, c = i - r * cols;
    const int32_t label = labels[r];
    const C v = (label < 0 || label >= cols) ? C(NAN) : c == label ? -load_as<C>(gloss, t, r) : C(0);
    store_as<C>(glogp, t, i, v);
  }
}

}  // namespace

void nll_forward(int64_t rows, int64_t cols, const void* logp, DType t, const int32_t* labels, void* loss) {
  check_floating(t, "nll_loss");
  if (rows == 0) return;
  if (t == DType::f64) {
    nll_forward_kernel<double><<<grid_for(rows), kBlock, 0, stream()>>>(rows, cols, logp, t, labels, loss);
  } else {
    nll_forward_kernel<float><<<grid_for(rows), kBlock, 0, stream()>>>(rows, cols, logp, t, labels, loss);
  }
  HL_LAUNCH_CHECK("nll_forward_kernel");
}

void nll_backward(int64_t rows, int64_t cols, const int32_t* labels, const void* gloss, void* glogp, DType t) {
  check_floating(t, "nll_loss_backward");
  const int64_t n = rows * cols;
  if (n == 0) return;
  if (t == DType::f64) {
    nll_backward_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(rows, cols, labels, gloss, glogp, t);
  } else {
    nll_backward_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(rows, cols, labels, gloss, glogp, t);
  }
  HL_LAUNCH_CHECK("nll_backward_kernel");
}

}  // namespace hl::kernels::cuda
