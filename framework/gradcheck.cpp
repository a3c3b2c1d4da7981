#include "framework/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "framework/autograd.h"
#include "framework/ops.h"

namespace hl {

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  auto skipped = [&](size_t i) { return std::find(opt.skip.begin(), opt.skip.end(), i) != opt.skip.end(); };
  std::vector<Tensor> x;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i].detach().to(Device::cpu);
    if (!skipped(i) && is_floating(t.dtype())) {
      t = cast(t, DType::f64).clone();
      t.requires_grad_(true);
    } else {
      t = t.clone();
    }
    x.push_back(t);
  }

  Tensor out = f(x);
  HL_CHECK(out.defined() && is_floating(out.dtype()), "gradcheck: the function must return a floating tensor");
  Generator gen(opt.seed);
  const Tensor w = Tensor::uniform(out.shape(), gen, -1.0, 1.0, DType::f64);
  auto scalarize = [&](const Tensor& o) { return sum(mul(cast(o, DType::f64), w)); };
  scalarize(out).backward();

  GradcheckResult res;
  res.ok = true;
  std::ostringstream report;
  NoGradGuard no_grad;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!x[i].requires_grad()) continue;
    const Tensor analytic_t = x[i].grad();
    const std::vector<double> analytic =
        analytic_t.defined() ? analytic_t.to_double() : std::vector<double>(static_cast<size_t>(x[i].numel()), 0.0);
    double* data = x[i].data<double>();
    double worst = 0.0;
    int64_t worst_at = -1;
    double worst_num = 0.0;
    for (int64_t j = 0; j < x[i].numel(); ++j) {
      const double orig = data[j];
      data[j] = orig + opt.eps;
      const double lp = scalarize(f(x)).item();
      data[j] = orig - opt.eps;
      const double lm = scalarize(f(x)).item();
      data[j] = orig;
      const double numeric = (lp - lm) / (2.0 * opt.eps);
      const double a = analytic[static_cast<size_t>(j)];
      const double err = std::fabs(a - numeric);
      if (!(err <= opt.atol + opt.rtol * std::fabs(numeric))) {  // also catches NaN
        if (res.ok) {
          report << "input " << i << " element " << j << ": analytic " << a << " vs numeric " << numeric << "\n";
        }
        res.ok = false;
      }
      if (err > worst || std::isnan(err)) {
        worst = err;
        worst_at = j;
        worst_num = numeric;
      }
    }
    res.max_abs_error = std::max(res.max_abs_error, worst);
    if (worst_at >= 0) {
      report << "input " << i << " " << x[i].describe() << ": worst element " << worst_at << " |analytic - numeric| = "
             << worst << " (numeric " << worst_num << ")\n";
    }
  }
  res.report = report.str();
  return res;
}

}  // namespace hl
