// Bad input through the public API: every op in framework/ops.h gets mismatched shapes, wrong dtypes,
// tensors on different devices, undefined tensors and empty (numel 0) tensors; every tutorial program
// gets invalid flags. The contract (docs/hardening.md): a mismatch throws hl::Error whose message
// starts with the op's name and names the shapes or dtypes involved; an empty tensor gives a correct
// empty result or a clear error; nothing crashes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

// Run `f`; it must throw hl::Error starting with "<op>: " and containing every part.
void check_error(const std::function<void()>& f, const std::string& op, const std::vector<std::string>& parts,
                 const char* expr, int line) {
  SCOPED_TRACE(testing::Message() << "line " << line << ": " << expr);
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(op + ": ", 0), 0u) << "message does not start with '" << op << ": ': " << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-hl::Error exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error";
}

#define EXPECT_OP_ERROR(expr, op, ...) check_error([&] { (void)(expr); }, op, {__VA_ARGS__}, #expr, __LINE__)

Tensor rand(const Shape& s, Generator& g, DType t = DType::f32) { return Tensor::randn(s, g, t); }

Tensor labels(const std::vector<int32_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

// ---- shapes ---------------------------------------------------------------------------------------------

TEST(BadInput, ShapeMismatchNamesTheOpAndTheShapes) {
  Generator g(hl::test::fresh_seed());
  const Tensor a = rand({2, 3}, g), b = rand({4, 3}, g);
  const std::string sa = "[2, 3]", sb = "[4, 3]";
  EXPECT_OP_ERROR(add(a, b), "add", sa, sb);
  EXPECT_OP_ERROR(sub(a, b), "sub", sa, sb);
  EXPECT_OP_ERROR(mul(a, b), "mul", sa, sb);
  EXPECT_OP_ERROR(div(a, b), "div", sa, sb);
  EXPECT_OP_ERROR(a + b, "add", sa, sb);
  EXPECT_OP_ERROR(a - b, "sub", sa, sb);
  EXPECT_OP_ERROR(a * b, "mul", sa, sb);
  EXPECT_OP_ERROR(a / b, "div", sa, sb);
  EXPECT_OP_ERROR(add(rand({1, 1, 1, 1, 1, 1, 1, 1, 1}, g), a), "add", "at most 8 dimensions");

  EXPECT_OP_ERROR(matmul(a, a), "matmul", "f32[2, 3]", "3 vs 2");
  EXPECT_OP_ERROR(matmul(a, b), "matmul", "f32[2, 3]", "f32[4, 3]", "3 vs 4");
  EXPECT_OP_ERROR(matmul(a, rand({3}, g)), "matmul", "needs 2-D", "f32[3]");
  EXPECT_OP_ERROR(matmul(a, a, true, true), "matmul", "(transposed)", "f32[2, 3]");

  const Tensor w = rand({5, 4}, g), bias = rand({5}, g);
  EXPECT_OP_ERROR(linear(a, w, bias), "linear", "f32[2, 3]", "f32[5, 4]");
  EXPECT_OP_ERROR(linear(rand({2, 4}, g), w, rand({4}, g)), "linear", "bias f32[4]", "f32[5, 4]");
  EXPECT_OP_ERROR(linear(rand({2, 4}, g), w, rand({5, 1}, g)), "linear", "bias f32[5, 1]");
  EXPECT_OP_ERROR(linear(rand({4}, g), w), "linear", "needs 2-D", "f32[4]");

  EXPECT_OP_ERROR(sum(a, {2}), "sum", "dimension 2", "f32[2, 3]");
  EXPECT_OP_ERROR(sum(a, {-3}), "sum", "dimension -3", "f32[2, 3]");
  EXPECT_OP_ERROR(mean(a, {5}), "mean", "dimension 5", "f32[2, 3]");
  EXPECT_OP_ERROR(sum_to(a, {4}), "sum_to", "f32[2, 3]", "[4]");
  EXPECT_OP_ERROR(sum_to(a, {1, 2, 3}), "sum_to", "f32[2, 3]", "[1, 2, 3]");
  EXPECT_OP_ERROR(reshape(a, {4}), "reshape", "f32[2, 3]", "[4]");
  EXPECT_OP_ERROR(reshape(a, {-1, -1}), "reshape", "more than one -1");
  EXPECT_OP_ERROR(reshape(a, {-1, 4}), "reshape", "f32[2, 3]", "[-1, 4]");
  EXPECT_OP_ERROR(reshape(a, {-2, -3}), "reshape", "negative dimension");
  EXPECT_OP_ERROR(flatten(a, 3), "flatten", "f32[2, 3]");

  EXPECT_OP_ERROR(log_softmax(rand({2, 3, 4}, g)), "log_softmax", "f32[2, 3, 4]");
  EXPECT_OP_ERROR(log_softmax(rand({3}, g)), "log_softmax", "f32[3]");
  const Tensor logp = log_softmax(rand({4, 3}, g));
  EXPECT_OP_ERROR(nll_loss(logp, labels({0, 1, 2})), "nll_loss", "i32 [4]", "i32[3]");
  EXPECT_OP_ERROR(nll_loss(rand({4}, g), labels({0, 1, 2, 0})), "nll_loss", "f32[4]");
  EXPECT_OP_ERROR(nll_loss(logp, labels({0, 1, 3, 0})), "nll_loss", "label 3", "[0, 3)");
  EXPECT_OP_ERROR(nll_loss(logp, labels({0, -1, 2, 0})), "nll_loss", "label -1");
  EXPECT_OP_ERROR(cross_entropy(rand({4, 3}, g), labels({0, 1})), "cross_entropy", "i32 [4]", "i32[2]");
  EXPECT_OP_ERROR(cross_entropy(rand({4, 3}, g), Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0}, {2, 2})),
                  "cross_entropy", "i32[2, 2]");
  EXPECT_OP_ERROR(argmax(rand({3}, g)), "argmax", "f32[3]");
  EXPECT_OP_ERROR(argmax(rand({2, 2, 2}, g)), "argmax", "f32[2, 2, 2]");
  EXPECT_OP_ERROR(accuracy(rand({4, 3}, g), labels({0, 1})), "accuracy", "i32 [4]", "i32[2]");
  EXPECT_OP_ERROR(correct_count(rand({4, 3}, g), labels({0, 1})), "correct_count", "i32 [4]", "i32[2]");
  EXPECT_OP_ERROR(correct_count(rand({4}, g), labels({0, 1, 2, 3})), "correct_count", "f32[4]");
}

