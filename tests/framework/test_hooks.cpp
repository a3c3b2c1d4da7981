// Gradient hooks and retain_grad (Tensor::register_hook, Tensor::retain_grad): what tutorial 06 uses
// to record the activation gradients of a training run (paper §3.2, Figure 3).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

Tensor random_f64(const Shape& shape, uint64_t seed) {
  const auto v = test::random_values(static_cast<size_t>(shape_numel(shape)), seed, -1.0, 1.0, DType::f64);
  return Tensor::from_vector(v, shape, DType::f64);
}

// The part of the graph downstream of the hooked tensor y: y is used twice (relu(y) * c and y * y),
// so the hook must see the sum of both contributions.
Tensor downstream(const Tensor& y, const Tensor& c) { return sum(relu(y) * c + y * y); }

TEST(Hooks, SeeTheWholeGradientOfAnIntermediateTensor) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  Tensor x = random_f64({4, 3}, seed).requires_grad_();
  Tensor w = random_f64({3, 5}, seed + 1).requires_grad_();
  Tensor c = random_f64({4, 5}, seed + 2);
  Tensor y = matmul(x, w);
  std::vector<Tensor> seen;
  const size_t index = y.register_hook([&](const Tensor& g) {
    EXPECT_FALSE(grad_enabled()) << "hooks run with grad mode off";
    seen.push_back(g.clone());
    return Tensor();
  });
  EXPECT_EQ(index, 0u);  // the hook's index: the first one registered on y
  downstream(y, c).backward();
  ASSERT_EQ(seen.size(), 1u) << "one call per backward, with the summed gradient";
  ASSERT_EQ(seen[0].shape(), y.shape());

  // Central differences of the downstream function at y, in double (eps: relu's kink is at 0 and the
  // random y values are O(0.1..1) away from it, so a 1e-6 step never crosses it).
  const std::vector<double> yv = y.to_double(), got = seen[0].to_double();
  const double eps = 1e-6;
  for (size_t i = 0; i < yv.size(); ++i) {
    std::vector<double> p = yv, m = yv;
    p[i] += eps;
    m[i] -= eps;
    NoGradGuard ng;
    const double lp = downstream(Tensor::from_vector(p, y.shape(), DType::f64), c).item();
    const double lm = downstream(Tensor::from_vector(m, y.shape(), DType::f64), c).item();
    EXPECT_NEAR(got[i], (lp - lm) / (2 * eps), 1e-7) << "element " << i;
  }
  // The leaves still get theirs: dL/dx = g W^T, computed from what the hook saw.
  const Tensor gx = matmul(seen[0], w.detach(), false, true);
  const auto a = x.grad().to_double(), b = gx.to_double();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i], b[i]);
}

TEST(Hooks, ReturningATensorReplacesTheGradient) {
  Tensor x = Tensor::from_vector(std::vector<double>{1.0, -2.0, 3.0}, {3}, DType::f64).requires_grad_();
  Tensor y = x * 2.0;
  y.register_hook([](const Tensor& g) { return g * 10.0; });  // then the next hook sees the replacement
  std::vector<double> second;
  y.register_hook([&](const Tensor& g) {
    second = g.to_double();
    return Tensor();
  });
  sum(y * y).backward();  // dL/dy = 2y = (4, -8, 12); x10 -> (40, -80, 120); dL/dx = 2 * that
  EXPECT_EQ(second, (std::vector<double>{40.0, -80.0, 120.0}));
  EXPECT_EQ(x.grad().to_double(), (std::vector<double>{80.0, -160.0, 240.0}));
}

TEST(Hooks, LeafHooksRunBeforeAccumulation) {
  Tensor x = Tensor::from_vector(std::vector<double>{3.0}, {1}, DType::f64).requires_grad_();
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen.push_back(g.item());
    return g * 0.5;
  });
  sum(x * 4.0).backward();
  sum(x * 6.0).backward();
  EXPECT_EQ(seen, (std::vector<double>{4.0, 6.0}));  // each backward's own gradient, not the running sum
  EXPECT_DOUBLE_EQ(x.grad().item(), 5.0);             // 0.5 * 4 + 0.5 * 6
  x.remove_hooks();
  sum(x * 2.0).backward();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(x.grad().item(), 7.0);
}

TEST(Hooks, RetainGradKeepsANonLeafGradient) {
  Tensor x = Tensor::from_vector(std::vector<double>{1.0, 2.0}, {2}, DType::f64).requires_grad_();
  Tensor y = x * 3.0;
  Tensor z = y * y;
  EXPECT_FALSE(y.retains_grad());
  EXPECT_TRUE(x.retains_grad());
  y.retain_grad();
  EXPECT_TRUE(y.retains_grad());
  sum(z).backward(Tensor(), /*retain_graph=*/true);
  EXPECT_FALSE(z.grad().defined()) << "only tensors that asked keep a non-leaf gradient";
  EXPECT_EQ(y.grad().to_double(), (std::vector<double>{6.0, 12.0}));  // 2y
  sum(z).backward();
  EXPECT_EQ(y.grad().to_double(), (std::vector<double>{12.0, 24.0})) << "accumulates like a leaf";
  EXPECT_EQ(x.grad().to_double(), (std::vector<double>{36.0, 72.0}));  // 2 * (6y) ... = 2 * 18x
}

TEST(Hooks, HookOnF16TensorSeesF16Gradient) {
  // What tutorial 06 relies on in mixed precision: the gradient of an f16 activation is f16.
  Tensor x = Tensor::from_vector(std::vector<float>{0.5f, -0.25f}, {1, 2}, DType::f16).requires_grad_();
  Tensor y = x * 2.0;
  DType seen = DType::f64;
  y.register_hook([&](const Tensor& g) {
    seen = g.dtype();
    return Tensor();
  });
  sum(y).backward();
  EXPECT_EQ(seen, DType::f16);
}

// A replacement of another dtype is converted to the gradient's: the next hook, and the op behind the
// tensor, see the tensor's own dtype.
TEST(Hooks, AReplacementOfAnotherDtypeIsConverted) {
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f, -2.0f}, {2}).requires_grad_();
  Tensor y = x * 2.0;
  y.register_hook([](const Tensor& g) { return cast(g * 10.0, DType::f64); });
  DType seen = DType::f16;
  std::vector<double> values;
  y.register_hook([&](const Tensor& g) {
    seen = g.dtype();
    values = g.to_double();
    return Tensor();
  });
  sum(y).backward();
  EXPECT_EQ(seen, DType::f32);
  EXPECT_EQ(values, (std::vector<double>{10.0, 10.0}));
  EXPECT_EQ(x.grad().to_double(), (std::vector<double>{20.0, 20.0}));
}

TEST(Hooks, ClearErrors) {
  Tensor plain = Tensor::from_vector(std::vector<double>{1.0}, {1}, DType::f64);
  try {
    plain.register_hook([](const Tensor&) { return Tensor(); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("register_hook"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not require grad"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plain.retain_grad(), Error);
  EXPECT_THROW(Tensor().register_hook([](const Tensor&) { return Tensor(); }), Error);

  Tensor x = Tensor::from_vector(std::vector<double>{1.0, 2.0}, {2}, DType::f64).requires_grad_();
  Tensor y = x * 2.0;
  y.register_hook([](const Tensor&) { return Tensor::zeros({3}, DType::f64); });
  try {
    sum(y).backward();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hook 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos) << e.what();
  }
}

}  // namespace
