// Tests of the CUDA backend (kernels/cuda/*.cu) against float64 references computed here.
//
// Every GPU test starts with HL_REQUIRE_CUDA(), so on a machine without a GPU it is reported as
// skipped with the reason. Following DESIGN.md §6, each test uses fresh random inputs (the seed is
// printed; rerun with HALFLING_TEST_SEED=<seed>), poisons its outputs with NaN before the kernel
// runs (so an element the kernel forgets to write fails; where NaN is due, a finite value no correct
// kernel writes instead), checks every element, and states each tolerance with its reason. The tests
// use raw device memory from hl::runtime and the public kernel API with DeviceType::cuda, so they need
// nothing from the framework.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"
#include "kernels/reduce_plan.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/test_util.h"

namespace hl {
namespace {

using kernels::BinaryOp;
using kernels::BroadcastIndex;
using kernels::ReduceIndex;
using kernels::ScalarOp;
using kernels::UnaryOp;
using runtime::CopyKind;

constexpr DeviceType kCuda = DeviceType::cuda;
using namespace test::gpu;   // DeviceBuffer, encode/decode, expect_all_close (tests/kernels/cuda_test_util.h)

// =====================================================================================================
// runtime
// =====================================================================================================

TEST(CudaRuntime, ReportsWhyCudaIsUnavailable) {
  // This one runs where there is NO usable GPU: the probe must answer false with a reason, not crash.
  bool available = true;
  ASSERT_NO_THROW(available = runtime::cuda_available());
  if (available) GTEST_SKIP() << "a GPU is present (" << runtime::cuda_device_description() << ")";
  EXPECT_FALSE(runtime::cuda_unavailable_reason().empty());
  EXPECT_EQ(runtime::cuda_compute_capability(), 0);
  EXPECT_FALSE(runtime::cuda_available()) << "the probe result must be stable";
  EXPECT_THROW(runtime::cuda_device_description(), Error);
  EXPECT_THROW(runtime::cuda_malloc(16), Error);
  std::cout << "[ info     ] CUDA unavailable: " << runtime::cuda_unavailable_reason() << "\n";
}

// cuBLAS is opened by the cublas GEMM variant on first use, not linked (kernels/cuda/gemm/cublas.cu
// says why: loading it cost every process about 0.4 s). A library that names it again would bring the
// cost back silently; the GPU tests of the variant (CudaGemm.*) check that the loading works.
TEST(CudaRuntime, CublasIsOpenedOnFirstUseNotLinked) {
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "a CPU-only build has no cuBLAS variant";
  if (test::run_command("command -v readelf").first != 0) GTEST_SKIP() << "readelf (binutils) not installed";
  const std::string lib = std::string(HALFLING_BINARY_DIR) + "/libhalfling.so";
  const auto [status, out] = test::run_command("readelf -d '" + lib + "'");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("libcudart.so"), std::string::npos) << "the check should see the CUDA runtime it links:\n" << out;
  EXPECT_EQ(out.find("libcublas"), std::string::npos) << lib << " links cuBLAS again:\n" << out;
}

TEST(CudaRuntime, DescribesTheDevice) {
  HL_REQUIRE_CUDA();
  EXPECT_TRUE(runtime::cuda_compiled());
  EXPECT_TRUE(runtime::cuda_unavailable_reason().empty());
  EXPECT_GE(runtime::cuda_compute_capability(), 70);
  const std::string d = runtime::cuda_device_description();
  EXPECT_NE(d.find("sm_" + std::to_string(runtime::cuda_compute_capability())), std::string::npos) << d;
  EXPECT_NE(d.find("SMs"), std::string::npos) << d;
  EXPECT_NE(runtime::cuda_stream(), nullptr);
  EXPECT_EQ(runtime::cuda_stream(), runtime::cuda_stream()) << "one halfling stream";
  std::cout << "[ info     ] " << d << "\n";
}

TEST(CudaRuntime, CopiesAndMemsetRoundTrip) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  const size_t n = 100003;
  const std::vector<double> values = test::random_values(n, seed, -100.0, 100.0, DType::f32);
  DeviceBuffer a(values, DType::f32), b(n, DType::f32);
  b.poison();
  runtime::cuda_memcpy_async(b.get(), a.get(), n * 4, CopyKind::device_to_device);
  expect_all_equal(b.download(), values, "device_to_device copy");

  // Pinned host memory, both directions.
  auto* pinned = static_cast<float*>(runtime::cuda_host_alloc(n * 4));
  ASSERT_NE(pinned, nullptr);
  runtime::cuda_memcpy_async(pinned, b.get(), n * 4, CopyKind::device_to_host);
  runtime::cuda_synchronize();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(pinned[i], static_cast<float>(values[i])) << i;
  runtime::cuda_host_free(pinned);

  runtime::cuda_memset_async(b.get(), 0, n * 4);
  expect_all_equal(b.download(), std::vector<double>(n, 0.0), "memset 0");
}

TEST(CudaRuntime, AllocationFailureNamesTheSize) {
  HL_REQUIRE_CUDA();
  const size_t huge = size_t{1} << 52;  // 4 PiB: more than any GPU has
  try {
    runtime::cuda_malloc(huge);
    FAIL() << "cuda_malloc(4 PiB) succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(runtime::cuda_malloc(0), nullptr);
  runtime::cuda_synchronize();  // the failed allocation left no error behind for later calls
}

// =====================================================================================================
// elementwise
// =====================================================================================================

// Output element i -> offsets in a and b (the same walk the kernels do, written independently).
void broadcast_offsets(const BroadcastIndex& ix, int64_t i, int64_t& ia, int64_t& ib) {
  ia = ib = 0;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    const int64_t c = i % ix.shape[d];
    i /= ix.shape[d];
    ia += c * ix.stride_a[d];
    ib += c * ix.stride_b[d];
  }
}

// Elements an operand with these strides spans in memory.
int64_t storage_size(const BroadcastIndex& ix, const int64_t* stride) {
  int64_t last = 0;
  for (int d = 0; d < ix.ndim; ++d) last += (ix.shape[d] - 1) * stride[d];
  return ix.numel() == 0 ? 0 : last + 1;
}

// Dense row-major operands of shapes a and b, broadcast NumPy-style against `out`.
BroadcastIndex make_broadcast(const std::vector<int64_t>& out, const std::vector<int64_t>& a,
                              const std::vector<int64_t>& b) {
  BroadcastIndex ix;
  ix.ndim = static_cast<int>(out.size());
  for (int d = 0; d < ix.ndim; ++d) ix.shape[d] = out[static_cast<size_t>(d)];
  auto strides = [&](const std::vector<int64_t>& s, int64_t* stride) {
    int64_t st = 1;
    const int offset = ix.ndim - static_cast<int>(s.size());  // right-aligned
    for (int d = ix.ndim - 1; d >= 0; --d) {
      const int64_t size = d >= offset ? s[static_cast<size_t>(d - offset)] : 1;
      stride[d] = size == 1 ? 0 : st;
      st *= size;
    }
  };
  strides(a, ix.stride_a);
  strides(b, ix.stride_b);
  return ix;
}

struct BinaryCase {
  std::string label;
  BroadcastIndex ix;
};

