// Tutorial 02: autograd by hand. Build a small graph with halfling tensors, read the graph the ops
// recorded, run backward, compare every gradient with the formula derived on paper, then let the
// central-difference gradient check do the same for many ops (and catch a deliberately wrong one).
// The chapter is tutorials/02_autograd/README.md; the engine is framework/autograd.cpp.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/gradcheck.h"
#include "framework/ops.h"
#include "framework/tensor.h"
#include "tutorials/common/cli.h"

using namespace hl;

namespace {

// The shortest decimal that reads back as the same number.
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// "[4.5, 1, -54]": the values only. Every value in sections 1-3 is exact in f32, so its shortest
// double form is short too.
std::string values(const Tensor& t) {
  std::string s = "[";
  for (double v : t.to_double()) s += (s.size() > 1 ? ", " : "") + num(v);
  return s + "]";
}
std::string values(const std::vector<double>& v) {
  std::string s = "[";
  for (double x : v) s += (s.size() > 1 ? ", " : "") + num(x);
  return s + "]";
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void heading(const std::string& title) { std::printf("\n== %s ==\n", title.c_str()); }

Tensor leaf(const std::vector<float>& v, const Shape& shape, const std::string& name) {
  Tensor t = Tensor::from_vector(v, shape);
  t.set_name(name);
  t.requires_grad_();
  return t;
}

// Print the graph that the ops recorded, from `t` down to the leaves: each tensor, the op whose
// Node made it, and that node's inputs. A tensor reached twice (like `a` below) is printed twice.
void print_graph(const Tensor& t, const std::string& prefix = "  ", bool last = true, bool root = true) {
  const TensorImpl* impl = t.impl();
  const std::string label = impl->name.empty() ? "(unnamed)" : impl->name;
  std::string line = label;
  if (impl->grad_fn) line += " = " + impl->grad_fn->op + "(...)";
  else line += impl->requires_grad ? "  (leaf, requires grad)" : "  (constant)";
  std::printf("%s%s%s\n", prefix.c_str(), root ? "" : (last ? "`- " : "|- "), line.c_str());
  if (!impl->grad_fn) return;
  const std::vector<Tensor>& in = impl->grad_fn->inputs;
  const std::string child_prefix = root ? prefix : prefix + (last ? "   " : "|  ");
  for (size_t i = 0; i < in.size(); ++i) print_graph(in[i], child_prefix, i + 1 == in.size(), false);
}

// Run f and print the hl::Error it throws (the point of the section is the message).
void expect_error(const std::string& what, const std::function<void()>& f) {
  try {
    f();
    std::printf("%s: no error (unexpected)\n", what.c_str());
  } catch (const Error& e) {
    std::printf("%s -> hl::Error:\n  %s\n", what.c_str(), e.what());
  }
}

// ---- 1. y = sum((a*b + a)^2) -------------------------------------------------------------------------

void small_graph() {
  heading("1. A small graph: y = sum((a*b + a)^2)");
  Tensor a = leaf({1.0f, 2.0f, -3.0f}, {3}, "a");
  Tensor b = leaf({0.5f, -1.5f, 2.0f}, {3}, "b");
  Tensor c = (a * b).set_name("c");
  Tensor d = (c + a).set_name("d");
  Tensor e = pow(d, 2.0).set_name("e");
  Tensor y = sum(e).set_name("y");
  std::printf("a = %s\nb = %s\n", values(a).c_str(), values(b).c_str());
  std::printf("forward:\n  c = a*b    = %s\n  d = c + a  = %s\n  e = d^2    = %s\n  y = sum(e) = %s\n",
              values(c).c_str(), values(d).c_str(), values(e).c_str(), num(y.item()).c_str());
  std::printf("the graph recorded on y (a Node per op: its name, its inputs, a backward closure):\n");
  print_graph(y);

  y.backward();
  // By hand: dy/dd = 2d, and d = a*b + a, so dy/da = 2d * (b + 1) (a is used twice: the two paths
  // add up) and dy/db = 2d * a.
  const std::vector<double> av = a.to_double(), bv = b.to_double(), dv = d.to_double();
  std::vector<double> ga_hand, gb_hand;
  for (size_t i = 0; i < av.size(); ++i) {
    ga_hand.push_back(2 * dv[i] * (bv[i] + 1));
    gb_hand.push_back(2 * dv[i] * av[i]);
  }
  std::printf("y.backward():\n");
  std::printf("  dy/da  autograd %-18s by hand 2(ab+a)(b+1) = %-18s max difference %s\n", values(a.grad()).c_str(),
              values(ga_hand).c_str(), num(max_abs_diff(a.grad().to_double(), ga_hand)).c_str());
  std::printf("  dy/db  autograd %-18s by hand 2(ab+a)a     = %-18s max difference %s\n", values(b.grad()).c_str(),
              values(gb_hand).c_str(), num(max_abs_diff(b.grad().to_double(), gb_hand)).c_str());
  std::printf("  c, d, e and y are not leaves: their gradients were passed on and freed, c.grad() defined: %s\n",
              c.grad().defined() ? "yes" : "no");
}

// ---- 2. a tiny neuron ----------------------------------------------------------------------------------

void neuron() {
  heading("2. A tiny neuron: L = (relu(x . w + b) - t)^2");
  Tensor x = leaf({1.0f, 2.0f, 3.0f}, {1, 3}, "x");
  Tensor w = leaf({0.5f, -0.25f, 0.125f}, {1, 3}, "w");
  Tensor bias = leaf({0.25f}, {1}, "b");
  const float target = 1.0f;
  Tensor z = linear(x, w, bias).set_name("z");  // x w^T + b, one GEMM
  Tensor h = relu(z).set_name("h");
  Tensor r = (h - static_cast<double>(target)).set_name("h - t");
  Tensor L = sum(pow(r, 2.0).set_name("(h - t)^2")).set_name("L");
  std::printf("x = %s, w = %s, b = %s, t = %s\n", values(x).c_str(), values(w).c_str(), values(bias).c_str(),
              num(target).c_str());
  std::printf("forward: z = x . w + b = %s, h = relu(z) = %s, L = %s\n", num(z.item()).c_str(), num(h.item()).c_str(),
              num(L.item()).c_str());
  print_graph(L);
  L.backward();
  // By hand: dL/dh = 2(h - t); dh/dz = 1 if z > 0 else 0; dz/dw = x, dz/db = 1, dz/dx = w.
  const double zv = z.item(), hv = h.item();
  const double dz = 2 * (hv - target) * (zv > 0 ? 1.0 : 0.0);
  std::vector<double> gw_hand, gx_hand;
  for (double xi : x.to_double()) gw_hand.push_back(dz * xi);
  for (double wi : w.to_double()) gx_hand.push_back(dz * wi);
  std::printf("L.backward(), with dL/dz = 2(h - t) * [z > 0] = %s:\n", num(dz).c_str());
  std::printf("  dL/dw  autograd %-26s by hand dL/dz * x = %-26s max difference %s\n", values(w.grad()).c_str(),
              values(gw_hand).c_str(), num(max_abs_diff(w.grad().to_double(), gw_hand)).c_str());
  std::printf("  dL/db  autograd %-26s by hand dL/dz     = %-26s max difference %s\n", values(bias.grad()).c_str(),
              values(std::vector<double>{dz}).c_str(), num(std::fabs(bias.grad().item() - dz)).c_str());
  std::printf("  dL/dx  autograd %-26s by hand dL/dz * w = %-26s max difference %s\n", values(x.grad()).c_str(),
              values(gx_hand).c_str(), num(max_abs_diff(x.grad().to_double(), gx_hand)).c_str());
}

// ---- 3. accumulation, release, no-grad, saved tensors ------------------------------------------------

void lifecycle() {
  heading("3. Gradients accumulate; the graph is freed; NoGradGuard records nothing; saved tensors are checked");
  Tensor a = leaf({1.0f, 2.0f, -3.0f}, {3}, "a");
  Tensor b = leaf({0.5f, -1.5f, 2.0f}, {3}, "b");
  Tensor y = sum(pow(a * b + a, 2.0));
  y.backward(Tensor(), /*retain_graph=*/true);
  std::printf("y.backward(retain_graph=true): a.grad = %s\n", values(a.grad()).c_str());
  y.backward();
  std::printf("y.backward() again:             a.grad = %s  (added to .grad: the optimizer must zero_grad())\n",
              values(a.grad()).c_str());
  a.zero_grad();
  std::printf("a.zero_grad():                  a.grad defined: %s\n", a.grad().defined() ? "yes" : "no");
  expect_error("y.backward() a third time (the second call freed the graph)", [&] { y.backward(); });

  {
    NoGradGuard no_grad;  // what evaluation loops and optimizer updates run under
    Tensor z = sum(a * b);
    std::printf("under NoGradGuard: z = sum(a*b) = %s, z.requires_grad() = %s, node recorded: %s\n", num(z.item()).c_str(),
                z.requires_grad() ? "true" : "false", z.impl()->grad_fn ? "yes" : "no");
    expect_error("z.backward()", [&] { z.backward(); });
  }
  Tensor detached = a.detach();
  std::printf("a.detach() shares a's storage (%s) and requires_grad = %s\n",
              detached.data_ptr() == a.data_ptr() ? "same pointer" : "a copy", detached.requires_grad() ? "true" : "false");

  // mul saved b (d(a*b)/da = b). Writing b between the forward pass and backward(), as an optimizer
  // step there would, makes that gradient wrong: backward() refuses, before it computes anything.
  Tensor p = sum(a * b);
  b.fill_(1.0f);
  expect_error("p = sum(a*b); b.fill_(1); p.backward()", [&] { p.backward(); });
}

// ---- 4. gradcheck --------------------------------------------------------------------------------------

// x*x with a hand-written backward, through the same record() every op in framework/ops.cpp uses.
// `forget_the_two` drops the factor 2 of d(x^2)/dx = 2x: the classic slip gradcheck exists to catch.
Tensor square(const Tensor& x, bool forget_the_two) {
  Tensor out;
  {
    NoGradGuard no_grad;  // compute the value only; the node comes from record() below
    out = mul(x, x);
  }
  // The closure reads x's values: saved, so that backward() refuses if x is overwritten before it runs.
  return record(out, forget_the_two ? "square_wrong" : "square", {x}, {{"input", x}},
                [x, forget_the_two](const Tensor& g) {
    const Tensor gx = mul(g, x);
    return std::vector<Tensor>{forget_the_two ? gx : mul(gx, 2.0)};
  });
}

struct Check {
  std::string name;
  GradcheckFn f;
  std::vector<Tensor> inputs;
  GradcheckOptions opt;
};

// Returns the number of checks whose verdict was not the expected one.
int gradchecks(uint64_t seed, double eps) {
  heading("4. gradcheck: analytic gradients against central differences, in f64");
  Generator gen(seed);
  auto rnd = [&gen](const Shape& s, double lo = -1.0, double hi = 1.0) {
    return Tensor::uniform(s, gen, lo, hi, DType::f64);
  };
  // relu has a kink at 0: keep every input at least 0.1 away from it.
  std::vector<double> away(12);
  for (size_t i = 0; i < away.size(); ++i) away[i] = (i % 2 ? 1.0 : -1.0) * (0.1 + gen.uniform());
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 4, 2}, {3});
  GradcheckOptions base;
  base.eps = eps;
  base.seed = seed;
  GradcheckOptions skip_labels = base;
  skip_labels.skip = {1};

