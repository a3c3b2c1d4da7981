// Autograd engine: graph recording, accumulation, release, no-grad, detach, errors.
#include <gtest/gtest.h>

#include <memory>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "kernels/half.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

Tensor vec(std::vector<double> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64); }

// Every .grad owns its storage. add of two same-shaped tensors hands both the one gradient, reshape a
// view of it, and a hook may return a tensor its caller keeps; the optimizer then unscales and clips
// .grad in place, so a shared buffer was divided twice (found by review, 2026-11-29: with a static loss
// scale of 1024, an SGD step 1024 times too small). Now only a gradient nothing else holds is kept as it
// is, as in PyTorch.
TEST(Autograd, EveryLeafOwnsItsGradient) {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor q = Tensor::from_vector(std::vector<float>{1, 1, 1, 1, 1, 1}, {6}).requires_grad_();
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {6});
  sum(mul(add(p.reshape({6}), q), w)).backward();
  ASSERT_EQ(p.grad().to_vector(), w.to_vector());
  ASSERT_EQ(q.grad().to_vector(), w.to_vector());
  q.grad().fill_(0);  // in place, as the optimizer's unscale and clipping write
  EXPECT_EQ(p.grad().to_vector(), w.to_vector()) << "p's gradient changed with q's: one buffer";

  Tensor a = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{3, 4}, {2}).requires_grad_();
  sum(add(a, b)).backward();
  a.grad().fill_(7);
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{1, 1}));

  // A hook's returned tensor stays the caller's.
  Tensor mine = Tensor::from_vector(std::vector<float>{5, 5}, {2});
  Tensor c = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  c.register_hook([&](const Tensor&) { return mine; });
  sum(c).backward();
  c.grad().fill_(0);
  EXPECT_EQ(mine.to_vector(), (std::vector<float>{5, 5}));
  EXPECT_EQ(c.grad().to_vector(), (std::vector<float>{0, 0}));
  // A view of the caller's tensor (a handle nobody else holds, on a storage two hold) is copied too.
  Tensor flat = Tensor::from_vector(std::vector<float>{6, 6}, {1, 2});
  Tensor d = Tensor::from_vector(std::vector<float>{1, 2}, {2}).requires_grad_();
  d.register_hook([&](const Tensor&) { return flat.reshape({2}); });
  sum(d).backward();
  d.grad().fill_(0);
  EXPECT_EQ(flat.to_vector(), (std::vector<float>{6, 6}));

  // And a gradient nothing else holds is kept as it is, not copied (one copy of every gradient per
  // backward otherwise): a hook that only looks sees the buffer that becomes .grad.
  Tensor e = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
  const void* seen = nullptr;
  e.register_hook([&](const Tensor& g) {
    seen = g.data_ptr();
    return Tensor();
  });
  sum(e * 2.0).backward();
  EXPECT_EQ(e.grad().data_ptr(), seen);
  EXPECT_EQ(e.grad().to_vector(), (std::vector<float>{2, 2, 2}));
}

TEST(Autograd, ChainRuleByHand) {
  // y = sum((a * b + a)^2); dy/da = 2(ab + a)(b + 1), dy/db = 2(ab + a) a
  Tensor a = vec({1.0, 2.0, -3.0}).requires_grad_();
  Tensor b = vec({0.5, -1.0, 4.0}).requires_grad_();
  Tensor y = sum(pow(a * b + a, 2.0));
  y.backward();
  const std::vector<double> av{1, 2, -3}, bv{0.5, -1, 4};
  const auto ga = a.grad().to_double(), gb = b.grad().to_double();
  for (size_t i = 0; i < 3; ++i) {
    const double u = av[i] * bv[i] + av[i];
    EXPECT_DOUBLE_EQ(ga[i], 2 * u * (bv[i] + 1));
    EXPECT_DOUBLE_EQ(gb[i], 2 * u * av[i]);
  }
}

