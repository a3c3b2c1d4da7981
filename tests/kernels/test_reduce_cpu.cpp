// The CPU reduce_sum (kernels/reduce.h) against a float64 reference written here, for every pattern
// of reduced dims over a 4-d shape with odd sizes: trailing reduced dims are summed as contiguous runs,
// trailing kept dims added as runs into consecutive outputs (kernels/cpu/reduce_cpu.cpp), and a full
// reduction runs in parallel.
// Fresh random inputs, outputs poisoned with NaN, every element checked.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "tests/kernels/typed_buffer.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

TEST(ReduceCpu, EveryPatternOfReducedDimsMatchesFloat64) {
  const uint64_t seed = test::fresh_seed();
  const int64_t shape[4] = {3, 5, 7, 6};
  const int64_t n = 3 * 5 * 7 * 6;
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    const auto xv = test::random_values(static_cast<size_t>(n), seed, -1, 1, t);
    test::TypedBuffer x(t, static_cast<size_t>(n));
    x.set_all(xv);
    for (int mask = 1; mask < 16; ++mask) {  // bit d set: dim d is reduced
      ReduceIndex ix;
      ix.ndim = 4;
      for (int d = 0; d < 4; ++d) ix.shape[d] = shape[d], ix.reduced[d] = (mask >> d) & 1;
      const int64_t out_n = ix.out_numel();
      std::vector<double> want(static_cast<size_t>(out_n), 0.0), magnitude(want.size(), 0.0);
      int64_t i = 0;
      for (int64_t a = 0; a < shape[0]; ++a)
        for (int64_t b = 0; b < shape[1]; ++b)
          for (int64_t c = 0; c < shape[2]; ++c)
            for (int64_t e = 0; e < shape[3]; ++e, ++i) {
              const int64_t idx[4] = {a, b, c, e};
              int64_t o = 0;
              for (int d = 0; d < 4; ++d)
                if (!ix.reduced[d]) o = o * shape[d] + idx[d];
              want[static_cast<size_t>(o)] += 0.5 * xv[static_cast<size_t>(i)];
              magnitude[static_cast<size_t>(o)] += std::fabs(0.5 * xv[static_cast<size_t>(i)]);
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
        ASSERT_NEAR(out.get(static_cast<size_t>(o)), w, tol)
            << dtype_name(t) << " mask " << mask << " output " << o << " seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace hl::kernels