std::vector<BinaryCase> binary_cases() {
  std::vector<BinaryCase> cases;
  cases.push_back({"dense [3,5,7]", make_broadcast({3, 5, 7}, {3, 5, 7}, {3, 5, 7})});
  cases.push_back({"[4,1,5,3] op [6,5,1]", make_broadcast({4, 6, 5, 3}, {4, 1, 5, 3}, {6, 5, 1})});
  cases.push_back({"[1000] op scalar", make_broadcast({1000}, {1000}, {1})});
  cases.push_back({"row [1,33] op column [65,1]", make_broadcast({65, 33}, {1, 33}, {65, 1})});
  cases.push_back({"0-d op 0-d", make_broadcast({}, {}, {})});
  BroadcastIndex t;  // a is a [7,5] matrix read transposed as [5,7]; b a row vector
  t.ndim = 2;
  t.shape[0] = 5;
  t.shape[1] = 7;
  t.stride_a[0] = 1;
  t.stride_a[1] = 5;
  t.stride_b[0] = 0;
  t.stride_b[1] = 1;
  cases.push_back({"transposed [5,7] op [7]", t});
  cases.push_back({"large dense [300001]", make_broadcast({300001}, {300001}, {300001})});
  return cases;
}

TEST(CudaElementwise, BinaryBroadcastsOverMixedDtypes) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const DType f16 = DType::f16, f32 = DType::f32, f64 = DType::f64;
  const std::vector<std::vector<DType>> dtypes = {{f32, f32, f32}, {f16, f16, f16}, {f16, f32, f32},
                                                  {f32, f16, f32}, {f16, f16, f32}, {f32, f32, f16},
                                                  {f64, f64, f64}, {f16, f64, f64}, {f32, f64, f32}};
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& dt : dtypes) {
      const DType ta = dt[0], tb = dt[1], tout = dt[2];
      const int64_t n = c.ix.numel();
      const auto a = test::random_values(static_cast<size_t>(storage_size(c.ix, c.ix.stride_a)), seed++, -4, 4, ta);
      // b in [0.5, 4): a divisor far from zero
      const auto b = test::random_values(static_cast<size_t>(storage_size(c.ix, c.ix.stride_b)), seed++, 0.5, 4, tb);
      DeviceBuffer da(a, ta), db(b, tb), dout(static_cast<size_t>(n), tout);
      for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
        dout.poison();
        kernels::binary(kCuda, op, c.ix, da.get(), ta, db.get(), tb, dout.get(), tout);
        std::vector<double> ref(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          int64_t ia, ib;
          broadcast_offsets(c.ix, i, ia, ib);
          const double x = a[static_cast<size_t>(ia)], y = b[static_cast<size_t>(ib)];
          const double r = op == BinaryOp::add ? x + y : op == BinaryOp::sub ? x - y : op == BinaryOp::mul ? x * y : x / y;
          ref[static_cast<size_t>(i)] = r;
        }
        // f32 math on f16/f32 inputs is correctly rounded (within half an f32 ulp of the exact
        // value); an f16 output adds its own rounding, and rounding twice (f32 then f16) can land
        // one f16 ulp (2 * 2^-11 relative) from the exact value. Below 2^-14 an f16 ulp is no longer
        // relative: subnormals are spaced 2^-24 apart (mul/div of the random inputs reach there; on
        // an H200 a product of 2.5898e-5, half-way between two subnormals, rounded to the even one
        // 2.9e-8 away, past the relative bound). f64 math: half an f64 ulp.
        const bool wide = ta == f64 || tb == f64 || tout == f64;
        const double rtol = tout == f16 ? 2 * kF16Eps : (wide && tout == f64) ? 1e-15 : kF32Eps;
        const double atol = tout == f16 ? std::ldexp(1.0, -24) : 1e-300;
        expect_all_close(dout.download(), ref, [&](size_t i) { return rtol * std::fabs(ref[i]) + atol; },
                         "binary op " + std::to_string(static_cast<int>(op)) + " " + c.label + " " + name(ta) + "," +
                             name(tb) + "->" + name(tout));
      }
    }
  }
}

TEST(CudaElementwise, UnaryOps) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const size_t n = 70001;
  const std::vector<std::pair<DType, DType>> dtypes = {
      {DType::f32, DType::f32}, {DType::f16, DType::f16}, {DType::f16, DType::f32},
      {DType::f32, DType::f16}, {DType::f64, DType::f64}, {DType::f32, DType::f64}};
  for (auto [tx, tout] : dtypes) {
    for (UnaryOp op : {UnaryOp::neg, UnaryOp::relu, UnaryOp::exp, UnaryOp::log}) {
      // log needs positive inputs; exp stays well inside the f16 range for |x| < 8
      const double lo = op == UnaryOp::log ? 0.01 : -8.0, hi = op == UnaryOp::log ? 100.0 : 8.0;
      const auto x = test::random_values(n, seed++, lo, hi, tx);
      DeviceBuffer dx(x, tx), dout(n, tout);
      dout.poison();
      kernels::unary(kCuda, op, static_cast<int64_t>(n), dx.get(), tx, dout.get(), tout);
      std::vector<double> ref(n);
      for (size_t i = 0; i < n; ++i) {
        const double v = x[i];
        ref[i] = op == UnaryOp::neg ? -v : op == UnaryOp::relu ? (v > 0 ? v : 0.0) : op == UnaryOp::exp ? std::exp(v)
                                                                                                      : std::log(v);
      }
      // CUDA's expf/logf are within 2 f32 ulps (4 * 2^-24 relative; 6 leaves a margin), exp/log
      // within 2 f64 ulps; an f16 output adds up to one f16 ulp (rounded from an f32 already off).
      // Below 2^-14 an f16 is subnormal and its ulp is the fixed 2^-24, so there the rounding error
      // is up to 2^-25 absolute, not relative: an input of 4.04e-7 passed through relu into f16 is
      // 7 x 2^-24 = 4.17e-7, 3% away and correctly rounded (an H100 run of 2026-11-27 drew one).
      const bool wide = tx == DType::f64 || tout == DType::f64;
      double rtol = wide ? 1e-15 : 6 * kF32Eps;
      if (tout == DType::f16) rtol += 2 * kF16Eps;
      if (tout == DType::f32 && wide) rtol = kF32Eps;  // double math, one rounding into f32
      const double atol = tout == DType::f16 ? 0x1p-25 : 1e-300;
      expect_all_close(dout.download(), ref, [&](size_t i) { return rtol * std::fabs(ref[i]) + atol; },
                       "unary op " + std::to_string(static_cast<int>(op)) + " " + name(tx, tout));
    }
  }
}

TEST(CudaElementwise, ReluBackward) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const size_t n = 50000;
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    const auto x = test::random_values(n, seed++, -1, 1, t);
    const auto g = test::random_values(n, seed++, -3, 3, t);
    DeviceBuffer dx(x, t), dg(g, t), dout(n, t);
    dout.poison();
    kernels::relu_backward(kCuda, static_cast<int64_t>(n), dx.get(), dg.get(), dout.get(), t);
    std::vector<double> ref(n);
    for (size_t i = 0; i < n; ++i) ref[i] = x[i] > 0 ? g[i] : 0.0;
    expect_all_equal(dout.download(), ref, "relu_backward " + name(t));  // a selection: exact
  }
}

