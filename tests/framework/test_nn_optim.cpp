// Modules and the SGD optimizer (PyTorch semantics, checked against hand-computed updates).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
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
  // PyTorch's U(-1/sqrt(in), 1/sqrt(in)): inside the bound, and spread over it (not all zero, both signs).
  double lo = 0, hi = 0;
  for (float v : lin.weight.to_vector()) {
    EXPECT_LE(std::abs(v), bound);
    lo = std::min(lo, static_cast<double>(v)), hi = std::max(hi, static_cast<double>(v));
  }
  EXPECT_LT(lo, -0.9 * bound);
  EXPECT_GT(hi, 0.9 * bound);
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
  const Tensor x = Tensor::randn({2, 6}, g).requires_grad_();
  const std::vector<float> plain = m(x).to_vector();
  // The ops of the graph, from the output back to the first layer: what each layer ran.
  const auto ops = [&] {
    std::vector<std::string> out;
    const Tensor y = m(x);  // holds the graph while it is walked
    for (const Node* n = y.impl()->grad_fn.get(); n != nullptr; n = n->inputs[0].impl()->grad_fn.get())
      out.push_back(n->op);
    return out;
  };
  m.fuse_linear_relu();
  EXPECT_EQ(m(x).to_vector(), plain);
  // last + ReLU (the model's last two layers), middle (followed by a Linear), first + ReLU
  EXPECT_EQ(ops(), (std::vector<std::string>{"linear_relu", "linear", "linear_relu"}));
  // The layers keep no trace of the fusion: called alone, the first one is a Linear (it kept a flag
  // Sequential had set, and clamped its outputs, until a review found it).
  const Tensor alone = (*first)(x);
  EXPECT_EQ(alone.impl()->grad_fn->op, "linear");
  EXPECT_EQ(alone.to_vector(), linear(x, first->weight, first->bias).to_vector());
  m.fuse_linear_relu(false);
  EXPECT_EQ(m(x).to_vector(), plain);
  EXPECT_EQ(ops(), (std::vector<std::string>{"relu", "linear", "linear", "relu", "linear"}));
}

TEST(NN, FusionLeavesAReluAfterAnyOtherLayerInPlace) {
  // Only a Linear or a Conv2d takes the ReLU that follows it; after a Flatten it must still run.
  nn::Sequential m({std::make_shared<nn::Flatten>(), std::make_shared<nn::ReLU>()});
  m.fuse_linear_relu();
  const Tensor x = Tensor::from_vector(std::vector<float>{-1.0f, 2.0f, -3.0f, 4.0f}, {2, 2, 1});
  EXPECT_EQ(m(x).to_vector(), (std::vector<float>{0.0f, 2.0f, 0.0f, 4.0f}));
}

TEST(NN, LinearRefusesNoFeaturesAndInputsOfTheWrongShape) {
  Generator g(1);
  EXPECT_THROW(nn::Linear(0, 5, g), Error);
  EXPECT_THROW(nn::Linear(5, 0, g), Error);
  EXPECT_NO_THROW(nn::Linear(1, 1, g));
  nn::Linear lin(3, 2, g);
  // [N, 4], a 3-D input whose dim 1 is 3, and no tensor: each named by the layer, before any op runs.
  for (const Tensor& x : {Tensor::zeros({2, 4}), Tensor::zeros({2, 3, 5}), Tensor()}) {
    EXPECT_EQ(test::error_of([&] { lin(x); }), "Linear(3 -> 2): expected input [N, 3], got " + x.describe());
  }
}

TEST(NN, TrainAndEvalReachTheModuleAndEveryChild) {
  Generator g(1);
  auto inner = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Dropout>(0.5, g)});
  nn::Sequential outer({std::make_shared<nn::Linear>(2, 2, g), inner});
  outer.eval();
  EXPECT_FALSE(outer.training());
  EXPECT_FALSE(outer[0].training());
  EXPECT_FALSE(inner->training());
  EXPECT_FALSE((*inner)[0].training());
  outer.train();
  EXPECT_TRUE(outer.training());
  EXPECT_TRUE((*inner)[0].training());
}

// A parameter registered as a view into a larger tensor (storage offset 2), converted to another
// dtype: the new storage starts at 0, so the view's offset must be replaced too.
struct ViewParameter : nn::Module {
  Tensor w;
  explicit ViewParameter(const Tensor& whole) { w = register_parameter("w", whole.slice_rows(1, 3)); }
  Tensor forward(const Tensor& x) override { return x; }
  std::string name() const override { return "ViewParameter"; }
};

TEST(NN, ModuleToDtypeKeepsTheValuesOfAViewParameter) {
  ViewParameter m(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}));
  ASSERT_EQ(m.w.to_vector(), (std::vector<float>{3, 4, 5, 6}));
  m.to(DType::f64);
  EXPECT_EQ(m.w.dtype(), DType::f64);
  EXPECT_EQ(m.w.to_vector(), (std::vector<float>{3, 4, 5, 6}));
}

