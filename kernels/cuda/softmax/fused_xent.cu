// Softmax ladder, rung 4: "fused_xent" — softmax, cross-entropy loss and its gradient without ever
// writing the probabilities to memory.
//
// What changes from `online`: the consumer of the softmax is folded into the kernel. For a row with
// label l, loss = log(sum(exp(x))) - x[l] = (max - x[l]) + log(d), and the gradient of the loss with
// respect to the logits is (softmax(x) - onehot(l)) * multiplier. One block per row computes the
// online (max, d) pair in one pass over the FP16 (or FP32) logits, thread 0 writes the row's loss, and
// a second pass writes the gradient in FP16 (or FP32). Math is FP32 throughout (paper §3.3); the
// gradient is rounded once, on the store.
//
// Three entry points share the kernel:
//   xent_forward   loss per row + the row statistics (max, log d): 8 bytes per row
//   xent_backward  dx from the logits and the statistics, times multiplier * grad_scale[0]
//   xent_fused     both in one launch (when the multiplier is known before the forward pass)
// The framework uses forward/backward (framework/ops.cpp cross_entropy): the gradient must be
// multiplied by the loss scale S *before* it is rounded to FP16 (paper §3.2: unscaled, many gradient
// values flush to zero in FP16), and S is only attached to the loss after the forward pass
// (scaler.scale(loss).backward()). So backward reads the upstream gradient — S / batch arrives as
// grad_scale (device memory, no host sync) and multiplier — and recomputes exp() from the logits and
// the saved statistics instead of storing an [N, C] probability matrix. Per training step this is
// one launch forward (+ the mean over rows) and one launch backward, against log_softmax + nll +
// mean forward and the mean's backward, nll_backward and log_softmax_backward for the unfused path,
// with an f32 [N, C] log-probability matrix written, kept and read back in between.
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;

enum Mode { kForward, kBackward, kFused };

template <int MODE, bool VEC, class TX, class TG>
__global__ void fused_xent_kernel(int64_t rows, int64_t cols, const TX* x, const int32_t* labels, float* loss,
                                  float* stats, const float* grad_scale, float multiplier, TG* gx) {
  const BlockGroup g;
  float mult = 0.0f;
  if constexpr (MODE != kForward) mult = multiplier * (grad_scale != nullptr ? *grad_scale : 1.0f);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TX* xr = x + r * cols;
    const int32_t label = labels[r];
    // A label outside [0, cols) makes the loss and the gradient row NaN (kernels/softmax.h), so the
    // loss scaler sees it.
    const bool bad = label < 0 || label >= cols;
    RowStats st;
    if constexpr (MODE != kBackward) {
      MaxSum s{-INFINITY, 0.0f};
      row_for_each<VEC>(xr, cols, g.rank(), g.size(), [&](int64_t, float v) { online_add(s, v); });
      s = g.merge(s);
      st = finish_stats(s.m, s.d);
      if (g.rank() == 0) {
        // (max - x[l]) + log d: no cancellation between two large numbers for large logits.
        loss[r] = bad ? NAN : (st.max - to_f32(xr[label])) + st.log_sum;
        if (stats != nullptr) {
          stats[2 * r] = st.max;
          stats[2 * r + 1] = st.log_sum;
        }
      }
    } else {
      st = {stats[2 * r], stats[2 * r + 1]};
    }
    if constexpr (MODE != kForward) {
      row_map<VEC>(xr, gx + r * cols, cols, g.rank(), g.size(), [&](int64_t c, float v) {
        return bad ? NAN : (prob(v, st) - (c == label ? 1.0f : 0.0f)) * mult;
      });
    }
  }
}

constexpr int kMaxThreads = 512;

template <int MODE, class TX, class TG>
void launch(const SoftmaxArgs& a) {
  const TX* x = static_cast<const TX*>(a.x);
  TG* gx = static_cast<TG*>(a.y);
  const int block = block_for_row(a.cols, kVec<TX>, kMaxThreads);
  const unsigned grid = grid_of(a.rows);
  float* loss = static_cast<float*>(a.loss);
  float* stats = static_cast<float*>(a.stats);
  const float* scale = static_cast<const float*>(a.grad_scale);
  const auto mult = static_cast<float>(a.multiplier);
  if (can_vectorize<TX, TG>(a.cols, x, MODE == kForward ? nullptr : gx)) {
    fused_xent_kernel<MODE, true><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, a.labels, loss, stats, scale,
                                                               mult, gx);
  } else {
    fused_xent_kernel<MODE, false><<<grid, block, 0, stream()>>>(a.rows, a.cols, x, a.labels, loss, stats, scale,
                                                                mult, gx);
  }
  HL_LAUNCH_CHECK("fused_xent_kernel");
}

void run(const SoftmaxArgs& a) {
  with_type(a.x_type, [&](auto tx) {
    using TX = decltype(tx);
    if (a.op == SoftmaxOp::xent_forward) return launch<kForward, TX, TX>(a);
    with_type(a.y_type, [&](auto tg) {
      using TG = decltype(tg);
      if (a.op == SoftmaxOp::xent_backward) {
        launch<kBackward, TX, TG>(a);
      } else {
        launch<kFused, TX, TG>(a);
      }
    });
  });
}

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::xent_forward && a.op != SoftmaxOp::xent_backward && a.op != SoftmaxOp::xent_fused)
    return "fused_xent computes cross-entropy only (softmax: warp_row, block_row, online)";
  return unsupported_types(a);
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"fused_xent", DeviceType::cuda, 50,
                                  "softmax + cross-entropy loss + gradient, no probability matrix in memory", run,
                                  unsupported});

}  // namespace hl::kernels::cuda
