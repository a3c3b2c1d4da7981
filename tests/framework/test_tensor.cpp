// Tensor basics: factories, dtype conversion, views, printing, errors, devices, the allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/device.h"
#include "framework/ops.h"
#include "framework/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/runtime.h"
#include "tests/test_util.h"

#if defined(HALFLING_WITH_CUDA)
#include <future>
#include <mutex>
#include <thread>

#include "kernels/cuda/scratch.cuh"
#endif

namespace {

using namespace hl;

// tests/test_util.h's fresh_seed: a test's later calls follow from its first, so the one seed it prints
// replays them all (HALFLING_TEST_SEED=<it> gives the first; the rest follow from it as here).
TEST(TestUtil, LaterSeedsOfATestFollowFromItsFirst) {
  const uint64_t first = hl::test::fresh_seed(), second = hl::test::fresh_seed(), third = hl::test::fresh_seed();
  EXPECT_EQ(second, first + 0x9E3779B97F4A7C15ull);
  EXPECT_EQ(third, first + 2 * 0x9E3779B97F4A7C15ull);
  EXPECT_NE(second, first + 1) << "a test's own seed++ must not meet its next seed";
}

TEST(Tensor, FactoriesAndMetadata) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.device(), Device::cpu);
  EXPECT_EQ(z.describe(), "f32[2, 3] on cpu");
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0f);
  for (float v : Tensor::full({4}, 2.5, DType::f16).to_vector()) EXPECT_EQ(v, 2.5f);
  EXPECT_EQ(Tensor::scalar(3.0).item(), 3.0);
  EXPECT_EQ(Tensor::scalar(3.0).dim(), 0);
  EXPECT_EQ(z.size(-1), 3);
  EXPECT_EQ(z.size(-2), 2);  // -dim() is the first dimension, one past it is out of range
  EXPECT_THROW(z.size(-3), Error);
  EXPECT_THROW(z.size(2), Error);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(Tensor::empty({-1, 2}), Error);
}

TEST(Tensor, DtypeConversionRoundsToNearestEven) {
  Tensor t = Tensor::from_vector(std::vector<float>{0.123456789f, 65519.0f, 65520.0f, 2049.0f, 1e-8f}, {5});
  std::vector<float> h = t.to(DType::f16).to_vector();
  EXPECT_EQ(h[0], hl::round_to_half(0.123456789f));
  EXPECT_EQ(h[1], 65504.0f);
  EXPECT_TRUE(std::isinf(h[2]));
  EXPECT_EQ(h[3], 2048.0f);
  EXPECT_EQ(h[4], 0.0f);  // below half of 2^-24: flushed
  Tensor i = Tensor::from_vector(std::vector<float>{-1.7f, 2.9f}, {2}).to(DType::i32);
  EXPECT_EQ(i.to_int(), (std::vector<int32_t>{-1, 2}));  // truncation toward zero
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{1.0 / 3.0}, {1}).to(DType::f32).item(),
            static_cast<double>(1.0f / 3.0f));
}

TEST(Tensor, LargeIntegersCastExactly) {
  // 2^24 + 1 is not a float: i32 -> f64 must not pass through f32; i32 -> f32 rounds once (to even).
  Tensor i = Tensor::from_vector(std::vector<int32_t>{16777217, 2147483647, -2147483647}, {3});
  std::vector<double> d(3);
  hl::kernels::cast(DeviceType::cpu, 3, i.data_ptr(), DType::i32, d.data(), DType::f64);
  EXPECT_EQ(d, (std::vector<double>{16777217.0, 2147483647.0, -2147483647.0}));
  EXPECT_EQ(i.to(DType::f32).to_double()[0], 16777216.0);
  EXPECT_EQ(i.to(DType::f64).to_double()[1], 2147483647.0);
}

// Floating -> i32 follows CUDA's cvt.rzi.s32 on every backend: truncate toward zero, saturate what does
// not fit (and +-inf) to INT32_MIN / INT32_MAX, NaN -> 0 (docs/precision.md). A bare C++ cast of those
// values is undefined; x86 made all of them INT32_MIN. fill (Tensor::full) follows the same rule.
TEST(Tensor, FloatToIntCastTruncatesSaturatesAndMapsNanToZero) {
  constexpr int32_t lo = INT32_MIN, hi = INT32_MAX;
  const std::vector<double> in = {NAN,  INFINITY,      -INFINITY,     3e9,           -3e9,          2.9,
                                  -2.9, -0.0,          2147483647.9,  2147483648.0,  -2147483648.9, -2147483649.0,
                                  1e300, 2147483520.0, -2147483648.0};
  const std::vector<int32_t> want = {0, hi, lo, hi, lo, 2, -2, 0, hi, hi, lo, lo, hi, 2147483520, lo};
  std::vector<Device> devices = {Device::cpu};
  if (cuda_available()) devices.push_back(Device::cuda);  // the rule is the GPU's: both must agree
  for (const Device dev : devices) {
    EXPECT_EQ(Tensor::from_vector(in, {static_cast<int64_t>(in.size())}, DType::f64, dev).to(DType::i32).to_int(),
              want)
        << "f64 on " << device_name(dev);
    // f32: the same values rounded to float give the same integers (2147483647.9 becomes 2^31: saturated).
    EXPECT_EQ(Tensor::from_vector(in, {static_cast<int64_t>(in.size())}, DType::f32, dev).to(DType::i32).to_int(),
              want)
        << "f32 on " << device_name(dev);
    const std::vector<float> halves = {NAN, INFINITY, -INFINITY, 65504.0f, -2.9f};
    EXPECT_EQ(Tensor::from_vector(halves, {5}, DType::f16, dev).to(DType::i32).to_int(),
              (std::vector<int32_t>{0, hi, lo, 65504, -2}))
        << "f16 on " << device_name(dev);
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_EQ(Tensor::full({2}, in[i], DType::i32, dev).to_int(), (std::vector<int32_t>{want[i], want[i]}))
          << "full(" << in[i] << ") on " << device_name(dev);
    Tensor t = Tensor::zeros({3}, DType::i32, dev);
    t.fill_(-1e10);
    EXPECT_EQ(t.to_int(), (std::vector<int32_t>{lo, lo, lo})) << device_name(dev);
  }
}

