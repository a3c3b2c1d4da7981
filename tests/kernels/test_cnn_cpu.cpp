// The CPU pooling, batch-norm and dropout kernels (kernels/pool.h, batchnorm.h, dropout.h) in f32 and
// f16 against float64 references written here, from the same (already rounded) inputs, with the
// outputs poisoned with NaN first. (The f64 paths are checked by the gradient checks in
// tests/framework/test_cnn.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/cnn_backends.h"
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

// Max pooling has fast paths (kernels/cpu/pool_cpu.cpp): the 2x2 stride-2 window forward, and the
// backward of any non-overlapping windows. They must give what the general paths give, bit for bit:
// outputs, argmax and input gradients, including the tie rule (the first maximum in row-major window
// order wins) and the NaN rule (the first NaN wins), and -0 gradients (0 + -0 = +0). Values come from a
// small set so that ties are common, with NaNs, infinities and signed zeros mixed in; odd sizes leave
// a last row/column that no window covers.
TEST(PoolCpu, MaxFastPathsMatchTheGeneralPathBitForBit) {
  const uint64_t seed = test::fresh_seed();
  const auto shape = [](int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t ph = 0, int64_t pw = 0) {
    Pool2dShape s;
    s.N = N, s.C = C, s.H = H, s.W = W, s.kh = kh, s.kw = kw, s.stride_h = sh, s.stride_w = sw;
    s.pad_h = ph, s.pad_w = pw;
    return s;
  };
  const Pool2dShape shapes[] = {
      shape(2, 3, 8, 6, 2, 2, 2, 2),    // 2x2 stride 2, even sizes
      shape(3, 2, 7, 9, 2, 2, 2, 2),    // odd sizes: the last row and column belong to no window
      shape(1, 8, 2, 2, 2, 2, 2, 2),    // one window per plane
      shape(2, 3, 6, 22, 2, 2, 2, 2),   // 11 windows a row: two groups of four (f32 vectors), three after
      shape(1, 2, 5, 17, 2, 2, 2, 2),   // 8 windows a row, odd width: the last vector ends at column 15
      shape(2, 2, 10, 11, 3, 3, 3, 3),  // disjoint 3x3 (backward fast path only)
      shape(2, 1, 9, 8, 2, 3, 3, 4),    // disjoint with gaps between windows, per-dimension sizes
      // Near misses, one condition of a fast path broken each: they must take the general paths
      // (a fast path taken here reads the wrong windows, and the bits differ).
      shape(2, 2, 6, 7, 2, 2, 2, 1),        // 2x2, stride 2 down but 1 across
      shape(2, 2, 7, 6, 2, 2, 1, 2),        // 2x2, stride 1 down
      shape(2, 2, 6, 8, 2, 2, 2, 2, 0, 1),  // 2x2 stride 2, padded across
      shape(2, 2, 8, 6, 2, 2, 2, 2, 1, 0),  // 2x2 stride 2, padded down
      shape(2, 2, 9, 9, 3, 3, 3, 2),        // 3x3 windows overlapping across
      shape(2, 2, 9, 9, 3, 3, 3, 3, 0, 1),  // 3x3 stride 3, padded: still disjoint, so either backward path
                                            // gives these bits (pool_cpu.cpp keeps the fast one unpadded)
      shape(2, 2, 9, 8, 3, 2, 2, 2),        // stride 2 with one window side not 2: 3x2, 2x3, 1x2, 2x1
      shape(2, 2, 8, 9, 2, 3, 2, 2),
      shape(2, 2, 8, 8, 1, 2, 2, 2),
      shape(2, 2, 8, 8, 2, 1, 2, 2),
      shape(2, 2, 8, 8, 2, 2, 3, 2),        // 2x2 windows, stride 3 down or across
      shape(2, 2, 8, 8, 2, 2, 2, 3),
  };
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), -0.0, 0.0};
  for (DType t : {DType::f32, DType::f16, DType::f64})
    for (const Pool2dShape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " window " + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
                   " stride " + std::to_string(s.stride_h) + "x" + std::to_string(s.stride_w) + " pad " +
                   std::to_string(s.pad_h) + "x" + std::to_string(s.pad_w) + " on " +
                   std::to_string(s.H) + "x" + std::to_string(s.W) + ", seed " + std::to_string(seed));
      const int64_t nx = s.N * s.C * s.H * s.W, ny = s.N * s.C * s.P() * s.Q();
      auto xv = test::random_values(nx, seed, -2, 2, t);
      auto dyv = test::random_values(ny, seed + 1, -1, 1, t);
      for (size_t i = 0; i < xv.size(); ++i) {
        xv[i] = std::round(xv[i]);                        // 5 values (and -0): ties everywhere
        if (i % 13 == 5) xv[i] = specials[(i / 13) % 5];  // NaN, +-inf, -0, +0
      }
      for (size_t i = 0; i < dyv.size(); i += 7)
        dyv[i] = i % 14 == 0 ? -0.0 : std::numeric_limits<double>::quiet_NaN();
      TypedBuffer x(t, nx), dy(t, ny);
      x.set_all(xv), dy.set_all(dyv);
      TypedBuffer y1(t, ny), y2(t, ny), i1(DType::i32, ny), i2(DType::i32, ny), dx1(t, nx), dx2(t, nx);
      y1.fill_nan(), y2.fill_nan(), dx1.fill_nan(), dx2.fill_nan();
      for (size_t i = 0; i < static_cast<size_t>(ny); ++i) i1.set(i, -7), i2.set(i, -9);
      max_pool2d_forward(DeviceType::cpu, s, x.data(), y1.data(), static_cast<int32_t*>(i1.data()), t);
      cpu::max_pool2d_forward_general(s, x.data(), y2.data(), static_cast<int32_t*>(i2.data()), t);
      EXPECT_EQ(y1.bytes(), y2.bytes()) << "forward outputs differ";
      ASSERT_EQ(i1.bytes(), i2.bytes()) << "argmax differs";
      max_pool2d_backward(DeviceType::cpu, s, dy.data(), static_cast<const int32_t*>(i1.data()), dx1.data(), t);
      cpu::max_pool2d_backward_general(s, dy.data(), static_cast<const int32_t*>(i1.data()), dx2.data(), t);
      EXPECT_EQ(dx1.bytes(), dx2.bytes()) << "input gradients differ";
      // The data must exercise the rules: some window's maximum is a NaN (where the NaNs fall decides,
      // so it is checked), and some gradient is -0 (dy[0], by construction).
      ASSERT_TRUE(std::signbit(dyv[0]) && dyv[0] == 0.0);
      bool nan_out = false;
      for (size_t i = 0; i < static_cast<size_t>(ny); ++i) nan_out |= std::isnan(y1.get(i));
      EXPECT_TRUE(nan_out);
    }
}