// A shape whose element count (or byte count) does not fit in 64 bits used to wrap around: a small
// block was allocated for a huge shape, and a row slice of it wrote gigabytes past the block. Every
// factory and reshape now refuses it, naming itself and the shape. Zeros do not hide an overflow:
// [0, 2^40, 2^40] is empty, but its rows would hold 2^80 elements.
TEST(BadInput, ShapesWhoseElementCountOverflowsAreRefused) {
  Generator g(hl::test::fresh_seed());
  const int64_t big = (int64_t(1) << 62) + 1, e40 = int64_t(1) << 40;
  const std::string too_many = "has more elements than fit in 64 bits";
  EXPECT_OP_ERROR(Tensor::empty({big, 4096}), "Tensor::empty", "[4611686018427387905, 4096]", too_many);
  EXPECT_OP_ERROR(Tensor::zeros({int64_t(1) << 62, 4}), "Tensor::empty", "[4611686018427387904, 4]", too_many);
  EXPECT_OP_ERROR(Tensor::full({e40, e40}, 1.0, DType::f16), "Tensor::empty", "[1099511627776, 1099511627776]",
                  too_many);
  EXPECT_OP_ERROR(Tensor::empty({0, e40, e40}), "Tensor::empty", "[0, 1099511627776, 1099511627776]", too_many);
  EXPECT_OP_ERROR(Tensor::empty({int64_t(1) << 61}, DType::f64), "Tensor::empty", "[2305843009213693952] of f64",
                  "has more bytes than fit in 64 bits");
  EXPECT_OP_ERROR(Tensor::randn({int64_t(1) << 62, 4}, g), "Tensor::randn", "[4611686018427387904, 4]", too_many);
  EXPECT_OP_ERROR(Tensor::uniform({int64_t(1) << 62, 4}, g, -1.0, 1.0), "Tensor::uniform", too_many);
  EXPECT_OP_ERROR(Tensor::from_vector(std::vector<float>{1, 2}, {int64_t(1) << 62, 4}), "Tensor::from_vector",
                  "[4611686018427387904, 4]", too_many);
  const Tensor four = Tensor::zeros({4});
  EXPECT_OP_ERROR(reshape(four, {big, 4}), "reshape", "[4611686018427387905, 4]", too_many);
  EXPECT_OP_ERROR(reshape(four, {int64_t(1) << 62, 4, -1}), "reshape", "[4611686018427387904, 4, -1]", too_many);
  EXPECT_OP_ERROR(four.reshape({0, e40, e40}), "reshape", too_many);
  // Up to the edge: a dimension as large as an int64 holds, next to a 0, is an empty tensor.
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Tensor::empty({max, 0}).numel(), 0);
  EXPECT_EQ(Tensor::zeros({0}).reshape({0, max}).shape(), (Shape{0, max}));
  EXPECT_EQ(shape_numel({max}), max);
  int64_t n = -1;
  EXPECT_FALSE(shape_numel_fits({max, 2}, n));
  EXPECT_FALSE(shape_numel_fits({-1, 2}, n));
  EXPECT_EQ(n, -1) << "left untouched on a refusal";
  EXPECT_OP_ERROR(shape_numel({3, -1}), "shape_numel", "negative dimension in shape [3, -1]");
}