// Each value prints as the shortest decimal that reads back (correctly rounded) as the same value of
// its dtype, so no digit is shown that the dtype does not hold and two different values never print
// alike. DESIGN.md §1's examples: 0.123456789 is 0.1235 in f16 and 0.12345679 in f32.
TEST(Tensor, PrintingUsesTheDigitsOfTheDtype) {
  Tensor t = Tensor::from_vector(std::vector<float>{0.123456789f}, {1});
  EXPECT_EQ(t.to(DType::f16).str(), "tensor([0.1235], f16[1])");
  EXPECT_EQ(t.str(), "tensor([0.12345679], f32[1])");
  Tensor big = Tensor::zeros({100});
  EXPECT_NE(big.str().find("..."), std::string::npos);  // long dims are elided

  auto half_str = [](uint16_t bits) { return Tensor::from_half({half::from_bits(bits)}, {1}).str(); };
  // Neighbours 1.0205078125 and 1.021484375: 4 digits cannot tell them apart, so the first takes 5.
  EXPECT_EQ(half_str(0x3C15), "tensor([1.0205], f16[1])");
  EXPECT_EQ(half_str(0x3C16), "tensor([1.021], f16[1])");
  // The largest half keeps its whole part: 6.55e+04 also reads back as 65504, but a person reads 65500.
  EXPECT_EQ(half_str(0x7BFF), "tensor([65504], f16[1])");
  EXPECT_EQ(half_str(0xFBFF), "tensor([-65504], f16[1])");
  EXPECT_EQ(half_str(0x2E66), "tensor([0.1], f16[1])");   // 0.0999755859375 is the half nearest 0.1
  EXPECT_EQ(half_str(0x0001), "tensor([6e-08], f16[1])");  // 2^-24: 6e-08 reads back as it
  EXPECT_EQ(half_str(0x8000), "tensor([-0], f16[1])");
  EXPECT_EQ(half_str(0x7C00), "tensor([inf], f16[1])");
  EXPECT_EQ(half_str(0x7E00), "tensor([nan], f16[1])");
  // Every finite half, both signs: the printed value reads back as that half, and no two print alike.
  std::set<std::string> seen;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    if ((bits & 0x7C00) == 0x7C00) continue;  // inf and NaN
    const std::string s = half_str(static_cast<uint16_t>(bits));
    const std::string value = s.substr(8, s.find(']') - 8);  // "tensor([" ... "], f16[1])"
    ASSERT_EQ(double_to_half_bits(std::strtod(value.c_str(), nullptr)), bits) << s;
    EXPECT_TRUE(seen.insert(value).second) << s << " prints like another half";
  }

  // f32: 10 + 10 * 2^-20 and 10 + 11 * 2^-20 both printed 10.00001 with 8 digits.
  const double ulp = std::ldexp(1.0, -20);
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{10 + 10 * ulp, 10 + 11 * ulp}, {2}, DType::f32).str(),
            "tensor([10.00001, 10.0000105], f32[2])");
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{123456789.0, 1e10, 0.1}, {3}, DType::f32).str(),
            "tensor([123456792, 1e+10, 0.1], f32[3])");  // the value held; 11 whole digits: shortest form
  EXPECT_EQ(Tensor::from_vector(std::vector<double>{0.1, 1.0 / 3.0, 5e-324}, {3}, DType::f64).str(),
            "tensor([0.1, 0.3333333333333333, 5e-324], f64[3])");
  // Random f32 and f64 bit patterns read back exactly (strtof: one rounding, as a reader would make).
  Generator g(hl::test::fresh_seed());
  for (int i = 0; i < 2000; ++i) {
    uint32_t fbits = static_cast<uint32_t>(g.next_u64());
    float f;
    std::memcpy(&f, &fbits, sizeof f);
    if (!std::isfinite(f)) continue;
    const std::string s = Tensor::from_vector(std::vector<float>{f}, {1}).str();
    const float back = std::strtof(s.substr(8).c_str(), nullptr);
    EXPECT_EQ(std::memcmp(&back, &f, sizeof f), 0) << s << " for bits " << fbits;
    uint64_t dbits = g.next_u64();
    double d;
    std::memcpy(&d, &dbits, sizeof d);
    if (!std::isfinite(d)) continue;
    const std::string sd = Tensor::from_vector(std::vector<double>{d}, {1}, DType::f64).str();
    const double dback = std::strtod(sd.substr(8).c_str(), nullptr);
    EXPECT_EQ(std::memcmp(&dback, &d, sizeof d), 0) << sd << " for bits " << dbits;
  }
}

