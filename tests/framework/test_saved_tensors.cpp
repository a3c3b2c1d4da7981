// Saved tensors: backward() refuses a graph whose saved tensors were written in place (copy_, fill_,
// an optimizer's step) or given new storage (nn::Module::to) since the forward pass, before it
// computes anything; a tensor an op does not read the values of may be written freely.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/ops_cnn.h"
#include "framework/optim.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
using hl::test::error_of;

Tensor vec(std::vector<double> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(SavedTensors, AnInPlaceWriteToASavedOperandIsRefusedNamingTheOpAndTheTensor) {
  Tensor a = vec({1, 2, 3}).requires_grad_();
  Tensor b = vec({4, 5, 6});
  Tensor loss = sum(mul(a, b));
  b.fill_(0);  // d(loss)/da is b as it was: 4, 5, 6; the new b would give zeros
  const std::string e = error_of([&] { loss.backward(); });
  EXPECT_TRUE(contains(e, "backward: 'mul' needs its operand b (f64[3] on cpu)")) << e;
  EXPECT_TRUE(contains(e, "written in place since")) << e;
  EXPECT_TRUE(contains(e, "version was 0, now 1")) << e;
  EXPECT_FALSE(a.grad().defined()) << "a refused backward wrote a gradient";
}

TEST(SavedTensors, CopyIntoASavedInputIsRefusedToo) {
  Tensor a = vec({0.5, 1.5}).requires_grad_();
  Tensor loss = sum(relu(a));
  a.detach().copy_(vec({-1.0, -2.0}));  // a view of a's storage: the same counter
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "'relu' needs its input")) << "no error";
}

// exp, div and log_softmax read their own output: writing the output is refused.
TEST(SavedTensors, AWriteToASavedOutputIsRefused) {
  Tensor a = vec({0.1, 0.2}).requires_grad_();
  Tensor y = exp(a);
  Tensor loss = sum(y);
  y.fill_(3.0);
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "'exp' needs its output")) << "no error";
}

// add reads only its operands' shapes: writing one after the forward pass changes no gradient, and is
// allowed, as in PyTorch. So is writing an operand whose values only another operand's gradient reads.
TEST(SavedTensors, TensorsWhoseValuesNoGradientReadsMayBeWritten) {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = vec({3, 4});
  Tensor loss = sum(add(a, b));
  b.fill_(9);
  loss.backward();
  EXPECT_EQ(a.grad().to_double(), (std::vector<double>{1, 1}));

  // matmul(x, w) with only w requiring grad: dW reads x, nothing reads w.
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, DType::f64);
  Tensor w = Tensor::from_vector(std::vector<double>{1, 0, 0, 1}, {2, 2}, DType::f64).requires_grad_();
  Tensor l2 = sum(matmul(x, w));
  w.detach().fill_(5);
  l2.backward();
  EXPECT_EQ(w.grad().to_double(), (std::vector<double>{4, 4, 6, 6}));  // x^T * ones
  Tensor l3 = sum(matmul(x, w));
  x.fill_(0);
  EXPECT_TRUE(contains(error_of([&] { l3.backward(); }), "'matmul' needs its operand a")) << "no error";

  // The same for mul (found by review: it listed both operands), div's output when b needs no
  // gradient, and pow(a, 0), whose gradient is zeros whatever a holds.
  Tensor m = vec({1, 2}), wm = vec({3, 4}).requires_grad_();
  Tensor l4 = sum(mul(m, wm));
  wm.detach().fill_(0);
  l4.backward();
  EXPECT_EQ(wm.grad().to_double(), (std::vector<double>{1, 2}));
  Tensor num = vec({1, 2}).requires_grad_();
  Tensor q = div(num, vec({4, 8}));
  Tensor l5 = sum(q);
  q.fill_(7);
  l5.backward();
  EXPECT_EQ(num.grad().to_double(), (std::vector<double>{0.25, 0.125}));
  Tensor p = vec({0, 2}).requires_grad_();
  Tensor l6 = sum(pow(p, 0.0));
  p.detach().fill_(5);
  l6.backward();
  EXPECT_EQ(p.grad().to_double(), (std::vector<double>{0, 0}));
}