// ---- dtypes ---------------------------------------------------------------------------------------------

TEST(BadInput, DtypeMismatchNamesTheOpAndTheDtypes) {
  Generator g(hl::test::fresh_seed());
  const Tensor f = rand({2, 3}, g), h = rand({2, 3}, g, DType::f16);
  const Tensor i = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  const std::string si = "i32[2, 3]";
  EXPECT_OP_ERROR(promote(DType::i32, DType::f32), "promote", "i32", "f32");
  EXPECT_OP_ERROR(add(f, i), "add", si);
  EXPECT_OP_ERROR(sub(i, f), "sub", si);
  EXPECT_OP_ERROR(mul(f, i), "mul", si);
  EXPECT_OP_ERROR(div(i, f), "div", si);
  EXPECT_OP_ERROR(i + f, "add", si);
  EXPECT_OP_ERROR(add(i, 1.0), "add", si);
  EXPECT_OP_ERROR(mul(i, 2.0), "mul", si);
  EXPECT_OP_ERROR(i - 1.0, "add", si);
  EXPECT_OP_ERROR(i * 2.0, "mul", si);
  EXPECT_OP_ERROR(2.0 * i, "mul", si);
  EXPECT_OP_ERROR(i / 2.0, "div", si);  // the op written, whichever computes it
  EXPECT_OP_ERROR(rsub(1.0, i), "rsub", si);
  EXPECT_OP_ERROR(rdiv(1.0, i), "rdiv", si);
  EXPECT_OP_ERROR(pow(i, 2.0), "pow", si);
  EXPECT_OP_ERROR(neg(i), "neg", si);
  EXPECT_OP_ERROR(-i, "neg", si);
  EXPECT_OP_ERROR(relu(i), "relu", si);
  EXPECT_OP_ERROR(exp(i), "exp", si);
  EXPECT_OP_ERROR(log(i), "log", si);
  EXPECT_OP_ERROR(sum(i), "sum", si);
  EXPECT_OP_ERROR(sum(i, {0}), "sum", si);
  EXPECT_OP_ERROR(mean(i), "mean", si);
  EXPECT_OP_ERROR(mean(i, {1}, true), "mean", si);
  EXPECT_OP_ERROR(sum_to(i, {3}), "sum_to", si);
  EXPECT_OP_ERROR(matmul(h, rand({3, 2}, g)), "matmul", "f16[2, 3]", "f32[3, 2]");
  EXPECT_OP_ERROR(matmul(i, rand({3, 2}, g)), "matmul", si);
  EXPECT_OP_ERROR(linear(h, rand({4, 3}, g)), "linear", "f16[2, 3]", "f32[4, 3]");
  EXPECT_OP_ERROR(linear(f, rand({4, 3}, g), labels({1, 2, 3, 4})), "linear", "i32[4]");
  EXPECT_OP_ERROR(log_softmax(i), "log_softmax", si);
  const Tensor logp = log_softmax(rand({2, 3}, g));
  EXPECT_OP_ERROR(nll_loss(cast(logp, DType::f16), labels({0, 1})), "nll_loss", "f16[2, 3]");
  EXPECT_OP_ERROR(nll_loss(logp, Tensor::from_vector(std::vector<float>{0, 1}, {2})), "nll_loss", "f32[2]");
  EXPECT_OP_ERROR(nll_loss(i, labels({0, 1})), "nll_loss", si);
  EXPECT_OP_ERROR(cross_entropy(f, Tensor::from_vector(std::vector<float>{0, 1}, {2})), "cross_entropy", "f32[2]");
  EXPECT_OP_ERROR(cross_entropy(i, labels({0, 1})), "cross_entropy", si);
  EXPECT_OP_ERROR(argmax(i), "argmax", si);
  EXPECT_OP_ERROR(accuracy(i, labels({0, 1})), "accuracy", si);
  EXPECT_OP_ERROR(accuracy(f, Tensor::from_vector(std::vector<double>{0, 1}, {2})), "accuracy", "f64[2]");
  EXPECT_OP_ERROR(correct_count(i, labels({0, 1})), "correct_count", si);

  // What is allowed: f16 with f32 promotes (precision policy), and a bias of another float dtype.
  EXPECT_EQ(add(h, f).dtype(), DType::f32);
  const Tensor x = rand({2, 3}, g), w = rand({4, 3}, g), b16 = rand({4}, g, DType::f16);
  const std::vector<float> with16 = linear(x, w, b16).to_vector();
  const std::vector<float> with32 = linear(x, w, cast(b16, DType::f32)).to_vector();
  EXPECT_EQ(with16, with32);
}

