// CUDA SGD update with PyTorch's semantics (kernels/optim.h), one thread per parameter element.
//
// The arithmetic is FP32 whatever the storage: with FP16 parameters (the `fp16` precision mode) the
// result is rounded to FP16 on the store, which is exactly where small updates are lost (paper §3.1:
// an update below half an FP16 ulp of the weight vanishes). The `mixed` mode avoids that by giving
// this kernel FP32 master weights instead.
#include "kernels/backends.h"
#include "kernels/cuda/common.cuh"

namespace hl::kernels::cuda {

namespace {

// The scalars, converted once on the host to the compute type.
struct SgdScalars {
  float lr, momentum, weight_decay, dampening;
  bool use_momentum, nesterov, first_step;
};

__global__ void sgd_kernel(int64_t n, void* param, const void* grad, void* momentum_buf, DType t, SgdScalars s) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    const float p = load_float(param, t, i);
    float d = load_float(grad, t, i) + s.weight_decay * p;
    if (s.use_momentum) {
      // PyTorch: the buffer starts as the first gradient, then is an exponential moving sum.
      const float buf = s.first_step ? d : s.momentum * load_float(momentum_buf, t, i) + (1.0f - s.dampening) * d;
      store_float(momentum_buf, t, i, buf);
      d = s.nesterov ? d + s.momentum * buf : buf;
    }
    store_float(param, t, i, p - s.lr * d);
  }
}

}  // namespace

void sgd_step(int64_t n, void* param, const void* grad, void* momentum_buf, DType t, const SgdParams& p) {
  HL_CHECK(t == DType::f32 || t == DType::f16, "sgd_step: CUDA parameters must be f32 or f16, got ", dtype_name(t));
  const bool use_momentum = p.momentum != 0.0;
  HL_CHECK(!use_momentum || momentum_buf != nullptr, "sgd_step: momentum ", p.momentum, " needs a momentum buffer");
  if (n == 0) return;
  const SgdScalars s{static_cast<float>(p.lr),           static_cast<float>(p.momentum),
                     static_cast<float>(p.weight_decay), static_cast<float>(p.dampening),
                     use_momentum,                       p.nesterov,
                     p.first_step};
  sgd_kernel<<<grid_for(n), kBlock, 0, stream()>>>(n, param, grad, momentum_buf, t, s);
  HL_LAUNCH_CHECK("sgd_kernel");
}

}  // namespace hl::kernels::cuda
