// CPU optimizer passes (kernels/optim.h): the reference semantics of the fused mixed-precision
// update. For every element the master weight (or the parameter itself) is read once, updated in
// f32 (f64 for f64 state), and the parameter is written once (rounded to f16 when it is f16).
#include <cmath>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

namespace {

// Every slot is checked before any is updated, as the CUDA passes do: a bad slot leaves every
// parameter as it was, not the ones before it updated.
void check_slot(const ParamSlot& s, const char* op) {
  HL_CHECK(s.state_type == DType::f32 || s.state_type == DType::f64, op, ": optimizer state must be f32 or f64, got ",
           dtype_name(s.state_type));
  HL_CHECK(is_floating(s.param_type), op, ": needs a floating dtype, got ", dtype_name(s.param_type));
}

// Run f(S{}, P{}) with S the state type (float/double) and P the parameter's storage type.
template <class F>
void visit_slot(const ParamSlot& s, const char* op, F&& f) {
  visit_floating(s.param_type, op, [&](auto P) {
    if (s.state_type == DType::f64) {
      f(double{}, P);
    } else {
      f(float{}, P);
    }
  });
}

// The weight an update starts from: the master copy when there is one, else the parameter.
template <class S, class P>
inline S read_weight(const ParamSlot& s, int64_t i) {
  return s.master ? static_cast<const S*>(s.master)[i] : static_cast<S>(load(static_cast<const P*>(s.param), i));
}

template <class S, class P>
inline void write_weight(const ParamSlot& s, int64_t i, S w) {
  if (s.master) static_cast<S*>(s.master)[i] = w;
  store(static_cast<P*>(s.param), i, w);  // the working copy: rounded once, from the updated master
}

}  // namespace

namespace {

// One SGD slot with the per-element tests (master copy? momentum? first step? Nesterov?) made template
// flags and the pointers declared unaliased, so that the loop vectorizes: with the tests inside, the
// update of MLP-512's 670K weights took 15% of its CPU training time. Same arithmetic, same order.
template <class S, class P, bool kMaster, bool kMom, bool kFirst, bool kNesterov>
void sgd_slot(const ParamSlot& s, S lr, S mom, S wd, S one_minus_damp) {
  const S* __restrict g = static_cast<const S*>(s.grad);
  S* __restrict buf = static_cast<S*>(s.buf1);
  S* __restrict master = static_cast<S*>(s.master);
  P* __restrict param = static_cast<P*>(s.param);
#pragma omp parallel for if (s.n > kParallelThreshold)
  for (int64_t i = 0; i < s.n; ++i) {
    const S w = kMaster ? master[i] : static_cast<S>(load(param, i));
    S d = g[i] + wd * w;
    if constexpr (kMom) {
      const S b = kFirst ? d : mom * buf[i] + one_minus_damp * d;
      buf[i] = b;
      d = kNesterov ? d + mom * b : b;
    }
    const S updated = w - lr * d;
    if constexpr (kMaster) master[i] = updated;
    store(param, i, updated);  // the working copy: rounded once, from the updated master
  }
}

}  // namespace

void sgd_update(const std::vector<ParamSlot>& slots, const SgdParams& sp) {
  const bool use_mom = sp.momentum != 0.0;
  for (const ParamSlot& s : slots) {
    check_slot(s, "sgd_update");
    HL_CHECK(!use_mom || s.buf1 != nullptr, "sgd_update: momentum ", sp.momentum, " needs a momentum buffer");
  }
  if (sp.skip != nullptr && *sp.skip != 0) return;  // the loss scaler found an overflow: write nothing
  for (const ParamSlot& s : slots) {
    visit_slot(s, "sgd_update", [&](auto Stag, auto Ptag) {
      using S = decltype(Stag);
      using P = decltype(Ptag);
      // 1 - dampening in double, rounded once, as PyTorch computes it (a Python float); the f32
      // difference 1 - f32(dampening) can differ in the last bits.
      const S lr = static_cast<S>(sp.lr), mom = static_cast<S>(sp.momentum), wd = static_cast<S>(sp.weight_decay),
              one_minus_damp = static_cast<S>(1.0 - sp.dampening);
      // SGD's momentum buffer starts as the gradient at the parameter's first applied update: the
      // device flag says whether that happened (set by optim_finish), else the host's first_step.
      const bool first_update = s.initialized != nullptr ? *s.initialized == 0 : s.first_step;
      // Turn the four run-time flags into template arguments (16 loops).
      const auto with = [&](auto master, auto momentum, auto first, auto nesterov) {
        sgd_slot<S, P, decltype(master)::value, decltype(momentum)::value, decltype(first)::value,
                 decltype(nesterov)::value>(s, lr, mom, wd, one_minus_damp);
      };
      const auto flag = [](bool b, auto&& next) {
        b ? next(std::true_type{}) : next(std::false_type{});
      };
      flag(s.master != nullptr, [&](auto m) {
        flag(use_mom, [&](auto mo) {
          flag(first_update, [&](auto f) { flag(sp.nesterov, [&](auto n) { with(m, mo, f, n); }); });
        });
      });
    });
  }
}

