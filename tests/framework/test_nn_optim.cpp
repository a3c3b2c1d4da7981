// Modules and the SGD optimizer (PyTorch semantics, checked against hand-computed updates).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <utility>

#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

TEST(NN, LinearShapesNamesAndInit) {
  Generator g(1);
  nn::Linear lin(784, 512, g);
  EXPECT_EQ(lin.weight.shape(), (Shape{512, 784}));
  EXPECT_EQ(lin.bias.shape(), (Shape{512}));
  const double bound = 1.0 / std::sqrt(784.0);
  for (float v : lin.weight.to_vector()) EXPECT_LE(std::abs(v), bound);
  auto mlp = nn::mlp512(g);
  const auto named = mlp->named_parameters();
  ASSERT_EQ(named.size(), 6u);
  EXPECT_EQ(named[0].first, "1.weight");
  EXPECT_EQ(named[5].first, "5.bias");
  EXPECT_EQ(mlp->num_parameters(), 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  Tensor out = (*mlp)(Tensor::zeros({3, 1, 28, 28}));
  EXPECT_EQ(out.shape(), (Shape{3, 10}));
  EXPECT_THROW(lin(Tensor::zeros({3, 10})), Error);
}

TEST(NN, FusedLinearReluGivesTheSameOutputAndGradients) {
  Generator g(hl::test::fresh_seed());
  auto m = nn::mlp512(g);
  Tensor x = Tensor::randn({4, 784}, g);
  Tensor y = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {4});
  const auto out1 = (*m)(x).to_vector();
  cross_entropy((*m)(x), y).backward();
  std::vector<std::vector<float>> g1;
  for (auto& p : m->parameters()) {
    g1.push_back(p.grad().to_vector());
    p.zero_grad();
  }
  m->fuse_linear_relu();
  EXPECT_EQ((*m)(x).to_vector(), out1);
  cross_entropy((*m)(x), y).backward();
  size_t i = 0;
  for (auto& p : m->parameters()) EXPECT_EQ(p.grad().to_vector(), g1[i++]);
}

// Fusion takes every Linear directly followed by a ReLU, the last pair of the model included, and
// nothing else.
TEST(NN, FusionTakesEveryLinearFollowedByAReluAndNothingElse) {
  Generator g(hl::test::fresh_seed());
  auto first = std::make_shared<nn::Linear>(6, 5, g), middle = std::make_shared<nn::Linear>(5, 4, g),
       last = std::make_shared<nn::Linear>(4, 3, g);
  nn::Sequential m({first, std::make_shared<nn::ReLU>(), middle, last, std::make_shared<nn::ReLU>()});
  const Tensor x = Tensor::randn({2, 6}, g);
  const std::vector<float> plain = m(x).to_vector();
  m.fuse_linear_relu();
  EXPECT_EQ(m(x).to_vector(), plain);
  EXPECT_TRUE(first->fused_relu);
  EXPECT_FALSE(middle->fused_relu);  // followed by a Linear
  EXPECT_TRUE(last->fused_relu);     // the model's last two layers
  m.fuse_linear_relu(false);
  EXPECT_EQ(m(x).to_vector(), plain);
  EXPECT_FALSE(first->fused_relu);
  EXPECT_FALSE(last->fused_relu);
}

TEST(NN, ModuleToDtypeKeepsHandles) {
  Generator g(1);
  nn::Linear lin(4, 2, g);
  Tensor handle = lin.weight;
  lin.to(DType::f16);
  EXPECT_EQ(handle.dtype(), DType::f16);
  EXPECT_TRUE(handle.requires_grad());
}

