// Central-difference gradient checking in double precision on the CPU (DESIGN.md §6).
//
// The function is evaluated on f64 copies of the inputs. Its output is reduced to a scalar
// L = sum(f(x) * w) with fixed random weights w (so every output element matters), the analytic
// gradient comes from L.backward(), and each input element is perturbed by +-eps to estimate
// dL/dx = (L(x + eps) - L(x - eps)) / (2 eps).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace hl {

struct GradcheckResult {
  bool ok = false;
  double max_abs_error = 0.0;
  // The first failure, then the worst element of each input (none for an input whose every element
  // is exact).
  std::string report;
};

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  // Inputs (by index) that are not differentiated (labels, indices, ...).
  std::vector<size_t> skip;
  uint64_t seed = 1234;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs may be any floating dtype on any device: they are copied to f64 on the CPU first.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {});

}  // namespace hl