// A window whose values are all -inf: no value is greater than the running -inf, and the argmax is
// still the window's first element (max_pool_take's "nothing seen yet"), not a fixed position, so the
// gradient goes to an element of the window. The general path (3x3 stride 1, padded) and both fast
// paths (2x2 stride 2), in every dtype.
TEST(PoolCpu, AWindowOfMinusInfinityPointsAtItsFirstElement) {
  for (DType t : {DType::f32, DType::f16, DType::f64})
    for (const Pool2dShape& s : {pool(1, 2, 4, 4, 3, 1, 1), pool(1, 2, 4, 4, 2, 2, 0)}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " window " + std::to_string(s.kh));
      const int64_t P = s.P(), Q = s.Q(), nx = s.N * s.C * s.H * s.W, ny = s.N * s.C * P * Q;
      TypedBuffer x(t, nx), y(t, ny), idx(DType::i32, ny), dy(t, ny), dx(t, nx);
      for (int64_t i = 0; i < nx; ++i) x.set(i, -std::numeric_limits<double>::infinity());
      for (int64_t i = 0; i < ny; ++i) dy.set(i, 1.0), idx.set(i, -7);
      y.fill_nan(), dx.fill_nan();
      max_pool2d_forward(DeviceType::cpu, s, x.data(), y.data(), static_cast<int32_t*>(idx.data()), t);
      std::vector<double> want_dx(nx, 0.0);
      for (int64_t pl = 0; pl < s.N * s.C; ++pl)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q) {
            const int64_t o = (pl * P + p) * Q + q;
            const int64_t h = std::max<int64_t>(p * s.stride_h - s.pad_h, 0);
            const int64_t w = std::max<int64_t>(q * s.stride_w - s.pad_w, 0);
            EXPECT_EQ(y.get(o), -std::numeric_limits<double>::infinity()) << o;
            EXPECT_EQ(idx.get(o), static_cast<double>(h * s.W + w)) << o;
            want_dx[pl * s.H * s.W + h * s.W + w] += 1.0;
          }
      max_pool2d_backward(DeviceType::cpu, s, dy.data(), static_cast<const int32_t*>(idx.data()), dx.data(), t);
      EXPECT_EQ(dx.values(), want_dx);
    }
}