TEST(CudaElementwise, ScalarOps) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const size_t n = 40000;
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    for (ScalarOp op : {ScalarOp::add, ScalarOp::mul, ScalarOp::rsub, ScalarOp::rdiv, ScalarOp::pow}) {
      const auto x = test::random_values(n, seed++, 0.25, 4, t);  // positive: rdiv and pow are defined
      const double s = op == ScalarOp::pow ? 2.5 : -1.75;
      DeviceBuffer dx(x, t), dout(n, t);
      dout.poison();
      kernels::scalar(kCuda, op, static_cast<int64_t>(n), dx.get(), s, dout.get(), t);
      std::vector<double> ref(n);
      const double cs = t == DType::f64 ? s : static_cast<float>(s);  // the kernel's scalar, as computed
      for (size_t i = 0; i < n; ++i) {
        const double v = x[i];
        ref[i] = op == ScalarOp::add ? v + cs : op == ScalarOp::mul ? v * cs : op == ScalarOp::rsub ? cs - v
                 : op == ScalarOp::rdiv                             ? cs / v
                                                                    : std::pow(v, cs);
      }
      // CUDA's powf is within 4 f32 ulps (8 * 2^-24; 16 leaves a margin), pow within 2 f64 ulps; the
      // other ops are correctly rounded. An f16 output adds one f16 ulp.
      double rtol = t == DType::f64 ? 1e-15 : 16 * kF32Eps;
      if (t == DType::f16) rtol += 2 * kF16Eps;
      expect_all_close(dout.download(), ref, [&](size_t i) { return rtol * std::fabs(ref[i]) + 1e-300; },
                       "scalar op " + std::to_string(static_cast<int>(op)) + " " + name(t));
    }
  }
}

TEST(CudaElementwise, CastBetweenEveryDtypePair) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const size_t n = 20011;
  const DType all[] = {DType::f32, DType::f16, DType::f64, DType::i32};
  for (DType tx : all) {
    for (DType tout : all) {
      // Within +-1000: integers and fractions both fit every dtype's range.
      const auto x = test::random_values(n, seed++, -1000, 1000, tx);
      DeviceBuffer dx(x, tx), dout(n, tout);
      dout.poison();
      kernels::cast(kCuda, static_cast<int64_t>(n), dx.get(), tx, dout.get(), tout);
      std::vector<double> ref(n);
      for (size_t i = 0; i < n; ++i) ref[i] = round_to(tout, x[i]);  // one rounding (truncation into i32)
      expect_all_equal(dout.download(), ref, "cast " + name(tx, tout));
    }
  }
}