TEST(Optim, StateFollowsTheModelToTheGpu) {
  HL_REQUIRE_CUDA();
  // PyTorch's usual order: the optimizer first, then model.to(cuda). The state made on the CPU
  // (master weights, momentum, the step counter) must follow the parameters, or the update kernels
  // get host addresses. Reference: the same steps with the optimizer made after the move.
  const uint64_t seed = hl::test::fresh_seed();
  Generator ga(seed), gb(seed), gx(seed + 1);
  nn::Linear late(16, 8, ga), early(16, 8, gb);
  const optim::SGD::Options opt{.lr = 0.1, .momentum = 0.9, .master_weights = true};
  optim::SGD sgd_early(early.parameters(), opt);
  early.to(Device::cuda);
  late.to(Device::cuda);
  optim::SGD sgd_late(late.parameters(), opt);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = Tensor::randn({4, 16}, gx).to(Device::cuda);
    for (auto [m, o] : {std::pair{&early, &sgd_early}, std::pair{&late, &sgd_late}}) {
      o->zero_grad();
      sum((*m)(x) * (*m)(x)).backward();
      o->step();
    }
  }
  EXPECT_EQ(sgd_early.steps(), 3);
  EXPECT_EQ(sgd_early.master_weights()[0].device(), Device::cuda);
  EXPECT_EQ(sgd_early.momentum_buffers()[0].device(), Device::cuda);
  EXPECT_EQ(early.weight.to_vector(), late.weight.to_vector());  // the same kernels on the same data
  EXPECT_EQ(early.bias.to_vector(), late.bias.to_vector());
}

TEST(Optim, SgdMatchesPyTorchSemantics) {
  // Two steps by hand. p0 = 1, grads 0.5 then 0.25; lr 0.1, momentum 0.9, weight decay 0.01.
  Tensor p = Tensor::from_vector(std::vector<double>{1.0}, {1}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  double pv = 1.0, buf = 0.0;
  for (double gval : {0.5, 0.25}) {
    p.zero_grad();
    sum(p * gval).backward();
    sgd.step();
    const double d = gval + 0.01 * pv;
    buf = (sgd.steps() == 1) ? d : 0.9 * buf + d;  // the first step stores the gradient as is
    pv -= 0.1 * buf;
    EXPECT_NEAR(p.item(), pv, 1e-15);
  }
  // Nesterov: p -= lr * (d + momentum * buf)
  Tensor q = Tensor::from_vector(std::vector<double>{2.0}, {1}).requires_grad_();
  optim::SGD nest({q}, {.lr = 0.5, .momentum = 0.5, .nesterov = true});
  sum(q * 1.0).backward();
  nest.step();
  EXPECT_NEAR(q.item(), 2.0 - 0.5 * (1.0 + 0.5 * 1.0), 1e-15);
}

TEST(Optim, SgdDampeningAndNesterovMatchPyTorchOverSeveralSteps) {
  // Four steps with a gradient that changes every step, so that the momentum buffer's history
  // matters (at the first step buf = d: dampening does not act yet, and Nesterov's d + m * buf is
  // (1 + m) * d, which m / buf in place of m * buf would give too).
  // PyTorch: buf = m * buf + (1 - dampening) * d after the first step; Nesterov: d + m * buf.
  for (const bool nesterov : {false, true}) {
    const double lr = 0.1, m = 0.8, wd = 0.05, damp = nesterov ? 0.0 : 0.3;
    Tensor p = Tensor::from_vector(std::vector<double>{1.0, -3.0}, {2}).requires_grad_();
    optim::SGD sgd({p}, {.lr = lr, .momentum = m, .weight_decay = wd, .dampening = damp, .nesterov = nesterov});
    std::vector<double> w{1.0, -3.0}, buf(2, 0.0);
    for (int t = 0; t < 4; ++t) {
      const std::vector<double> g{0.5 + t, -2.0 / (t + 1)};
      sgd.zero_grad();
      sum(mul(p, Tensor::from_vector(g, {2}))).backward();
      sgd.step();
      for (size_t i = 0; i < 2; ++i) {
        const double d = g[i] + wd * w[i];
        buf[i] = t == 0 ? d : m * buf[i] + (1.0 - damp) * d;
        w[i] -= lr * (nesterov ? d + m * buf[i] : buf[i]);
      }
      const auto got = p.to_double();
      EXPECT_NEAR(got[0], w[0], 1e-14) << "nesterov " << nesterov << ", step " << t;
      EXPECT_NEAR(got[1], w[1], 1e-14) << "nesterov " << nesterov << ", step " << t;
    }
  }
}

TEST(Optim, SgdStateRoundTripResumesExactly) {
  // Run A: 6 steps straight. Run B: 3 steps, state() into a fresh optimizer, 3 more steps.
  Generator g(hl::test::fresh_seed());
  const Tensor init = Tensor::randn({5}, g);
  const Tensor target = Tensor::randn({5}, g);
  auto loss_of = [&](const Tensor& p) { return sum(pow(p - target, 2.0)); };
  Tensor a = init.clone().requires_grad_();
  optim::SGD sa({a}, {.lr = 0.1 / 3.0, .momentum = 0.9, .weight_decay = 1e-4});
  for (int i = 0; i < 6; ++i) {
    sa.zero_grad();
    loss_of(a).backward();
    sa.step();
  }
  Tensor b = init.clone().requires_grad_();
  optim::SGD sb({b}, {.lr = 0.1 / 3.0, .momentum = 0.9, .weight_decay = 1e-4});
  for (int i = 0; i < 3; ++i) {
    sb.zero_grad();
    loss_of(b).backward();
    sb.step();
  }
  const optim::Optimizer::State st = sb.state();
  EXPECT_EQ(st.meta.at("type"), "SGD");
  EXPECT_EQ(st.meta.at("steps"), "3");
  ASSERT_EQ(st.tensors.size(), 1u);
  Tensor c = b.detach().clone().requires_grad_();
  optim::SGD sc({c}, {.lr = 1.0, .momentum = 0.9, .weight_decay = 1e-4});  // lr restored from the state
  sc.load_state(st);
  EXPECT_EQ(sc.lr(), 0.1 / 3.0);
  for (int i = 0; i < 3; ++i) {
    sc.zero_grad();
    loss_of(c).backward();
    sc.step();
  }
  EXPECT_EQ(c.to_vector(), a.to_vector());  // bit for bit
  EXPECT_EQ(sc.steps(), 6);
  optim::Optimizer::State wrong = st;
  wrong.meta["type"] = "Adam";
  EXPECT_THROW(sc.load_state(wrong), Error);
  // Numbers that do not parse, or are out of range, are refused before anything changes.
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"steps", "3x"}, {"steps", "-1"}, {"lr", "fast"}, {"lr", "-0.1"}, {"lr", "inf"}}) {
    optim::Optimizer::State bad = st;
    bad.meta[key] = value;
    EXPECT_THROW(sc.load_state(bad), Error) << key << " = " << value;
    EXPECT_EQ(sc.steps(), 6);
    EXPECT_EQ(sc.lr(), 0.1 / 3.0);
  }
}