// An input unfrozen between the forward pass and backward() gets no gradient from the ops that read
// saved values: what they saved was decided by which gradients were needed then (found by review: the
// closure asked again, and computed x's gradient from a w it had not saved, written since).
TEST(SavedTensors, AnInputUnfrozenAfterTheForwardPassGetsNoGradientFromSavedValues) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2}, {1, 2}, DType::f64);
  Tensor w = Tensor::from_vector(std::vector<double>{3, 4}, {2, 1}, DType::f64).requires_grad_();
  Tensor l1 = sum(matmul(x, w));
  Tensor l2 = sum(mul(x, vec({3, 4}).reshape({1, 2})));  // needs no gradient: no node
  Tensor xv = vec({1, 2}), wv = vec({3, 4}).requires_grad_();
  Tensor l3 = sum(mul(xv, wv));
  w.detach().fill_(100);
  wv.detach().fill_(100);
  x.requires_grad_();
  xv.requires_grad_();
  l1.backward();
  l3.backward();
  EXPECT_FALSE(x.grad().defined()) << "x's gradient came from the written w";
  EXPECT_FALSE(xv.grad().defined()) << "xv's gradient came from the written wv";
  EXPECT_EQ(w.grad().to_double(), (std::vector<double>{1, 2}));
  EXPECT_EQ(wv.grad().to_double(), (std::vector<double>{1, 2}));
  EXPECT_FALSE(l2.requires_grad());
}

// Training-mode batch norm fixes which gradients it returns when it runs, as conv2d and eval mode do
// (it asked at backward time until a review found it).
TEST(SavedTensors, BatchNormInTrainingGivesNoGradientToAnInputUnfrozenAfterTheForwardPass) {
  Generator gen(4);
  Tensor x = Tensor::randn({2, 3, 2, 2}, gen, DType::f64);
  Tensor gamma = Tensor::ones({3}, DType::f64), beta = Tensor::zeros({3}, DType::f64).requires_grad_();
  Tensor loss = sum(mul(batch_norm2d(x, gamma, beta, Tensor(), Tensor(), /*training=*/true, 0.1, 1e-5),
                        Tensor::randn({2, 3, 2, 2}, gen, DType::f64)));
  x.requires_grad_();
  gamma.requires_grad_();
  loss.backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(gamma.grad().defined());
  EXPECT_TRUE(beta.grad().defined());
}

// A gradient hook runs during the pass, after the up-front check: a saved tensor it writes is caught
// when the node that saved it is reached (found by review).
TEST(SavedTensors, AWriteByAHookDuringBackwardIsRefused) {
  Tensor a = vec({1, 2, 3}).requires_grad_();
  Tensor b = vec({4, 5, 6});
  Tensor y = mul(a, b);
  y.register_hook([b](const Tensor& g) mutable {
    b.fill_(100);
    return g;
  });
  Tensor loss = sum(y);
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "'mul' needs its operand b")) << "no error";
  EXPECT_FALSE(a.grad().defined());
}

// The node does not keep a converted parameter's old storage alive (found by review: it held a
// shared_ptr to it until the graph died).
TEST(SavedTensors, TheOldStorageOfAConvertedParameterIsFreed) {
  Generator gen(3);
  nn::Linear layer(300, 200, gen);
  Tensor x = Tensor::uniform({2, 300}, gen, -1.0, 1.0).requires_grad_();
  Tensor loss = sum(layer.forward(x));
  const std::weak_ptr<Storage> old = layer.parameters()[0].impl_ptr()->storage;
  layer.to(DType::f64);
  EXPECT_TRUE(old.expired()) << "the graph keeps the f32 weights alive";
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "new storage")) << "no error";
}

// The check runs over the whole graph before the pass: a refused backward leaves every .grad as it was,
// also those of leaves whose part of the graph comes first.
TEST(SavedTensors, ARefusedBackwardLeavesEveryGradientUntouched) {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor c = vec({5, 6}).requires_grad_();
  Tensor b = vec({3, 4});
  Tensor loss = add(sum(mul(a, b)), sum(mul(c, 2.0)));  // the pass reaches c before mul(a, b)
  b.fill_(0);
  EXPECT_NE(error_of([&] { loss.backward(); }), "(no error)");
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

// retain_graph keeps the saved tensors' versions: a second pass after a write is refused.
TEST(SavedTensors, ASecondBackwardAfterAWriteIsRefused) {
  Tensor a = vec({1, 2}).requires_grad_();
  Tensor b = vec({3, 4});
  Tensor loss = sum(mul(a, b));
  loss.backward({}, true);
  EXPECT_EQ(a.grad().to_double(), (std::vector<double>{3, 4}));
  b.fill_(1);
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "'mul' needs its operand b")) << "no error";
  EXPECT_EQ(a.grad().to_double(), (std::vector<double>{3, 4}));
}

