// The float64 (long double) softmax reference the softmax tests compare against, and the error bounds
// that go with it. Written independently of kernels/cpu/softmax_cpu.cpp (which is itself a variant
// under test): two passes in long double, max subtracted first.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace hl::test::softmax_ref {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU32 = 0x1p-24;  // unit roundoff of FP32
constexpr double kU16 = 0x1p-11;  // unit roundoff of FP16

struct Row {
  double max, log_sum;  // NaN, NaN for a row without a finite maximum (the documented convention)
};

inline std::vector<Row> row_stats(int64_t rows, int64_t cols, const std::vector<double>& x) {
  std::vector<Row> out(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static)  // rows are independent; the sum within a row stays in order
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    long double mx = -kInf;
    bool nan = false;
    for (int64_t c = 0; c < cols; ++c) {
      if (std::isnan(row[c])) nan = true;
      if (row[c] > mx) mx = row[c];
    }
    if (!std::isfinite(static_cast<double>(mx)) || nan) {
      out[static_cast<size_t>(r)] = {kNaN, kNaN};
      continue;
    }
    long double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<long double>(row[c]) - mx);
    out[static_cast<size_t>(r)] = {static_cast<double>(mx), static_cast<double>(std::log(sum))};
  }
  return out;
}

inline double log_prob(double x, const Row& s) {
  return static_cast<double>((static_cast<long double>(x) - s.max) - s.log_sum);
}
inline double prob(double x, const Row& s) { return static_cast<double>(std::exp(static_cast<long double>(log_prob(x, s)))); }

// Bound on the absolute error of an FP32-math log-probability: x - max and the final subtraction
// round (2u relative each, with slack), exp()/log() are within 2 ulps, and the row sum is a chain of
// at most `chain` FP32 additions (each at most u of the running sum: a rigorous bound, not a guess).
inline double logprob_tol(double x, const Row& s, int64_t chain) {
  return 4 * kU32 * (std::fabs(x - s.max) + std::fabs(s.log_sum)) + (3.0 * static_cast<double>(chain) + 20) * kU32;
}

// Rounding of the output dtype: relative unit roundoff, and the absolute floor of its subnormals.
inline double out_rel(bool f16) { return f16 ? kU16 : kU32; }
inline double out_abs(bool f16) { return f16 ? 0x1p-25 : 0x1p-149; }

}  // namespace hl::test::softmax_ref