// A module added twice (tied weights) has its parameters listed once, under the first name, as
// PyTorch's named_parameters() does: an optimizer given them twice stepped them twice (found by review).
TEST(NN, ATiedModuleIsListedAndSteppedOnce) {
  Generator g(5);
  auto tied = std::make_shared<nn::Linear>(3, 3, g);
  nn::Sequential m({tied, std::make_shared<nn::ReLU>(), tied});
  std::vector<std::string> names;
  for (const auto& [n, t] : m.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(m.num_parameters(), 12);
  EXPECT_EQ(tied->weight.name(), "0.weight") << "the tensor keeps the name the model lists";
  const double before = tied->bias.to_double()[0];
  optim::SGD sgd(m.parameters(), {.lr = 0.5});
  sum(m(Tensor::randn({2, 3}, g))).backward();
  const double grad = tied->bias.grad().to_double()[0];
  sgd.step();
  EXPECT_DOUBLE_EQ(tied->bias.to_double()[0], static_cast<double>(static_cast<float>(before - 0.5 * grad)));
}

// Names are refused where they are made, not when a checkpoint is written: a taken one, an empty one,
// one with the '.' that joins paths.
TEST(NN, ANameTakenOrWithADotIsRefusedAtRegistration) {
  struct Twice : nn::Module {
    explicit Twice(int what) {
      register_parameter("w", Tensor::zeros({1}));
      if (what == 0) register_buffer("w", Tensor::zeros({1}));
      if (what == 1) register_module("w", std::make_shared<nn::ReLU>());
      if (what == 2) register_parameter("a.b", Tensor::zeros({1}));
      if (what == 3) register_parameter("", Tensor::zeros({1}));
    }
    Tensor forward(const Tensor& x) override { return x; }
    std::string name() const override { return "Twice"; }
  };
  for (int what : {0, 1}) {
    const std::string e = test::error_of([&] { Twice t(what); });
    EXPECT_NE(e.find("Twice: the " + std::string(what == 0 ? "buffer" : "module") + " name 'w' is taken already"),
              std::string::npos)
        << e;
  }
  for (int what : {2, 3}) {
    const std::string e = test::error_of([&] { Twice t(what); });
    EXPECT_NE(e.find("must be non-empty and without a '.'"), std::string::npos) << e;
  }
  EXPECT_NO_THROW(Twice(4));
}

// A model converts to a floating dtype only: to(i32) truncated every weight (found by review).
TEST(NN, ModuleToAnIntegerDtypeIsRefusedAndChangesNothing) {
  Generator g(2);
  auto m = nn::lenet(g);
  const std::vector<float> w = m->parameters()[0].to_vector();
  const std::string e = test::error_of([&] { m->to(DType::i32); });
  EXPECT_NE(e.find("Module::to: a model converts to a floating dtype (f16, f32 or f64), got i32 (Sequential)"),
            std::string::npos)
      << e;
  EXPECT_EQ(m->parameters()[0].dtype(), DType::f32);
  EXPECT_EQ(m->parameters()[0].to_vector(), w);
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

TEST(Optim, StateFollowsTheModelToAnotherDtype) {
  // model.to(f64) after steps were taken: the moments (and masters, and FP32 gradient buffers) made
  // for f32 parameters were written by the f64 update as doubles, past their end (a heap overflow;
  // a Linear(1000, 1000) with Adam crashed), and f64 state was read as floats after to(f32). The state
  // now converts with the parameters. Every gradient here is 1, so the values follow by hand.
  for (const DType from : {DType::f32, DType::f64}) {
    const DType to = from == DType::f32 ? DType::f64 : DType::f32;
    SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
    Generator g(3);
    nn::Linear lin(3, 2, g, /*bias=*/false), lin2(3, 2, g, /*bias=*/false);
    lin.to(from);
    lin2.to(from);
    optim::SGD sgd(lin.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::Adam adam(lin2.parameters(), {.lr = 0.01, .master_weights = true});
    const std::vector<double> w0 = lin.weight.to_double(), v0 = lin2.weight.to_double();
    const auto step = [&](DType t) {
      for (auto [m, o] : {std::pair<nn::Linear*, optim::Optimizer*>{&lin, &sgd}, {&lin2, &adam}}) {
        o->zero_grad();
        sum((*m)(Tensor::ones({1, 3}, t))).backward();  // dL/dW = 1 everywhere
        o->step();
      }
    };
    step(from);
    lin.to(to);
    lin2.to(to);
    step(to);
    ASSERT_EQ(sgd.momentum_buffers()[0].dtype(), to);
    ASSERT_EQ(adam.state_buffers("exp_avg")[0].dtype(), to);
    ASSERT_EQ(adam.master_weights()[0].dtype(), to);
    for (double b : sgd.momentum_buffers()[0].to_double()) EXPECT_NEAR(b, 1.0 * 0.9 + 1.0, 1e-6);
    for (double m : adam.state_buffers("exp_avg")[0].to_double()) EXPECT_NEAR(m, 0.1 * 0.9 + 0.1, 1e-6);
    for (double v : adam.state_buffers("exp_avg_sq")[0].to_double()) EXPECT_NEAR(v, 0.001 * 0.999 + 0.001, 1e-9);
    const std::vector<double> w = lin.weight.to_double(), v = lin2.weight.to_double();
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(w[i], w0[i] - 0.1 * 1.0 - 0.1 * 1.9, 1e-6);
      EXPECT_NEAR(v[i], v0[i] - 2 * 0.01, 1e-6);  // Adam's bias-corrected steps: lr each, for a constant gradient
    }
  }
}

TEST(Optim, StateRightAfterModuleToIsInTheNewDtype) {
  // The optimizer converts its own state at the next step; state() taken before that (a checkpoint
  // saved right after model.to) gives it converted already, so that the saved tensors have the dtype
  // the next step uses, and a fresh optimizer loading them steps as the first one does.
  for (const DType from : {DType::f32, DType::f64}) {
    const DType to = from == DType::f32 ? DType::f64 : DType::f32;
    SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
    Generator g(5);
    nn::Linear a(3, 2, g), b(3, 2, g);
    a.to(from);
    optim::Adam adam(a.parameters(), {.lr = 0.01, .master_weights = true});
    const auto step = [](nn::Linear& m, optim::Optimizer& o, DType t) {
      o.zero_grad();
      sum(m(Tensor::from_vector(std::vector<double>{0.5, -1.0, 2.0}, {1, 3}).to(t))).backward();
      o.step();
    };
    step(a, adam, from);
    step(a, adam, from);
    a.to(to);
    const optim::Optimizer::State s = adam.state();
    ASSERT_EQ(s.tensors.size(), 6u);  // master, exp_avg and exp_avg_sq of the weight and the bias
    for (const auto& [name, t] : s.tensors) {
      EXPECT_EQ(t.dtype(), to) << name;
      EXPECT_EQ(t.device(), a.weight.device()) << name;
    }
    EXPECT_EQ(adam.state_buffers("exp_avg")[0].dtype(), from);  // its own copy waits for the step
    const std::vector<double> m_before = adam.state_buffers("exp_avg")[0].to_double();
    const std::vector<double> m_saved = s.tensors[2].second.to_double();
    ASSERT_EQ(s.tensors[2].first, "exp_avg.0");
    for (size_t i = 0; i < m_before.size(); ++i)
      EXPECT_EQ(m_saved[i], to == DType::f32 ? static_cast<double>(static_cast<float>(m_before[i])) : m_before[i]);

    b.to(to);
    for (size_t i = 0; i < a.parameters().size(); ++i) b.parameters()[i].copy_(a.parameters()[i]);
    optim::Adam resumed(b.parameters(), {.lr = 0.01, .master_weights = true});
    resumed.load_state(s);
    step(a, adam, to);
    step(b, resumed, to);
    for (size_t i = 0; i < a.parameters().size(); ++i) {
      const std::vector<double> x = a.parameters()[i].to_double(), y = b.parameters()[i].to_double();
      for (size_t j = 0; j < x.size(); ++j) EXPECT_EQ(x[j], y[j]) << "parameter " << i << " element " << j;
    }
  }
}

TEST(Optim, StateRightAfterModuleToIsOnTheNewDevice) {
  HL_REQUIRE_CUDA();
  // state() between model.to(cuda) and the next step gives the state on the GPU already, and Adam's
  // step counters of split groups (a parameter that missed a step) follow the model at that step.
  // The gradients do not depend on the weights (the input is ones), so the GPU's steps must give the
  // CPU's bits (CudaOptim.* compare the update kernels bit for bit).
  Generator g1(7), g2(7);
  nn::Linear moved(2, 2, g1), ref(2, 2, g2);
  optim::Adam adam(moved.parameters(), {.lr = 0.1, .master_weights = true});
  optim::Adam adam_ref(ref.parameters(), {.lr = 0.1, .master_weights = true});
  const auto step = [](nn::Linear& m, optim::Adam& o, bool bias_only) {
    o.zero_grad();
    (bias_only ? sum(m.bias) : sum(m(Tensor::ones({1, 2}, DType::f32, m.weight.device())))).backward();
    o.step();
  };
  for (auto [m, o] : {std::pair{&moved, &adam}, std::pair{&ref, &adam_ref}}) {
    step(*m, *o, true);  // the weight misses the first step: a group and a counter of its own
    step(*m, *o, false);
  }
  moved.to(Device::cuda);
  for (const auto& [name, t] : adam.state().tensors) EXPECT_EQ(t.device(), Device::cuda) << name;
  step(moved, adam, false);
  step(ref, adam_ref, false);
  EXPECT_EQ(adam.param_steps(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(moved.weight.to_vector(), ref.weight.to_vector());
  EXPECT_EQ(moved.bias.to_vector(), ref.bias.to_vector());
}

TEST(Optim, AdamsFirstStepIsTheLearningRateWhateverBeta2) {
  // At t = 1 the bias corrections give m^ = g and v^ = g^2, so each weight moves by lr (eps aside).
  // 1 - beta2 computed in f32 from f32(beta2) is off by 0.0014% at 0.999 and 0.14% at 0.99999, and the
  // step with it (PyTorch computes 1 - beta2 in double): w after one step was 0.900067806, not 0.9.
  for (const double beta2 : {0.999, 0.9999, 0.99999}) {
    Tensor w = Tensor::ones({1}).requires_grad_();
    optim::Adam adam({w}, {.lr = 0.1, .beta2 = beta2, .eps = 1e-12});
    sum(w * 2.0).backward();
    adam.step();
    EXPECT_NEAR(w.item(), 0.9, 2e-7) << "beta2 " << beta2;  // a few f32 ulps of 0.9
  }
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

// load_state's error message, or "(loaded)".
std::string load_refusal(optim::Optimizer& into, const optim::Optimizer::State& st) {
  const std::string e = test::error_of([&] { into.load_state(st); });
  return e == "(no error)" ? "(loaded)" : e;
}

TEST(Optim, LoadStateNamesAMasterWeightsMismatch) {
  Tensor p = Tensor::zeros({2}).requires_grad_();
  optim::SGD with({p}, {.lr = 0.1, .master_weights = true});
  optim::SGD without({p}, {.lr = 0.1});
  EXPECT_EQ(load_refusal(without, with.state()), "load_state: the state has master weights, this SGD does not");
  EXPECT_EQ(load_refusal(with, without.state()), "load_state: the state has no master weights, this SGD keeps them");
}

TEST(Optim, LoadStateTakesOnlyNamesOfTheFormPrefixDotIndex) {
  // Two parameters, so "momentum.0" and "momentum.1" are the only momentum names. Each other
  // spelling is refused by name, and the refusal changes nothing: "momentum.01" or "momentum. 0"
  // read as numbers would name a parameter a second way, "momentum.2" is one past the end and
  // "momentum.-1" before the start.
  Tensor a = Tensor::from_vector(std::vector<float>{1.0f}, {1}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{1.0f}, {1}).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
  sum(a + b).backward();
  sgd.step();
  const optim::Optimizer::State good = sgd.state();
  ASSERT_EQ(good.tensors.size(), 2u);
  ASSERT_EQ(good.tensors[0].first, "momentum.0");
  for (const std::string bad : {"momentum", "momentum.", "momentum.x", "momentum.0x", "momentum.01", "momentum.00",
                                "momentum.+0", "momentum. 0", "momentum.-1", "momentum.2",
                                "momentum.99999999999999999999"}) {
    optim::Optimizer::State st = good;
    st.tensors[0].first = bad;
    st.meta["lr"] = "0.5";
    EXPECT_EQ(load_refusal(sgd, st), "load_state: unexpected state tensor '" + bad + "' (this SGD has 2 parameters)");
    EXPECT_EQ(sgd.lr(), 0.1) << bad;  // nothing was loaded
  }
  EXPECT_EQ(load_refusal(sgd, good), "(loaded)");
}

TEST(Optim, LoadStateNeedsAMasterForEveryParameter) {
  Tensor a = Tensor::from_vector(std::vector<float>{1.0f}, {1}, DType::f16).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{2.0f}, {1}, DType::f16).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.1, .master_weights = true});
  const optim::Optimizer::State full = sgd.state();
  ASSERT_EQ(full.tensors.size(), 2u);
  for (size_t missing : {0u, 1u}) {
    optim::Optimizer::State st = full;
    st.tensors.erase(st.tensors.begin() + static_cast<std::ptrdiff_t>(missing));
    EXPECT_EQ(load_refusal(sgd, st),
              "load_state: the state lacks master weights for parameter " + std::to_string(missing));
  }
}

TEST(Optim, LoadStateAcceptsALearningRateOfZero) {
  // set_lr(0) is allowed (a schedule may end there), so a state saved then must load.
  Tensor p = Tensor::zeros({2}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::Optimizer::State st = sgd.state();
  st.meta["lr"] = "0";
  EXPECT_EQ(load_refusal(sgd, st), "(loaded)");
  EXPECT_EQ(sgd.lr(), 0.0);
  st.meta["lr"] = "-0.1";
  EXPECT_NE(load_refusal(sgd, st), "(loaded)");
}

TEST(Optim, LoadStateDecidesAfreshWhichMomentumBuffersHaveStarted) {
  // With dampening 0.5 a started buffer takes 0.5 * g, a fresh one g (PyTorch: the first applied
  // update stores the gradient undamped), so each parameter's step shows which one it had.
  const auto make = [](float v) { return Tensor::from_vector(std::vector<float>{v}, {1}).requires_grad_(); };
  const optim::SGD::Options opts{.lr = 1.0, .momentum = 0.5, .dampening = 0.5};
  const auto step_with_ones = [](optim::SGD& sgd, const Tensor& a, const Tensor& b) {
    sgd.zero_grad();
    sum(a + b).backward();  // gradient 1 for both
    sgd.step();
  };
  // 1. A state without any momentum buffer, loaded into an optimizer whose buffers had started:
  //    both buffers start afresh.
  Tensor a = make(0.0f), b = make(0.0f);
  optim::SGD used({a, b}, opts);
  step_with_ones(used, a, b);  // a = b = -1, both buffers started
  Tensor c = make(0.0f), d = make(0.0f);
  optim::SGD fresh({c, d}, opts);
  ASSERT_EQ(load_refusal(used, fresh.state()), "(loaded)");
  step_with_ones(used, a, b);
  EXPECT_EQ(a.item(), -2.0);  // a started buffer would give -1.5
  EXPECT_EQ(b.item(), -2.0);
  // 2. A state with a buffer for parameter 0 only (parameter 1 never had a gradient): parameter 1's
  //    buffer starts afresh, parameter 0's goes on.
  Tensor e = make(0.0f), f = make(0.0f);
  optim::SGD half({e, f}, opts);
  half.zero_grad();
  sum(e).backward();
  half.step();
  const optim::Optimizer::State st = half.state();
  ASSERT_EQ(st.tensors.size(), 1u);
  ASSERT_EQ(st.tensors[0].first, "momentum.0");
  Tensor g = make(0.0f), h = make(0.0f);
  optim::SGD resumed({g, h}, opts);
  ASSERT_EQ(load_refusal(resumed, st), "(loaded)");
  step_with_ones(resumed, g, h);
  EXPECT_EQ(g.item(), -1.0);  // buf = 0.5 * 1 + 0.5 * 1
  EXPECT_EQ(h.item(), -1.0);  // buf = 1, fresh; a started one would give -0.5
}

TEST(Optim, AParameterWithoutAGradientThisStepIsLeftAlone) {
  // Its gradient of the step before must not be applied again.
  Tensor a = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 1.0});
  sum(a + b).backward();
  sgd.step();
  sgd.zero_grad();
  sum(a).backward();
  sgd.step();
  EXPECT_EQ(a.item(), -2.0);
  EXPECT_EQ(b.item(), -1.0);
  EXPECT_FALSE(sgd.unscaled_grads()[1].defined());
}

// PyTorch counts Adam's t per parameter: a parameter whose first gradient comes at step 11 takes a first
// step (t = 1: m and v bias-corrected to g and g^2, so an update of lr * g / (|g| + eps), about lr). Counted
// per optimizer, t was 11 and the update 0.48 lr (found by review, 2026-11-29); after a long wait it
// approaches 3.16 lr. A parameter that misses a step keeps its count; a skipped step counts for nobody.
TEST(Optim, AdamCountsEachParametersOwnSteps) {
  Tensor a = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  Tensor c = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  optim::Adam adam({a, b, c}, {.lr = 0.1});
  const auto step_of = [](optim::Adam& o, std::vector<Tensor> present) {  // a step with these gradients only
    o.zero_grad();
    Tensor loss = sum(present[0]);
    for (size_t i = 1; i < present.size(); ++i) loss = loss + sum(present[i]);
    loss.backward();
    o.step();
  };
  const auto step_with = [&](std::vector<Tensor> present) { step_of(adam, std::move(present)); };
  for (int i = 0; i < 10; ++i) step_with({a, c});
  step_with({a, b});  // b's first gradient; c misses this one
  EXPECT_NEAR(b.item(), -0.1, 1e-6) << "b's first update is a first step";
  step_with({a, b, c});
  EXPECT_EQ(adam.steps(), 12);
  EXPECT_EQ(adam.param_steps(), (std::vector<int64_t>{12, 2, 11}));
  // A skipped step (a found-inf flag set on the device) counts for no group.
  Tensor flag = Tensor::from_vector(std::vector<int32_t>{1}, {});
  adam.zero_grad();
  sum(b).backward();
  adam.step_unless(flag.data<int32_t>());
  EXPECT_EQ(adam.param_steps(), (std::vector<int64_t>{12, 2, 11}));
  // The counts travel with the state, and a resumed optimizer takes the next step as the first would.
  const optim::Optimizer::State st = adam.state();
  ASSERT_EQ(st.meta.at("param_steps"), "12,2,11");
  Tensor a2 = Tensor::from_vector(std::vector<double>{a.item()}, {1}, DType::f32).requires_grad_();
  Tensor b2 = Tensor::from_vector(std::vector<double>{b.item()}, {1}, DType::f32).requires_grad_();
  Tensor c2 = Tensor::from_vector(std::vector<double>{c.item()}, {1}, DType::f32).requires_grad_();
  optim::Adam resumed({a2, b2, c2}, {.lr = 0.1});
  resumed.load_state(st);
  EXPECT_EQ(resumed.param_steps(), (std::vector<int64_t>{12, 2, 11}));
  step_with({a, b, c});
  resumed.zero_grad();
  (sum(a2) + sum(b2) + sum(c2)).backward();
  resumed.step();
  EXPECT_EQ(a2.item(), a.item());
  EXPECT_EQ(b2.item(), b.item());
  EXPECT_EQ(c2.item(), c.item());
  // A group other than the first splits too: {b, c} leave a's group together at the first step, then b
  // and c part. A group is split only when some of it is present and some absent, so a steady pattern
  // of missing gradients makes no new counters (an allocation per group and step would grow forever).
  Tensor x = Tensor::zeros({1}).requires_grad_(), y = Tensor::zeros({1}).requires_grad_();
  Tensor z = Tensor::zeros({1}).requires_grad_();
  optim::Adam nested({x, y, z}, {.lr = 0.1});
  const auto nested_step = [&](std::vector<Tensor> present) { step_of(nested, std::move(present)); };
  nested_step({x});
  nested_step({x, y});
  nested_step({x, y, z});
  EXPECT_EQ(nested.param_steps(), (std::vector<int64_t>{3, 2, 1}));
  nested_step({x, z});
  const size_t bytes = memory_stats(Device::cpu).current_bytes;
  for (int i = 0; i < 4; ++i) {
    nested_step({x, z});
    EXPECT_EQ(memory_stats(Device::cpu).current_bytes, bytes) << "step " << i;
  }
  EXPECT_EQ(nested.param_steps(), (std::vector<int64_t>{8, 2, 6}));
  // The first parameter leaves its group as any other does.
  Tensor u = Tensor::zeros({1}).requires_grad_(), v = Tensor::zeros({1}).requires_grad_();
  optim::Adam first_absent({u, v}, {.lr = 0.1});
  sum(v).backward();
  first_absent.step();
  EXPECT_EQ(first_absent.param_steps(), (std::vector<int64_t>{0, 1}));
  // A count of 0 (a parameter that never had a gradient) is saved and loaded as the others.
  Tensor u2 = Tensor::zeros({1}).requires_grad_(), v2 = Tensor::zeros({1}).requires_grad_();
  optim::Adam reloaded({u2, v2}, {.lr = 0.1});
  ASSERT_EQ(first_absent.state().meta.at("param_steps"), "0,1");
  reloaded.load_state(first_absent.state());
  EXPECT_EQ(reloaded.param_steps(), (std::vector<int64_t>{0, 1}));
  // Every parameter at every step: one group, and the state as before (no param_steps).
  Tensor d = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  optim::Adam plain({d}, {.lr = 0.1});
  sum(d).backward();
  plain.step();
  EXPECT_EQ(plain.state().meta.count("param_steps"), 0u);
  optim::Optimizer::State bad = st;
  bad.meta["param_steps"] = "12,2";
  EXPECT_EQ(load_refusal(resumed, bad), "Adam::load_state: 'param_steps' has 2 counts for 3 parameters");
  bad.meta["param_steps"] = "12,13,11";
  EXPECT_EQ(load_refusal(resumed, bad), "Adam::load_state: 'param_steps' has 13, outside [0, steps = 12]");
}

// A parameter written through copy_ (a checkpoint loaded without the optimizer, say) after an optimizer
// with master weights was made: the next step re-reads its master, where it used to overwrite the new
// values with the old master's (found by review, 2026-11-29). Converting the model in place
// (Module::to(f16)) is not a write: masters taken before it keep their FP32 values.
TEST(Optim, AParameterWrittenBehindTheOptimizersBackHasItsMasterReread) {
  Generator gen(3);
  auto model = std::make_shared<nn::Linear>(2, 1, gen);
  optim::SGD sgd(model->parameters(), {.lr = 0.0, .master_weights = true});
  const std::vector<double> fp32 = sgd.master_weights()[0].to_double();
  model->to(DType::f16);
  sum(model->forward(Tensor::ones({1, 2}, DType::f16))).backward();
  sgd.step();
  EXPECT_EQ(sgd.master_weights()[0].to_double(), fp32) << "to(f16) was taken for a write";

  Tensor w = model->parameters()[0];
  w.copy_(Tensor::from_vector(std::vector<float>{0.25f, -0.5f}, {1, 2}));  // as load_checkpoint does
  sgd.zero_grad();
  sum(model->forward(Tensor::ones({1, 2}, DType::f16))).backward();
  sgd.step();  // lr 0: nothing may move
  EXPECT_EQ(w.to_vector(), (std::vector<float>{0.25f, -0.5f}));
  EXPECT_EQ(sgd.master_weights()[0].to_vector(), (std::vector<float>{0.25f, -0.5f}));
  w.fill_(2.0);
  sgd.step();
  EXPECT_EQ(w.to_vector(), (std::vector<float>{2, 2}));
}

// A parameter written with copy_ or fill_ after a step is newer than its master: the next step re-reads
// the master from it, for every parameter (not the first alone), and only once (the write is noted, so
// a later step keeps the master's FP32 updates, which an FP16 parameter cannot hold).
TEST(Optim, AWrittenParameterHasItsMasterRereadOnceAtTheNextStep) {
  Tensor p0 = Tensor::ones({2}, DType::f16).requires_grad_(), p1 = Tensor::ones({2}, DType::f16).requires_grad_();
  optim::SGD sgd({p0, p1}, {.lr = 1e-4, .master_weights = true});
  const auto step = [&] {
    sgd.zero_grad();
    sum(p0 + p1).backward();  // every gradient 1
    sgd.step();
  };
  EXPECT_FALSE(sgd.param_written_since_master(0));
  EXPECT_FALSE(sgd.param_written_since_master(1));
  step();  // masters 1 - 1e-4; the FP16 parameters stay 1 (half an ulp of 1 is 2.4e-4)
  EXPECT_EQ(p1.to_vector(), (std::vector<float>{1, 1}));
  p1.detach().fill_(2.0);
  EXPECT_FALSE(sgd.param_written_since_master(0));
  EXPECT_TRUE(sgd.param_written_since_master(1));
  EXPECT_THROW(sgd.param_written_since_master(2), Error);
  step();  // master 1 re-read: 2 - 1e-4
  EXPECT_FALSE(sgd.param_written_since_master(1));
  step();  // and not again: 2 - 2e-4, where a second re-read from the FP16 value 2 would give 2 - 1e-4
  const float lr = 1e-4f;
  for (float m : sgd.master_weights()[1].to_vector()) EXPECT_EQ(m, (2.0f - lr) - lr);
  for (float m : sgd.master_weights()[0].to_vector()) EXPECT_EQ(m, ((1.0f - lr) - lr) - lr);

  // Without masters nothing is ever stale.
  Tensor w = Tensor::ones({2}).requires_grad_();
  optim::SGD plain({w}, {.lr = 0.1});
  w.detach().fill_(3.0);
  EXPECT_FALSE(plain.param_written_since_master(0));
}

// A state whose buffers this optimizer does not keep, or with Adam's m and not its v, is refused by name
// (it had loaded, and the missing v came back as zeros: a first resumed step far too large).
TEST(Optim, LoadStateRefusesBuffersItDoesNotKeepAndIncompleteSets) {
  Tensor p = Tensor::from_vector(std::vector<float>{1.0f}, {1}).requires_grad_();
  optim::Adam adam({p}, {.lr = 0.1});
  sum(p).backward();
  adam.step();
  const optim::Optimizer::State good = adam.state();
  optim::Optimizer::State st = good;
  for (auto& [name, t] : st.tensors)
    if (name == "exp_avg_sq.0") name = "exp_avgsq.0";
  EXPECT_EQ(load_refusal(adam, st),
            "load_state: unexpected state tensor 'exp_avgsq.0' (this Adam keeps exp_avg, exp_avg_sq)");
  st = good;
  std::erase_if(st.tensors, [](const auto& e) { return e.first == "exp_avg_sq.0"; });
  EXPECT_EQ(load_refusal(adam, st), "load_state: parameter 0 has 'exp_avg' but not 'exp_avg_sq' (Adam keeps "
                                    "them together)");
  EXPECT_EQ(load_refusal(adam, good), "(loaded)");
  // Every parameter is checked, not the first alone (a loop that stopped after it passed).
  Tensor q = Tensor::from_vector(std::vector<float>{2.0f}, {1}).requires_grad_();
  optim::Adam two({p, q}, {.lr = 0.1});
  sum(p + q).backward();
  two.step();
  st = two.state();
  std::erase_if(st.tensors, [](const auto& e) { return e.first == "exp_avg.1"; });
  EXPECT_EQ(load_refusal(two, st), "load_state: parameter 1 has 'exp_avg_sq' but not 'exp_avg' (Adam keeps "
                                   "them together)");
  p.zero_grad();
  optim::SGD plain({p}, {.lr = 0.1});
  optim::SGD with_momentum({p}, {.lr = 0.1, .momentum = 0.9});
  sum(p).backward();
  with_momentum.step();
  optim::Optimizer::State m = with_momentum.state();
  EXPECT_EQ(load_refusal(plain, m),
            "load_state: unexpected state tensor 'momentum.0' (this SGD keeps no per-parameter buffers)");
}

TEST(Optim, SkipStepAndLoadStateEndTheStepSoTheNextOneUnscalesAgain) {
  Tensor p = Tensor::from_vector(std::vector<float>{0.0f}, {1}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 1.0});
  sum(p * 8.0).backward();
  sgd.unscale_grads(0.5f, nullptr);
  EXPECT_THROW(sgd.unscale_grads(0.5f, nullptr), Error);  // twice in one step
  sgd.skip_step();
  EXPECT_FALSE(sgd.grads_unscaled());
  EXPECT_EQ(p.item(), 0.0);
  sgd.zero_grad();
  sum(p * 4.0).backward();
  sgd.unscale_grads(0.5f, nullptr);  // a new step: allowed
  sgd.load_state(sgd.state());       // loading a state ends the step too
  EXPECT_FALSE(sgd.grads_unscaled());
  // An f32 gradient is unscaled in place, so the next step needs a fresh backward (as in PyTorch).
  sgd.zero_grad();
  sum(p * 4.0).backward();
  sgd.unscale_grads(0.25f, nullptr);
  sgd.step();
  EXPECT_EQ(p.item(), -1.0);  // 4 * 0.25, unscaled once
}

