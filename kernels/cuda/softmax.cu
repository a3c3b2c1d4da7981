// CUDA log-softmax and negative log-likelihood over the rows of a [rows, cols] matrix.
//
// Paper §3.3: softmax is one of the reductions that must run in FP32 even when the logits are FP16.
// Each row is handled by one block: read the row once for its maximum, once for sum(exp(x - max)),
// and once more to write y = (x - max) - log(sum). Subtracting the maximum keeps every exp() in
// [0, 1], so logits of any magnitude (an FP16 logit can be 65504) never overflow; computing x - max
// before subtracting log(sum) keeps the largest log-probabilities accurate to FP32 precision even
// when the logits themselves are large. Rows of any length are fine: the block loops over the row.
#include "kernels/backends.h"
#include "kernels/cuda/common.cuh"
#include "kernels/softmax.h"

namespace hl::kernels::cuda {

namespace {

constexpr int64_t kMaxRowBlocks = 65535;  // blocks loop over rows beyond this

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks); }

// C is the compute type: float for f16/f32 data, double when the data is f64 (gradient checks).
template <class C>
__global__ void log_softmax_forward_kernel(int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty) {
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * cols;
    C mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = MaxOp{}(mx, load_as<C>(x, tx, row + c));
    mx = block_reduce(mx, MaxOp{}, C(-INFINITY), scratch);

    C sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += math_exp(load_as<C>(x, tx, row + c) - mx);
    sum = block_reduce(sum, SumOp{}, C(0), scratch);

    // A row without a finite maximum (all -inf, or containing +inf) has no meaningful
    // log-probabilities: NaN, like the CPU reference. A NaN logit propagates through the sum.
    const C log_sum = isfinite(mx) ? math_log(sum) : C(NAN);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      store_as<C>(y, ty, row + c, (load_as<C>(x, tx, row + c) - mx) - log_sum);
    }
  }
}

// d/dx of log_softmax: gx = gy - softmax(x) * sum(gy), with softmax(x) = exp(y).
template <class C>
__global__ void log_softmax_backward_kernel(int64_t rows, int64_t cols, const void* y, const void* gy, DType ty,
                                            void* gx, DType tgx) {
  __shared__ C scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t row = r * cols;
    C sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += load_as<C>(gy, ty, row + c);
    sum = block_reduce(sum, SumOp{}, C(0), scratch);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const int64_t i = row + c;
      store_as<C>(gx, tgx, i, load_as<C>(gy, ty, i) - math_exp(load_as<C>(y, ty, i)) * sum);
    }
  }
}

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

// One thread per element of glogp: -gloss[r] at the label, 0 elsewhere (a bad label gives a zero row).
template <class C>
__global__ void nll_backward_kernel(int64_t rows, int64_t cols, const int32_t* labels, const void* gloss,
                                    void* glogp, DType t) {
  const int64_t n = rows * cols;
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    const int64_t r = i / cols, c = i - r * cols;
    const C v = c == labels[r] ? -load_as<C>(gloss, t, r) : C(0);
    store_as<C>(glogp, t, i, v);
  }
}

bool any_f64(DType a, DType b) { return a == DType::f64 || b == DType::f64; }

}  // namespace

void log_softmax_forward(int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty) {
  check_floating(tx, "log_softmax");
  check_floating(ty, "log_softmax");
  if (rows == 0 || cols == 0) return;
  const int block = row_block_size(cols);
  if (any_f64(tx, ty)) {
    log_softmax_forward_kernel<double><<<row_grid(rows), block, 0, stream()>>>(rows, cols, x, tx, y, ty);
  } else {
    log_softmax_forward_kernel<float><<<row_grid(rows), block, 0, stream()>>>(rows, cols, x, tx, y, ty);
  }
  HL_LAUNCH_CHECK("log_softmax_forward_kernel");
}

void log_softmax_backward(int64_t rows, int64_t cols, const void* y, const void* gy, DType ty, void* gx,
                          DType tgx) {
  check_floating(ty, "log_softmax_backward");
  check_floating(tgx, "log_softmax_backward");
  if (rows == 0 || cols == 0) return;
  const int block = row_block_size(cols);
  if (any_f64(ty, tgx)) {
    log_softmax_backward_kernel<double><<<row_grid(rows), block, 0, stream()>>>(rows, cols, y, gy, ty, gx, tgx);
  } else {
    log_softmax_backward_kernel<float><<<row_grid(rows), block, 0, stream()>>>(rows, cols, y, gy, ty, gx, tgx);
  }
  HL_LAUNCH_CHECK("log_softmax_backward_kernel");
}

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