  const std::vector<Check> checks = {
      {"a*b (broadcast [3,4]*[4])", [](const auto& v) { return mul(v[0], v[1]); }, {rnd({3, 4}), rnd({4})}, base},
      {"a/b", [](const auto& v) { return div(v[0], v[1]); }, {rnd({3, 4}), rnd({3, 4}, 0.5, 2.0)}, base},
      {"exp(a)", [](const auto& v) { return exp(v[0]); }, {rnd({2, 5})}, base},
      {"log(a), a > 0", [](const auto& v) { return log(v[0]); }, {rnd({2, 5}, 0.5, 2.0)}, base},
      {"pow(a, 3)", [](const auto& v) { return pow(v[0], 3.0); }, {rnd({2, 5})}, base},
      {"relu(a)", [](const auto& v) { return relu(v[0]); }, {Tensor::from_vector(away, {3, 4})}, base},
      {"sum(a, dim 1)", [](const auto& v) { return sum(v[0], {1}); }, {rnd({2, 3, 4})}, base},
      {"mean(a)", [](const auto& v) { return mean(v[0]); }, {rnd({2, 3, 4})}, base},
      {"matmul(a, b)", [](const auto& v) { return matmul(v[0], v[1]); }, {rnd({3, 5}), rnd({5, 4})}, base},
      {"linear(x, W, b)", [](const auto& v) { return linear(v[0], v[1], v[2]); }, {rnd({4, 6}), rnd({3, 6}), rnd({3})}, base},
      {"log_softmax(z)", [](const auto& v) { return log_softmax(v[0]); }, {rnd({3, 5}, -3.0, 3.0)}, base},
      {"cross_entropy(z, labels)", [](const auto& v) { return cross_entropy(v[0], v[1]); },
       {rnd({3, 5}, -3.0, 3.0), labels}, skip_labels},
      {"square(a), correct backward", [](const auto& v) { return square(v[0], false); }, {rnd({4})}, base},
      {"square(a), backward without the 2", [](const auto& v) { return square(v[0], true); }, {rnd({4})}, base},
  };