// The layout of str(): nested brackets indented under the first, rows of the innermost dim on one
// line, and a dim longer than max_per_dim elided in its middle (half of max_per_dim at each end).
TEST(Tensor, PrintingLaysOutNestedDimsAndElidesLongOnes) {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor cube = Tensor::from_vector(v, {2, 3, 4});
  EXPECT_EQ(cube.str(),
            "tensor([[[0, 1, 2, 3],\n"
            "         [4, 5, 6, 7],\n"
            "         [8, 9, 10, 11]],\n"
            "        [[12, 13, 14, 15],\n"
            "         [16, 17, 18, 19],\n"
            "         [20, 21, 22, 23]]], f32[2, 3, 4])");
  EXPECT_EQ(cube.str(2),
            "tensor([[[0, ..., 3],\n"
            "         ...,\n"
            "         [8, ..., 11]],\n"
            "        [[12, ..., 15],\n"
            "         ...,\n"
            "         [20, ..., 23]]], f32[2, 3, 4])");
  const Tensor tall = Tensor::from_vector(v, {8, 3});
  EXPECT_EQ(tall.str(),
            "tensor([[0, 1, 2],\n"
            "        [3, 4, 5],\n"
            "        [6, 7, 8],\n"
            "        ...,\n"
            "        [15, 16, 17],\n"
            "        [18, 19, 20],\n"
            "        [21, 22, 23]], f32[8, 3])");
  const Tensor row = Tensor::from_vector(std::vector<float>(v.begin(), v.begin() + 10), {10});
  EXPECT_EQ(row.str(), "tensor([0, 1, 2, ..., 7, 8, 9], f32[10])");
  EXPECT_EQ(row.str(10), "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], f32[10])");  // a wider limit prints all
  EXPECT_EQ(row.str(0), "tensor([0, ..., 9], f32[10])");                    // at least one at each end
  EXPECT_EQ(Tensor::zeros({}).str(), "tensor(0, f32[])");
  EXPECT_EQ(Tensor::zeros({2, 0}).str(), "tensor([[],\n        []], f32[2, 0])");
}

// Every way of reading values back to the host counts once in debug::host_reads() (the no-sync
// tests rely on it); computing on the device counts nothing.
TEST(Tensor, EveryReadBackToTheHostCountsOnce) {
  const Tensor f = Tensor::from_vector(std::vector<float>{1.5f, -2.0f}, {2});
  const Tensor i = Tensor::from_vector(std::vector<int32_t>{7}, {1});
  const auto reads = [](const char* what, const std::function<void()>& read) {
    const int64_t before = debug::host_reads();
    read();
    EXPECT_EQ(debug::host_reads() - before, 1) << what;
  };
  reads("to_vector", [&] { (void)f.to_vector(); });
  reads("to_double of f32", [&] { (void)f.to_double(); });
  reads("to_double of i32", [&] { (void)i.to_double(); });
  reads("to_int", [&] { (void)i.to_int(); });
  reads("item of i32", [&] { EXPECT_EQ(i.item(), 7.0); });
  reads("item of f32", [&] { EXPECT_EQ(f.slice_rows(1, 2).item(), -2.0); });
  double word = 0;
  reads("read_raw", [&] { detail::read_raw(detail::raw_tensor(&word, sizeof word, Device::cpu), &word, sizeof word); });
  const int64_t before = debug::host_reads();
  const Tensor g = sum(f * 2.0 + f);
  (void)f.to(Device::cpu);
  EXPECT_EQ(debug::host_reads(), before) << "computing (and a copy to the same device) reads nothing back";
  EXPECT_EQ(g.item(), -1.5);
}

TEST(Tensor, ReshapeAndFlattenAreViews) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.data_ptr(), t.data_ptr());
  const Tensor cube = Tensor::zeros({2, 3, 4});
  Tensor f = cube.flatten();
  EXPECT_EQ(f.shape(), (Shape{2, 12}));
  EXPECT_EQ(cube.flatten(0).shape(), (Shape{24}));
  EXPECT_EQ(cube.flatten(2).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(cube.flatten(-1).shape(), (Shape{2, 3, 4}));  // negative dims count from the end
  EXPECT_EQ(cube.flatten(-3).shape(), (Shape{24}));
  EXPECT_EQ(Tensor::zeros({}).flatten(0).shape(), (Shape{1}));
  EXPECT_THROW(cube.flatten(-4), Error);
  EXPECT_THROW(cube.flatten(4), Error);
  r.fill_(7.0);
  for (float v : t.to_vector()) EXPECT_EQ(v, 7.0f);  // the view writes through
  EXPECT_THROW(t.reshape({4, 2}), Error);
  EXPECT_THROW(t.reshape({-1, -1}), Error);
  Tensor rows = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}).slice_rows(1, 3);
  EXPECT_EQ(rows.to_vector(), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(rows.reshape({4}).to_vector(), (std::vector<float>{3, 4, 5, 6}));  // a view of a view keeps its offset
  EXPECT_EQ(rows.slice_rows(1, 2).reshape({1, 2}).to_vector(), (std::vector<float>{5, 6}));
  EXPECT_EQ(rows.slice_rows(1, 1).shape(), (Shape{0, 2}));  // an empty range is a valid slice
  EXPECT_EQ(rows.slice_rows(2, 2).shape(), (Shape{0, 2}));
  EXPECT_THROW(t.slice_rows(1, 3), Error);
  const std::string e = test::error_of([] { Tensor::scalar(1.0).slice_rows(0, 0); });
  EXPECT_NE(e.find("slice_rows: needs at least one dimension, got f32[] on cpu"), std::string::npos) << e;
}

