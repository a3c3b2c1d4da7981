// CPU dropout (kernels/dropout.h): the same counter-based hash as the GPU, so the same mask.
#include "kernels/cnn_backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

void dropout_apply(int64_t n, const void* x, void* y, DType t, uint32_t threshold, float scale, uint64_t seed,
                   uint64_t offset) {
  visit_floating(t, "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const C sc = static_cast<C>(scale);
#pragma omp parallel for if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = dropout_keep(seed, offset + static_cast<uint64_t>(i), threshold);
      store(py, i, keep ? load(px, i) * sc : C(0));
    }
  });
}

}  // namespace hl::kernels::cpu
