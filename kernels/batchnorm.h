// BatchNorm2d (Ioffe & Szegedy 2015) over NCHW activations: per channel c,
//   y = gamma[c] * (x - mean[c]) * invstd[c] + beta[c],   invstd = 1 / sqrt(var + eps)
// with mean/var the batch statistics over (N, H, W) in training and the running statistics in
// evaluation. Training also updates the running statistics the way PyTorch does:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)   (unbiased, M = N*H*W)
// while the normalization itself uses the biased var.
//
// Precision (paper §3.3, DESIGN.md §3: batch-norm statistics and parameters stay FP32): x, y, dy and
// dx share one dtype t (f16 or f32; f64 on the CPU for gradient checks); gamma, beta, the running
// statistics, the saved statistics and dgamma/dbeta have dtype tp = f32 (f64 exactly when t is f64).
// Statistics are computed with two passes (mean first, then the mean of squared deviations), never
// as E[x^2] - E[x]^2 (which cancels catastrophically) and never in f16: an f16 input whose variance
// exceeds 65504 (the f16 maximum) still gives finite f32 statistics. The CPU accumulates in double,
// the GPU in f32.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace hl::kernels {

struct BatchNormShape {
  int64_t N = 0, C = 0, HW = 0;  // x is [N, C, HW] (HW = H*W; 1 for BatchNorm1d-style input)
  int64_t count() const { return N * HW; }
};

// Training forward. running_mean / running_var may be null (no running statistics are kept).
// save_mean[C] and save_invstd[C] (dtype tp) receive the batch statistics for the backward pass.
// Needs count() >= 2 (an unbiased variance of one value is undefined).
void batch_norm_forward_train(DeviceType dev, const BatchNormShape& s, const void* x, void* y, DType t,
                              const void* gamma, const void* beta, void* running_mean, void* running_var,
                              void* save_mean, void* save_invstd, DType tp, double momentum, double eps);

// Evaluation forward: normalizes with the running statistics.
void batch_norm_forward_eval(DeviceType dev, const BatchNormShape& s, const void* x, void* y, DType t,
                             const void* gamma, const void* beta, const void* running_mean,
                             const void* running_var, DType tp, double eps);

// Backward of the training forward (batch statistics):
//   dbeta  = sum dy,   dgamma = sum dy * xhat,
//   dx     = gamma * invstd / M * (M * dy - dbeta - xhat * dgamma)
// dx has dtype t; dgamma, dbeta have dtype tp and are overwritten (the framework accumulates).
void batch_norm_backward(DeviceType dev, const BatchNormShape& s, const void* x, const void* dy, void* dx, DType t,
                         const void* gamma, const void* save_mean, const void* save_invstd, void* dgamma,
                         void* dbeta, DType tp);

}  // namespace hl::kernels
