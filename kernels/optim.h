// Optimizer update kernels. The parameter is updated in place from its gradient.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace hl::kernels {

struct SgdParams {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  bool first_step = false;  // PyTorch semantics: the momentum buffer starts as the first gradient
};

// PyTorch's SGD: g = grad + wd*p; buf = first ? g : momentum*buf + (1-dampening)*g;
// g = nesterov ? g + momentum*buf : buf; p -= lr*g. param/grad/momentum_buf share dtype t
// (f32 or f16; the arithmetic is f32 either way). momentum_buf may be null when momentum == 0.
void sgd_step(DeviceType dev, int64_t n, void* param, const void* grad, void* momentum_buf, DType t,
              const SgdParams& p);

}  // namespace hl::kernels
