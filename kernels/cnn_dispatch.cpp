// Route each pooling / batch-norm / dropout call to the backend of its device (kernels/cnn_backends.h),
// after the checks every backend relies on.
#include <cmath>

#include "kernels/cnn_backends.h"
#include "kernels/error.h"

namespace hl::kernels {

#if defined(HALFLING_WITH_CUDA)
#define HL_CNN_DISPATCH(fn, ...)                             \
  do {                                                       \
    if (dev == DeviceType::cpu) return cpu::fn(__VA_ARGS__); \
    return cuda::fn(__VA_ARGS__);                            \
  } while (0)
#else
#define HL_CNN_DISPATCH(fn, ...)                                                                        \
  do {                                                                                                  \
    if (dev == DeviceType::cpu) return cpu::fn(__VA_ARGS__);                                            \
    throw Error(#fn ": a cuda tensor reached a build without CUDA (rebuild with -DHALFLING_CUDA=ON)"); \
  } while (0)
#endif

namespace {
void check_float(DType t, const char* op) {
  HL_CHECK(t == DType::f16 || t == DType::f32 || t == DType::f64, op, ": needs f16, f32 or f64 data, got ",
           dtype_name(t));
}
void check_bn(const BatchNormShape& s, DType t, DType tp, const char* op) {
  check_float(t, op);
  HL_CHECK(s.N >= 1 && s.C >= 1 && s.HW >= 1, op, ": sizes must be >= 1, got N=", s.N, " C=", s.C, " HW=", s.HW);
  // Statistics and parameters stay f32 (f64 only for f64 gradient checks): DESIGN.md §3.
  const DType want = t == DType::f64 ? DType::f64 : DType::f32;
  HL_CHECK(tp == want, op, ": parameters and statistics must be ", dtype_name(want), " for ", dtype_name(t),
           " data, got ", dtype_name(tp));
}
}  // namespace

void check_pool2d_shape(const Pool2dShape& s, const char* op) {
  HL_CHECK(s.N >= 1 && s.C >= 1 && s.H >= 1 && s.W >= 1, op, ": input sizes must be >= 1, got [", s.N, ", ", s.C,
           ", ", s.H, ", ", s.W, "]");
  HL_CHECK(s.kh >= 1 && s.kw >= 1, op, ": the window must be at least 1x1, got ", s.kh, "x", s.kw);
  HL_CHECK(s.stride_h >= 1 && s.stride_w >= 1, op, ": strides must be >= 1, got ", s.stride_h, "x", s.stride_w);
  HL_CHECK(s.pad_h >= 0 && s.pad_w >= 0 && 2 * s.pad_h <= s.kh && 2 * s.pad_w <= s.kw, op, ": padding ", s.pad_h,
           "x", s.pad_w, " must be between 0 and half the ", s.kh, "x", s.kw, " window");
  HL_CHECK(s.kh <= s.H + 2 * s.pad_h && s.kw <= s.W + 2 * s.pad_w, op, ": the ", s.kh, "x", s.kw,
           " window is larger than the padded input ", s.H + 2 * s.pad_h, "x", s.W + 2 * s.pad_w, " (input [", s.N,
           ", ", s.C, ", ", s.H, ", ", s.W, "])");
}

void max_pool2d_forward(DeviceType dev, const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t) {
  check_pool2d_shape(s, "max_pool2d");
  check_float(t, "max_pool2d");
  HL_CHECK(s.H * s.W <= INT32_MAX, "max_pool2d: an input plane of ", s.H, "x", s.W, " overflows the i32 argmax");
  HL_CNN_DISPATCH(max_pool2d_forward, s, x, y, argmax, t);
}
void max_pool2d_backward(DeviceType dev, const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx,
                         DType t) {
  check_pool2d_shape(s, "max_pool2d_backward");
  check_float(t, "max_pool2d_backward");
  HL_CNN_DISPATCH(max_pool2d_backward, s, dy, argmax, dx, t);
}
void avg_pool2d_forward(DeviceType dev, const Pool2dShape& s, const void* x, void* y, DType t) {
  check_pool2d_shape(s, "avg_pool2d");
  check_float(t, "avg_pool2d");
  HL_CNN_DISPATCH(avg_pool2d_forward, s, x, y, t);
}
void avg_pool2d_backward(DeviceType dev, const Pool2dShape& s, const void* dy, void* dx, DType t) {
  check_pool2d_shape(s, "avg_pool2d_backward");
  check_float(t, "avg_pool2d_backward");
  HL_CNN_DISPATCH(avg_pool2d_backward, s, dy, dx, t);
}

void batch_norm_forward_train(DeviceType dev, const BatchNormShape& s, const void* x, void* y, DType t,
                              const void* gamma, const void* beta, void* running_mean, void* running_var,
                              void* save_mean, void* save_invstd, DType tp, double momentum, double eps) {
  check_bn(s, t, tp, "batch_norm");
  HL_CHECK(s.count() >= 2, "batch_norm: training needs more than one value per channel, got N=", s.N,
           " HW=", s.HW, " (use eval mode, or a larger batch)");
  HL_CHECK((running_mean == nullptr) == (running_var == nullptr),
           "batch_norm: running_mean and running_var must both be given or both be null");
  HL_CNN_DISPATCH(batch_norm_forward_train, s, x, y, t, gamma, beta, running_mean, running_var, save_mean,
                  save_invstd, tp, momentum, eps);
}
void batch_norm_forward_eval(DeviceType dev, const BatchNormShape& s, const void* x, void* y, DType t,
                             const void* gamma, const void* beta, const void* running_mean,
                             const void* running_var, DType tp, double eps) {
  check_bn(s, t, tp, "batch_norm (eval)");
  HL_CHECK(running_mean != nullptr && running_var != nullptr,
           "batch_norm (eval): evaluation mode needs running statistics");
  HL_CNN_DISPATCH(batch_norm_forward_eval, s, x, y, t, gamma, beta, running_mean, running_var, tp, eps);
}
void batch_norm_backward(DeviceType dev, const BatchNormShape& s, const void* x, const void* dy, void* dx, DType t,
                         const void* gamma, const void* save_mean, const void* save_invstd, void* dgamma,
                         void* dbeta, DType tp) {
  check_bn(s, t, tp, "batch_norm_backward");
  HL_CNN_DISPATCH(batch_norm_backward, s, x, dy, dx, t, gamma, save_mean, save_invstd, dgamma, dbeta, tp);
}

uint32_t dropout_threshold(double p) {
  HL_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  return static_cast<uint32_t>(std::llround(p * 16777216.0));  // 2^24
}

namespace {
// Forward and backward apply the same mask and scale (same seed and offset), to x or to dy.
void dropout_masked(const char* op, DeviceType dev, int64_t n, const void* in, void* out, DType t, double p,
                    uint64_t seed, uint64_t offset) {
  check_float(t, op);
  const uint32_t th = dropout_threshold(p);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  HL_CNN_DISPATCH(dropout_apply, n, in, out, t, th, scale, seed, offset);
}
}  // namespace

void dropout_forward(DeviceType dev, int64_t n, const void* x, void* y, DType t, double p, uint64_t seed,
                     uint64_t offset) {
  dropout_masked("dropout", dev, n, x, y, t, p, seed, offset);
}
void dropout_backward(DeviceType dev, int64_t n, const void* dy, void* dx, DType t, double p, uint64_t seed,
                      uint64_t offset) {
  dropout_masked("dropout_backward", dev, n, dy, dx, t, p, seed, offset);
}

}  // namespace hl::kernels