TEST(CudaElementwise, CastToF16RoundsEdgeValuesLikeTheCpu) {
  HL_REQUIRE_CUDA();
  const double tiny = std::ldexp(1.0, -24);  // smallest f16 subnormal
  const std::vector<double> edges = {
      65504.0,                       // largest finite f16
      65519.99,                      // just below the rounding boundary: 65504
      65520.0,                       // exactly half an ulp above 65504: rounds to infinity
      -65520.0,                      // and -infinity
      tiny,                          // 2^-24
      std::ldexp(1.0, -25),          // half of it: a tie, rounds to even (zero)
      std::ldexp(1.5, -25),          // above the tie: 2^-24
      std::ldexp(1.0, -14),          // smallest normal
      std::ldexp(1023.0, -24),       // largest subnormal
      1.0 + std::ldexp(1.0, -11),    // tie between 1 and 1 + 2^-10: even is 1
      1.0 + std::ldexp(3.0, -11),    // tie between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9
      0.1, -0.1, 0.123456789, 1.0 / 3.0, -0.0, 0.0, kInf, -kInf};
  for (DType tx : {DType::f32, DType::f64}) {
    std::vector<double> x = edges;
    if (tx == DType::f64) {
      // Rounding f64 -> f32 -> f16 would turn this into the tie 1 + 2^-11 and then round to 1;
      // a single rounding sees that it is above the tie and gives 1 + 2^-10.
      x.push_back(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
    }
    DeviceBuffer dx(x, tx), dout(x.size(), DType::f16);
    dout.poison();
    kernels::cast(kCuda, static_cast<int64_t>(x.size()), dx.get(), tx, dout.get(), DType::f16);
    const std::vector<double> out = dout.download();
    for (size_t i = 0; i < x.size(); ++i) {
      const double input = round_to(tx, x[i]);
      const uint16_t want = tx == DType::f64 ? double_to_half_bits(input)
                                             : float_to_half_bits(static_cast<float>(input));
      const uint16_t got = double_to_half_bits(out[i]);  // out[i] is an f16 value: exact round trip
      EXPECT_EQ(got, want) << name(tx) << " " << std::setprecision(17) << input << " -> f16: got " << out[i]
                           << ", want " << half_bits_to_float(want);
    }
  }
  // NaN stays NaN; float -> i32 truncates toward zero.
  const std::vector<double> x = {kNaN, -2.7, 2.7, -0.5, 7.99};
  DeviceBuffer dx(x, DType::f32), dh(x.size(), DType::f16), di(x.size(), DType::i32);
  dh.poison();
  di.poison();
  kernels::cast(kCuda, static_cast<int64_t>(x.size()), dx.get(), DType::f32, dh.get(), DType::f16);
  kernels::cast(kCuda, 4, static_cast<float*>(dx.get()) + 1, DType::f32, di.get(), DType::i32);
  EXPECT_TRUE(std::isnan(dh.download()[0]));
  const std::vector<double> ints = di.download();
  EXPECT_EQ(ints[0], -2);
  EXPECT_EQ(ints[1], 2);
  EXPECT_EQ(ints[2], 0);
  EXPECT_EQ(ints[3], 7);
}

TEST(CudaElementwise, FillConvertsTheValueOnce) {
  HL_REQUIRE_CUDA();
  const size_t n = 100003;
  for (DType t : {DType::f32, DType::f16, DType::f64, DType::i32}) {
    for (double value : {0.1, -3.75, 65519.0, -7.9}) {
      DeviceBuffer d(n, t);
      d.poison();
      kernels::fill(kCuda, static_cast<int64_t>(n), d.get(), t, value);
      expect_all_equal(d.download(), std::vector<double>(n, round_to(t, value)),
                       "fill " + name(t) + " " + std::to_string(value));
    }
  }
}

// =====================================================================================================
// reductions
// =====================================================================================================

// Sum (and sum of |x|, for the tolerance) of every output element of a dense input.
void reference_reduce(const ReduceIndex& ix, const std::vector<double>& x, std::vector<double>& sum,
                      std::vector<double>& abs_sum) {
  sum.assign(static_cast<size_t>(ix.out_numel()), 0.0);
  abs_sum.assign(sum.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const auto o = static_cast<size_t>(ix.output_of(static_cast<int64_t>(i)));
    sum[o] += x[i];
    abs_sum[o] += std::fabs(x[i]);
  }
}

// Every case through both of reduce_sum's paths: the channel path (kernels/reduce_plan.h, taken where
// it applies) and CUB (the hook forces it), each against the float64 reference. `offset`: the input
// starts that many elements into its buffer (a view whose address allows narrower loads, or none), and
// the elements before and after it are NaN, so that a kernel reading outside the tensor shows.
TEST(CudaReduce, SumOverAnyDimensions) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int> reduced;
    size_t offset = 0;
  };
  const std::vector<Case> cases = {
      {{5, 7, 9, 3}, {0, 2}},        // non-contiguous reduced dims, non-contiguous kept dims
      {{5, 7, 9, 3}, {1}},           // a middle dim
      {{5, 7, 9, 3}, {3}},           // the last dim (contiguous rows; channel path, A = 1, 1-wide loads)
      {{5, 7, 9, 3}, {0}},           // the first dim (a linear bias gradient: sum over the batch)
      {{5, 7, 9, 3}, {1, 3}},        //
      {{5, 7, 9, 3}, {0, 1, 2, 3}},  // everything: one output
      {{5, 7, 9, 3}, {}},            // nothing: a copy
      {{1, 6, 1, 4}, {0, 2}},        // only size-1 dims reduced: a copy
      {{3, 0, 4}, {1}},              // an empty reduced dim: zeros
      {{128, 64, 7, 7}, {0, 2, 3}},  // batch-norm statistics layout (N, C, H, W) -> C
      {{1048579}, {0}},              // a long full reduction (odd length)
      {{}, {}},                      // a 0-d tensor
      // The channel path's plans (reduce_plan.h; slice counts for a 132-SM GPU):
      {{128, 32, 28, 28}, {0, 2, 3}},     // LeNet conv1's bias gradient: 16-byte f16 loads, 6 slices
      {{128, 64, 14, 14}, {0, 2, 3}},     // conv2's: B = 196, 8-byte f16 loads
      {{2, 3, 2}, {0, 2}},                // B = 2: 4-byte f16 loads
      {{1000, 37}, {1}},                  // 1000 row sums: one slice each, written without a second pass
      {{4, 3, 1 << 16}, {0, 2}},          // three long sums: many slices each
      {{128, 32, 28, 28}, {0, 2, 3}, 1},  // the same view one element off: one element per load
      {{128, 32, 28, 28}, {0, 2, 3}, 4},  // four off: 8-byte f16 loads (f32, f64 16-byte)
      {{1, 9, 1, 40}, {0, 2, 3}, 2},      // size-1 dims around: [9, 40] row sums
  };
  const std::vector<std::pair<DType, DType>> dtypes = {
      {DType::f32, DType::f32}, {DType::f16, DType::f32}, {DType::f16, DType::f16}, {DType::f64, DType::f64}};
  for (const Case& c : cases) {
    const ReduceIndex ix = ReduceIndex::of(c.shape, c.reduced);
    size_t in_n = 1;
    for (int64_t s : c.shape) in_n *= static_cast<size_t>(s);
    for (auto [tx, tout] : dtypes) {
      const auto x = test::random_values(in_n, seed++, -2, 2, tx);
      std::vector<double> sum, abs_sum;
      reference_reduce(ix, x, sum, abs_sum);
      std::vector<double> padded(c.offset, kNaN);
      padded.insert(padded.end(), x.begin(), x.end());
      padded.insert(padded.end(), 16, kNaN);
      DeviceBuffer dx(padded, tx);
      const void* x_view = static_cast<const char*>(dx.get()) + c.offset * dtype_size(tx);
      for (bool channel_path : {true, false}) {
        const kernels::reduce_plan::ScopedChannelPath path(channel_path);
        for (double scale : {1.0, 1.0 / static_cast<double>(std::max<int64_t>(1, ix.reduce_numel()))}) {
          DeviceBuffer dout(static_cast<size_t>(ix.out_numel()), tout);
          dout.poison();
          kernels::reduce_sum(kCuda, ix, x_view, tx, dout.get(), tout, scale);
          std::vector<double> ref(sum.size());
          for (size_t o = 0; o < ref.size(); ++o) ref[o] = sum[o] * scale;
          // f32 accumulation: the error is a few hundred roundings at most (each path adds per-thread
          // runs, then a tree; the channel path then its slices in order), bounded by 1e-5 * sum|x|
          // (~170 * 2^-24); f64 likewise at 1e-13. The output dtype adds its own rounding of the result.
          const double acc_tol = tx == DType::f64 ? 1e-13 : 1e-5;
          const double out_tol = tout == DType::f16 ? kF16Eps : tout == DType::f32 ? kF32Eps : 0.0;
          std::string shape;
          for (int64_t s : c.shape) shape += std::to_string(s) + ",";
          expect_all_close(
              dout.download(), ref,
              [&](size_t o) { return acc_tol * abs_sum[o] * scale + out_tol * std::fabs(ref[o]) + 1e-300; },
              "reduce_sum [" + shape + "] offset " + std::to_string(c.offset) + " " + name(tx, tout) + " scale " +
                  std::to_string(scale) + (channel_path ? " (channel path where it applies)" : " (CUB)"));
        }
      }
    }
  }
  // The long sum once more on ones, where the answer is exact: every partial sum, in any order, is an
  // integer below 2^24, exact in FP32 (and f16 holds 1 exactly). A kernel that drops the last 3 elements
  // (a tail shorter than one load or block) is 3 off, which the random case's tolerance above (1e-5 *
  // sum|x|, about 10 there) lets through. Offsets 0 and 1, with NaN around the view, as above. (f16
  // output is left out: 1048579 overflows it. A full sum always goes to CUB's DeviceReduce, the channel
  // path applies to none (reduce_plan.h), so one run each: this test runs under racecheck.)
  const int64_t ones_n = 1048579;
  const ReduceIndex ones_ix = ReduceIndex::of({ones_n}, {0});
  for (size_t offset : {size_t{0}, size_t{1}}) {
    for (auto [tx, tout] : std::vector<std::pair<DType, DType>>{
             {DType::f32, DType::f32}, {DType::f16, DType::f32}, {DType::f64, DType::f64}}) {
      std::vector<double> padded(offset, kNaN);
      padded.insert(padded.end(), static_cast<size_t>(ones_n), 1.0);
      padded.insert(padded.end(), 16, kNaN);
      DeviceBuffer dx(padded, tx), dout(1, tout);
      dout.poison();
      kernels::reduce_sum(kCuda, ones_ix, static_cast<const char*>(dx.get()) + offset * dtype_size(tx), tx,
                          dout.get(), tout, 1.0);
      expect_all_equal(dout.download(), {static_cast<double>(ones_n)},
                       "reduce_sum of " + std::to_string(ones_n) + " ones, offset " + std::to_string(offset) + " " +
                           name(tx, tout));
    }
  }
  // The same for the channel path's sums, through both paths: LeNet conv1's bias gradient (100352 ones
  // per channel, 16-byte loads at offset 0, one element per load at offset 1) and three long sums of
  // many slices (262144 ones each). Every partial sum is an integer below 2^24: exact in FP32 in any
  // order, so one element or one slice left out is a wrong answer, where the random cases' bound (about
  // 1 here) lets a few through. f16 inputs (a mixed-precision bias gradient), f32 outputs (f16 cannot
  // hold the sums); few runs, for racecheck's time.
  struct OnesCase {
    std::vector<int64_t> shape;
    std::vector<int> reduced;
    size_t offset;
  };
  for (const OnesCase& c : {OnesCase{{128, 32, 28, 28}, {0, 2, 3}, 0}, OnesCase{{128, 32, 28, 28}, {0, 2, 3}, 1},
                            OnesCase{{4, 3, 1 << 16}, {0, 2}, 0}}) {
    const ReduceIndex ix = ReduceIndex::of(c.shape, c.reduced);
    size_t in_n = 1;
    for (int64_t s : c.shape) in_n *= static_cast<size_t>(s);
    std::vector<double> padded(c.offset, kNaN);
    padded.insert(padded.end(), in_n, 1.0);
    padded.insert(padded.end(), 16, kNaN);
    DeviceBuffer dx(padded, DType::f16);
    for (bool channel_path : {true, false}) {
      const kernels::reduce_plan::ScopedChannelPath path(channel_path);
      DeviceBuffer dout(static_cast<size_t>(ix.out_numel()), DType::f32);
      dout.poison();
      kernels::reduce_sum(kCuda, ix, static_cast<const char*>(dx.get()) + c.offset * dtype_size(DType::f16),
                          DType::f16, dout.get(), DType::f32, 1.0);
      expect_all_equal(dout.download(),
                       std::vector<double>(static_cast<size_t>(ix.out_numel()), static_cast<double>(ix.reduce_numel())),
                       "reduce_sum of ones [" + std::to_string(c.shape[0]) + ", ...] offset " +
                           std::to_string(c.offset) + (channel_path ? " (channel path)" : " (CUB)"));
    }
  }
}

