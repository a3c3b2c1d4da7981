// Forward values, the precision policy, and argument errors of the ops.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/ops.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector(v, s); }

TEST(Ops, BroadcastingBinaryOps) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor bias = f32({10, 20, 30}, {3});
  EXPECT_EQ((a + bias).to_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor col = f32({2, 4}, {2, 1});
  EXPECT_EQ((a / col).to_vector(), (std::vector<float>{0.5f, 1, 1.5f, 1, 1.25f, 1.5f}));
  EXPECT_EQ((a - 1.0).to_vector(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ((2.0 * a).to_vector(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ((a / 4.0).to_vector(), (std::vector<float>{0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f}));
  EXPECT_EQ((a + 0.5).to_vector(), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}));
  EXPECT_EQ((a * 3.0).to_vector(), (std::vector<float>{3, 6, 9, 12, 15, 18}));
  EXPECT_THROW(a + f32({1, 2}, {2}), Error);
  try {
    a* f32({1, 2}, {2});
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("mul:", 0), 0u) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  }
}

TEST(Ops, PrecisionPolicy) {
  Tensor h = f32({1, 2}, {2}).to(DType::f16);
  Tensor f = f32({3, 4}, {2});
  EXPECT_EQ((h + f).dtype(), DType::f32);   // f16 + f32 promotes to f32
  EXPECT_EQ((h * h).dtype(), DType::f16);
  EXPECT_EQ(sum(h).dtype(), DType::f32);    // reductions compute and return f32
  EXPECT_EQ(mean(h).dtype(), DType::f32);
  Tensor a = Tensor::ones({2, 3}, DType::f16), b = Tensor::ones({3, 4}, DType::f16);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f16);  // GEMM keeps f16 (f32 accumulation inside)
  Tensor logits = f32({12.0f, 0.0f}, {1, 2}).to(DType::f16);
  Tensor lsm = log_softmax(logits);
  EXPECT_EQ(lsm.dtype(), DType::f32);  // log-softmax computes in f32
  for (float v : lsm.to_vector()) EXPECT_TRUE(std::isfinite(v));  // exp(12) > 65504, yet finite
  EXPECT_THROW(matmul(a, Tensor::ones({3, 4})), Error);  // matmul does not mix dtypes silently
}

TEST(Ops, SumOfManyF16OnesIsExact) {
  // 4096 f16 ones: an f16 accumulator would stall at 2048 (2048 + 1 rounds back to 2048).
  Tensor ones = Tensor::ones({4096}, DType::f16);
  EXPECT_EQ(sum(ones).item(), 4096.0);
  Tensor a = Tensor::ones({1, 4096}, DType::f16), b = Tensor::ones({4096, 1}, DType::f16);
  EXPECT_EQ(matmul(a, b).item(), 4096.0);  // f32 accumulation inside the GEMM; 4096 fits in f16
}

TEST(Ops, ReductionsOverDims) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a, {0}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(a, {1}).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_EQ(sum(a, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(mean(a).item(), 3.5);
  EXPECT_EQ(sum_to(a, {1, 3}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_THROW(sum(a, {2}), Error);
}

TEST(Ops, MatmulLayouts) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});   // [[1,2,3],[4,5,6]]
  Tensor b = f32({1, 0, 0, 1, 1, 1}, {3, 2});   // [[1,0],[0,1],[1,1]]
  EXPECT_EQ(matmul(a, b).to_vector(), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(matmul(a, a, false, true).to_vector(), (std::vector<float>{14, 32, 32, 77}));  // a a^T
  EXPECT_EQ(matmul(a, a, true, false).shape(), (Shape{3, 3}));                            // a^T a
  EXPECT_THROW(matmul(a, a), Error);  // 3 vs 2
  EXPECT_THROW(matmul(f32({1, 2}, {2}), a), Error);
}

TEST(Ops, LinearMatchesMatmulPlusBias) {
  Generator g(hl::test::fresh_seed());
  Tensor x = Tensor::randn({5, 7}, g), w = Tensor::randn({3, 7}, g), b = Tensor::randn({3}, g);
  const auto y = linear(x, w, b).to_vector();
  const auto ref = (matmul(x, w, false, true) + b).to_vector();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-5);
  const auto yr = linear(x, w, b, true).to_vector();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(yr[i], std::max(y[i], 0.0f));
  EXPECT_THROW(linear(x, Tensor::randn({3, 6}, g)), Error);
  EXPECT_THROW(linear(x, w, Tensor::randn({4}, g)), Error);
}

TEST(Ops, CrossEntropyValues) {
  // Uniform logits: loss = log(C).
  Tensor logits = Tensor::zeros({4, 10});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 9}, {4});
  EXPECT_NEAR(cross_entropy(logits, labels).item(), std::log(10.0), 1e-6);
  Tensor l2 = f32({0, 0, 100, 0}, {2, 2});  // row 1 is confidently class 0
  Tensor y2 = Tensor::from_vector(std::vector<int32_t>{1, 0}, {2});
  EXPECT_NEAR(cross_entropy(l2, y2).item(), std::log(2.0) / 2.0, 1e-6);
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 10}, {4})), Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{0, 1}, {2})), Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({4})), Error);  // labels must be i32
}

TEST(Ops, LogSoftmaxOfAllMinusInfinityIsNaN) {
  // Documented behaviour: no finite maximum, so the row is NaN (as in PyTorch), not a crash.
  Tensor t = f32({-INFINITY, -INFINITY, 0.0f, 1.0f}, {2, 2});
  const auto y = log_softmax(t).to_vector();
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_NEAR(y[3], -std::log1p(std::exp(-1.0)), 1e-6);
}

TEST(Ops, ReluKeepsNaNVisible) {
  // An overflow that became NaN must survive the activation, or the loss scaler cannot see it.
  Tensor t = f32({NAN, -1.0f, 2.0f, INFINITY}, {4});
  const auto y = relu(t).to_vector();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_TRUE(std::isinf(y[3]));
  Tensor w = Tensor::ones({1, 4});
  const auto fused = linear(f32({NAN, 1, 1, 1}, {1, 4}), w, Tensor(), true).to_vector();
  EXPECT_TRUE(std::isnan(fused[0]));  // the GEMM's ReLU epilogue too
}

TEST(Ops, ArgmaxAndAccuracy) {
  Tensor logits = f32({0.1f, 0.9f, 0.5f, 0.2f, 0.3f, 0.3f}, {3, 2});
  EXPECT_EQ(argmax(logits).to_int(), (std::vector<int32_t>{1, 0, 0}));  // ties -> first index
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 1, 0}, {3});
  EXPECT_NEAR(accuracy(logits, labels), 2.0 / 3.0, 1e-12);
}

TEST(Ops, DeviceMismatchIsAnError) {
  if (!hl::runtime::cuda_available()) GTEST_SKIP() << "needs a GPU: " << hl::runtime::cuda_unavailable_reason();
  Tensor a = Tensor::ones({2}), b = Tensor::ones({2}, DType::f32, Device::cuda);
  EXPECT_THROW(a + b, Error);
}

}  // namespace