TEST(Tensor, ItemAndErrorsNameTheTensor) {
  Tensor t = Tensor::zeros({2, 2});
  try {
    t.item();
    FAIL() << "item() on 4 elements must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 2]"), std::string::npos) << e.what();
  }
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_THROW(u.shape(), Error);
}

// Overlapping views of one storage: copying rows [0, n-1) onto rows [1, n) (and back) must act as if
// the source were read whole first. A host memcpy of overlapping ranges is undefined behaviour, which
// glibc's x86 memcpy happens to hide; run under ASan (scripts/sanitize.sh) this test reports
// memcpy-param-overlap without copy_bytes' memmove. cudaMemcpy's ranges must not overlap either.
TEST(Tensor, CopyBetweenOverlappingViewsActsAsIfTheSourceWereReadFirst) {
  std::vector<Device> devices = {Device::cpu};
  if (cuda_available()) devices.push_back(Device::cuda);
  for (const Device dev : devices) {
    for (const int64_t rows : {2, 5, 1000}) {
      const int64_t cols = 3;
      std::vector<double> v(static_cast<size_t>(rows * cols));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
      Tensor t = Tensor::from_vector(v, {rows, cols}, DType::f32, dev);
      t.slice_rows(1, rows).copy_(t.slice_rows(0, rows - 1));  // forward: the destination starts later
      std::vector<double> want = v;
      for (size_t i = static_cast<size_t>(cols); i < want.size(); ++i) want[i] = v[i - static_cast<size_t>(cols)];
      EXPECT_EQ(t.to_double(), want) << rows << " rows, forward, on " << device_name(dev);
      t = Tensor::from_vector(v, {rows, cols}, DType::f32, dev);
      t.slice_rows(0, rows - 1).copy_(t.slice_rows(1, rows));  // backward: the destination starts earlier
      want = v;
      for (size_t i = 0; i + static_cast<size_t>(cols) < want.size(); ++i) want[i] = v[i + static_cast<size_t>(cols)];
      EXPECT_EQ(t.to_double(), want) << rows << " rows, backward, on " << device_name(dev);
    }
  }
}

TEST(Tensor, CopyConvertsAndChecksShape) {
  Tensor dst = Tensor::zeros({3}, DType::f16);
  dst.copy_(Tensor::from_vector(std::vector<float>{1.0f, 2049.0f, -3.0f}, {3}));
  EXPECT_EQ(dst.to_vector(), (std::vector<float>{1.0f, 2048.0f, -3.0f}));
  EXPECT_THROW(dst.copy_(Tensor::zeros({4})), Error);
  Tensor c = dst.clone();
  EXPECT_NE(c.data_ptr(), dst.data_ptr());
}

TEST(Tensor, GeneratorIsPortableAndSeeded) {
  Generator a(42), b(42), c(43);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(a.next_u64(), c.next_u64());
  // Pinned first values of xoshiro256** seeded through splitmix64(42), cross-checked against an
  // independent Python implementation: every seeded experiment depends on these staying put.
  // The first two outputs depend on the seeding alone; the state update shows from the third on.
  Generator d(42);
  EXPECT_EQ(d.next_u64(), 1546998764402558742ull);
  EXPECT_EQ(d.next_u64(), 6990951692964543102ull);
  EXPECT_EQ(d.next_u64(), 12544586762248559009ull);
  EXPECT_EQ(d.next_u64(), 17057574109182124193ull);
  EXPECT_EQ(d.next_u64(), 18295552978065317476ull);
  EXPECT_EQ(d.next_u64(), 14199186830065750584ull);
  for (int i = 6; i < 999; ++i) d.next_u64();
  EXPECT_EQ(d.next_u64(), 10224724267483498856ull);  // the 1000th
  Generator g(7);
  double s = 0, s2 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double x = g.normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.03);
  EXPECT_NEAR(s2 / n, 1.0, 0.05);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(g.below(7), 7u);
}

TEST(Tensor, ReseedingDropsTheSpareNormal) {
  // normal() makes two values per Box-Muller pair and keeps the second; manual_seed must drop it,
  // or a reseeded generator would start with a value of the old sequence.
  Generator fresh(5);
  const double first = fresh.normal();
  Generator used(99);
  used.normal();  // leaves a spare
  used.manual_seed(5);
  EXPECT_EQ(used.normal(), first);
  EXPECT_EQ(used.normal(), fresh.normal());
}

TEST(Tensor, NormalIsBoxMullerKeepingTheSecondValueOfEachPair) {
  // Each pair of uniforms (u1, u2) gives r cos(2 pi u2), then r sin(2 pi u2) on the next call, with
  // r = sqrt(-2 ln u1): the two values of a pair come out in that order before new uniforms are drawn.
  Generator u(42), g(42);
  for (int pair = 0; pair < 3; ++pair) {
    const double u1 = u.uniform(), u2 = u.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    EXPECT_DOUBLE_EQ(g.normal(), r * std::cos(2.0 * M_PI * u2)) << "pair " << pair;
    EXPECT_DOUBLE_EQ(g.normal(), r * std::sin(2.0 * M_PI * u2)) << "pair " << pair;
  }
}