TEST(Optim, BadOptionsAndParametersAreErrors) {
  Tensor p = Tensor::zeros({2}).requires_grad_();
  EXPECT_THROW(optim::SGD({p}, {.lr = -1.0}), Error);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Error);
  // Adam's betas: [0, 1) each, as in PyTorch (beta1 = 0 is RMSprop-like and allowed).
  EXPECT_NO_THROW(optim::Adam({p}, {.beta1 = 0.0, .beta2 = 0.0}));
  EXPECT_THROW(optim::Adam({p}, {.eps = 0.0}), Error);  // v = 0 at a zero gradient would divide 0 by 0
  for (const auto& [b1, b2] : std::vector<std::pair<double, double>>{{1.0, 0.999}, {0.9, 1.0}, {-0.1, 0.999},
                                                                       {0.9, -0.1}}) {
    EXPECT_THROW(optim::Adam({p}, {.beta1 = b1, .beta2 = b2}), Error) << b1 << ", " << b2;
  }
  Tensor not_leaf = p * 2.0;
  EXPECT_THROW(optim::SGD({not_leaf}, {.lr = 0.1}), Error);
  // Every parameter is checked, not only the first, and the message says which one.
  try {
    optim::SGD({p, not_leaf}, {.lr = 0.1});
    ADD_FAILURE() << "a non-leaf second parameter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Optimizer: parameter 1 ("), std::string::npos) << e.what();
  }
  Tensor no_grad = Tensor::zeros({2});
  EXPECT_THROW(optim::SGD({no_grad}, {.lr = 0.1}), Error);
}