// ---- devices (needs a GPU to have two devices) -------------------------------------------------------------

TEST(BadInput, DeviceMismatchNamesTheOpAndTheDevices) {
  HL_REQUIRE_CUDA();
  Generator g(hl::test::fresh_seed());
  const Tensor c = rand({2, 3}, g), d = rand({2, 3}, g).to(Device::cuda);
  EXPECT_OP_ERROR(add(c, d), "add", "on cpu", "on cuda");
  EXPECT_OP_ERROR(sub(d, c), "sub", "on cpu", "on cuda");
  EXPECT_OP_ERROR(mul(c, d), "mul", "on cpu", "on cuda");
  EXPECT_OP_ERROR(div(d, c), "div", "on cpu", "on cuda");
  EXPECT_OP_ERROR(matmul(c, rand({3, 2}, g).to(Device::cuda)), "matmul", "on cpu", "on cuda");
  EXPECT_OP_ERROR(linear(c, rand({4, 3}, g).to(Device::cuda)), "linear", "on cpu", "on cuda");
  EXPECT_OP_ERROR(linear(d, rand({4, 3}, g).to(Device::cuda), rand({4}, g)), "linear", "on cpu", "on cuda");
  const Tensor logits = rand({2, 3}, g).to(Device::cuda);
  EXPECT_OP_ERROR(nll_loss(log_softmax(logits), labels({0, 1})), "nll_loss", "on cpu", "on cuda");
  EXPECT_OP_ERROR(cross_entropy(logits, labels({0, 1})), "cross_entropy", "on cpu", "on cuda");
  EXPECT_OP_ERROR(correct_count(logits, labels({0, 1})), "correct_count", "on cpu", "on cuda");
  EXPECT_OP_ERROR(accuracy(logits, labels({0, 1})), "accuracy", "on cpu", "on cuda");
}