TEST(Tensor, RandnAndUniformScaleTheGeneratorsDraws) {
  // randn is mean + std * normal() and uniform is low + (high - low) * uniform(), in draw order,
  // computed in f64 (exact here, in an f64 tensor).
  Generator a(11), b(11);
  const std::vector<double> n = Tensor::randn({4}, a, DType::f64, Device::cpu, 2.0, 3.0).to_double();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(n[static_cast<size_t>(i)], 2.0 + 3.0 * b.normal()) << i;
  const std::vector<double> u = Tensor::uniform({4}, a, -1.0, 5.0, DType::f64).to_double();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(u[static_cast<size_t>(i)], -1.0 + 6.0 * b.uniform()) << i;
}

TEST(Tensor, ANameIsKeptByDetachAndAnUndefinedTensorHasNoGrad) {
  Tensor w = Tensor::zeros({2});
  EXPECT_EQ(w.name(), "");
  EXPECT_EQ(&w.set_name("fc1.weight"), &w);
  EXPECT_EQ(w.name(), "fc1.weight");
  EXPECT_EQ(w.detach().name(), "fc1.weight");  // the same data under the same name (error messages use it)
  EXPECT_FALSE(Tensor().grad().defined());     // no tensor, no gradient: not a crash
  EXPECT_FALSE(w.grad().defined());
}

TEST(Tensor, RawStateTakesWholeWordsAndRefusesToReadPastThem) {
  // n bytes are held in ceil(n / 8) f64 words: the saved size of every optimizer and scaler counter.
  const unsigned char bytes[17] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<std::pair<size_t, int64_t>> sizes{{1, 1}, {7, 1}, {8, 1}, {9, 2}, {16, 2}, {17, 3}};
  for (const auto& [n, words] : sizes) {
    const Tensor t = detail::raw_tensor(bytes, n, Device::cpu);
    EXPECT_EQ(t.shape(), (Shape{words})) << n << " bytes";
    unsigned char back[17] = {};
    detail::read_raw(t, back, n);
    EXPECT_EQ(std::memcmp(back, bytes, n), 0) << n << " bytes";
  }
  const Tensor one_word = detail::raw_tensor(bytes, 8, Device::cpu);
  unsigned char out[16] = {};
  std::string e = test::error_of([&] { detail::read_raw(one_word, out, 16); });
  EXPECT_NE(e.find("read_raw: f64[1] on cpu holds fewer than 16 bytes"), std::string::npos) << e;
  e = test::error_of([&] { detail::read_raw(Tensor(), out, 1); });
  EXPECT_NE(e.find("read_raw: an undefined tensor holds fewer than 1 bytes"), std::string::npos) << e;
}

TEST(Tensor, BelowTakesOnlyAPositiveBound) {
  Generator g(3);
  const std::string e = test::error_of([&] { g.below(0); });
  EXPECT_NE(e.find("Generator::below: n must be positive"), std::string::npos) << e;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g.below(1), 0u);
}

TEST(Device, ParseAndFallback) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
  EXPECT_THROW(parse_device("tpu"), Error);
  if (!cuda_available()) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(parse_device("cuda"), Device::cpu);  // falls back with a one-line notice
    EXPECT_EQ(parse_device("auto"), Device::cpu);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_LE(std::count(err.begin(), err.end(), '\n'), 1);
    EXPECT_THROW(Tensor::zeros({2}, DType::f32, Device::cuda), Error);
  } else {
    EXPECT_EQ(parse_device("cuda"), Device::cuda);
  }
}

// The fallback notice is printed once per process, not once per call: checked in a fresh process
// (the "threadsafe" death-test style runs this test alone in a new one), where no earlier test has
// printed it yet.
TEST(Device, FallbackNoticeIsPrintedOncePerProcess) {
  if (cuda_available()) GTEST_SKIP() << "the notice is for a machine without a usable GPU";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        parse_device("cuda");
        parse_device("gpu");
        std::exit(0);
      },
      testing::ExitedWithCode(0), "^halfling: CUDA requested but unavailable \\([^\n]*\\); running on the CPU\n$");
}

// "auto" in a CUDA build without a usable GPU says so too (DESIGN.md §2: a CUDA build falls back with a
// one-line notice), once, also when "cuda" follows; a CPU-only build, with no GPU to miss, says nothing.
TEST(Device, AutoFallbackNoticeInACudaBuildOnly) {
  if (cuda_available()) GTEST_SKIP() << "the notice is for a machine without a usable GPU";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string notice =
      runtime::cuda_compiled()
          ? "^halfling: CUDA preferred \\(--device auto\\) but unavailable \\([^\n]*\\); running on the CPU\n$"
          : "^$";
  EXPECT_EXIT(
      {
        parse_device("auto");
        parse_device("auto");
        if (!runtime::cuda_compiled()) std::exit(0);  // "cuda" would print its own notice
        parse_device("cuda");
        std::exit(0);
      },
      testing::ExitedWithCode(0), notice);
}