// The kernel-level shape check (the framework checks first, with its own words, so these messages
// are what a direct kernel caller sees): each names the op and the sizes involved.
TEST(PoolCpu, ShapeCheckNamesTheOpAndTheSizes) {
  const auto message = [](const Pool2dShape& s) {
    try {
      check_pool2d_shape(s, "max_pool2d");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  Pool2dShape s;
  s.N = 2, s.C = 3, s.H = 2, s.W = 3, s.kh = 4, s.kw = 7, s.pad_h = 1, s.pad_w = 2;
  EXPECT_EQ(message(s), "(accepted)");  // fits only with both sides padded: 4 <= 2 + 2, 7 <= 3 + 4
  s.W = 2;
  const std::string big = message(s);
  EXPECT_NE(big.find("max_pool2d: the 4x7 window is larger than the padded input 4x6 (input [2, 3, 2, 2])"),
            std::string::npos)
      << big;
  s.W = 3, s.pad_w = 4;
  EXPECT_NE(message(s).find("max_pool2d: padding 1x4 must be between 0 and half the 4x7 window"), std::string::npos)
      << message(s);
  s.pad_w = 0, s.H = 0;
  EXPECT_NE(message(s).find("input sizes must be >= 1, got [2, 3, 0, 3]"), std::string::npos) << message(s);
  // The window against the padded input, rows alone: 6 rows do not fit in 1 + 2 * 2.
  s.H = 1, s.W = 3, s.kh = 6, s.kw = 2, s.pad_h = 2, s.pad_w = 0;
  EXPECT_EQ(message(s),
            "max_pool2d: the 6x2 window is larger than the padded input 5x3 (input [2, 3, 1, 3])");
  // Each stride alone.
  s.H = 4, s.kh = 2, s.pad_h = 0, s.stride_h = 0, s.stride_w = 1;
  EXPECT_EQ(message(s), "max_pool2d: strides must be >= 1, got 0x1");
  s.stride_h = 1, s.stride_w = 0;
  EXPECT_EQ(message(s), "max_pool2d: strides must be >= 1, got 1x0");
  // Each input size alone.
  for (int side = 0; side < 4; ++side) {
    Pool2dShape t;
    t.N = 2, t.C = 3, t.H = 4, t.W = 5, t.kh = t.kw = 2;
    ASSERT_EQ(message(t), "(accepted)");
    (side == 0 ? t.N : side == 1 ? t.C : side == 2 ? t.H : t.W) = 0;
    EXPECT_EQ(message(t), detail::concat("max_pool2d: input sizes must be >= 1, got [", t.N, ", ", t.C, ", ", t.H,
                                         ", ", t.W, "]"));
  }
}

// max_pool2d's argmax is i32, so a plane of more than INT32_MAX elements is refused before any data
// is read (the pointers here are never touched).
TEST(PoolCpu, MaxPoolRefusesAPlaneTheI32ArgmaxCannotIndex) {
  Pool2dShape s;
  s.N = 1, s.C = 1, s.H = 65536, s.W = 65536, s.kh = s.kw = 2, s.stride_h = s.stride_w = 2;
  EXPECT_EQ(test::error_of([&] { max_pool2d_forward(DeviceType::cpu, s, nullptr, nullptr, nullptr, DType::f16); }),
            "max_pool2d: an input plane of 65536x65536 overflows the i32 argmax");
}

// Batch norm's own conditions, at the kernel layer (the framework checks them too, in its words):
// training needs two values per channel; evaluation needs both running statistics.
TEST(BatchNormCpu, TrainingNeedsTwoValuesAndEvalBothRunningStatistics) {
  TypedBuffer x(DType::f32, 64), y(DType::f32, 64), p(DType::f32, 8), q(DType::f32, 8), m(DType::f32, 8),
      v(DType::f32, 8);
  const BatchNormShape one{1, 3, 1};
  EXPECT_EQ(test::error_of([&] {
              batch_norm_forward_train(DeviceType::cpu, one, x.data(), y.data(), DType::f32, p.data(), q.data(),
                                       nullptr, nullptr, m.data(), v.data(), DType::f32, 0.1, 1e-5);
            }),
            "batch_norm: training needs more than one value per channel, got N=1 HW=1 (use eval mode, or a larger "
            "batch)");
  const BatchNormShape s{2, 3, 4};
  for (int missing = 0; missing < 2; ++missing) {
    EXPECT_EQ(test::error_of([&] {
                batch_norm_forward_eval(DeviceType::cpu, s, x.data(), y.data(), DType::f32, p.data(), q.data(),
                                        missing == 0 ? nullptr : m.data(), missing == 1 ? nullptr : v.data(),
                                        DType::f32, 1e-5);
              }),
              "batch_norm (eval): evaluation mode needs running statistics")
        << missing;
  }
}

// The batch-norm entry points' size check (kernels/cnn_dispatch.cpp), each size alone, for every entry.
TEST(BatchNormCpu, EachSizeAloneIsChecked) {
  TypedBuffer x(DType::f32, 64), y(DType::f32, 64), p(DType::f32, 8), q(DType::f32, 8), m(DType::f32, 8),
      v(DType::f32, 8);
  for (int side = 0; side < 3; ++side) {
    BatchNormShape s{2, 3, 4};
    (side == 0 ? s.N : side == 1 ? s.C : s.HW) = 0;
    const std::string sizes = detail::concat(": sizes must be >= 1, got N=", s.N, " C=", s.C, " HW=", s.HW);
    EXPECT_EQ(test::error_of([&] {
                batch_norm_forward_train(DeviceType::cpu, s, x.data(), y.data(), DType::f32, p.data(), q.data(),
                                         nullptr, nullptr, m.data(), v.data(), DType::f32, 0.1, 1e-5);
              }),
              "batch_norm" + sizes);
    EXPECT_EQ(test::error_of([&] {
                batch_norm_forward_eval(DeviceType::cpu, s, x.data(), y.data(), DType::f32, p.data(), q.data(),
                                        m.data(), v.data(), DType::f32, 1e-5);
              }),
              "batch_norm (eval)" + sizes);
    EXPECT_EQ(test::error_of([&] {
                batch_norm_backward(DeviceType::cpu, s, x.data(), y.data(), x.data(), DType::f32, p.data(), m.data(),
                                    v.data(), p.data(), q.data(), DType::f32);
              }),
              "batch_norm_backward" + sizes);
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
          // y = (x - mean) * scale + beta in FP32 from FP32 statistics: mean and scale carry their
          // rounding (u each), the subtraction, product and sum theirs, 4u of each term with slack;
          // then one rounding to the output dtype (f16: relative, and its subnormal floor).
          const double scale = gv[c] * inv, u = 0x1p-24;
          double tol = 4 * u * (scale * (std::fabs(xv[o] - mean) + std::fabs(mean)) + std::fabs(bv[c]));
          if (t == DType::f16) tol += 0x1p-11 * std::fabs(want) + 0x1p-25;
          EXPECT_NEAR(y.get(o), want, tol) << o;
        }
    }
  }
}

