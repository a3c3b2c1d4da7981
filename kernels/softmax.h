// Log-softmax and negative log-likelihood over the last dimension of a [rows, cols] matrix.
// Paper §3.3: these reductions compute in f32 even when the logits are f16; outputs are f32
// (or f64 for f64 inputs, used by gradient checks).
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace hl::kernels {

// y[r, c] = x[r, c] - max_r - log(sum_c exp(x[r, c] - max_r)). y has dtype ty (f32 or f64).
void log_softmax_forward(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, void* y,
                         DType ty);
// gx[r, c] = gy[r, c] - exp(y[r, c]) * sum_c gy[r, c]. y, gy have dtype ty; gx has dtype tgx.
void log_softmax_backward(DeviceType dev, int64_t rows, int64_t cols, const void* y, const void* gy,
                          DType ty, void* gx, DType tgx);

// loss[r] = -logp[r, label[r]]. Labels outside [0, cols) give NaN (validated on the host before).
void nll_forward(DeviceType dev, int64_t rows, int64_t cols, const void* logp, DType t,
                 const int32_t* labels, void* loss);
// glogp[r, c] = (c == label[r]) ? -gloss[r] : 0.
void nll_backward(DeviceType dev, int64_t rows, int64_t cols, const int32_t* labels, const void* gloss,
                  void* glogp, DType t);

}  // namespace hl::kernels