// The classic mistake the check exists for: an optimizer step between a forward pass and its backward.
// The gradient would be of the old weights' loss, computed with the new weights.
TEST(SavedTensors, AnOptimizerStepBetweenForwardAndBackwardIsRefused) {
  Generator gen(7);
  nn::Linear layer(3, 2, gen);
  optim::SGD::Options o;
  o.lr = 0.1;
  optim::SGD opt(layer.parameters(), o);
  Tensor x = Tensor::uniform({4, 3}, gen, -1.0, 1.0).requires_grad_();
  sum(layer.forward(x)).backward();
  Tensor pending = sum(layer.forward(x));
  opt.step();
  const std::string e = error_of([&] { pending.backward(); });
  EXPECT_TRUE(contains(e, "'linear' needs its weight")) << e;
  EXPECT_TRUE(contains(e, "optimizer's step")) << e;

  // The ordinary order is untouched: forward, backward, step, again.
  opt.zero_grad();
  x.zero_grad();
  Tensor next = sum(layer.forward(x));
  next.backward();
  opt.step();
  EXPECT_TRUE(x.grad().defined());
}

// The step's write is counted, and the optimizer's masters stay in step with it: a step is not taken
// for an outside write whose master must be re-read (which would round an f16 master's FP32 bits away).
TEST(SavedTensors, AStepIsCountedAsAWriteWithoutRereadingTheMasters) {
  Tensor p = Tensor::from_vector(std::vector<float>{1.0f}, {1}, DType::f16).requires_grad_();
  optim::SGD::Options o;
  o.lr = 1e-4;  // below half an f16 ulp of 1: only the FP32 master moves
  o.master_weights = true;
  optim::SGD opt({p}, o);
  const uint64_t before = p.impl()->storage->version();
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    sum(mul(p, 1.0)).backward();
    opt.step();
  }
  EXPECT_EQ(p.impl()->storage->version(), before + 3);
  EXPECT_FLOAT_EQ(static_cast<float>(opt.master_weights()[0].item()), 1.0f - 3e-4f)
      << "the master was re-read from the f16 parameter";
}

// A model's parameters are named by their path in it, so that the message tells two layers' weights
// apart: "2.weight" is the second Linear's, and a Sequential inside another module gets its prefix.
TEST(SavedTensors, TheMessageNamesTheParameterByItsPathInTheModel) {
  Generator gen(9);
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Linear>(3, 4, gen));
  net->add(std::make_shared<nn::ReLU>());
  net->add(std::make_shared<nn::Linear>(4, 2, gen));
  std::vector<std::string> names;
  for (const Tensor& p : net->parameters()) names.push_back(p.name());
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  optim::SGD::Options o;
  optim::SGD opt(net->parameters(), o);
  Tensor x = Tensor::uniform({2, 3}, gen, -1.0, 1.0);
  sum(net->forward(x)).backward();
  Tensor pending = sum(net->forward(x));
  opt.step();
  const std::string e = error_of([&] { pending.backward(); });
  EXPECT_TRUE(contains(e, "'linear' needs its weight ('2.weight', f32[2, 4] on cpu)")) << e;

  struct Outer : nn::Module {
    explicit Outer(std::shared_ptr<nn::Module> body) { register_module("body", std::move(body)); }
    std::string name() const override { return "Outer"; }
    Tensor forward(const Tensor& x) override { return x; }
  };
  const Outer outer(net);
  EXPECT_EQ(outer.named_parameters()[2].first, "body.2.weight");
  EXPECT_EQ(outer.named_parameters()[2].second.name(), "body.2.weight");
}

TEST(SavedTensors, ConvertingTheModelBetweenForwardAndBackwardIsRefused) {
  Generator gen(3);
  nn::Linear layer(3, 2, gen);
  Tensor x = Tensor::uniform({2, 3}, gen, -1.0, 1.0).requires_grad_();
  Tensor loss = sum(layer.forward(x));
  layer.to(DType::f64);
  const std::string e = error_of([&] { loss.backward(); });
  EXPECT_TRUE(contains(e, "'linear' needs its weight")) << e;
  EXPECT_TRUE(contains(e, "new storage")) << e;
}

// The labels a data loader reuses: cross_entropy's gradient is softmax - onehot(labels).
TEST(SavedTensors, OverwrittenLabelsAreRefused) {
  Tensor logits = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 2}, {2});
  Tensor loss = cross_entropy(logits, labels);
  labels.copy_(Tensor::from_vector(std::vector<int32_t>{1, 1}, {2}));
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "'cross_entropy' needs its labels")) << "no error";
}

