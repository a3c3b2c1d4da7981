// CPU batch norm (kernels/batchnorm.h has the semantics). Per-channel sums accumulate in double, so
// the CPU is the accurate reference the GPU's f32 reductions are compared with; results are stored
// in the parameter dtype (f32, or f64 for gradient checks).
#include <cmath>

#include "kernels/cnn_backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

namespace {

template <class F>
void visit_param(DType tp, F&& f) {
  if (tp == DType::f64) {
    f(double{});
  } else {
    f(float{});
  }
}

}  // namespace

void batch_norm_forward_train(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma,
                              const void* beta, void* running_mean, void* running_var, void* save_mean,
                              void* save_invstd, DType tp, double momentum, double eps) {
  visit_floating(t, "batch_norm", [&](auto tag) {
    visit_param(tp, [&](auto ptag) {
      using T = decltype(tag);
      using Pm = decltype(ptag);
      const T* px = static_cast<const T*>(x);
      T* py = static_cast<T*>(y);
      const Pm* g = static_cast<const Pm*>(gamma);
      const Pm* b = static_cast<const Pm*>(beta);
      const int64_t M = s.count();
#pragma omp parallel for if (s.C > 1 && s.N * s.C * s.HW > kParallelThreshold)
      for (int64_t c = 0; c < s.C; ++c) {
        // Two passes: the mean, then the mean squared deviation from it (no cancellation).
        double sum = 0;
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) sum += static_cast<double>(load(px, (n * s.C + c) * s.HW + i));
        const double mean = sum / static_cast<double>(M);
        double sq = 0;
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) {
            const double d = static_cast<double>(load(px, (n * s.C + c) * s.HW + i)) - mean;
            sq += d * d;
          }
        const double var = sq / static_cast<double>(M);
        // Rounded to the parameter dtype first: the normalization uses exactly the saved statistics,
        // as the backward pass and the GPU do.
        const Pm m = static_cast<Pm>(mean);
        const Pm inv = static_cast<Pm>(1.0 / std::sqrt(var + eps));
        static_cast<Pm*>(save_mean)[c] = m;
        static_cast<Pm*>(save_invstd)[c] = inv;
        if (running_mean != nullptr) {
          Pm* rm = static_cast<Pm*>(running_mean);
          Pm* rv = static_cast<Pm*>(running_var);
          const double unbiased = sq / static_cast<double>(M - 1);
          rm[c] = static_cast<Pm>((1.0 - momentum) * static_cast<double>(rm[c]) + momentum * mean);
          rv[c] = static_cast<Pm>((1.0 - momentum) * static_cast<double>(rv[c]) + momentum * unbiased);
        }
        // y = (x - mean) * scale + beta, not x * scale + (beta - mean * scale): with a small spread
        // scale is large, and the folded form's rounding of x * scale swamps y (kernels/cuda/batchnorm.cu).
        using Cm = compute_t<T>;  // f32 (f64 for f64 data), like the GPU
        const Cm scale = static_cast<Cm>(g[c]) * static_cast<Cm>(inv);
        const Cm mc = static_cast<Cm>(m), bc = static_cast<Cm>(b[c]);
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) {
            const int64_t o = (n * s.C + c) * s.HW + i;
            store(py, o, (static_cast<Cm>(load(px, o)) - mc) * scale + bc);
          }
      }
    });
  });
}

void batch_norm_forward_eval(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma,
                             const void* beta, const void* running_mean, const void* running_var, DType tp,
                             double eps) {
  visit_floating(t, "batch_norm (eval)", [&](auto tag) {
    visit_param(tp, [&](auto ptag) {
      using T = decltype(tag);
      using Pm = decltype(ptag);
      using Cm = compute_t<T>;
      const T* px = static_cast<const T*>(x);
      T* py = static_cast<T*>(y);
      const Pm* g = static_cast<const Pm*>(gamma);
      const Pm* b = static_cast<const Pm*>(beta);
      const Pm* rm = static_cast<const Pm*>(running_mean);
      const Pm* rv = static_cast<const Pm*>(running_var);
#pragma omp parallel for if (s.C > 1 && s.N * s.C * s.HW > kParallelThreshold)
      for (int64_t c = 0; c < s.C; ++c) {
        const Pm inv = static_cast<Pm>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
        const Cm scale = static_cast<Cm>(g[c]) * static_cast<Cm>(inv);
        const Cm mc = static_cast<Cm>(rm[c]), bc = static_cast<Cm>(b[c]);
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) {
            const int64_t o = (n * s.C + c) * s.HW + i;
            store(py, o, (static_cast<Cm>(load(px, o)) - mc) * scale + bc);
          }
      }
    });
  });
}

void batch_norm_backward(const BatchNormShape& s, const void* x, const void* dy, void* dx, DType t,
                         const void* gamma, const void* save_mean, const void* save_invstd, void* dgamma,
                         void* dbeta, DType tp) {
  visit_floating(t, "batch_norm_backward", [&](auto tag) {
    visit_param(tp, [&](auto ptag) {
      using T = decltype(tag);
      using Pm = decltype(ptag);
      using Cm = compute_t<T>;
      const T* px = static_cast<const T*>(x);
      const T* pdy = static_cast<const T*>(dy);
      T* pdx = static_cast<T*>(dx);
      const int64_t M = s.count();
#pragma omp parallel for if (s.C > 1 && s.N * s.C * s.HW > kParallelThreshold)
      for (int64_t c = 0; c < s.C; ++c) {
        const double mean = static_cast<double>(static_cast<const Pm*>(save_mean)[c]);
        const double inv = static_cast<double>(static_cast<const Pm*>(save_invstd)[c]);
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) {
            const int64_t o = (n * s.C + c) * s.HW + i;
            const double g = static_cast<double>(load(pdy, o));
            sdy += g;
            sdyx += g * (static_cast<double>(load(px, o)) - mean) * inv;
          }
        static_cast<Pm*>(dbeta)[c] = static_cast<Pm>(sdy);
        static_cast<Pm*>(dgamma)[c] = static_cast<Pm>(sdyx);
        // dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat))
        const Cm k = static_cast<Cm>(static_cast<double>(static_cast<const Pm*>(gamma)[c]) * inv);
        const Cm mdy = static_cast<Cm>(sdy / static_cast<double>(M));
        const Cm mdyx = static_cast<Cm>(sdyx / static_cast<double>(M));
        const Cm cm = static_cast<Cm>(mean), ci = static_cast<Cm>(inv);
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t i = 0; i < s.HW; ++i) {
            const int64_t o = (n * s.C + c) * s.HW + i;
            const Cm xhat = (load(px, o) - cm) * ci;
            store(pdx, o, k * (load(pdy, o) - mdy - xhat * mdyx));
          }
      }
    });
  });
}

}  // namespace hl::kernels::cpu