// ---- undefined tensors -------------------------------------------------------------------------------------

TEST(BadInput, UndefinedTensorsAreNamedErrors) {
  Generator g(hl::test::fresh_seed());
  const Tensor u, a = rand({2, 3}, g);
  const std::string what = "undefined";
  EXPECT_OP_ERROR(add(u, a), "add", what);
  EXPECT_OP_ERROR(add(a, u), "add", what);
  EXPECT_OP_ERROR(sub(u, a), "sub", what);
  EXPECT_OP_ERROR(mul(a, u), "mul", what);
  EXPECT_OP_ERROR(div(u, a), "div", what);
  EXPECT_OP_ERROR(u + a, "add", what);
  EXPECT_OP_ERROR(add(u, 1.0), "add", what);
  EXPECT_OP_ERROR(mul(u, 1.0), "mul", what);
  EXPECT_OP_ERROR(rsub(1.0, u), "rsub", what);
  EXPECT_OP_ERROR(rdiv(1.0, u), "rdiv", what);
  EXPECT_OP_ERROR(pow(u, 2.0), "pow", what);
  EXPECT_OP_ERROR(neg(u), "neg", what);
  EXPECT_OP_ERROR(relu(u), "relu", what);
  EXPECT_OP_ERROR(exp(u), "exp", what);
  EXPECT_OP_ERROR(log(u), "log", what);
  EXPECT_OP_ERROR(cast(u, DType::f16), "cast", what);
  EXPECT_OP_ERROR(sum(u), "sum", what);
  EXPECT_OP_ERROR(sum(u, {0}), "sum", what);
  EXPECT_OP_ERROR(mean(u), "mean", what);
  EXPECT_OP_ERROR(mean(u, {0}), "mean", what);
  EXPECT_OP_ERROR(sum_to(u, {1}), "sum_to", what);
  EXPECT_OP_ERROR(matmul(u, a), "matmul", what);
  EXPECT_OP_ERROR(matmul(a, u), "matmul", what);
  EXPECT_OP_ERROR(linear(u, a), "linear", what);
  EXPECT_OP_ERROR(linear(a, u), "linear", what);
  EXPECT_OP_ERROR(reshape(u, {1}), "reshape", what);
  EXPECT_OP_ERROR(flatten(u), "flatten", what);
  EXPECT_OP_ERROR(log_softmax(u), "log_softmax", what);
  EXPECT_OP_ERROR(nll_loss(u, labels({0, 1})), "nll_loss", what);
  EXPECT_OP_ERROR(nll_loss(log_softmax(a), u), "nll_loss", what);
  EXPECT_OP_ERROR(cross_entropy(u, labels({0, 1})), "cross_entropy", what);
  EXPECT_OP_ERROR(cross_entropy(a, u), "cross_entropy", what);
  EXPECT_OP_ERROR(argmax(u), "argmax", what);
  EXPECT_OP_ERROR(accuracy(u, labels({0, 1})), "accuracy", what);
  EXPECT_OP_ERROR(accuracy(a, u), "accuracy", what);
  EXPECT_OP_ERROR(correct_count(u, labels({0, 1})), "correct_count", what);
  EXPECT_OP_ERROR(correct_count(a, u), "correct_count", what);
}

// ---- empty tensors: a correct empty result, or a clear error -----------------------------------------------------

