// The cross-entropy kernels run both ways the framework can run them, shared by the CPU and CUDA
// softmax tests (test_softmax_cpu.cpp, test_softmax_cuda.cpp), which compare the two results with
// each other and with the reference of tests/kernels/softmax_reference.h.
#pragma once
#include <cstdint>
#include <limits>

#include "framework/tensor.h"
#include "kernels/softmax.h"

namespace hl::test {

struct XentRuns {
  kernels::SoftmaxArgs forward;  // the xent_forward call (its pointers stay valid while this lives)
  Tensor loss, stats, g;         // xent_forward, then xent_backward from its statistics
  Tensor loss_fused, g_fused;    // xent_fused, without statistics
};

// What every output holds before the kernels run: the losses (loss, loss_fused), the statistics and
// the gradients (g, g_fused).
struct XentFill {
  double loss, stats, grad;
};

// NaN: an element left alone where a number is due fails. It cannot show one left alone where NaN is
// due (a bad label, a row without a finite maximum): a kernel that skips such rows passes.
inline XentFill xent_nan_fill() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {nan, nan, nan};
}

// Finite values no correct kernel writes, for the rows where NaN is due. Losses -1: a loss is
// (max - x[label]) + log(sum(exp(x - max))), both terms >= 0 also as computed (the sum holds
// exp(0) = 1), or +inf, or NaN. Statistics -1: finite, so that xent_backward reading statistics that
// xent_forward left alone computes numbers where NaN is due. Gradients 60000 (1875 * 32, exact in FP16):
// |grad| = |softmax - onehot| * multiplier * grad_scale[0] <= multiplier * grad_scale[0], which the
// caller keeps far below 60000.
inline XentFill xent_sentinel_fill() { return {-1.0, -1.0, 60000.0}; }

// Logits x [rows, cols] (f16 or f32, on x's device), i32 labels on the same device, grad_scale an f32
// scalar there: the loss and statistics are f32, the gradient has dtype tg and is scaled by
// grad_scale[0] * multiplier. Every output is filled with `fill` first (NaN unless given); the registry
// picks the variants.
inline XentRuns run_xent_split_and_fused(const Tensor& x, const Tensor& labels, const Tensor& grad_scale,
                                         double multiplier, DType tg, const XentFill& fill = xent_nan_fill()) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const Device dev = x.device();
  XentRuns out{{},
               Tensor::full({rows}, fill.loss, DType::f32, dev),
               Tensor::full({rows, 2}, fill.stats, DType::f32, dev),
               Tensor::full({rows, cols}, fill.grad, tg, dev),
               Tensor::full({rows}, fill.loss, DType::f32, dev),
               Tensor::full({rows, cols}, fill.grad, tg, dev)};
  kernels::SoftmaxArgs a;
  a.device = dev;
  a.rows = rows;
  a.cols = cols;
  a.x = x.data_ptr();
  a.x_type = x.dtype();
  a.labels = labels.data<int32_t>();
  a.stat_type = DType::f32;
  a.grad_scale = grad_scale.data_ptr();
  a.multiplier = multiplier;
  a.y_type = tg;
  a.op = kernels::SoftmaxOp::xent_forward;
  a.loss = out.loss.data_ptr();
  a.stats = out.stats.data_ptr();
  kernels::softmax(a);
  out.forward = a;
  a.op = kernels::SoftmaxOp::xent_backward;
  a.y = out.g.data_ptr();
  kernels::softmax(a);
  a.op = kernels::SoftmaxOp::xent_fused;
  a.loss = out.loss_fused.data_ptr();
  a.stats = nullptr;
  a.y = out.g_fused.data_ptr();
  kernels::softmax(a);
  return out;
}

}  // namespace hl::test