// The channel path adds each sum's slices in a fixed order: the same call gives the same bits every time
// (what CUDA graphs and the bit-identical training runs rely on), here on sums split over many slices.
TEST(CudaReduce, ChannelPathGivesTheSameBitsEveryRun) {
  HL_REQUIRE_CUDA();
  const kernels::reduce_plan::ScopedChannelPath path(true);
  const ReduceIndex ix = ReduceIndex::of({8, 3, 1 << 15}, {0, 2});
  const auto x = test::random_values(size_t{8} * 3 * (1 << 15), test::fresh_seed(), -2, 2, DType::f16);
  DeviceBuffer dx(x, DType::f16);
  std::vector<double> first;
  for (int run = 0; run < 5; ++run) {
    DeviceBuffer dout(3, DType::f32);
    dout.poison();
    kernels::reduce_sum(kCuda, ix, dx.get(), DType::f16, dout.get(), DType::f32, 1.0);
    const std::vector<double> out = dout.download();
    if (run == 0) {
      first = out;
    } else {
      for (size_t o = 0; o < out.size(); ++o)
        EXPECT_EQ(std::memcmp(&out[o], &first[o], sizeof(double)), 0) << "run " << run << " output " << o;
    }
  }
}

TEST(CudaReduce, ArgmaxTakesTheFirstOfTiedMaxima) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{37, 10}, {64, 33}, {3, 1000}, {2, 70000}, {5, 1}};
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    for (auto [rows, cols] : shapes) {
      // Integers 0..3 (floored by drawing as i32): every row has many tied maxima.
      auto x = test::random_values(static_cast<size_t>(rows * cols), seed++, -5, 4, DType::i32);
      for (auto& v : x) v = v * 0.5;  // half-integers, still exact in f16
      if (rows > 1 && cols > 2) {
        // row 1: all equal -> index 0; the last row: a NaN wins over every number (like PyTorch)
        std::fill(x.begin() + cols, x.begin() + 2 * cols, -1.5);
        x[static_cast<size_t>((rows - 1) * cols + cols / 2)] = kNaN;
      }
      DeviceBuffer dx(x, t), dout(static_cast<size_t>(rows), DType::i32);
      dout.poison();
      kernels::argmax_rows(kCuda, rows, cols, dx.get(), t, dout.i32());
      std::vector<double> ref(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        int64_t best = 0;
        for (int64_t c = 1; c < cols; ++c) {
          const double v = x[static_cast<size_t>(r * cols + c)], b = x[static_cast<size_t>(r * cols + best)];
          if (std::isnan(b)) break;
          if (std::isnan(v) || v > b) best = c;
        }
        ref[static_cast<size_t>(r)] = static_cast<double>(best);
      }
      expect_all_equal(dout.download(), ref,
                       "argmax " + name(t) + " " + std::to_string(rows) + "x" + std::to_string(cols));
    }
  }
}

TEST(CudaReduce, CountEqual) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    const auto a = test::random_values(n, seed++, 0, 4, DType::i32);
    const auto b = test::random_values(n, seed++, 0, 4, DType::i32);
    DeviceBuffer da(a, DType::i32), db(b, DType::i32), dc(1, DType::i32);
    dc.poison();
    kernels::count_equal(kCuda, static_cast<int64_t>(n), da.i32(), db.i32(), dc.i32());
    double want = 0;
    for (size_t i = 0; i < n; ++i) want += a[i] == b[i];
    EXPECT_EQ(dc.download()[0], want) << "n = " << n;
  }
}

TEST(CudaReduce, AnyNonfiniteFindsASingleInfOrNaN) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const size_t n = (1 << 20) + 7;
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    auto x = test::random_values(n, seed++, -60000, 60000, t);  // large but finite in every dtype
    const size_t random_at = static_cast<size_t>(seed % n);
    x[random_at / 2] = t == DType::f16 ? 65504.0 : t == DType::f32 ? 3.0e38 : 1.0e300;  // the largest finite ones
    // The bad value at a random place, and at the last and the first element: a kernel whose loop stops
    // one short of n, or starts one past 0, misses a value only there.
    for (size_t at : {random_at, n - 1, size_t{0}}) {
      for (double bad : {0.0, kInf, -kInf, kNaN}) {  // 0.0: no bad value, the flag must read 0
        if (bad == 0.0 && at != random_at) continue;   // the same input at every place: run once
        auto y = x;
        if (bad != 0.0) y[at] = bad;  // (NaN != 0 too)
        DeviceBuffer dx(y, t), flag(1, DType::i32);
        flag.upload({12345});  // neither 0 nor 1
        kernels::any_nonfinite(kCuda, static_cast<int64_t>(n), dx.get(), t, flag.i32());
        EXPECT_EQ(flag.download()[0], bad == 0.0 ? 0.0 : 1.0) << name(t) << " with " << bad << " at " << at;
      }
    }
  }
}

// =====================================================================================================
// NLL (the pick after log_softmax in the unfused cross-entropy path)
// =====================================================================================================

// (log-softmax itself: every rung of the softmax ladder in tests/kernels/test_softmax_cuda.cpp)

