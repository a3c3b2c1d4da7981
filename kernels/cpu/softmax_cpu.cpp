// CPU log-softmax and NLL. Paper §3.3: the exponentials and the row sums are computed in wide
// precision (double here) whatever the input dtype; outputs are f32 (f64 for gradient checks).
#include <cmath>
#include <limits>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

void log_softmax_forward(int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty) {
  visit_floating(tx, "log_softmax", [&](auto X) {
    visit_floating(ty, "log_softmax", [&](auto Y) {
      using TX = decltype(X);
      using TY = decltype(Y);
      const TX* px = static_cast<const TX*>(x);
      TY* py = static_cast<TY*>(y);
#pragma omp parallel for if (rows * cols > kParallelThreshold)
      for (int64_t r = 0; r < rows; ++r) {
        const TX* row = px + r * cols;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < cols; ++c) mx = std::fmax(mx, static_cast<double>(load(row, c)));
        // A row of all -inf has no finite maximum: define the result as NaN (like PyTorch) rather
        // than computing -inf - (-inf) by accident.
        double sum = 0.0;
        if (std::isfinite(mx)) {
          for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(load(row, c)) - mx);
        }
        const double lse = std::isfinite(mx) ? mx + std::log(sum) : std::numeric_limits<double>::quiet_NaN();
        for (int64_t c = 0; c < cols; ++c) store(py, r * cols + c, static_cast<double>(load(row, c)) - lse);
      }
    });
  });
}

void log_softmax_backward(int64_t rows, int64_t cols, const void* y, const void* gy, DType ty, void* gx,
                          DType tgx) {
  visit_floating(ty, "log_softmax_backward", [&](auto Y) {
    visit_floating(tgx, "log_softmax_backward", [&](auto G) {
      using TY = decltype(Y);
      using TG = decltype(G);
      const TY* py = static_cast<const TY*>(y);
      const TY* pgy = static_cast<const TY*>(gy);
      TG* pgx = static_cast<TG*>(gx);
#pragma omp parallel for if (rows * cols > kParallelThreshold)
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(load(pgy, r * cols + c));
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          store(pgx, i, static_cast<double>(load(pgy, i)) - std::exp(static_cast<double>(load(py, i))) * s);
        }
      }
    });
  });
}

void nll_forward(int64_t rows, int64_t cols, const void* logp, DType t, const int32_t* labels, void* loss) {
  visit_floating(t, "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(logp);
    T* pl = static_cast<T*>(loss);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t l = labels[r];
      if (l < 0 || l >= cols) {
        store(pl, r, std::numeric_limits<double>::quiet_NaN());
      } else {
        store(pl, r, -load(p, r * cols + l));
      }
    }
  });
}

void nll_backward(int64_t rows, int64_t cols, const int32_t* labels, const void* gloss, void* glogp, DType t) {
  visit_floating(t, "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(gloss);
    T* po = static_cast<T*>(glogp);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) store(po, r * cols + c, compute_t<T>(0));
      const int32_t l = labels[r];
      if (l >= 0 && l < cols) store(po, r * cols + l, -load(pg, r));
    }
  });
}

}  // namespace hl::kernels::cpu