TEST(BadInput, EmptyTensorsGiveEmptyResultsOrClearErrors) {
  Generator g(hl::test::fresh_seed());
  const Tensor e = Tensor::zeros({0, 3}), row = rand({3}, g);
  for (const Tensor& r : {add(e, e), sub(e, row), mul(row, e), div(e, rand({1, 3}, g)), e + 1.0, e * 2.0, rsub(1.0, e),
                          rdiv(1.0, e), pow(e, 2.0), neg(e), relu(e), exp(e), log(e), cast(e, DType::f16)})
    EXPECT_EQ(r.shape(), (Shape{0, 3}));
  EXPECT_EQ(add(Tensor::zeros({0}), Tensor::zeros({1})).shape(), (Shape{0}));
  EXPECT_OP_ERROR(add(Tensor::zeros({0}), Tensor::zeros({2})), "add", "[0]", "[2]");

  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_EQ(sum(e, {0}).to_vector(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(sum_to(e, {3}).to_vector(), std::vector<float>(3, 0.0f));
  EXPECT_OP_ERROR(mean(e), "mean", "zero elements", "f32[0, 3]");
  EXPECT_OP_ERROR(mean(e, {0}), "mean", "zero elements", "f32[0, 3]");
  EXPECT_EQ(mean(e, {1}).shape(), (Shape{0}));

  EXPECT_EQ(matmul(e, rand({3, 4}, g)).shape(), (Shape{0, 4}));
  EXPECT_EQ(matmul(rand({2, 3}, g), Tensor::zeros({3, 0})).shape(), (Shape{2, 0}));
  EXPECT_EQ(matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 4})).to_vector(), std::vector<float>(8, 0.0f));
  const Tensor bias = rand({4}, g);
  const Tensor y = linear(Tensor::zeros({2, 0}), Tensor::zeros({4, 0}), bias);  // no inputs: y = bias
  const std::vector<float> bv = bias.to_vector();
  std::vector<float> expect(bv);
  expect.insert(expect.end(), bv.begin(), bv.end());
  EXPECT_EQ(y.to_vector(), expect);
  EXPECT_EQ(linear(e, rand({4, 3}, g), bias).shape(), (Shape{0, 4}));

  EXPECT_EQ(reshape(e, {3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(reshape(e, {-1, 3}).shape(), (Shape{0, 3}));
  EXPECT_OP_ERROR(reshape(e, {-1, 0}), "reshape", "f32[0, 3]");  // any size fits: ambiguous
  EXPECT_EQ(flatten(Tensor::zeros({0, 2, 3})).shape(), (Shape{0, 6}));

  EXPECT_EQ(log_softmax(e).shape(), (Shape{0, 3}));
  EXPECT_EQ(log_softmax(Tensor::zeros({2, 0})).shape(), (Shape{2, 0}));
  const Tensor no_labels = Tensor::from_vector(std::vector<int32_t>{}, {0});
  EXPECT_OP_ERROR(nll_loss(log_softmax(e), no_labels), "nll_loss", "empty batch");
  EXPECT_OP_ERROR(cross_entropy(e, no_labels), "cross_entropy", "empty batch");
  EXPECT_OP_ERROR(nll_loss(Tensor::zeros({2, 0}), labels({0, 0})), "nll_loss", "outside [0, 0)");
  EXPECT_EQ(argmax(e).shape(), (Shape{0}));
  EXPECT_OP_ERROR(argmax(Tensor::zeros({2, 0})), "argmax", "f32[2, 0]");
  EXPECT_EQ(correct_count(e, no_labels).item(), 0.0);
  EXPECT_OP_ERROR(accuracy(e, no_labels), "accuracy", "empty batch");
}

TEST(BadInput, EmptyBatchesBackpropagateToZeroGradients) {
  Generator g(hl::test::fresh_seed());
  Tensor w = rand({4, 3}, g).requires_grad_(), b = rand({4}, g).requires_grad_();
  Tensor x = Tensor::zeros({0, 3}).requires_grad_();
  Tensor loss = sum(mul(relu(linear(x, w, b)), 2.0)) + sum(exp(x));
  loss.backward();
  EXPECT_EQ(loss.item(), 0.0);
  EXPECT_EQ(w.grad().to_vector(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3}));
  // An empty inner dimension: the product is zeros, and so are the gradients (of empty shapes).
  Tensor p = Tensor::zeros({2, 0}).requires_grad_(), q = Tensor::zeros({0, 4}).requires_grad_();
  Tensor r = matmul(p, q);
  EXPECT_EQ(r.to_vector(), std::vector<float>(8, 0.0f));
  sum(mul(r, rand({2, 4}, g))).backward();
  EXPECT_EQ(p.grad().shape(), (Shape{2, 0}));
  EXPECT_EQ(q.grad().shape(), (Shape{0, 4}));
}

// ---- graphs that are never backpropagated --------------------------------------------------------------------

// A forward pass whose graph is dropped without backward() (inference without NoGradGuard, a loss
// computed only for logging) must free its tensors. A backward closure that captures its own output
// makes a reference cycle (output -> node -> closure -> output) that leaks every such pass (found by
// LeakSanitizer in scripts/sanitize.sh).
TEST(BadInput, GraphsDroppedWithoutBackwardAreFreed) {
  Generator g(hl::test::fresh_seed());
  const Tensor x = rand({4, 3}, g).requires_grad_(), w = rand({5, 3}, g).requires_grad_();
  const Tensor b = rand({5}, g).requires_grad_(), pos = add(mul(exp(rand({4, 3}, g)), 1.0), 0.5);
  const std::vector<std::pair<std::string, std::function<Tensor()>>> ops = {
      {"add", [&] { return add(x, x); }},          {"sub", [&] { return sub(x, x); }},
      {"mul", [&] { return mul(x, x); }},          {"div", [&] { return div(x, pos); }},
      {"add_scalar", [&] { return add(x, 1.0); }}, {"mul_scalar", [&] { return mul(x, 2.0); }},
      {"rsub", [&] { return rsub(1.0, x); }},      {"rdiv", [&] { return rdiv(1.0, pos + x); }},
      {"pow", [&] { return pow(x, 2.0); }},        {"neg", [&] { return neg(x); }},
      {"relu", [&] { return relu(x); }},           {"exp", [&] { return exp(x); }},
      {"log", [&] { return log(pos + x * 0.0); }}, {"cast", [&] { return cast(x, DType::f64); }},
      {"sum", [&] { return sum(x); }},             {"mean", [&] { return mean(x, {0}); }},
      {"matmul", [&] { return matmul(x, w, false, true); }},
      {"linear", [&] { return linear(x, w, b); }}, {"linear_relu", [&] { return linear(x, w, b, true); }},
      {"reshape", [&] { return reshape(x, {3, 4}); }},
      {"log_softmax", [&] { return log_softmax(x); }},
      {"cross_entropy", [&] { return cross_entropy(x, labels({0, 1, 2, 0})); }},
  };
  for (const auto& [name, op] : ops) {
    std::weak_ptr<TensorImpl> alive;
    {
      const Tensor y = op();
      ASSERT_TRUE(y.requires_grad()) << name;
      alive = y.impl_ptr();
    }
    EXPECT_TRUE(alive.expired()) << name << ": the output outlives its last handle (a cycle through its backward)";
  }
}

// ---- tutorial programs: invalid flags -------------------------------------------------------------------

std::vector<std::string> tutorial_programs() {
  std::vector<std::string> out;
  const std::filesystem::path dir = std::filesystem::path(HALFLING_BINARY_DIR) / "tutorials";
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto perms = e.status().permissions();
    if (e.is_regular_file() && (perms & std::filesystem::perms::owner_exec) != std::filesystem::perms::none)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct BadFlag {
  std::string flag;      // checked only when the program's --help lists it
  std::string args;      // the invalid use
  std::string expected;  // must appear in the output
};

// Invalid values for the flags the tutorials share (tutorials/common/cli.h) and a few of their own.
const std::vector<BadFlag> kBadFlags = {
    {"--epochs", "--epochs 0", "--epochs"},       {"--epochs", "--epochs -3", "--epochs"},
    {"--epochs", "--epochs many", "--epochs"},    {"--batch", "--batch 0", "--batch"},
    {"--batch", "--batch 99999999999999999999", "--batch"},
    {"--lr", "--lr -1", "--lr"},                  {"--lr", "--lr inf", "--lr"},
    {"--momentum", "--momentum 1.5", "--momentum"},
    {"--device", "--device tpu", "--device"},     {"--precision", "--precision fp8", "--precision"},
    {"--seed", "--seed abc", "--seed"},           {"--gemm", "--gemm no_such_variant", "no_such_variant"},
    {"--dataset", "--dataset imagenet", "--dataset"},
    {"--train-subset", "--train-subset -1", "--train-subset"},
};

TEST(BadInput, TutorialProgramsRejectInvalidFlagsClearly) {
  const auto programs = tutorial_programs();
  ASSERT_FALSE(programs.empty()) << "no programs in " << HALFLING_BINARY_DIR << "/tutorials";
  for (const std::string& prog : programs) {
    SCOPED_TRACE(prog);
    bool signaled = false;
    const auto [help_status, help] = hl::test::run_command(prog + " --help", &signaled);
    EXPECT_EQ(help_status, 0) << help;
    // A missing data directory keeps a wrongly accepted flag from starting a long training run.
    const std::string no_data = help.find("--data") != std::string::npos ? " --data /nonexistent_halfling_data" : "";
    std::vector<BadFlag> cases = {{"", "--no-such-flag", "--no-such-flag"}, {"", "stray_argument", "stray_argument"}};
    for (const auto& c : kBadFlags)
      if (help.find(c.flag + " ") != std::string::npos || help.find(c.flag + "\n") != std::string::npos) cases.push_back(c);
    for (const auto& c : cases) {
      const auto [status, out] = hl::test::run_command(prog + " " + c.args + no_data, &signaled);
      EXPECT_FALSE(signaled) << c.args << " crashed:\n" << out;
      EXPECT_NE(status, 0) << c.args << " was accepted:\n" << out;
      EXPECT_NE(out.find(c.expected), std::string::npos) << c.args << ": the error does not name '" << c.expected
                                                         << "':\n" << out;
      EXPECT_EQ(out.find("Sanitizer"), std::string::npos) << c.args << ":\n" << out;
      EXPECT_EQ(out.find("terminate called"), std::string::npos) << c.args << ":\n" << out;
    }
    // A flag missing its value, last on the line.
    const auto [status, out] = hl::test::run_command(prog + " --seed", &signaled);
    EXPECT_FALSE(signaled) << out;
    EXPECT_NE(status, 0) << out;
    EXPECT_NE(out.find("--seed"), std::string::npos) << out;
  }
}

// NaN passes CLI::Range (every comparison with NaN is false), so without its own check `--lr nan` would
// start training with a NaN learning rate: tutorials/common/cli.cpp's kFinite refuses it. A program
// without the flag refuses it as unknown, which names it too.
TEST(BadInput, TutorialProgramsRejectNanLearningRate) {
  const std::vector<std::string> programs = tutorial_programs();
  ASSERT_FALSE(programs.empty()) << "no tutorial programs found in build/tutorials/";
  for (const std::string& prog : programs) {
    bool signaled = false;
    for (const std::string args : {"--lr nan", "--momentum nan"}) {
      const auto [status, out] = hl::test::run_command(prog + " " + args + " --data /nonexistent_halfling_data", &signaled);
      EXPECT_FALSE(signaled) << prog << " " << args << " crashed:\n" << out;
      EXPECT_NE(status, 0) << prog << " " << args;
      EXPECT_NE(out.find(args.substr(0, args.find(' '))), std::string::npos) << prog << " " << args << ":\n" << out;
    }
  }
}

}  // namespace