// Two parameters on the same elements would be updated twice a step (in turn on the CPU, racing in one
// launch on the GPU): refused, naming both, whether they are one tensor twice or overlapping views.
// Views of one storage that do not overlap, and an empty parameter, are fine.
TEST(Optim, ParametersSharingMemoryAreRefused) {
  const auto message = [](const std::vector<Tensor>& params) -> std::string {
    try {
      optim::SGD sgd(params, {.lr = 0.1});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  Tensor p = Tensor::zeros({2}).requires_grad_(), q = Tensor::zeros({3}).requires_grad_();
  std::string m = message({p, q, p});
  EXPECT_NE(m.find("Optimizer: parameters 0 ("), std::string::npos) << m;
  EXPECT_NE(m.find(") and 2 ("), std::string::npos) << m;
  EXPECT_NE(m.find("the same elements listed twice"), std::string::npos) << m;
  EXPECT_THROW(optim::Adam({q, p, p}, {}), Error);
  Tensor one = Tensor::zeros({1}).requires_grad_();  // a one-element parameter has elements too
  m = message({one, q, one});
  EXPECT_NE(m.find("Optimizer: parameters 0 ("), std::string::npos) << m;

  // Rows of one storage, each a leaf of its own: rows [0, 2) and [1, 3) share row 1.
  Tensor base = Tensor::zeros({4, 3});
  Tensor a = base.slice_rows(0, 2).detach().requires_grad_(), b = base.slice_rows(1, 3).detach().requires_grad_();
  Tensor c = base.slice_rows(3, 4).detach().requires_grad_(), e = Tensor::zeros({0}).requires_grad_();
  m = message({c, b, q, a});
  EXPECT_NE(m.find("parameters 1 ("), std::string::npos) << m;
  EXPECT_NE(m.find(") and 3 ("), std::string::npos) << m;
  EXPECT_NE(m.find("overlapping views of one storage"), std::string::npos) << m;
  // A view over several others.
  Tensor whole = base.detach().requires_grad_(), middle = base.slice_rows(1, 2).detach().requires_grad_();
  EXPECT_THROW(optim::SGD({c, whole, middle}, {.lr = 0.1}), Error);
  // Touching but not overlapping, and an empty parameter: accepted.
  Tensor first = base.slice_rows(0, 1).detach().requires_grad_();
  Tensor rest = base.slice_rows(1, 4).detach().requires_grad_();
  EXPECT_EQ(message({first, rest, e, p}), "");
  EXPECT_EQ(message({first, e, rest}), "");
  // An empty view inside another shares no element.
  EXPECT_EQ(message({rest, base.slice_rows(2, 2).detach().requires_grad_()}), "");
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