TEST(CudaSoftmax, NllForwardAndBackward) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {128, 10}, {9, 1000}}) {
      const size_t n = static_cast<size_t>(rows * cols);
      const auto logp = test::random_values(n, seed++, -10, -0.01, t);
      auto labels = test::random_values(static_cast<size_t>(rows), seed++, 0, static_cast<double>(cols), DType::i32);
      if (rows >= 3) {  // out-of-range labels: NaN loss and a NaN gradient row (kernels/softmax.h)
        labels[1] = -1;
        labels[2] = static_cast<double>(cols);
      }
      // Filled with -1 rather than NaN (as the gradient below with 7): the bad rows must come out NaN, and
      // a NaN poison would pass a kernel that skips them. No correct loss is -1: -logp > 0 here.
      DeviceBuffer dlogp(logp, t), dlabels(labels, DType::i32),
          dloss(std::vector<double>(static_cast<size_t>(rows), -1.0), t);
      kernels::nll_forward(kCuda, rows, cols, dlogp.get(), t, dlabels.i32(), dloss.get());
      std::vector<double> ref_loss(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const double l = labels[static_cast<size_t>(r)];
        ref_loss[static_cast<size_t>(r)] =
            (l < 0 || l >= static_cast<double>(cols)) ? kNaN : -logp[static_cast<size_t>(r * cols + static_cast<int64_t>(l))];
      }
      expect_all_equal(dloss.download(), ref_loss, "nll_forward " + name(t));  // a negation: exact

      const auto gloss = test::random_values(static_cast<size_t>(rows), seed++, -2, 2, t);
      // Filled with 7 rather than NaN: the bad rows must come out NaN, and a NaN poison could not tell
      // a written NaN from an element left alone.
      DeviceBuffer dgloss(gloss, t), dglogp(std::vector<double>(n, 7.0), t);
      kernels::nll_backward(kCuda, rows, cols, dlabels.i32(), dgloss.get(), dglogp.get(), t);
      std::vector<double> ref_grad(n, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const double l = labels[static_cast<size_t>(r)];
        if (l >= 0 && l < static_cast<double>(cols))
          ref_grad[static_cast<size_t>(r * cols + static_cast<int64_t>(l))] = -gloss[static_cast<size_t>(r)];
        else
          std::fill_n(ref_grad.begin() + r * cols, cols, kNaN);
      }
      expect_all_equal(dglogp.download(), ref_grad, "nll_backward " + name(t));  // exact
    }
  }
}

// =====================================================================================================
// optimizer
// =====================================================================================================

// The multi-tensor optimizer passes run the same arithmetic (f32) on the CPU and the GPU: the CPU
// backend is the reference. Slots of awkward sizes, more of them than one launch carries
// (kMaxSlots = 24), f16 working copies with f32 masters and plain f32 parameters.
struct OptimCase {
  std::vector<size_t> sizes;
  std::vector<std::vector<double>> param, master, grad, m, v;
  std::vector<DType> ptype;
};

OptimCase make_optim_case(uint64_t& seed) {
  OptimCase c;
  for (int i = 0; i < 30; ++i) c.sizes.push_back(static_cast<size_t>(i % 5 == 0 ? 10007 : 1 + 37 * i));
  c.sizes.push_back(4096);
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    const size_t n = c.sizes[i];
    c.ptype.push_back(i % 2 ? DType::f16 : DType::f32);
    c.master.push_back(test::random_values(n, seed++, -2, 2, DType::f32));
    std::vector<double> p(n);
    for (size_t j = 0; j < n; ++j)
      p[j] = c.ptype[i] == DType::f16 ? round_to_half(static_cast<float>(c.master[i][j])) : c.master[i][j];
    c.param.push_back(p);
    c.grad.push_back(test::random_values(n, seed++, -1, 1, DType::f32));
    c.m.push_back(test::random_values(n, seed++, -1, 1, DType::f32));
    std::vector<double> v = test::random_values(n, seed++, 0, 1, DType::f32);  // second moments are >= 0
    c.v.push_back(v);
  }
  return c;
}

// Runs `update` on the GPU and on the CPU over the same slots; compares params, masters and moments.
void check_optim_against_cpu(const OptimCase& c, bool adam,
                             const std::function<void(DeviceType, const std::vector<kernels::ParamSlot>&)>& update,
                             const std::string& label) {
  std::vector<std::unique_ptr<DeviceBuffer>> dev;
  std::vector<std::vector<uint8_t>> host;
  auto host_buf = [&](const std::vector<double>& vals, DType t) {
    host.push_back(encode(vals, t));
    return static_cast<void*>(host.back().data());
  };
  host.reserve(c.sizes.size() * 5);
  std::vector<kernels::ParamSlot> gpu, cpu;
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    const bool has_master = c.ptype[i] == DType::f16;
    kernels::ParamSlot g, h;
    g.n = h.n = static_cast<int64_t>(c.sizes[i]);
    g.param_type = h.param_type = c.ptype[i];
    dev.push_back(std::make_unique<DeviceBuffer>(c.param[i], c.ptype[i]));
    g.param = dev.back()->get();
    h.param = host_buf(c.param[i], c.ptype[i]);
    if (has_master) {
      dev.push_back(std::make_unique<DeviceBuffer>(c.master[i], DType::f32));
      g.master = dev.back()->get();
      h.master = host_buf(c.master[i], DType::f32);
    }
    dev.push_back(std::make_unique<DeviceBuffer>(c.grad[i], DType::f32));
    g.grad = dev.back()->get();
    h.grad = host_buf(c.grad[i], DType::f32);
    dev.push_back(std::make_unique<DeviceBuffer>(c.m[i], DType::f32));
    g.buf1 = dev.back()->get();
    h.buf1 = host_buf(c.m[i], DType::f32);
    if (adam) {
      dev.push_back(std::make_unique<DeviceBuffer>(c.v[i], DType::f32));
      g.buf2 = dev.back()->get();
      h.buf2 = host_buf(c.v[i], DType::f32);
    }
    g.first_step = h.first_step = i % 7 == 3;
    gpu.push_back(g);
    cpu.push_back(h);
  }
  update(kCuda, gpu);
  update(DeviceType::cpu, cpu);
  size_t k = 0;
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    const size_t n = c.sizes[i];
    auto host_vals = [&](const void* p, DType t) {
      const uint8_t* b = static_cast<const uint8_t*>(p);
      return decode(std::vector<uint8_t>(b, b + n * dtype_size(t)), t);
    };
    // The same f32 operations in the same order on both sides, each rounded once (optim.cu is built
    // with -fmad=false, so nvcc fuses no multiply-add; division and sqrt are IEEE on both), and the
    // bias corrections computed on the host alike: the same values, exactly. The f16 copy is rounded
    // from the same master, so it is the same too.
    const std::string what = label + " slot " + std::to_string(i);
    expect_all_equal(dev[k++]->download(), host_vals(cpu[i].param, c.ptype[i]), what + " param");
    if (cpu[i].master) expect_all_equal(dev[k++]->download(), host_vals(cpu[i].master, DType::f32), what + " master");
    ++k;  // the gradient is read-only
    expect_all_equal(dev[k++]->download(), host_vals(cpu[i].buf1, DType::f32), what + " buf1");
    if (adam) expect_all_equal(dev[k++]->download(), host_vals(cpu[i].buf2, DType::f32), what + " buf2");
  }
}

TEST(CudaOptim, MultiTensorSgdMatchesTheCpu) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const OptimCase c = make_optim_case(seed);
  for (bool nesterov : {false, true}) {
    kernels::SgdParams p;
    p.lr = 0.05;
    p.momentum = 0.9;
    p.weight_decay = 5e-4;
    p.dampening = nesterov ? 0.0 : 0.1;  // 1 - dampening is computed in double on both sides
    p.nesterov = nesterov;
    check_optim_against_cpu(c, false, [&](DeviceType d, const auto& slots) { kernels::sgd_update(d, slots, p); },
                            nesterov ? "sgd nesterov" : "sgd");
  }
}

