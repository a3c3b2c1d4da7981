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

// Logits x [rows, cols] (f16 or f32, on x's device), i32 labels on the same device, grad_scale an f32
// scalar there: the loss and statistics are f32, the gradient has dtype tg and is scaled by
// grad_scale[0] * multiplier. Every output is poisoned with NaN first; the registry picks the variants.
inline XentRuns run_xent_split_and_fused(const Tensor& x, const Tensor& labels, const Tensor& grad_scale,
                                         double multiplier, DType tg) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const Device dev = x.device();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  XentRuns out{{},
               Tensor::full({rows}, nan, DType::f32, dev),
               Tensor::full({rows, 2}, nan, DType::f32, dev),
               Tensor::full({rows, cols}, nan, tg, dev),
               Tensor::full({rows}, nan, DType::f32, dev),
               Tensor::full({rows, cols}, nan, tg, dev)};
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
