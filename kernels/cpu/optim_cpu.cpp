// CPU optimizer updates (PyTorch's SGD semantics, see kernels/optim.h).
#include "kernels/backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

void sgd_step(int64_t n, void* param, const void* grad, void* momentum_buf, DType t, const SgdParams& sp) {
  visit_floating(t, "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buf);
    const C lr = static_cast<C>(sp.lr), mom = static_cast<C>(sp.momentum), wd = static_cast<C>(sp.weight_decay),
            damp = static_cast<C>(sp.dampening);
    const bool use_mom = sp.momentum != 0.0;
    HL_CHECK(!use_mom || buf != nullptr, "sgd_step: momentum ", sp.momentum, " needs a momentum buffer");
#pragma omp parallel for if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      C d = load(g, i) + wd * load(p, i);
      if (use_mom) {
        const C b = sp.first_step ? d : mom * load(buf, i) + (C(1) - damp) * d;
        store(buf, i, b);
        d = sp.nesterov ? d + mom * b : b;
      }
      store(p, i, load(p, i) - lr * d);
    }
  });
}

}  // namespace hl::kernels::cpu