TEST(Autograd, GradientsAccumulateAcrossUsesAndCalls) {
  Tensor x = vec({3.0}).requires_grad_();
  Tensor y = sum(x * x + x * 2.0);  // x used twice: dy/dx = 2x + 2 = 8
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 8.0);
  sum(x * 5.0).backward();  // a second backward adds into .grad
  EXPECT_DOUBLE_EQ(x.grad().item(), 13.0);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GraphIsFreedUnlessRetained) {
  Tensor x = vec({1.0, 2.0}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the first call retained the graph
  EXPECT_THROW(y.backward(), Error);  // now it is gone
}

// Freeing the graph lets go of what it held: an intermediate tensor that only the graph still
// references dies with the backward pass that consumed it (its memory goes back to the allocator),
// even while the tensor whose node saved it lives on.
TEST(Autograd, BackwardReleasesTheIntermediateTensors) {
  Tensor x = vec({1.0, 2.0}).requires_grad_();
  std::weak_ptr<TensorImpl> middle;
  Tensor product, y;
  {
    const Tensor h = exp(x);
    middle = h.impl_ptr();
    product = h * h;  // its node holds h twice: as its inputs, and in its backward closure
    y = sum(product);
  }
  EXPECT_FALSE(middle.expired()) << "the graph keeps h alive until backward";
  y.backward();
  EXPECT_TRUE(middle.expired()) << "backward() freed the graph, and h with it";
}

TEST(Autograd, NoGradAndDetach) {
  Tensor x = vec({1.0}).requires_grad_();
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE(grad_enabled());
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data_ptr(), x.data_ptr());
  EXPECT_THROW(sum(d * 2.0).backward(), Error);  // nothing requires grad
}

TEST(Autograd, NonScalarNeedsSeedAndShapesMustMatch) {
  Tensor x = vec({1.0, 2.0}).requires_grad_();
  Tensor y = x * 3.0;
  EXPECT_THROW(y.backward(), Error);
  EXPECT_THROW(y.backward(vec({1.0})), Error);
  y.backward(vec({1.0, 10.0}));
  EXPECT_EQ(x.grad().to_double(), (std::vector<double>{3.0, 30.0}));
}

TEST(Autograd, OnlyLeavesChangeRequiresGrad) {
  Tensor x = vec({1.0}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_THROW(y.requires_grad_(false), Error);
  Tensor i = Tensor::from_vector(std::vector<int32_t>{1}, {1});
  EXPECT_THROW(i.requires_grad_(), Error);
}

TEST(Autograd, GradientKeepsTheDtypeOfTheLeaf) {
  // An f16 leaf used in an f32 computation receives an f16 gradient.
  Tensor h = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}, DType::f16).requires_grad_();
  Tensor f = Tensor::from_vector(std::vector<float>{3.0f, 4.0f}, {2});
  Tensor y = sum(h * f);  // promotes to f32
  EXPECT_EQ(y.dtype(), DType::f32);
  y.backward();
  EXPECT_EQ(h.grad().dtype(), DType::f16);
  EXPECT_EQ(h.grad().to_vector(), (std::vector<float>{3.0f, 4.0f}));
}

// The seed may be wider than the tensor it starts from: an f16 leaf still receives an f16 gradient.
TEST(Autograd, AWiderSeedStillGivesTheLeafItsOwnDtype) {
  Tensor h = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}, DType::f16).requires_grad_();
  h.backward(Tensor::from_vector(std::vector<float>{0.1f, 3.0f}, {2}));  // f32; 0.1 is not an f16
  EXPECT_EQ(h.grad().dtype(), DType::f16);
  EXPECT_EQ(h.grad().to_double(), (std::vector<double>{round_to_half(0.1f), 3.0}));
}

// A backward function may return an undefined gradient for an input it gives none to (the contract of
// Node::backward): that input receives nothing, the others receive theirs.
TEST(Autograd, AnUndefinedGradientGivesThatInputNothing) {
  Tensor a = vec({1.0, 2.0}).requires_grad_();
  Tensor b = vec({3.0, 4.0}).requires_grad_();
  Tensor out = record(add(a.detach(), b.detach()), "only_b", {a, b}, {},
                      [](const Tensor& g) { return std::vector<Tensor>{Tensor(), g}; });
  sum(out).backward();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(b.grad().to_double(), (std::vector<double>{1.0, 1.0}));
}

TEST(Autograd, ViewsPropagateGradients) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor y = sum(x.reshape({3, 2}) * 2.0) + sum(x.slice_rows(1, 2));
  y.backward();
  EXPECT_EQ(x.grad().to_double(), (std::vector<double>{2, 2, 2, 3, 3, 3}));
}

}  // namespace