// Without a usable GPU, in a CPU-only build (kernels/nocuda) and a CUDA build alike, every CUDA entry
// point that needs a device throws an error that starts with its own name, so a CPU path that calls
// one by mistake fails the same way in both builds; frees and destroys of null pointers do nothing.
TEST(Device, WithoutAGpuEveryCudaCallThrowsNamingItself) {
  if (runtime::cuda_available()) GTEST_SKIP() << "a GPU is present";
  int x = 0;
  void* p = &x;
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"cuda_malloc", [] { runtime::cuda_malloc(16); }},
      {"cuda_host_alloc", [] { runtime::cuda_host_alloc(16); }},
      {"cuda_memcpy_async", [&] { runtime::cuda_memcpy_async(p, p, 4, runtime::CopyKind::host_to_device); }},
      {"cuda_memset_async", [&] { runtime::cuda_memset_async(p, 0, 4); }},
      {"cuda_synchronize", [] { runtime::cuda_synchronize(); }},
      {"cuda_stream", [] { runtime::cuda_stream(); }},
      {"cuda_event_create", [] { runtime::cuda_event_create(); }},
      {"cuda_event_record", [&] { runtime::cuda_event_record(p); }},
      {"cuda_event_synchronize", [&] { runtime::cuda_event_synchronize(p); }},
      {"cuda_event_query", [&] { runtime::cuda_event_query(p); }},
      {"cuda_event_elapsed_ms", [&] { runtime::cuda_event_elapsed_ms(p, p); }},
      {"cuda_capture_begin", [] { runtime::cuda_capture_begin(); }},
      {"cuda_graph_launch", [&] { runtime::cuda_graph_launch(p); }},
  };
  for (const auto& [name, call] : calls) {
    const std::string message = hl::test::error_of(call);
    EXPECT_EQ(message.rfind(name + ": ", 0), 0u) << name << ": " << message;
  }
  runtime::cuda_free(nullptr);
  runtime::cuda_host_free(nullptr);
  runtime::cuda_event_destroy(nullptr);
  runtime::cuda_graph_destroy(nullptr);
  runtime::cuda_capture_abort();  // noexcept, and nothing is open
  EXPECT_FALSE(runtime::cuda_capturing());
  // In a CPU-only build a non-null pointer to free cannot have come from here: refused too. (A CUDA
  // build hands it to the driver, which may be present with an unusable GPU: not tried with &x.)
  if (runtime::cuda_compiled()) return;
  for (const char* name : {"cuda_free", "cuda_host_free", "cuda_event_destroy"}) {
    const std::string message = hl::test::error_of([&] {
      if (std::string(name) == "cuda_free") runtime::cuda_free(p);
      if (std::string(name) == "cuda_host_free") runtime::cuda_host_free(p);
      if (std::string(name) == "cuda_event_destroy") runtime::cuda_event_destroy(p);
    });
    EXPECT_EQ(message.rfind(std::string(name) + ": ", 0), 0u) << name << ": " << message;
  }
  runtime::cuda_graph_destroy(p);  // noexcept: cuda_capture_end never made one here
}

// copy_bytes copies exactly the count it is given, down to one byte, and nothing for zero.
TEST(Device, CopyBytesOnTheHostDownToOneByte) {
  const char src[3] = {'a', 'b', 'c'};
  char dst[3] = {'x', 'y', 'z'};
  copy_bytes(dst, Device::cpu, src, Device::cpu, 0);
  EXPECT_EQ(std::string(dst, 3), "xyz");
  copy_bytes(dst, Device::cpu, src, Device::cpu, 1);
  EXPECT_EQ(std::string(dst, 3), "ayz");
  copy_bytes(dst, Device::cpu, src, Device::cpu, 3);
  EXPECT_EQ(std::string(dst, 3), "abc");
}

// Blocks up to 1 MiB round up to a multiple of 512 bytes (0 bytes too: every allocation gets a real
// block), larger ones to a quarter step of their power of two (2^k times 1.25, 1.5, 1.75 or 2); each
// edge exactly.
TEST(Allocator, RoundsSizesAtEachEdge) {
  constexpr size_t MiB = size_t(1) << 20, GiB = size_t(1) << 30;
  const std::vector<std::pair<size_t, size_t>> cases = {
      {0, 512},           {1, 512},           {511, 512},         {512, 512},          {513, 1024},
      {MiB, MiB},         {MiB + 1, MiB * 5 / 4}, {MiB * 5 / 4, MiB * 5 / 4}, {MiB * 5 / 4 + 1, MiB * 3 / 2},
      {MiB * 7 / 4 + 1, 2 * MiB}, {2 * MiB, 2 * MiB}, {2 * MiB + 1, MiB * 5 / 2}, {5 * MiB, 5 * MiB},
      {17 * GiB, 20 * GiB}, {65 * GiB, 80 * GiB}, {81 * GiB, 96 * GiB},  // the review's cases: 2x was 32, 128, 128
  };
  for (const auto& [bytes, want] : cases) EXPECT_EQ(CachingAllocator::round_size(bytes), want) << bytes;
}

// Above 1 MiB a block is at most 25% larger than the request (a power of two wasted up to 2x), and
// every block size is one of the four classes of its power of two, so that sizes share cached blocks.
TEST(Allocator, LargeBlocksWasteAtMostAQuarter) {
  for (size_t bytes = (size_t(1) << 20) + 1; bytes < (size_t(1) << 62); bytes += bytes / 8 + 12345) {
    const size_t size = CachingAllocator::round_size(bytes);
    ASSERT_GE(size, bytes);
    EXPECT_LT(size - bytes, bytes / 4) << bytes;
    const size_t power = std::bit_floor(size - 1);  // 2^k < size <= 2^(k+1)
    EXPECT_EQ(size % (power / 4), 0u) << bytes << " -> " << size;
    EXPECT_EQ(CachingAllocator::round_size(size), size) << "a class rounds to itself";
  }
}

