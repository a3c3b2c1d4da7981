// CPU softmax family (kernels/softmax.h has the semantics) and the NLL pick of the unfused loss.
//
//   reference         every op, in double whatever the input dtype (paper §3.3: reductions never in
//                     FP16; double makes this the yardstick the FP32 CUDA rungs are measured against).
//   naive_fp16_nomax  the teaching counter-example, softmax only: exp(x) / sum(exp(x)) with no max
//                     subtraction and every intermediate rounded to FP16, emulated with kernels/half.h.
//                     A logit of 12 already overflows: exp(12) = 162754.8 > 65504. Never the default.
#include <cmath>
#include <limits>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/half.h"
#include "kernels/softmax.h"

namespace hl::kernels::cpu {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The two numbers that describe a row: its maximum and log(sum(exp(x - max))). A row without a
// finite maximum (all -inf, or any +inf) has no meaningful distribution: both become NaN, so that
// every output of the row is NaN (kernels/softmax.h). A NaN entry makes the sum, and the row, NaN.
struct RowStats {
  double max, log_sum;
};

template <class TX>
RowStats row_stats(const TX* row, int64_t cols) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) mx = std::fmax(mx, static_cast<double>(load(row, c)));
  if (!std::isfinite(mx)) return {kNaN, kNaN};
  double sum = 0.0;
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(load(row, c)) - mx);
  return {mx, std::log(sum)};
}

// (x - max) - log_sum: subtracting the maximum first keeps the large log-probabilities accurate even
// for logits of magnitude 1e4.
double log_prob(double x, const RowStats& s) { return (x - s.max) - s.log_sum; }

bool bad_label(int32_t label, int64_t cols) { return label < 0 || label >= cols; }

void forward(const SoftmaxArgs& a, bool log) {
  visit_floating(a.x_type, "softmax", [&](auto X) {
    visit_floating(a.y_type, "softmax", [&](auto Y) {
      using TX = decltype(X);
      using TY = decltype(Y);
      const TX* px = static_cast<const TX*>(a.x);
      TY* py = static_cast<TY*>(a.y);
      const int64_t cols = a.cols;
#pragma omp parallel for if (a.rows * cols > kParallelThreshold)
      for (int64_t r = 0; r < a.rows; ++r) {
        const TX* row = px + r * cols;
        const RowStats s = row_stats(row, cols);
        for (int64_t c = 0; c < cols; ++c) {
          const double lp = log_prob(static_cast<double>(load(row, c)), s);
          store(py, r * cols + c, log ? lp : std::exp(lp));
        }
      }
    });
  });
}