TEST(SavedTensors, ConvolutionAndBatchNormCheckTheirInputs) {
  Generator gen(5);
  Tensor x = Tensor::uniform({2, 1, 4, 4}, gen, -1.0, 1.0);
  Tensor w = Tensor::uniform({2, 1, 3, 3}, gen, -1.0, 1.0).requires_grad_();
  Tensor l1 = sum(conv2d(x, w));
  x.fill_(0);  // dw reads x
  EXPECT_TRUE(contains(error_of([&] { l1.backward(); }), "'conv2d' needs its input")) << "no error";

  Tensor h = Tensor::uniform({2, 2, 3, 3}, gen, -1.0, 1.0).requires_grad_();
  Tensor gamma = Tensor::ones({2}).requires_grad_();
  Tensor beta = Tensor::zeros({2}).requires_grad_();
  Tensor l2 = sum(mul(batch_norm2d(h, gamma, beta, Tensor(), Tensor(), true, 0.1, 1e-5), h.detach()));
  gamma.detach().fill_(2);
  EXPECT_TRUE(contains(error_of([&] { l2.backward(); }), "'batch_norm2d' needs its gamma")) << "no error";
}

// Every other op that reads a saved tensor's values, each with the tensor it reads written.
TEST(SavedTensors, EveryOpThatReadsValuesChecksThem) {
  Generator gen(11);
  const auto leaf = [&gen](const Shape& s) { return Tensor::uniform(s, gen, 0.5, 1.5, DType::f64).requires_grad_(); };
  struct Case {
    const char* expected;
    std::function<Tensor(Tensor& victim)> run;  // returns the loss, sets the tensor to write
  };
  const std::vector<Case> cases = {
      {"'div' needs its operand b", [&](Tensor& v) { Tensor a = leaf({2}); v = vec({2, 3}); return sum(div(a, v)); }},
      {"'div' needs its output", [&](Tensor& v) { v = div(vec({2, 3}), leaf({2})); return sum(v); }},
      {"'rdiv' needs its input", [&](Tensor& v) { Tensor a = leaf({2}); v = a; return sum(rdiv(1.0, a)); }},
      {"'rdiv' needs its output", [&](Tensor& v) { v = rdiv(1.0, leaf({2})); return sum(v); }},
      {"'pow' needs its input", [&](Tensor& v) { Tensor a = leaf({2}); v = a; return sum(pow(a, 3.0)); }},
      {"'log' needs its input", [&](Tensor& v) { Tensor a = leaf({2}); v = a; return sum(log(a)); }},
      {"'log_softmax' needs its output", [&](Tensor& v) { v = log_softmax(leaf({2, 3})); return sum(v); }},
      {"'nll_loss' needs its labels", [&](Tensor& v) {
         v = Tensor::from_vector(std::vector<int32_t>{0, 2}, {2});
         return nll_loss(log_softmax(leaf({2, 3})), v);
       }},
      {"'linear_relu' needs its output", [&](Tensor& v) {
         v = linear(leaf({2, 3}), leaf({4, 3}), Tensor(), true);
         return sum(v);
       }},
      {"'conv2d_relu' needs its output", [&](Tensor& v) {
         v = conv2d(leaf({1, 1, 3, 3}), leaf({1, 1, 2, 2}), Tensor(), {1, 1}, {0, 0}, true);
         return sum(v);
       }},
      {"'batch_norm2d_eval' needs its gamma", [&](Tensor& v) {
         Tensor g = leaf({2});
         v = g;
         const Tensor rm = Tensor::zeros({2}, DType::f64), rv = Tensor::ones({2}, DType::f64);
         return sum(batch_norm2d(leaf({1, 2, 2, 2}), g, leaf({2}), rm, rv, false, 0.1, 1e-5));
       }},
  };
  for (const Case& c : cases) {
    Tensor victim;
    Tensor loss = c.run(victim);
    victim.detach().fill_(0);
    const std::string e = error_of([&] { loss.backward(); });
    EXPECT_TRUE(contains(e, c.expected)) << c.expected << ": " << e;
  }
}

// An op that lists its own output as saved would keep it alive through its own node: refused at record.
TEST(SavedTensors, SavingTheOutputItselfIsRefusedAtRecord) {
  Tensor a = vec({1}).requires_grad_();
  Tensor out = vec({2});
  const std::string e = error_of([&] {
    record(out, "bad_op", {a}, {{"output", out}}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  });
  EXPECT_TRUE(contains(e, "'bad_op' saves its own output")) << e;
}

}  // namespace
