// Differentiable ops of convolutional networks: convolution, pooling, batch norm, dropout. Like
// framework/ops.h, each checks its arguments (naming the op, shapes, dtypes and devices), computes
// through the kernels/ API (kernels/conv.h, pool.h, batchnorm.h, dropout.h) and records its backward.
//
// Precision policy (DESIGN.md §3, docs/precision.md):
//   conv2d       x and w share a dtype; f16 inputs accumulate in f32; the output has the input dtype.
//   pooling      the output has the input dtype; window sums in f32.
//   batch_norm2d x/y f16 or f32 (f64 for gradient checks); gamma, beta and the running statistics are
//                f32 (f64 with f64 x) in every mode, and the statistics are computed in f32 or better:
//                under `mixed`, an f16 activation is normalized with f32 statistics.
//   dropout      the output has the input dtype.
// All activations are NCHW.
#pragma once
#include <array>
#include <cstdint>

#include "framework/tensor.h"

namespace hl {

using Size2 = std::array<int64_t, 2>;  // {height, width}

// y[N,K,P,Q] = conv(x[N,C,H,W], w[K,C,R,S]) + b[K] (optional), then ReLU when fused_relu (computed in
// the kernel's epilogue). b may have any float dtype. The variant comes from the conv registry
// (HALFLING_CONV, --conv). An empty input (N = 0, or any zero dim) is refused with an error naming it,
// where PyTorch returns an empty output; batch_norm2d and pooling refuse it too.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Size2 stride = {1, 1},
              Size2 padding = {0, 0}, bool fused_relu = false);

// Max pooling; stride defaults to the window ({0, 0} means "= kernel"). Ties: the first maximum in
// the window wins; NaN propagates (kernels/pool.h).
Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride = {0, 0}, Size2 padding = {0, 0});
// Average pooling (padding counts as zeros, divisor kh*kw).
Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride = {0, 0}, Size2 padding = {0, 0});
// [N, C, H, W] -> [N, C]: the mean of each plane.
Tensor global_avg_pool2d(const Tensor& x);

// Batch normalization over (N, H, W) per channel. training: batch statistics, and running_mean /
// running_var (if defined) are updated in place with `momentum` (unbiased variance, like PyTorch).
// !training: the running statistics normalize. gamma/beta: [C] parameters (differentiable).
Tensor batch_norm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// Inverted dropout: in training each element is zeroed with probability p and the rest scaled by
// 1/(1-p); the mask comes from a counter-based hash of (seed, index), identical on CPU and GPU, and is
// regenerated in the backward pass. Not training, or p == 0: x itself. p == 1: x * 0, as PyTorch (zeros,
// NaN where x is NaN or infinite; a zero gradient), with no mask drawn.
Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed);
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);  // seed = gen.next_u64()

}  // namespace hl
