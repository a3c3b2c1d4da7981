// CUDA pooling (kernels/pool.h has the semantics; kernels/cpu/pool_cpu.cpp is the reference).
//
// One thread per output element in the forward passes; one thread per input element in the backward
// passes, which gather the windows containing their element instead of scattering with atomics: the
// result is deterministic and identical to the CPU's summation order. Window arithmetic is f32 and
// the result is rounded once on the store (paper §3.3: reductions in FP32).
#include "kernels/cnn_backends.h"
#include "kernels/cuda/common.cuh"
#include "kernels/pool_window.h"

namespace hl::kernels::cuda {

namespace {

__global__ void max_pool_forward_kernel(Pool2dShape s, const void* x, void* y, int32_t* argmax, DType t) {
  const int64_t P = s.P(), Q = s.Q(), total = s.N * s.C * P * Q;
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t q = o % Q, p = (o / Q) % P, pl = o / (P * Q);
    const int64_t base = pl * s.H * s.W;
    float best = -INFINITY;
    int32_t where = -1;
    for_each_in_window(s, p, q, [&](int64_t h, int64_t w) {
      max_pool_take(load_float(x, t, base + h * s.W + w), static_cast<int32_t>(h * s.W + w), best, where);
    });
    store_float(y, t, o, best);
    argmax[o] = where;
  }
}

__global__ void max_pool_backward_kernel(Pool2dShape s, const void* dy, const int32_t* argmax, void* dx, DType t) {
  const int64_t P = s.P(), Q = s.Q(), total = s.N * s.C * s.H * s.W;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t w = i % s.W, h = (i / s.W) % s.H, pl = i / (s.H * s.W);
    const int32_t me = static_cast<int32_t>(h * s.W + w);
    float acc = 0.0f;
    for_each_window_containing(s, h, w, [&](int64_t p, int64_t q) {
      const int64_t o = (pl * P + p) * Q + q;
      if (argmax[o] == me) acc += load_float(dy, t, o);
    });
    store_float(dx, t, i, acc);
  }
}

__global__ void avg_pool_forward_kernel(Pool2dShape s, const void* x, void* y, DType t) {
  const int64_t P = s.P(), Q = s.Q(), total = s.N * s.C * P * Q;
  const float inv = 1.0f / static_cast<float>(s.kh * s.kw);
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t q = o % Q, p = (o / Q) % P, pl = o / (P * Q);
    const int64_t base = pl * s.H * s.W;
    float acc = 0.0f;
    for_each_in_window(s, p, q, [&](int64_t h, int64_t w) { acc += load_float(x, t, base + h * s.W + w); });
    store_float(y, t, o, acc * inv);
  }
}

__global__ void avg_pool_backward_kernel(Pool2dShape s, const void* dy, void* dx, DType t) {
  const int64_t P = s.P(), Q = s.Q(), total = s.N * s.C * s.H * s.W;
  const float inv = 1.0f / static_cast<float>(s.kh * s.kw);
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t w = i % s.W, h = (i / s.W) % s.H, pl = i / (s.H * s.W);
    float acc = 0.0f;
    for_each_window_containing(s, h, w,
                               [&](int64_t p, int64_t q) { acc += load_float(dy, t, (pl * P + p) * Q + q); });
    store_float(dx, t, i, acc * inv);
  }
}

void check_gpu_dtype(DType t, const char* op) {
  HL_CHECK(t == DType::f16 || t == DType::f32, op, ": the CUDA kernels take f16 or f32, got ", dtype_name(t),
           " (f64 runs on the CPU, for gradient checks)");
}

}  // namespace

void max_pool2d_forward(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t) {
  check_gpu_dtype(t, "max_pool2d");
  const int64_t n = s.N * s.C * s.P() * s.Q();
  max_pool_forward_kernel<<<grid_for(n), kBlock, 0, stream()>>>(s, x, y, argmax, t);
  HL_LAUNCH_CHECK("max_pool_forward_kernel");
}
void max_pool2d_backward(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t) {
  check_gpu_dtype(t, "max_pool2d_backward");
  const int64_t n = s.N * s.C * s.H * s.W;
  max_pool_backward_kernel<<<grid_for(n), kBlock, 0, stream()>>>(s, dy, argmax, dx, t);
  HL_LAUNCH_CHECK("max_pool_backward_kernel");
}
void avg_pool2d_forward(const Pool2dShape& s, const void* x, void* y, DType t) {
  check_gpu_dtype(t, "avg_pool2d");
  const int64_t n = s.N * s.C * s.P() * s.Q();
  avg_pool_forward_kernel<<<grid_for(n), kBlock, 0, stream()>>>(s, x, y, t);
  HL_LAUNCH_CHECK("avg_pool_forward_kernel");
}
void avg_pool2d_backward(const Pool2dShape& s, const void* dy, void* dx, DType t) {
  check_gpu_dtype(t, "avg_pool2d_backward");
  const int64_t n = s.N * s.C * s.H * s.W;
  avg_pool_backward_kernel<<<grid_for(n), kBlock, 0, stream()>>>(s, dy, dx, t);
  HL_LAUNCH_CHECK("avg_pool_backward_kernel");
}

}  // namespace hl::kernels::cuda