TEST(Optim, ResumeKeepsAMomentumBufferThatHasNotStarted) {
  // Parameter 1 gets no gradient before the save, so the state has no momentum buffer for it: after
  // the restore its first update must start the buffer as the gradient itself (buf = d), not as
  // momentum * 0 + (1 - dampening) * d, exactly as in the run that was never interrupted.
  auto run = [](bool resume) {
    Tensor p0 = Tensor::from_vector(std::vector<double>{1.0, 2.0}, {2}).requires_grad_();
    Tensor p1 = Tensor::from_vector(std::vector<double>{-1.0}, {1}).requires_grad_();
    const optim::SGD::Options o{.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
    auto sgd = std::make_unique<optim::SGD>(std::vector<Tensor>{p0, p1}, o);
    for (int t = 0; t < 4; ++t) {
      if (t == 2 && resume) {
        const optim::Optimizer::State st = sgd->state();
        for (const auto& [name, tensor] : st.tensors) EXPECT_NE(name, "momentum.1");  // the case under test
        EXPECT_EQ(st.tensors.size(), 1u);                                         // momentum.0 only
        sgd = std::make_unique<optim::SGD>(std::vector<Tensor>{p0, p1}, o);
        sgd->load_state(st);
      }
      sgd->zero_grad();
      Tensor loss = sum(mul(p0, p0));
      if (t >= 2) loss = loss + sum(mul(p1, p1)) * 3.0;  // p1 joins after the save
      loss.backward();
      sgd->step();
    }
    return std::make_pair(p0.to_double(), p1.to_double());
  };
  const auto straight = run(false);
  const auto resumed = run(true);
  EXPECT_EQ(resumed.first, straight.first);
  EXPECT_EQ(resumed.second, straight.second);
  // By hand for p1: d = 6 * -1 = -6 starts the buffer; then w = -1 + 0.6 = -0.4, d = -2.4,
  // buf = 0.9 * -6 + 0.5 * -2.4 = -6.6, w = -0.4 + 0.66 = 0.26.
  EXPECT_NEAR(straight.second[0], 0.26, 1e-15);
}

TEST(Optim, LoadStateRestoresTheMasterWeights) {
  // f16 parameters with f32 masters: after 3 steps the masters hold bits the f16 copies do not. A
  // fresh optimizer (masters made from its parameters) must take the saved masters, not keep its own.
  Tensor p = Tensor::from_vector(std::vector<float>{1.0f, -0.5f}, {2}, DType::f16).requires_grad_();
  optim::SGD a({p}, {.lr = 1e-4, .master_weights = true});
  for (int t = 0; t < 3; ++t) {
    a.zero_grad();
    sum(mul(p, Tensor::from_vector(std::vector<float>{0.3f, 0.7f}, {2}, DType::f16))).backward();
    a.step();
  }
  const optim::Optimizer::State saved = a.state();
  Tensor q = Tensor::from_vector(std::vector<float>{5.0f, 5.0f}, {2}, DType::f16).requires_grad_();
  optim::SGD b({q}, {.lr = 1e-4, .master_weights = true});
  b.load_state(saved);
  const optim::Optimizer::State back = b.state();
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].first, "master.0");
  EXPECT_EQ(back.tensors[0].second.to_vector(), saved.tensors[0].second.to_vector());
  EXPECT_NE(back.tensors[0].second.to_vector(), p.to_vector());  // the masters are not the f16 values
}