TEST(DropoutCpu, OffsetsContinueTheSameStream) {
  // Elements [100, 200) of a call with offset 0 equal elements [0, 100) of a call with offset 100:
  // the mask is a function of (seed, offset + i) only.
  const uint64_t seed = test::fresh_seed();
  // One guard element past each output (and a readable input there) catches a write past n.
  TypedBuffer x(DType::f32, 201), a(DType::f32, 201), b(DType::f32, 101);
  for (size_t i = 0; i < 201; ++i) x.set(i, 1.0 + static_cast<double>(i));
  a.fill_nan(), b.fill_nan();
  dropout_forward(DeviceType::cpu, 200, x.data(), a.data(), DType::f32, 0.5, seed, 0);
  dropout_forward(DeviceType::cpu, 100, static_cast<float*>(x.data()) + 100, b.data(), DType::f32, 0.5, seed, 100);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(a.get(100 + i), b.get(i)) << i;
  EXPECT_TRUE(std::isnan(a.get(200)) && std::isnan(b.get(100))) << "dropout wrote past its n elements";
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 1u << 23);
  // p is in [0, 1): 1 would drop everything and scale by 1/0.
  for (double p : {1.0, 1.5, -0.25})
    EXPECT_EQ(test::error_of([&] { dropout_threshold(p); }), detail::concat("dropout: p must be in [0, 1), got ", p));
}

}  // namespace
}  // namespace hl::kernels
