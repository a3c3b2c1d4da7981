// Elementwise kernels: unary, binary with broadcasting, scalar, cast, fill.
// Hand-written on both backends (DESIGN.md §2); math in f32 (f64 for f64 tensors), f16 rounded on store.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace hl::kernels {

constexpr int kMaxDims = 8;

// How a binary op walks its operands: the output shape and, for each input, the element stride of
// every output dimension (0 where that input is broadcast along it). Made by framework/ops.cpp.
struct BroadcastIndex {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride_a[kMaxDims] = {};
  int64_t stride_b[kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

enum class BinaryOp : uint8_t { add, sub, mul, div };
// out[i] = a[ia(i)] op b[ib(i)]. a, b and out may have different floating dtypes (promotion).
void binary(DeviceType dev, BinaryOp op, const BroadcastIndex& ix, const void* a, DType ta,
            const void* b, DType tb, void* out, DType tout);

enum class UnaryOp : uint8_t { neg, relu, exp, log };
void unary(DeviceType dev, UnaryOp op, int64_t n, const void* x, DType tx, void* out, DType tout);

// grad_in[i] = x[i] > 0 ? grad_out[i] : 0. All three tensors share dtype t.
void relu_backward(DeviceType dev, int64_t n, const void* x, const void* grad_out, void* grad_in, DType t);

enum class ScalarOp : uint8_t { add, mul, rsub /* s - x */, rdiv /* s / x */, pow /* x^s */ };
void scalar(DeviceType dev, ScalarOp op, int64_t n, const void* x, double s, void* out, DType t);

// Convert between any two dtypes (float -> i32 truncates toward zero, saturates, and takes NaN to 0:
// saturating_i32 in dtype.h; f16 rounds to nearest even).
void cast(DeviceType dev, int64_t n, const void* x, DType tx, void* out, DType tout);
// out[i] = value, converted to t (to i32 by the cast's rule).
void fill(DeviceType dev, int64_t n, void* out, DType t, double value);

}  // namespace hl::kernels