void adam_update(const std::vector<ParamSlot>& slots, const AdamParams& ap) {
  for (const ParamSlot& s : slots) {
    check_slot(s, "adam_update");
    HL_CHECK(s.buf1 != nullptr && s.buf2 != nullptr, "adam_update: needs both moment buffers");
  }
  if (ap.skip != nullptr && *ap.skip != 0) return;  // the loss scaler found an overflow: write nothing
  const int64_t t = ap.applied_steps != nullptr ? *ap.applied_steps + 1 : ap.step;
  for (const ParamSlot& s : slots) {
    visit_slot(s, "adam_update", [&](auto Stag, auto Ptag) {
      using S = decltype(Stag);
      using P = decltype(Ptag);
      const S b1 = static_cast<S>(ap.beta1), b2 = static_cast<S>(ap.beta2), eps = static_cast<S>(ap.eps),
              wd = static_cast<S>(ap.weight_decay);
      // PyTorch's formulation: step size lr / (1 - b1^t), denominator sqrt(v) / sqrt(1 - b2^t) + eps.
      // Every coefficient is computed in double and rounded once, as PyTorch computes them (Python
      // floats): 1 - f32(0.99999) in f32 is 1.0014e-5, not 1e-5, which made each early step 0.07%
      // short (tests/python/pytorch_parity.py, adam_beta2_near_1).
      const S one_minus_b1 = static_cast<S>(1.0 - ap.beta1), one_minus_b2 = static_cast<S>(1.0 - ap.beta2);
      const S decay = static_cast<S>(1.0 - ap.lr * ap.weight_decay);  // AdamW's
      const S bc2_sqrt = static_cast<S>(std::sqrt(1.0 - std::pow(ap.beta2, static_cast<double>(t))));
      const S step_size = static_cast<S>(ap.lr / (1.0 - std::pow(ap.beta1, static_cast<double>(t))));
      const S* g = static_cast<const S*>(s.grad);
      S* m = static_cast<S*>(s.buf1);
      S* v = static_cast<S*>(s.buf2);
#pragma omp parallel for if (s.n > kParallelThreshold)
      for (int64_t i = 0; i < s.n; ++i) {
        S w = read_weight<S, P>(s, i);
        S gi = g[i];
        if (ap.decoupled) {
          w = w * decay;
        } else {
          gi = gi + wd * w;
        }
        m[i] = b1 * m[i] + one_minus_b1 * gi;
        v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
        const S denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        write_weight<S, P>(s, i, w - step_size * m[i] / denom);
      }
    });
  }
}

void unscale_grads(const std::vector<GradSlot>& slots, float inv_scale, int32_t* found_inf, const double* scale) {
  // 1/S is exact for power-of-two scales, so unscaling then adds no rounding of its own.
  if (scale != nullptr) inv_scale = static_cast<float>(1.0 / *scale);
  for (const GradSlot& s : slots) {  // all checked before any is written, as on the GPU
    HL_CHECK(is_floating(s.grad_type), "unscale_grads: needs a floating dtype, got ", dtype_name(s.grad_type));
    HL_CHECK(s.out_type == DType::f32 || s.out_type == DType::f64, "unscale_grads: output must be f32 or f64, got ",
             dtype_name(s.out_type));
  }
  int32_t found = 0;
  for (const GradSlot& s : slots) {
    visit_floating(s.grad_type, "unscale_grads", [&](auto Gtag) {
      using G = decltype(Gtag);
      const G* g = static_cast<const G*>(s.grad);
      int32_t local = 0;
      if (s.out_type == DType::f64) {
        double* o = static_cast<double*>(s.out);
        for (int64_t i = 0; i < s.n; ++i) {
          const double x = static_cast<double>(load(g, i));
          local |= !std::isfinite(x);
          o[i] = x * static_cast<double>(inv_scale);
        }
      } else {
        float* o = static_cast<float*>(s.out);
#pragma omp parallel for reduction(| : local) if (s.n > kParallelThreshold)
        for (int64_t i = 0; i < s.n; ++i) {
          const float x = static_cast<float>(load(g, i));
          local |= !std::isfinite(x);
          o[i] = x * inv_scale;  // exact when inv_scale is a power of two (and no underflow)
        }
      }
      found |= local;
    });
  }
  if (found) *found_inf = 1;
}

void sum_of_squares(const std::vector<ConstSpan>& tensors, float* out) {
  double total = 0.0;
  for (const ConstSpan& t : tensors) {
    visit_floating(t.type, "sum_of_squares", [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(t.data);
      // The same bits with any number of threads (cpu_common.h), so that a clipped step does not
      // depend on OMP_NUM_THREADS.
      total += ordered_sum(t.n, [x](int64_t i) {
        const double v = static_cast<double>(load(x, i));
        return v * v;
      });
    });
  }
  *out = static_cast<float>(total);
}

void clip_by_norm(const std::vector<Span>& grads, const float* sum_sq, double max_norm, double* norm_out) {
  for (const Span& g : grads)  // all checked before the norm or any gradient is written, as on the GPU
    HL_CHECK(is_floating(g.type), "clip_by_norm: needs a floating dtype, got ", dtype_name(g.type));
  const double norm = std::sqrt(static_cast<double>(*sum_sq));
  *norm_out = norm;
  // PyTorch's rule: scale by max_norm / (norm + 1e-6) when that is below 1. Never for a NaN norm,
  // which PyTorch multiplies in (optim.h says why it does not matter).
  const double factor = max_norm / (norm + 1e-6);
  if (!(factor < 1.0)) return;
  for (const Span& g : grads) scalar(ScalarOp::mul, g.n, g.data, factor, g.data, g.type);
}

void optim_finish(const int32_t* skip, int64_t* applied_steps, const std::vector<int32_t*>& mark) {
  if (skip != nullptr && *skip != 0) return;
  if (applied_steps != nullptr) ++*applied_steps;  // none to count: only the flags, as on the GPU
  for (int32_t* m : mark) *m = 1;
}

void scaler_update(const ScalerRule& rule, ScalerState* state, const int32_t* found_inf, float* scale_f32,
                   double* history_slot) {
  *history_slot = state->scale;
  scaler_rule(rule, *state, found_inf != nullptr && *found_inf != 0);
  *scale_f32 = static_cast<float>(state->scale);
}

}  // namespace hl::kernels::cpu
