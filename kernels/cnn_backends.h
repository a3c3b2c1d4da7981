// The per-backend entry points behind kernels/pool.h, kernels/batchnorm.h and kernels/dropout.h, in
// the style of kernels/backends.h (kept in a file of their own so that the convolutional-network
// kernels can be read, and grow, apart from the MLP ones). The public functions take a DeviceType
// and dispatch here (kernels/cnn_dispatch.cpp). Convolution dispatches through its variant
// registry instead (kernels/conv.h).
#pragma once
#include <cstdint>

#include "kernels/batchnorm.h"
#include "kernels/dropout.h"
#include "kernels/dtype.h"
#include "kernels/pool.h"

#define HL_DECLARE_CNN_BACKEND_KERNELS                                                                       \
  void max_pool2d_forward(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t);         \
  void max_pool2d_backward(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t); \
  void avg_pool2d_forward(const Pool2dShape& s, const void* x, void* y, DType t);                          \
  void avg_pool2d_backward(const Pool2dShape& s, const void* dy, void* dx, DType t);                       \
  void batch_norm_forward_train(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma, \
                                const void* beta, void* running_mean, void* running_var, void* save_mean,  \
                                void* save_invstd, DType tp, double momentum, double eps);                  \
  void batch_norm_forward_eval(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma,  \
                               const void* beta, const void* running_mean, const void* running_var, DType tp, \
                               double eps);                                                                 \
  void batch_norm_backward(const BatchNormShape& s, const void* x, const void* dy, void* dx, DType t,       \
                           const void* gamma, const void* save_mean, const void* save_invstd, void* dgamma, \
                           void* dbeta, DType tp);                                                          \
  void dropout_apply(int64_t n, const void* x, void* y, DType t, uint32_t threshold, float scale,            \
                     uint64_t seed, uint64_t offset);

namespace hl::kernels::cpu {
HL_DECLARE_CNN_BACKEND_KERNELS
// The general max-pooling paths (any window, stride, padding), which max_pool2d_forward/backward
// above use unless a fast path applies (kernels/cpu/pool_cpu.cpp): public so that the tests can hold
// each fast path to them bit for bit.
void max_pool2d_forward_general(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t);
void max_pool2d_backward_general(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t);
}  // namespace hl::kernels::cpu

#if defined(HALFLING_WITH_CUDA)
namespace hl::kernels::cuda {
HL_DECLARE_CNN_BACKEND_KERNELS
}  // namespace hl::kernels::cuda
#endif
