// The CPU reduce_sum (kernels/reduce.h) against a float64 reference written here: every pattern of
// reduced dims over a 4-d shape with odd sizes (none reduced included: a scaled copy), and shapes with
// dims of size 1 and 0, up to kMaxDims dims. Trailing reduced dims are summed as contiguous runs,
// trailing kept dims added as runs into consecutive outputs (kernels/cpu/reduce_cpu.cpp), and a full
// reduction runs in parallel: each split must give the same sums.
// Fresh random inputs, outputs poisoned with NaN, every element checked.
#include <gtest/gtest.h>

#include <omp.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "tests/kernels/typed_buffer.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

// Sums x (fresh random values of dtype t) over the dims marked in `reduced`, scaled by 0.5, into a
// poisoned output, and checks every output against a float64 sum in memory order.
void check_reduce(const std::vector<int64_t>& shape, const std::vector<bool>& reduced, DType t, uint64_t seed) {
  ReduceIndex ix;
  ix.ndim = static_cast<int>(shape.size());
  int64_t n = 1;
  for (int d = 0; d < ix.ndim; ++d) ix.shape[d] = shape[d], ix.reduced[d] = reduced[d], n *= shape[d];
  std::string what = std::string(dtype_name(t)) + " shape [";
  for (int d = 0; d < ix.ndim; ++d)
    what += std::to_string(shape[d]) + (reduced[d] ? "r" : "") + (d + 1 < ix.ndim ? ", " : "]");
  SCOPED_TRACE(what + " (r: reduced), seed " + std::to_string(seed));
  const auto xv = test::random_values(static_cast<size_t>(n), seed, -1, 1, t);
  test::TypedBuffer x(t, static_cast<size_t>(n));
  x.set_all(xv);
  const int64_t out_n = ix.out_numel();
  std::vector<double> want(static_cast<size_t>(out_n), 0.0), magnitude(want.size(), 0.0);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {  // x in memory order, the multi-index counted like an odometer
    int64_t o = 0;
    for (int d = 0; d < ix.ndim; ++d)
      if (!ix.reduced[d]) o = o * shape[d] + idx[d];
    want[static_cast<size_t>(o)] += 0.5 * xv[static_cast<size_t>(i)];
    magnitude[static_cast<size_t>(o)] += std::fabs(0.5 * xv[static_cast<size_t>(i)]);
    for (int d = ix.ndim - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
  test::TypedBuffer out(t, static_cast<size_t>(out_n));
  out.fill_nan();
  reduce_sum(DeviceType::cpu, ix, x.data(), t, out.data(), t, 0.5);
  // A double sum of at most 630 terms (error ~630 * 2^-53 * sum|terms|), then one rounding of the
  // output: 2^-24 (f32), 2^-11 (f16; plus 2^-25 absolute for subnormal results), 2^-53 (f64).
  const double out_u = t == DType::f16 ? 0x1p-11 : t == DType::f32 ? 0x1p-24 : 0x1p-53;
  for (int64_t o = 0; o < out_n; ++o) {
    const double w = want[static_cast<size_t>(o)];
    const double tol = 1024 * 0x1p-53 * magnitude[static_cast<size_t>(o)] + out_u * std::fabs(w) +
                       (t == DType::f16 ? 0x1p-25 : 0.0);
    ASSERT_NEAR(out.get(static_cast<size_t>(o)), w, tol) << "output " << o;
  }
}

// A full sum gives the same bits whatever the thread count: fixed chunks added in order, where an OpenMP
// reduction's order followed the thread count (found by review, 2026-11-29). Terms of magnitudes from
// 2^-30 to 2^30, so that any other order of additions rounds differently.
TEST(ReduceCpu, AFullSumIsTheSameForAnyThreadCount) {
  const int saved_threads = omp_get_max_threads();
  const int64_t n = 200003;
  std::vector<double> xv(static_cast<size_t>(n));
  uint64_t state = test::fresh_seed() | 1;
  for (double& v : xv) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) * 0x1p-53 - 0.5;
    v = std::ldexp(u, static_cast<int>((state >> 3) % 61) - 30);
  }
  for (DType t : {DType::f64, DType::f32}) {
    test::TypedBuffer x(t, static_cast<size_t>(n));
    x.set_all(xv);
    ReduceIndex ix;
    ix.ndim = 1;
    ix.shape[0] = n;
    ix.reduced[0] = true;
    const auto sum_with = [&](int threads) {
      omp_set_num_threads(threads);
      test::TypedBuffer out(DType::f64, 1);
      out.fill_nan();
      reduce_sum(DeviceType::cpu, ix, x.data(), t, out.data(), DType::f64, 1.0);
      return out.get(0);
    };
    const double one = sum_with(1);
    for (int threads : {2, 3, 4}) {
      const double many = sum_with(threads);
      EXPECT_EQ(std::memcmp(&one, &many, sizeof one), 0)
          << dtype_name(t) << ": " << threads << " threads give " << many << ", one thread " << one;
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST(ReduceCpu, EveryPatternOfReducedDimsMatchesFloat64) {
  const uint64_t seed = test::fresh_seed();
  for (DType t : {DType::f32, DType::f16, DType::f64})
    for (int mask = 0; mask < 16; ++mask) {  // bit d set: dim d is reduced; 0 is a scaled copy
      std::vector<bool> reduced(4);
      for (int d = 0; d < 4; ++d) reduced[d] = (mask >> d) & 1;
      check_reduce({3, 5, 7, 6}, reduced, t, seed);
    }
}

// Dims of size 1 make runs of one element: a trailing kept dim of size 1 after a reduced one (the
// kept-run path with runs of 1), kept dims of size 1 only (one output: the full reduction), and a
// reduced dim of size 1 (a copy). Empty dims give zeros where there are outputs, and nothing else.
TEST(ReduceCpu, DimsOfSizeOneAndZero) {
  static_assert(kMaxDims == 8, "the last two cases use every dim");
  const uint64_t seed = test::fresh_seed();
  struct Case {
    std::vector<int64_t> shape;
    std::vector<bool> reduced;
  };
  const std::vector<Case> cases = {
      {{2, 3, 1}, {false, true, false}},          {{4, 3, 1, 1}, {false, true, false, false}},
      {{3, 1, 4}, {true, false, false}},          {{5, 1}, {true, false}},
      {{1, 5}, {false, false}},                   {{4, 1, 3}, {false, true, false}},
      {{2, 1, 3, 1}, {true, false, true, false}}, {{7}, {false}},
      {{7}, {true}},                              {{0, 3}, {true, false}},
      {{3, 0}, {false, true}},                    {{3, 0, 2}, {false, true, false}},
      {{2, 3, 0}, {false, true, false}},          {{2, 2, 2, 2, 2, 3}, {false, true, false, true, false, false}},
      {{2, 1, 2, 3, 1, 2, 2, 3}, {false, true, false, true, true, false, false, false}},  // kMaxDims dims
      {{2, 1, 2, 3, 1, 2, 2, 3}, {true, false, true, false, false, true, false, true}},
  };
  for (DType t : {DType::f32, DType::f64})
    for (const Case& c : cases) check_reduce(c.shape, c.reduced, t, seed);
}

// argmax_rows: the first maximum of each row wins a tie, the first NaN wins over everything (as in
// PyTorch), and a later value is compared with the best so far, not with the row's first value.
// The answers are i32: a row past 2^31 - 1 columns, or a count over more elements, is refused before
// anything is read (so the pointers here are never touched), not wrapped to a negative index.
TEST(ReduceCpu, AnI32AnswerThatCouldNotHoldTheResultIsRefused) {
  const int64_t too_many = int64_t{INT32_MAX} + 1;
  EXPECT_EQ(test::error_of([&] { argmax_rows(DeviceType::cpu, 1, too_many, nullptr, DType::f16, nullptr); }),
            "argmax_rows: 2147483648 columns, but the indices are i32 (at most 2147483647)");
  EXPECT_EQ(test::error_of([&] { count_equal(DeviceType::cpu, too_many, nullptr, nullptr, nullptr); }),
            "count_equal: 2147483648 elements, but the count is i32 (at most 2147483647)");
  EXPECT_EQ(test::error_of([&] { argmax_rows(DeviceType::cpu, -1, 3, nullptr, DType::f32, nullptr); }),
            "argmax_rows: rows and cols must be >= 0, got rows=-1 cols=3");
  EXPECT_EQ(test::error_of([&] { count_equal(DeviceType::cpu, -1, nullptr, nullptr, nullptr); }),
            "count_equal: n must be >= 0, got -1");
  // A row of 0 columns has no maximum (the CPU loop would read the first element of the empty row); with
  // no rows nothing is read, whatever the width, up to the largest an i32 index can hold.
  EXPECT_EQ(test::error_of([&] { argmax_rows(DeviceType::cpu, 2, 0, nullptr, DType::f32, nullptr); }),
            "argmax_rows: a row of 0 columns has no maximum (2 rows)");
  for (int64_t cols : {int64_t{0}, int64_t{INT32_MAX}})
    EXPECT_EQ(test::error_of([&] { argmax_rows(DeviceType::cpu, 0, cols, nullptr, DType::f32, nullptr); }),
              "(no error)")
        << cols << " columns";
  const std::vector<int32_t> a = {1, 2, 3}, b = {1, 0, 3};
  int32_t count = -1;
  count_equal(DeviceType::cpu, 3, a.data(), b.data(), &count);
  EXPECT_EQ(count, 2);
}

TEST(ReduceCpu, ArgmaxRowsTakesTheFirstMaximumAndTheFirstNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> rows = {
      {0, 3, 1},          // 1: 1 > 0 but not > 3
      {2, 5, 5, 4},       // 1: the first of a tie
      {-1, -3, -2},       // 0: the first value is the maximum
      {1, nan, 7, nan},   // 1: the first NaN
      {nan, 9, nan},      // 0
      {-inf, -inf, -inf}, // 0
      {-4, -inf, -0.5},   // 2: the last
      {7},                // 0: a row of one column
  };
  const std::vector<int32_t> want = {1, 1, 0, 1, 0, 0, 2, 0};
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    SCOPED_TRACE(dtype_name(t));
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t cols = static_cast<int64_t>(rows[r].size());
      // Two copies of the row: the second row's answer is counted from its own start.
      test::TypedBuffer x2(t, 2 * rows[r].size());
      x2.set_all(rows[r]);
      for (size_t i = 0; i < rows[r].size(); ++i) x2.set(rows[r].size() + i, rows[r][i]);
      int32_t out[2] = {-7, -7};
      argmax_rows(DeviceType::cpu, 2, cols, x2.data(), t, out);
      EXPECT_EQ(out[0], want[r]) << "row " << r;
      EXPECT_EQ(out[1], want[r]) << "row " << r << ", second copy";
    }
  }
}

}  // namespace
}  // namespace hl::kernels
