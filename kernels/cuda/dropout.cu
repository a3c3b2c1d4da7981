// CUDA dropout (kernels/dropout.h): the mask bit of element i is dropout_keep(seed, offset + i), the
// same host/device function the CPU calls, so both backends drop exactly the same elements.
//
// No ladder: this is the only version, an elementwise pass bound by memory bandwidth. Paper: none of
// the three techniques of §3; it keeps FP16 tensors FP16 (the scale 1/(1-p) applied in FP32 and rounded
// once on the store, as the other elementwise kernels do).
#include "kernels/cnn_backends.h"
#include "kernels/cuda/common.cuh"

namespace hl::kernels::cuda {

namespace {

__global__ void dropout_kernel(int64_t n, const void* x, void* y, DType t, uint32_t threshold, float scale,
                               uint64_t seed, uint64_t offset) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    const bool keep = dropout_keep(seed, offset + static_cast<uint64_t>(i), threshold);
    store_float(y, t, i, keep ? load_float(x, t, i) * scale : 0.0f);
  }
}

}  // namespace

void dropout_apply(int64_t n, const void* x, void* y, DType t, uint32_t threshold, float scale, uint64_t seed,
                   uint64_t offset) {
  HL_CHECK(t == DType::f16 || t == DType::f32, "dropout: the CUDA kernel takes f16 or f32, got ", dtype_name(t));
  if (n == 0) return;
  dropout_kernel<<<grid_for(n), kBlock, 0, stream()>>>(n, x, y, t, threshold, scale, seed, offset);
  HL_LAUNCH_CHECK("dropout_kernel");
}

}  // namespace hl::kernels::cuda
