// Differentiable ops. Each one checks its arguments (naming the op, shapes, dtypes and devices in
// any error), computes through the kernels/ API, and records its backward (framework/autograd.h).
//
// Precision policy (DESIGN.md §3, docs/precision.md): matmul/linear keep the dtype of their inputs
// (f16 x f16 -> f16 with f32 accumulation); log_softmax, cross_entropy, sum and mean compute in f32
// and return f32 for f16 inputs; a binary op with one f16 and one f32 input promotes to f32.
#pragma once
#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "kernels/dtype.h"

namespace hl {

// The dtype a binary op returns (f16 < f32 < f64; i32 is not accepted by arithmetic).
DType promote(DType a, DType b);

// ---- elementwise, with broadcasting (numpy rules: trailing dims align, size-1 dims stretch) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor rsub(double s, const Tensor& a);  // s - a
Tensor rdiv(double s, const Tensor& a);  // s / a
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);  // rounded once, as div(); f16: a * (1/s) in FP32, rounded once
Tensor operator-(const Tensor& a);

// ---- dtype ----
Tensor cast(const Tensor& a, DType t);  // differentiable; the gradient is cast back

// ---- reductions (f32 math; f16 inputs give f32 outputs) ----
Tensor sum(const Tensor& a);                                             // all elements -> scalar
// Over the dims named (negative counts from the end; each at most once). An empty list reduces nothing
// (a copy in the reduction's dtype), where PyTorch's sum(x, dim=[]) reduces every dim: sum(a) does that.
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
// Sum `a` down to `shape` (the inverse of broadcasting; used by the backward of binary ops).
Tensor sum_to(const Tensor& a, const Shape& shape);

// ---- linear algebra ----
// [M, K] x [K, N] -> [M, N]; either operand may be read transposed (trans_a: a is [K, M]).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x [N, in] * W[out, in]^T + b[out] -> [N, out], with an optional fused ReLU epilogue.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), bool fused_relu = false);

// ---- shape (views) ----
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor flatten(const Tensor& a, int64_t start_dim = 1);

// ---- classification ----
// Log-softmax over the last dimension of a 2-D tensor; f32 (f64 for f64 input) output.
Tensor log_softmax(const Tensor& logits);
// Mean negative log-likelihood of i32 labels [N] under log-probabilities [N, C].
Tensor nll_loss(const Tensor& logp, const Tensor& labels);
// Mean cross-entropy of i32 labels [N] under logits [N, C], f32 math, f32 loss (f64 for f64 logits);
// the gradient has the logits' dtype. Fused (kernels/softmax.h xent_forward / xent_backward: the
// fused_xent rung on the GPU): equal to cross_entropy_unfused up to rounding. Labels outside [0, C)
// are an error on the CPU and give a NaN loss and gradient on the GPU. An all -inf row gives NaN.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
// nll_loss(log_softmax(logits), labels): the textbook composition (and what cross_entropy falls back
// to when a pinned softmax rung has no fused loss), kept for comparisons and teaching.
Tensor cross_entropy_unfused(const Tensor& logits, const Tensor& labels);
// Index of the largest value in each row of [N, C] -> i32 [N]. Not differentiable.
Tensor argmax(const Tensor& a);
// Fraction of rows whose argmax equals the label. Reads one number back to the host.
double accuracy(const Tensor& logits, const Tensor& labels);
// Number of rows whose argmax equals the label, as an i32 scalar tensor left on the device.
Tensor correct_count(const Tensor& logits, const Tensor& labels);

}  // namespace hl
