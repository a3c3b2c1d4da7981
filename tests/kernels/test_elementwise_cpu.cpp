// The CPU elementwise kernels' precision contract (kernels/elementwise.h): the math runs in f32, or
// in f64 when any operand or the output is f64, and the result is rounded once on store. The CUDA
// kernels are held to the same contract in tests/kernels/test_cuda_kernels.cpp, against a float64
// reference with tolerances. The CPU is the reference, so here the results are exact: each case is a
// value whose answer in f32 math differs from its answer in f64 math.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "tests/kernels/typed_buffer.h"

namespace hl::kernels {
namespace {

// out = a op b for one element of each (ndim 1, shape [1]). The output is poisoned first.
double binary1(BinaryOp op, DType ta, double a, DType tb, double b, DType tout) {
  test::TypedBuffer xa(ta, 1), xb(tb, 1), out(tout, 1);
  xa.set(0, a);
  xb.set(0, b);
  out.fill_nan();
  BroadcastIndex ix;
  ix.ndim = 1;
  ix.shape[0] = 1;
  ix.stride_a[0] = ix.stride_b[0] = 1;
  binary(DeviceType::cpu, op, ix, xa.data(), ta, xb.data(), tb, out.data(), tout);
  return out.get(0);
}

double unary1(UnaryOp op, DType tx, double x, DType tout) {
  test::TypedBuffer in(tx, 1), out(tout, 1);
  in.set(0, x);
  out.fill_nan();
  unary(DeviceType::cpu, op, 1, in.data(), tx, out.data(), tout);
  return out.get(0);
}

TEST(ElementwiseCpu, BinaryMathIsF64WhenAnySideIsF64) {
  const DType f16 = DType::f16, f32 = DType::f32, f64 = DType::f64;
  const double u = 1.0 + 0x1p-23;  // an f32 whose square needs more than 24 bits
  // f32 x f32 into f64: the exact product, 1 + 2^-22 + 2^-46 (f32 math would drop the 2^-46).
  EXPECT_EQ(binary1(BinaryOp::mul, f32, u, f32, u, f64), 1.0 + 0x1p-22 + 0x1p-46);
  // An f64 operand into an f32 output: 1 + (2^-24 + 2^-50) is just above the tie between 1 and
  // 1 + 2^-23, so one rounding gives 1 + 2^-23. Rounding the operand to f32 first makes it the tie,
  // which rounds to even: 1. Both operand orders, since either side may be the f64 one.
  const double nudge = 0x1p-24 + 0x1p-50;  // its sum with 1 is exact in f64
  EXPECT_EQ(binary1(BinaryOp::add, f32, 1.0, f64, nudge, f32), 1.0 + 0x1p-23);
  EXPECT_EQ(binary1(BinaryOp::add, f64, nudge, f32, 1.0, f32), 1.0 + 0x1p-23);
  EXPECT_EQ(binary1(BinaryOp::add, f16, 1.0, f64, nudge, f32), 1.0 + 0x1p-23);
  EXPECT_EQ(binary1(BinaryOp::sub, f64, 1.0, f64, -nudge, f64), 1.0 + nudge);
}

TEST(ElementwiseCpu, BinaryMathIsF32OtherwiseAndF16IsRoundedFromIt) {
  const DType f16 = DType::f16, f32 = DType::f32;
  // 1 + (2^-11 + 2^-34): f32 math rounds the sum to 1 + 2^-11 (2^-34 is below f32's last bit of 1),
  // exactly the f16 tie between 1 and 1 + 2^-10, which rounds to even: 1. That is what the GPU
  // computes (FP32 math, FP16 on store), so the CPU must round twice too, and not give 1 + 2^-10.
  EXPECT_EQ(binary1(BinaryOp::add, f32, 1.0, f32, 0x1p-11 + 0x1p-34, f16), 1.0);
  EXPECT_EQ(binary1(BinaryOp::add, f32, 1.0, f32, 0x1p-11 + 0x1p-34, f32), 1.0 + 0x1p-11);
  // f16 operands are widened exactly; 2049 is not an f16 (above 2048 the step is 2), f32 holds it.
  EXPECT_EQ(binary1(BinaryOp::add, f16, 2048.0, f16, 1.0, f32), 2049.0);
  EXPECT_EQ(binary1(BinaryOp::add, f16, 2048.0, f16, 1.0, f16), 2048.0);  // the tie, to even
  EXPECT_EQ(binary1(BinaryOp::div, f32, 1.0, f32, 3.0, f32), static_cast<double>(1.0f / 3.0f));
}

TEST(ElementwiseCpu, UnaryMathIsF64WhenEitherSideIsF64) {
  const DType f32 = DType::f32, f64 = DType::f64;
  // An f32 input into an f64 output: exp in double (f32 math would keep only 24 bits of e).
  EXPECT_EQ(unary1(UnaryOp::exp, f32, 1.0, f64), std::exp(1.0));
  EXPECT_EQ(unary1(UnaryOp::neg, f32, 0.1, f64), -static_cast<double>(0.1f));
  // An f64 input into an f32 output: log(1 + 2^-30) ~ 2^-30. Narrowing the input to f32 first
  // would make it 1, and the log 0.
  const float log_want = static_cast<float>(std::log1p(0x1p-30));
  EXPECT_EQ(unary1(UnaryOp::log, f64, 1.0 + 0x1p-30, f32), static_cast<double>(log_want));
  EXPECT_EQ(unary1(UnaryOp::exp, f64, 1.0, f64), std::exp(1.0));
  EXPECT_EQ(unary1(UnaryOp::exp, f32, 1.0, f32), static_cast<double>(std::exp(1.0f)));
}

// relu keeps x where x > 0 and NaN, else gives +0: relu(-0) is +0, as on the GPU (kernels/cuda/
// elementwise.cu) and in the GEMM's fused epilogue, so that CPU and GPU results compare bit for bit.
TEST(ElementwiseCpu, ReluOfNegativeZeroIsPositiveZero) {
  for (DType t : {DType::f16, DType::f32, DType::f64}) {
    const double z = unary1(UnaryOp::relu, t, -0.0, t);
    EXPECT_EQ(z, 0.0) << dtype_name(t);
    EXPECT_FALSE(std::signbit(z)) << dtype_name(t);
    EXPECT_FALSE(std::signbit(unary1(UnaryOp::relu, t, -1.0, t))) << dtype_name(t);
    EXPECT_TRUE(std::isnan(unary1(UnaryOp::relu, t, std::nan(""), t))) << dtype_name(t);
    EXPECT_EQ(unary1(UnaryOp::relu, t, 0.5, t), 0.5) << dtype_name(t);
  }
}

TEST(ElementwiseCpu, FillWritesNElementsConvertedOnce) {
  for (DType t : {DType::f32, DType::f16, DType::f64, DType::i32}) {
    SCOPED_TRACE(dtype_name(t));
    for (const double value : {0.1, -7.9, 65519.0, 1.0 + 0x1p-11 + 0x1p-40}) {
      const int64_t n = 37;
      test::TypedBuffer out(t, static_cast<size_t>(n) + 1);  // one guard element past the end
      if (t == DType::i32) {
        for (size_t i = 0; i <= static_cast<size_t>(n); ++i) out.set(i, -123456);
      } else {
        out.fill_nan();
      }
      fill(DeviceType::cpu, n, out.data(), t, value);
      // One rounding from the double: 65519 -> 65504 in f16 (below the overflow threshold 65520),
      // 1 + 2^-11 + 2^-40 -> 1 + 2^-10 in f16 (through f32 it would be the tie, and 1); i32 truncates.
      double want = value;
      if (t == DType::f32) want = static_cast<float>(value);
      if (t == DType::f16) want = half_bits_to_float(double_to_half_bits(value));
      if (t == DType::i32) want = static_cast<int32_t>(value);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out.get(static_cast<size_t>(i)), want) << "value " << value << " at " << i;
      }
      const double guard = out.get(static_cast<size_t>(n));
      if (t == DType::i32) {
        EXPECT_EQ(guard, -123456) << "fill wrote past its n elements";
      } else {
        EXPECT_TRUE(std::isnan(guard)) << "fill wrote past its n elements: " << guard;
      }
    }
  }
  // The f16 case above, spelled out.
  EXPECT_EQ(half_bits_to_float(double_to_half_bits(1.0 + 0x1p-11 + 0x1p-40)), 1.0f + 0x1p-10f);
}

}  // namespace
}  // namespace hl::kernels