TEST(CudaOptim, MultiTensorAdamMatchesTheCpu) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const OptimCase c = make_optim_case(seed);
  for (bool decoupled : {false, true}) {
    kernels::AdamParams p;
    p.lr = 1e-3;
    p.weight_decay = 1e-2;
    p.decoupled = decoupled;
    p.step = 7;
    check_optim_against_cpu(c, true, [&](DeviceType d, const auto& slots) { kernels::adam_update(d, slots, p); },
                            decoupled ? "adamw" : "adam");
  }
}

// kernels::set_multi_tensor(false) (bench/train --no-multi-tensor) launches each pass once per tensor,
// to time what batching saves: the arithmetic is the same, so the bits must be too, for the updates
// and for the unscale pass and its flag.
TEST(CudaOptim, OneLaunchPerTensorGivesTheSameBits) {
  HL_REQUIRE_CUDA();
  struct Restore {
    ~Restore() { kernels::set_multi_tensor(true); }
  } restore;
  kernels::set_multi_tensor(false);
  ASSERT_FALSE(kernels::multi_tensor());
  uint64_t seed = test::fresh_seed();
  const OptimCase c = make_optim_case(seed);
  kernels::SgdParams sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  check_optim_against_cpu(c, false, [&](DeviceType d, const auto& slots) { kernels::sgd_update(d, slots, sgd); },
                          "sgd, one launch per tensor");
  kernels::AdamParams adam;
  adam.step = 3;
  check_optim_against_cpu(c, true, [&](DeviceType d, const auto& slots) { kernels::adam_update(d, slots, adam); },
                          "adam, one launch per tensor");
  // Unscale: every slot's values, and one flag raised by a single inf in the last slot.
  std::vector<std::unique_ptr<DeviceBuffer>> in, out;
  std::vector<kernels::GradSlot> slots;
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    std::vector<double> g = c.grad[i];
    if (i + 1 == c.sizes.size()) g[g.size() / 2] = kInf;
    in.push_back(std::make_unique<DeviceBuffer>(g, DType::f32));
    out.push_back(std::make_unique<DeviceBuffer>(c.sizes[i], DType::f32));
    out.back()->poison();
    slots.push_back({in.back()->get(), DType::f32, out.back()->get(), DType::f32, static_cast<int64_t>(c.sizes[i])});
  }
  DeviceBuffer flag(std::vector<double>{0.0}, DType::i32);
  kernels::unscale_grads(kCuda, slots, 0.25f, flag.i32());
  EXPECT_EQ(flag.download()[0], 1.0) << "the inf in the last tensor's own launch";
  for (size_t i = 0; i + 1 < c.sizes.size(); ++i) {
    std::vector<double> ref(c.grad[i]);
    for (double& x : ref) x *= 0.25;  // exact: a power of two
    expect_all_equal(out[i]->download(), ref, "unscaled slot " + std::to_string(i) + ", one launch per tensor");
  }
}

TEST(CudaOptim, F16WeightsSwallowSmallUpdatesMastersKeepThem) {
  // Paper §3.1: below 1 the f16 spacing is 2^-11, so 1 - 2^-13 rounds back to 1 in f16. With an
  // FP32 master the update is kept, and 16 of them move the f16 copy by 2^-9 (exactly representable).
  HL_REQUIRE_CUDA();
  const size_t n = 4099;
  kernels::SgdParams p;
  p.lr = 1.0;
  const double update = std::ldexp(1.0, -13);
  DeviceBuffer plain(std::vector<double>(n, 1.0), DType::f16), copy(std::vector<double>(n, 1.0), DType::f16);
  DeviceBuffer master(std::vector<double>(n, 1.0), DType::f32), grad(std::vector<double>(n, update), DType::f32);
  kernels::ParamSlot a, b;
  a.param = plain.get();
  a.param_type = DType::f16;
  a.grad = grad.get();
  a.n = static_cast<int64_t>(n);
  b = a;
  b.param = copy.get();
  b.master = master.get();
  for (int i = 0; i < 16; ++i) kernels::sgd_update(kCuda, {a, b}, p);
  expect_all_equal(plain.download(), std::vector<double>(n, 1.0), "f16 weights without a master");
  expect_all_equal(master.download(), std::vector<double>(n, 1.0 - 16 * update), "f32 master");
  expect_all_equal(copy.download(), std::vector<double>(n, 1.0 - 16 * update), "f16 copy of the master");
}

TEST(CudaOptim, UnscaleRaisesOneFlagAndSumOfSquares) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const std::vector<size_t> sizes = {1, 4096, 4097, 10007, 3};
  std::vector<std::unique_ptr<DeviceBuffer>> in, out;
  std::vector<kernels::GradSlot> slots;
  std::vector<std::vector<double>> vals;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const DType t = i % 2 ? DType::f16 : DType::f32;
    vals.push_back(test::random_values(sizes[i], seed++, -4, 4, t));
    in.push_back(std::make_unique<DeviceBuffer>(vals.back(), t));
    out.push_back(std::make_unique<DeviceBuffer>(sizes[i], DType::f32));
    out.back()->poison();
    kernels::GradSlot s;
    s.grad = in.back()->get();
    s.grad_type = t;
    s.out = out.back()->get();
    s.n = static_cast<int64_t>(sizes[i]);
    slots.push_back(s);
  }
  DeviceBuffer flag(std::vector<double>{0.0}, DType::i32);
  kernels::unscale_grads(kCuda, slots, 1.0f / 1024.0f, flag.i32());
  EXPECT_EQ(flag.download()[0], 0.0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<double> ref(vals[i]);
    for (double& x : ref) x /= 1024.0;  // exact: a power of two, no underflow at these magnitudes
    expect_all_equal(out[i]->download(), ref, "unscaled slot " + std::to_string(i));
  }
  // Sum of squares of the unscaled gradients, against float64: squared and summed in double, as on
  // the CPU, then rounded once to float: at most 2^-24 relative, plus the double sums' ~1e-16.
  std::vector<kernels::ConstSpan> spans;
  double ref_sq = 0.0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    spans.push_back({out[i]->get(), DType::f32, static_cast<int64_t>(sizes[i])});
    for (double x : vals[i]) ref_sq += (x / 1024.0) * (x / 1024.0);
  }
  DeviceBuffer sq(1, DType::f32);
  sq.poison();
  kernels::sum_of_squares(kCuda, spans, static_cast<float*>(sq.get()));
  EXPECT_NEAR(sq.download()[0], ref_sq, 2 * kF32Eps * ref_sq);
  // One inf in the middle of one slot: the single flag goes up; NaN and -inf likewise.
  for (double bad : {kInf, -kInf, kNaN}) {
    vals[3][5000] = bad;
    in[3]->upload(vals[3]);
    DeviceBuffer f(std::vector<double>{0.0}, DType::i32);
    kernels::unscale_grads(kCuda, slots, 1.0f, f.i32());
    EXPECT_EQ(f.download()[0], 1.0) << bad;
  }
}