  std::printf("eps %s, pass when |analytic - numeric| <= %s + %s * |numeric| for every element\n", num(base.eps).c_str(),
              num(base.atol).c_str(), num(base.rtol).c_str());
  std::printf("%-36s %-28s %s\n", "op", "max |analytic - numeric|", "result");
  int surprises = 0;
  // The deliberately wrong op's report, and apart from it those of correct ops that failed (only at an
  // --eps far from the default, where the finite difference itself is off): each under its own heading.
  std::string wrong_report, surprise_report;
  for (const Check& c : checks) {
    const GradcheckResult r = gradcheck(c.f, c.inputs, c.opt);
    const bool expected_to_fail = c.name.find("without the 2") != std::string::npos;
    char err[32];
    std::snprintf(err, sizeof err, "%.2e", r.max_abs_error);
    std::printf("%-36s %-28s %s\n", c.name.c_str(), err, r.ok ? "PASS" : "FAIL");
    if (r.ok == expected_to_fail) ++surprises;
    if (!r.ok) (expected_to_fail ? wrong_report : surprise_report) += r.report;
  }
  const auto print_indented = [](const std::string& report) {
    size_t start = 0;
    while (start < report.size()) {
      const size_t end = report.find('\n', start);
      std::printf("  %s\n", report.substr(start, end - start).c_str());
      start = end == std::string::npos ? report.size() : end + 1;
    }
  };
  if (!wrong_report.empty()) {
    std::printf("what a wrong gradient looks like (gradcheck's report; numeric = 2 x analytic, the missing factor):\n");
    print_indented(wrong_report);
  }
  if (!surprise_report.empty()) {
    std::printf("correct ops that failed: the central difference at this --eps is off, not the op (gradcheck's "
                "report):\n");
    print_indented(surprise_report);
  }
  return surprises;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 02: autograd by hand, and the gradient check"};
  bool smoke = false;
  uint64_t seed = 0;
  double eps = 1e-6;
  app.add_flag("--smoke", smoke, "the same walk-through (it already runs in well under a second); accepted so CI runs every tutorial alike");
  // The shared validators (tutorials/common/cli.h), as --seed of the other tutorials: a plain uint64_t
  // option took "-1" as 2^64 - 1, and CLI::Range printed the bound 1e-12 as "0.000000".
  app.add_option("--seed", seed, "seed of the random inputs of the gradient checks")
      ->transform(tutorial::integer_in("UINT", 0, UINT64_MAX))
      ->capture_default_str();
  app.add_option("--eps", eps, "central-difference step of the gradient checks")
      ->transform(tutorial::real_in(1e-12, 0.1))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    // A misspelt HALFLING_GEMM (...) is refused up front, naming the variable: this program has no --gemm.
    tutorial::check_variant_environment();
    std::printf("halfling 02_autograd: define-by-run autograd on the CPU (f32 by hand, f64 for gradcheck)\n");
    small_graph();
    neuron();
    lifecycle();
    const int surprises = gradchecks(seed, eps);
    if (surprises > 0) {
      std::printf("\n%d gradient check(s) did not give the expected verdict (try the default --eps 1e-6)\n", surprises);
      return 2;
    }
    std::printf("\nevery correct op passed gradcheck, and the wrong backward was caught\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "02_autograd: %s\n", e.what());
    return 1;
  }
}
