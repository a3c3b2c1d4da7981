// CPU pooling (kernels/pool.h has the semantics): the reference for the CUDA kernels.
#include <limits>

#include "kernels/cnn_backends.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/pool_window.h"

namespace hl::kernels::cpu {

void max_pool2d_forward(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t) {
  visit_floating(t, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
#pragma omp parallel for if (planes * P * Q > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* in = px + pl * s.H * s.W;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          C best = -std::numeric_limits<C>::infinity();
          int32_t where = -1;
          for_each_in_window(s, p, q, [&](int64_t h, int64_t w) {
            max_pool_take(load(in, h * s.W + w), static_cast<int32_t>(h * s.W + w), best, where);
          });
          const int64_t o = (pl * P + p) * Q + q;
          store(py, o, best);
          argmax[o] = where;
        }
    }
  });
}

void max_pool2d_backward(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t) {
  visit_floating(t, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    // A local copy: clang rejects a lambda inside an OpenMP region that names a parameter of the
    // enclosing function ("reference to local variable declared in enclosing function").
    const int32_t* am = argmax;
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
#pragma omp parallel for if (planes * s.H * s.W > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) {
          C acc = 0;
          const int32_t me = static_cast<int32_t>(h * s.W + w);
          for_each_window_containing(s, h, w, [&](int64_t p, int64_t q) {
            const int64_t o = (pl * P + p) * Q + q;
            if (am[o] == me) acc += load(pdy, o);
          });
          store(pdx, (pl * s.H + h) * s.W + w, acc);
        }
  });
}

void avg_pool2d_forward(const Pool2dShape& s, const void* x, void* y, DType t) {
  visit_floating(t, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
    const C inv = C(1) / static_cast<C>(s.kh * s.kw);
#pragma omp parallel for if (planes * P * Q > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* in = px + pl * s.H * s.W;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          C acc = 0;
          for_each_in_window(s, p, q, [&](int64_t h, int64_t w) { acc += load(in, h * s.W + w); });
          store(py, (pl * P + p) * Q + q, acc * inv);
        }
    }
  });
}

void avg_pool2d_backward(const Pool2dShape& s, const void* dy, void* dx, DType t) {
  visit_floating(t, "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
    const C inv = C(1) / static_cast<C>(s.kh * s.kw);
#pragma omp parallel for if (planes * s.H * s.W > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) {
          C acc = 0;
          for_each_window_containing(s, h, w,
                                     [&](int64_t p, int64_t q) { acc += load(pdy, (pl * P + p) * Q + q); });
          store(pdx, (pl * s.H + h) * s.W + w, acc * inv);
        }
  });
}

}  // namespace hl::kernels::cpu