// The device-side skip of the no-sync step: with *skip set the update kernels write nothing and
// optim_finish neither counts nor marks; with it clear, the flag-driven first step and the
// device-counted Adam t match the host-given ones.
TEST(CudaOptim, DeviceSkipFlagFirstStepFlagsAndStepCount) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const std::vector<size_t> sizes = {1, 4097, 10007};
  struct Slot {
    std::unique_ptr<DeviceBuffer> param, grad, buf1, buf2;
  };
  auto make = [&](uint64_t s0) {
    std::vector<Slot> v;
    uint64_t s = s0;
    for (size_t n : sizes) {
      Slot sl;
      sl.param = std::make_unique<DeviceBuffer>(test::random_values(n, s++, -1, 1, DType::f32), DType::f32);
      sl.grad = std::make_unique<DeviceBuffer>(test::random_values(n, s++, -1, 1, DType::f32), DType::f32);
      sl.buf1 = std::make_unique<DeviceBuffer>(test::random_values(n, s++, -1, 1, DType::f32), DType::f32);
      sl.buf2 = std::make_unique<DeviceBuffer>(test::random_values(n, s++, 0, 1, DType::f32), DType::f32);
      v.push_back(std::move(sl));
    }
    return v;
  };
  auto slots_of = [&](const std::vector<Slot>& v, const int32_t* flags) {
    std::vector<kernels::ParamSlot> out;
    for (size_t i = 0; i < v.size(); ++i) {
      kernels::ParamSlot p;
      p.param = v[i].param->get();
      p.grad = v[i].grad->get();
      p.buf1 = v[i].buf1->get();
      p.buf2 = v[i].buf2->get();
      p.n = static_cast<int64_t>(sizes[i]);
      p.first_step = true;  // used only where flags is null
      p.initialized = flags != nullptr ? flags + i : nullptr;
      out.push_back(p);
    }
    return out;
  };
  auto all = [&](const std::vector<Slot>& v) {
    std::vector<std::vector<double>> out;
    for (const Slot& sl : v)
      for (const auto* b : {sl.param.get(), sl.buf1.get(), sl.buf2.get()}) out.push_back(b->download());
    return out;
  };
  const uint64_t s0 = seed;
  std::vector<Slot> a = make(s0), ref = make(s0);
  DeviceBuffer flags(std::vector<double>{0, 0, 0}, DType::i32), skip(std::vector<double>{1}, DType::i32);
  int64_t* count = static_cast<int64_t*>(runtime::cuda_malloc(sizeof(int64_t)));
  const int64_t five = 5;
  runtime::cuda_memcpy_async(count, &five, sizeof five, CopyKind::host_to_device);
  runtime::cuda_synchronize();
  auto read_count = [&] {
    int64_t c = -1;
    runtime::cuda_memcpy_async(&c, count, sizeof c, CopyKind::device_to_host);
    runtime::cuda_synchronize();
    return c;
  };
  std::vector<int32_t*> marks = {flags.i32(), flags.i32() + 1, flags.i32() + 2};
  kernels::SgdParams sp;
  sp.lr = 0.1;
  sp.momentum = 0.9;
  sp.dampening = 0.5;  // a first step (buf = g) differs from buf = 0.9 buf + 0.5 g
  kernels::AdamParams ap;
  ap.lr = 1e-2;
  ap.weight_decay = 0.01;

  // Skipped: nothing written, nothing counted.
  const auto before = all(a);
  sp.skip = skip.i32();
  ap.skip = skip.i32();
  ap.applied_steps = count;
  kernels::sgd_update(kCuda, slots_of(a, flags.i32()), sp);
  kernels::adam_update(kCuda, slots_of(a, nullptr), ap);
  kernels::optim_finish(kCuda, skip.i32(), count, marks);
  EXPECT_EQ(all(a), before);
  EXPECT_EQ(flags.download(), std::vector<double>({0, 0, 0}));
  EXPECT_EQ(read_count(), 5);

  // Applied: the flag-driven SGD first step equals first_step = true, bit for bit (same kernel).
  skip.upload({0});
  kernels::sgd_update(kCuda, slots_of(a, flags.i32()), sp);
  kernels::SgdParams sp_ref = sp;
  sp_ref.skip = nullptr;
  kernels::sgd_update(kCuda, slots_of(ref, nullptr), sp_ref);
  kernels::optim_finish(kCuda, skip.i32(), count, marks);
  EXPECT_EQ(all(a), all(ref));
  EXPECT_EQ(flags.download(), std::vector<double>({1, 1, 1}));
  EXPECT_EQ(read_count(), 6);

  // Adam with t = *count + 1 = 7 from the device against t = 7 from the host: the bias corrections
  // are computed with the device's pow here and the host's there, in double, then rounded to float:
  // at most an ulp apart, so the updated weights agree to a few f32 ulps.
  kernels::adam_update(kCuda, slots_of(a, nullptr), ap);
  kernels::AdamParams ap_ref = ap;
  ap_ref.skip = nullptr;
  ap_ref.applied_steps = nullptr;
  ap_ref.step = 7;
  kernels::adam_update(kCuda, slots_of(ref, nullptr), ap_ref);
  const auto got = all(a), want = all(ref);
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t i = 0; i < got[k].size(); ++i)
      ASSERT_NEAR(got[k][i], want[k][i], 1e-6 * (1.0 + std::fabs(want[k][i]))) << "buffer " << k << "[" << i << "]";
  runtime::cuda_free(count);
}

// Clipping on the device against the CPU path, from the same sum of squares: the norm and every
// scaled element bit-identical (the same double arithmetic, one float rounding of the factor).
TEST(CudaOptim, ClipByNormMatchesTheCpu) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const std::vector<size_t> sizes = {3, 4096, 9000};
  for (double sum_sq : {400.0, 0.25, kInf}) {
    std::vector<std::vector<double>> vals;
    std::vector<std::unique_ptr<DeviceBuffer>> dev;
    std::vector<std::vector<float>> host;
    std::vector<kernels::Span> dspans, hspans;
    for (size_t n : sizes) {
      vals.push_back(test::random_values(n, seed++, -3, 3, DType::f32));
      dev.push_back(std::make_unique<DeviceBuffer>(vals.back(), DType::f32));
      host.emplace_back(vals.back().begin(), vals.back().end());
      dspans.push_back({dev.back()->get(), DType::f32, static_cast<int64_t>(n)});
      hspans.push_back({host.back().data(), DType::f32, static_cast<int64_t>(n)});
    }
    DeviceBuffer sq(std::vector<double>{sum_sq}, DType::f32), norm(1, DType::f64);
    norm.poison();
    kernels::clip_by_norm(kCuda, dspans, static_cast<const float*>(sq.get()), 1.0, static_cast<double*>(norm.get()));
    const float hsq = static_cast<float>(sum_sq);
    double hnorm = 0.0;
    kernels::clip_by_norm(DeviceType::cpu, hspans, &hsq, 1.0, &hnorm);
    EXPECT_EQ(norm.download()[0], hnorm) << sum_sq;
    for (size_t k = 0; k < sizes.size(); ++k)
      expect_all_equal(dev[k]->download(), std::vector<double>(host[k].begin(), host[k].end()),
                       "clipped slot " + std::to_string(k));
  }
}

}  // namespace
}  // namespace hl
