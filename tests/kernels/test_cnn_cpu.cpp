// The CPU pooling, batch-norm and dropout kernels (kernels/pool.h, batchnorm.h, dropout.h) in f32 and
// f16 against float64 references written here, from the same (already rounded) inputs, with the
// outputs poisoned with NaN first. (The f64 paths are checked by the gradient checks in
// tests/framework/test_cnn.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/dropout.h"
#include "kernels/pool.h"
#include "tests/kernels/conv_reference.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

using test::TypedBuffer;

Pool2dShape pool(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t st, int64_t pad) {
  Pool2dShape s;
  s.N = N, s.C = C, s.H = H, s.W = W, s.kh = s.kw = k, s.stride_h = s.stride_w = st, s.pad_h = s.pad_w = pad;
  return s;
}

TEST(PoolCpu, MaxAndAvgMatchFloat64InF32AndF16) {
  const uint64_t seed = test::fresh_seed();
  for (DType t : {DType::f32, DType::f16})
    for (const Pool2dShape& s : {pool(2, 3, 7, 9, 2, 2, 0), pool(1, 2, 9, 7, 3, 2, 1), pool(2, 1, 5, 5, 5, 1, 2)}) {
      const int64_t P = s.P(), Q = s.Q(), nx = s.N * s.C * s.H * s.W, ny = s.N * s.C * P * Q;
      const auto xv = test::random_values(nx, seed, -1, 1, t);
      TypedBuffer x(t, nx), y(t, ny), ya(t, ny), idx(DType::i32, ny);
      x.set_all(xv);
      y.fill_nan(), ya.fill_nan();
      for (size_t i = 0; i < static_cast<size_t>(ny); ++i) idx.set(i, -7);
      max_pool2d_forward(DeviceType::cpu, s, x.data(), y.data(), static_cast<int32_t*>(idx.data()), t);
      avg_pool2d_forward(DeviceType::cpu, s, x.data(), ya.data(), t);
      for (int64_t pl = 0; pl < s.N * s.C; ++pl)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q) {
            double best = -std::numeric_limits<double>::infinity(), sum = 0, magnitude = 0;
            int64_t where = -1;
            for (int64_t r = 0; r < s.kh; ++r)
              for (int64_t c = 0; c < s.kw; ++c) {
                const int64_t h = p * s.stride_h - s.pad_h + r, w = q * s.stride_w - s.pad_w + c;
                if (h < 0 || h >= s.H || w < 0 || w >= s.W) continue;
                const double v = xv[(pl * s.H + h) * s.W + w];
                sum += v;
                magnitude += std::fabs(v);
                if (v > best) best = v, where = h * s.W + w;
              }
            const size_t o = (pl * P + p) * Q + q;
            EXPECT_EQ(y.get(o), best) << o;  // a maximum is exact
            EXPECT_EQ(idx.get(o), static_cast<double>(where)) << o;
            const double mean = sum / static_cast<double>(s.kh * s.kw);
            // f32 window sum of at most 25 terms (its error scales with the sum of |terms|, not with the
            // sum, which may cancel), then one rounding of the output.
            const double tol =
                32 * 0x1p-24 * magnitude + (t == DType::f16 ? 0x1p-11 * std::fabs(mean) + 0x1p-25 : 0.0);
            EXPECT_NEAR(ya.get(o), mean, tol) << o;
          }
    }
}

TEST(BatchNormCpu, TrainForwardMatchesFloat64InF32AndF16) {
  const uint64_t seed = test::fresh_seed();
  const BatchNormShape s{3, 4, 10};
  for (DType t : {DType::f32, DType::f16}) {
    const size_t n = s.N * s.C * s.HW;
    const auto xv = test::random_values(n, seed, -3, 5, t);
    const auto gv = test::random_values(s.C, seed + 1, 0.5, 1.5, DType::f32);
    const auto bv = test::random_values(s.C, seed + 2, -1, 1, DType::f32);
    TypedBuffer x(t, n), y(t, n), g(DType::f32, s.C), b(DType::f32, s.C), sm(DType::f32, s.C), si(DType::f32, s.C);
    x.set_all(xv), g.set_all(gv), b.set_all(bv);
    y.fill_nan(), sm.fill_nan(), si.fill_nan();
    batch_norm_forward_train(DeviceType::cpu, s, x.data(), y.data(), t, g.data(), b.data(), nullptr, nullptr, sm.data(),
                             si.data(), DType::f32, 0.1, 1e-5);
    for (int64_t c = 0; c < s.C; ++c) {
      double sum = 0, sq = 0;
      for (int64_t k = 0; k < s.N; ++k)
        for (int64_t i = 0; i < s.HW; ++i) sum += xv[(k * s.C + c) * s.HW + i];
      const double mean = sum / (s.N * s.HW);
      for (int64_t k = 0; k < s.N; ++k)
        for (int64_t i = 0; i < s.HW; ++i) sq += std::pow(xv[(k * s.C + c) * s.HW + i] - mean, 2);
      const double inv = 1 / std::sqrt(sq / (s.N * s.HW) + 1e-5);
      EXPECT_NEAR(sm.get(c), mean, 1e-6 * std::fabs(mean) + 1e-7);
      EXPECT_NEAR(si.get(c), inv, 1e-6 * inv);
      for (int64_t k = 0; k < s.N; ++k)
        for (int64_t i = 0; i < s.HW; ++i) {
          const size_t o = (k * s.C + c) * s.HW + i;
          const double want = gv[c] * (xv[o] - mean) * inv + bv[c];
          EXPECT_NEAR(y.get(o), want, (t == DType::f16 ? 0x1p-11 : 1e-6) * std::fabs(want) + 1e-5) << o;
        }
    }
  }
}

TEST(DropoutCpu, OffsetsContinueTheSameStream) {
  // Elements [100, 200) of a call with offset 0 equal elements [0, 100) of a call with offset 100:
  // the mask is a function of (seed, offset + i) only.
  const uint64_t seed = test::fresh_seed();
  TypedBuffer x(DType::f32, 200), a(DType::f32, 200), b(DType::f32, 100);
  for (size_t i = 0; i < 200; ++i) x.set(i, 1.0 + static_cast<double>(i));
  a.fill_nan(), b.fill_nan();
  dropout_forward(DeviceType::cpu, 200, x.data(), a.data(), DType::f32, 0.5, seed, 0);
  dropout_forward(DeviceType::cpu, 100, static_cast<float*>(x.data()) + 100, b.data(), DType::f32, 0.5, seed, 100);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(a.get(100 + i), b.get(i)) << i;
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 1u << 23);
}

}  // namespace
}  // namespace hl::kernels