// Past 1.75 * 2^63 bytes no class fits in size_t: refused with the size, instead of looping forever
// (the power-of-two rounding overflowed to 0 and never got past the request).
TEST(Allocator, RefusesARequestNoSizeClassCanHold) {
  const size_t largest = size_t(7) << 61;  // 1.75 * 2^63
  EXPECT_EQ(CachingAllocator::round_size(largest), largest);
  EXPECT_EQ(CachingAllocator::round_size((size_t(1) << 63) + 1), size_t(5) << 61);
  for (size_t bytes : {largest + 1, std::numeric_limits<size_t>::max()}) {
    const std::string message = hl::test::error_of([&] { CachingAllocator::round_size(bytes); });
    EXPECT_NE(message.find(std::to_string(bytes) + " bytes: larger than any memory"), std::string::npos) << message;
  }
  static int allocs = 0;
  CachingAllocator a([](size_t) -> void* { ++allocs; return nullptr; }, [](void*) {});
  EXPECT_THROW(a.allocate(std::numeric_limits<size_t>::max()), Error);
  EXPECT_EQ(allocs, 0) << "refused before the backend";
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
}

// Out of memory, the error names the bytes asked for and the block they were rounded to (the
// backend, which sees only the block, named the rounded size alone), after one retry with the cache
// given back, and the allocator's other caches (release_elsewhere) asked to give back theirs.
TEST(Allocator, OutOfMemoryNamesTheRequestAndTheBlock) {
  static int allocs = 0, elsewhere = 0;
  allocs = elsewhere = 0;
  CachingAllocator a(
      [](size_t n) -> void* {
        ++allocs;
        throw Error(detail::concat("test backend: cannot allocate ", n, " bytes"));
      },
      [](void*) {}, false, [] { ++elsewhere; });
  const size_t bytes = (size_t(3) << 20) + 1;
  const std::string message = hl::test::error_of([&] { a.allocate(bytes); });
  EXPECT_NE(message.find("out of memory for 3145729 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("a block of 3670016 bytes"), std::string::npos) << message;  // 3.5 MiB
  EXPECT_NE(message.find("test backend: cannot allocate 3670016 bytes"), std::string::npos) << message;
  EXPECT_EQ(allocs, 2) << "one retry";
  EXPECT_EQ(elsewhere, 1);
  // A request that rounds to itself is named once.
  const std::string exact = hl::test::error_of([&] { a.allocate(4096); });
  EXPECT_NE(exact.find("out of memory for 4096 bytes, with every cached block given back"), std::string::npos)
      << exact;
  // From 1 MiB on, the request is also given in MiB; below, it is not.
  EXPECT_NE(message.find("out of memory for 3145729 bytes (3 MiB), a block of 3670016 bytes"), std::string::npos)
      << message;
  const std::string one_mib = hl::test::error_of([&] { a.allocate(size_t(1) << 20); });
  EXPECT_NE(one_mib.find("out of memory for 1048576 bytes (1 MiB), with every"), std::string::npos) << one_mib;
  const std::string below = hl::test::error_of([&] { a.allocate((size_t(1) << 20) - 1); });
  EXPECT_NE(below.find("out of memory for 1048575 bytes, a block of 1048576 bytes"), std::string::npos) << below;
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(a.stats().backend_allocs, 0u);
}

TEST(Allocator, CachesAndCountsPeak) {
  // The caching logic is backend-independent: test it over a counting host backend.
  static int allocs = 0, frees = 0;
  allocs = frees = 0;
  CachingAllocator a([](size_t n) -> void* { ++allocs; return ::operator new(n); },
                     [](void* p) { ++frees; ::operator delete(p); });
  void* p1 = a.allocate(1000);
  EXPECT_EQ(a.stats().current_bytes, CachingAllocator::round_size(1000));
  a.deallocate(p1);
  EXPECT_EQ(a.stats().current_bytes, 0u);
  void* p2 = a.allocate(900);  // same rounded size: served from the cache
  EXPECT_EQ(p2, p1);
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(a.stats().backend_allocs, 1u);  // the statistic counts the backend's allocations, not hits
  void* p3 = a.allocate(5 << 20);
  EXPECT_EQ(a.stats().backend_allocs, 2u);
  EXPECT_EQ(a.stats().peak_bytes, CachingAllocator::round_size(900) + CachingAllocator::round_size(5 << 20));
  EXPECT_EQ(CachingAllocator::round_size(5 << 20), size_t(5) << 20);  // large blocks: quarter steps
  a.deallocate(p2);
  a.deallocate(p3);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 0u);
  a.release_cached();
  EXPECT_EQ(frees, 2);
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
}

TEST(Allocator, OutOfMemoryReturnsTheCacheAndAFailedFreeLeavesNothingDangling) {
  // A backend with room for two blocks whose n-th free can be made to fail.
  static std::set<void*> held;
  static int frees_until_failure = -1;
  held.clear();
  frees_until_failure = -1;
  CachingAllocator a(
      [](size_t n) -> void* {
        if (held.size() == 2) throw Error("test backend: out of memory");
        void* p = ::operator new(n);
        held.insert(p);
        return p;
      },
      [](void* p) {
        if (frees_until_failure > 0 && --frees_until_failure == 0) throw Error("test backend: free failed");
        ASSERT_EQ(held.erase(p), 1u) << "freed twice, or never allocated";
        ::operator delete(p);
      });
  void* small = a.allocate(100);
  void* large = a.allocate(4096);
  a.deallocate(small);
  a.deallocate(large);
  // Both blocks cached, the backend full: a third size gives the cache back and retries.
  void* other = a.allocate(20000);
  EXPECT_EQ(held.size(), 1u);
  EXPECT_EQ(a.stats().reserved_bytes, CachingAllocator::round_size(20000));
  void* again = a.allocate(100);
  a.deallocate(other);
  a.deallocate(again);
  // Two cached blocks; the second free fails. The first block is gone from the cache with its free,
  // so the next release must not free it again; the failed one was not freed, so it stays cached and
  // counted (not lost, as a block taken out before its free was), and the next release frees it.
  frees_until_failure = 2;
  EXPECT_THROW(a.release_cached(), Error);
  EXPECT_EQ(held.size(), 1u);
  EXPECT_EQ(a.stats().reserved_bytes, CachingAllocator::round_size(20000));
  a.release_cached();
  EXPECT_EQ(held.size(), 0u);
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
}

#if defined(HALFLING_WITH_CUDA)
// The kernels' scratch buffers (kernels/cuda/scratch.cuh) and the caching allocator each give their
// unused device memory back when the other runs out, then retry once; here over a fake device with
// room for two blocks (the scratch buffers' and the allocator's backends are test seams, and nothing
// below records a graph, so nothing reaches the GPU).
namespace fake_device {
std::set<void*> held;
void* alloc(size_t n) {
  if (held.size() >= 2) throw Error(detail::concat("fake device: cannot allocate ", n, " bytes"));
  void* p = ::operator new(n);
  held.insert(p);
  return p;
}
void free(void* p) {
  held.erase(p);
  ::operator delete(p);
}
CachingAllocator* cache = nullptr;
void release_cache() { cache->release_cached(); }
}  // namespace fake_device

struct FakeScratch : kernels::cuda::Scratch {
  FakeScratch() {
    raw_alloc = fake_device::alloc;
    raw_free = fake_device::free;
  }
  ~FakeScratch() {
    const std::lock_guard<std::mutex> lock(mu);
    release();
  }
  void* grow(size_t want) {
    const std::lock_guard<std::mutex> lock(mu);
    return reserve(want);
  }
};

TEST(ScratchAndAllocator, AScratchBufferThatCannotGrowGetsTheCachedBlocksBack) {
  fake_device::held.clear();
  CachingAllocator a(fake_device::alloc, fake_device::free);
  fake_device::cache = &a;
  const runtime::CachedBlocksRelease previous = runtime::cuda_set_cached_blocks_release(fake_device::release_cache);
  a.deallocate(a.allocate(1000));
  a.deallocate(a.allocate(5000));  // two cached blocks: the device is full
  {
    FakeScratch s;
    EXPECT_NE(s.grow(100000), nullptr);
    EXPECT_EQ(fake_device::held.size(), 1u) << "the scratch buffer alone";
    EXPECT_EQ(a.stats().reserved_bytes, 0u) << "the cache went back to the device";
  }
  runtime::cuda_set_cached_blocks_release(previous);
  EXPECT_TRUE(fake_device::held.empty());
}

TEST(ScratchAndAllocator, TheAllocatorGetsIdleScratchBuffersBack) {
  fake_device::held.clear();
  FakeScratch idle, busy;
  idle.grow(3000);
  busy.grow(3000);  // the device is full
  // Another thread holds busy's lock, as a call that queues kernels on it does: it must stay.
  std::promise<void> locked, done;
  std::thread user([&] {
    const std::lock_guard<std::mutex> lock(busy.mu);
    locked.set_value();
    done.get_future().wait();
  });
  locked.get_future().wait();
  CachingAllocator a(fake_device::alloc, fake_device::free, false, runtime::cuda_release_scratch);
  void* p = nullptr;
  const std::string message = hl::test::error_of([&] { p = a.allocate(1000); });
  EXPECT_EQ(idle.ptr, nullptr) << "the idle buffer went back to the device";
  EXPECT_NE(busy.ptr, nullptr) << "the buffer in use stays";
  done.set_value();
  user.join();
  EXPECT_EQ(message, "(no error)");
  a.deallocate(p);
  a.release_cached();
}
#endif

#if defined(HL_ASAN)  // framework/device.h: g++ and clang alike
TEST(Allocator, AsanSeesOverrunsAndCachedBlocks) {
  // Only in the ASan build (scripts/sanitize.sh): the slack past a request and freed blocks kept in
  // the cache are poisoned, so these accesses are reported although the allocator owns the memory.
  EXPECT_DEATH(
      {
        Tensor t = Tensor::zeros({3});  // 12 bytes in a 512-byte block
        volatile float* p = t.data<float>();
        p[3] = 1.0f;
      },
      "AddressSanitizer");
  EXPECT_DEATH(
      {
        float* p = nullptr;
        {
          Tensor t = Tensor::zeros({3});
          p = t.data<float>();
        }
        volatile float v = p[0];
        (void)v;
      },
      "AddressSanitizer");
}
#endif

TEST(Allocator, TensorsReuseMemory) {
  const MemoryStats before = memory_stats(Device::cpu);
  { Tensor t = Tensor::zeros({1 << 20}); }
  { Tensor t = Tensor::zeros({1 << 20}); }
  const MemoryStats after = memory_stats(Device::cpu);
  EXPECT_LE(after.backend_allocs - before.backend_allocs, 1u);
}

}  // namespace