TEST(Optim, LoadStateNamesAMasterWeightsMismatch) {
  Tensor p = Tensor::zeros({2}).requires_grad_();
  optim::SGD with({p}, {.lr = 0.1, .master_weights = true});
  optim::SGD without({p}, {.lr = 0.1});
  const auto refusal = [](optim::Optimizer& into, const optim::Optimizer::State& st) {
    try {
      into.load_state(st);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  EXPECT_EQ(refusal(without, with.state()),
            "load_state: the state has master weights, this SGD does not");
  EXPECT_EQ(refusal(with, without.state()), "load_state: the state has no master weights, this SGD keeps them");
}

TEST(Optim, BadOptionsAndParametersAreErrors) {
  Tensor p = Tensor::zeros({2}).requires_grad_();
  EXPECT_THROW(optim::SGD({p}, {.lr = -1.0}), Error);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Error);
  // Adam's betas: [0, 1) each, as in PyTorch (beta1 = 0 is RMSprop-like and allowed).
  EXPECT_NO_THROW(optim::Adam({p}, {.beta1 = 0.0, .beta2 = 0.0}));
  for (const auto& [b1, b2] : std::vector<std::pair<double, double>>{{1.0, 0.999}, {0.9, 1.0}, {-0.1, 0.999},
                                                                       {0.9, -0.1}}) {
    EXPECT_THROW(optim::Adam({p}, {.beta1 = b1, .beta2 = b2}), Error) << b1 << ", " << b2;
  }
  Tensor not_leaf = p * 2.0;
  EXPECT_THROW(optim::SGD({not_leaf}, {.lr = 0.1}), Error);
  Tensor no_grad = Tensor::zeros({2});
  EXPECT_THROW(optim::SGD({no_grad}, {.lr = 0.1}), Error);
}

TEST(Optim, TrainsASmallRegression) {
  // Fit y = 3x - 1 with one Linear(1, 1): the loss must fall by orders of magnitude.
  Generator g(hl::test::fresh_seed());
  nn::Linear lin(1, 1, g);
  optim::SGD sgd(lin.parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor x = Tensor::uniform({64, 1}, g, -1, 1);
  Tensor y = x * 3.0 - 1.0;
  double first = 0, last = 0;
  for (int it = 0; it < 200; ++it) {
    sgd.zero_grad();
    Tensor loss = mean(pow(lin(x) - y, 2.0));
    if (it == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    sgd.step();
  }
  EXPECT_LT(last, first * 1e-4);
  EXPECT_NEAR(lin.weight.item(), 3.0, 1e-2);
  EXPECT_NEAR(lin.bias.item(), -1.0, 1e-2);
}

}  // namespace