void log_softmax_backward(const SoftmaxArgs& a) {
  visit_floating(a.x_type, "log_softmax_backward", [&](auto Y) {
    visit_floating(a.y_type, "log_softmax_backward", [&](auto G) {
      using TY = decltype(Y);
      using TG = decltype(G);
      const TY* py = static_cast<const TY*>(a.x);
      const TY* pgy = static_cast<const TY*>(a.dy);
      TG* pgx = static_cast<TG*>(a.y);
      const int64_t cols = a.cols;
#pragma omp parallel for if (a.rows * cols > kParallelThreshold)
      for (int64_t r = 0; r < a.rows; ++r) {
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

// xent_forward, xent_backward and xent_fused: the same loop, with the parts each op needs.
void xent(const SoftmaxArgs& a) {
  const bool fwd = a.op != SoftmaxOp::xent_backward;
  const bool bwd = a.op != SoftmaxOp::xent_forward;
  visit_floating(a.x_type, "cross_entropy", [&](auto X) {
    visit_floating(bwd ? a.y_type : a.x_type, "cross_entropy", [&](auto G) {
      // The statistics are f32 or f64 (validated in kernels/softmax.cpp).
      const auto visit_stat = [&](auto&& f) { return a.stat_type == DType::f64 ? f(double{}) : f(float{}); };
      visit_stat([&](auto S) {
        using TX = decltype(X);
        using TG = decltype(G);
        using TS = decltype(S);
        const TX* px = static_cast<const TX*>(a.x);
        TG* pg = static_cast<TG*>(a.y);
        TS* loss = static_cast<TS*>(a.loss);
        TS* stats = static_cast<TS*>(a.stats);
        const double mult =
            a.multiplier *
            (a.grad_scale != nullptr ? static_cast<double>(load(static_cast<const TS*>(a.grad_scale), 0)) : 1.0);
        const int64_t cols = a.cols;
#pragma omp parallel for if (a.rows * cols > kParallelThreshold)
        for (int64_t r = 0; r < a.rows; ++r) {
          const TX* row = px + r * cols;
          const int32_t label = a.labels[r];
          const bool bad = bad_label(label, cols);
          RowStats s{};
          if (fwd) {
            s = row_stats(row, cols);
            // (max - x[label]) + log_sum, not (max + log_sum) - x[label]: no cancellation between
            // two large numbers when the logits are large.
            store(loss, r, bad ? kNaN : (s.max - static_cast<double>(load(row, label))) + s.log_sum);
            if (stats != nullptr) {
              store(stats, 2 * r, s.max);
              store(stats, 2 * r + 1, s.log_sum);
            }
            // The gradient uses the statistics as stored, so that xent_fused gives exactly what
            // xent_forward followed by xent_backward gives.
            s = {static_cast<double>(static_cast<TS>(s.max)), static_cast<double>(static_cast<TS>(s.log_sum))};
          } else {
            s = {static_cast<double>(load(stats, 2 * r)), static_cast<double>(load(stats, 2 * r + 1))};
          }
          if (bwd) {
            for (int64_t c = 0; c < cols; ++c) {
              const double p = std::exp(log_prob(static_cast<double>(load(row, c)), s));
              store(pg, r * cols + c, bad ? kNaN : (p - (c == label ? 1.0 : 0.0)) * mult);
            }
          }
        }
      });
    });
  });
}

void reference_run(const SoftmaxArgs& a) {
  switch (a.op) {
    case SoftmaxOp::softmax: return forward(a, false);
    case SoftmaxOp::log_softmax: return forward(a, true);
    case SoftmaxOp::log_softmax_backward: return log_softmax_backward(a);
    case SoftmaxOp::xent_forward:
    case SoftmaxOp::xent_backward:
    case SoftmaxOp::xent_fused: return xent(a);
  }
}

// ---- the teaching counter-example ------------------------------------------------------------------
// Every intermediate is an FP16 value: exp() is evaluated in float and rounded to FP16 (a GPU's hexp
// does no better), and the running sum and the quotient round to FP16 after each operation (float
// arithmetic on two FP16 operands rounded once to FP16 is the correctly rounded FP16 operation, since
// float carries more than twice FP16's 11 bits). The CUDA twin (kernels/cuda/softmax/naive_fp16_nomax.cu)
// does the same steps in the same order.
void nomax_run(const SoftmaxArgs& a) {
  const half* px = static_cast<const half*>(a.x);
  half* py = static_cast<half*>(a.y);
  const int64_t cols = a.cols;
  for (int64_t r = 0; r < a.rows; ++r) {
    const half* row = px + r * cols;
    half sum(0.0f);
    for (int64_t c = 0; c < cols; ++c) {
      const half e(std::exp(static_cast<float>(row[c])));  // inf as soon as x > 11.09
      sum = half(static_cast<float>(sum) + static_cast<float>(e));
    }
    for (int64_t c = 0; c < cols; ++c) {
      const half e(std::exp(static_cast<float>(row[c])));
      py[r * cols + c] = half(static_cast<float>(e) / static_cast<float>(sum));  // inf / inf = NaN
    }
  }
}

const char* nomax_unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax) return "the teaching variant computes the softmax forward only";
  if (a.x_type != DType::f16 || a.y_type != DType::f16) return "the teaching variant is FP16 in, FP16 out";
  return nullptr;
}

HL_REGISTER_VARIANT(SoftmaxArgs, {"reference", DeviceType::cpu, 10,
                                  "every op in double, max subtracted first: the yardstick", reference_run,
                                  nullptr});
HL_REGISTER_VARIANT(SoftmaxArgs, {"naive_fp16_nomax", DeviceType::cpu, -100,
                                  "teaching only: FP16 math, no max subtraction (overflows for a logit of 12)",
                                  nomax_run, nomax_unsupported});

}  // namespace

// ---- NLL (the unfused cross-entropy path: log_softmax, then this pick) --------------------------------

void nll_forward(int64_t rows, int64_t cols, const void* logp, DType t, const int32_t* labels, void* loss) {
  visit_floating(t, "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(logp);
    T* pl = static_cast<T*>(loss);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t l = labels[r];
      if (bad_label(l, cols)) {
        store(pl, r, kNaN);
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
      const int32_t l = labels[r];
      // A bad label's row is NaN, so that the loss scaler's check of the gradients sees it (softmax.h).
      const compute_t<T> fill = bad_label(l, cols) ? compute_t<T>(kNaN) : compute_t<T>(0);
      for (int64_t c = 0; c < cols; ++c) store(po, r * cols + c, fill);
      if (!bad_label(l, cols)) store(po, r * cols + l, -load(pg, r));
    }
  });
}

}  // namespace hl::kernels::cpu
