// Division by a number that is fixed for a whole kernel launch, done as a multiply and a shift.
//
// Why: a GPU has no integer divider. `n / d` with d known only at run time compiles to a subroutine of
// about 20 instructions for 32-bit operands (a float reciprocal, a multiply, two correction steps)
// and to a call of several times that for 64-bit ones. The implicit-GEMM convolution (rung 3,
// kernels/cuda/conv/implicit_gemm_wmma.cu) decomposes indices such as kk = (c, r, s) by the layer's
// R*S and S in its inner loop, and those divisions, not the Tensor Cores, set its pace (its header).
// But d is the same for every thread of a launch, so the expensive part can be done once, on the
// host: for a divisor d >= 1 there is a "magic" multiplier m such that, for every n that fits in N
// bits,
//
//     n / d  ==  (mulhi(m, n) + n) >> l          l = ceil(log2 d),  m = floor(2^N (2^l - d) / d) + 1
//
// where mulhi is the high half of the 2N-bit product (one IMAD.HI on the GPU for N = 32, a few for
// N = 64). This is Theorem 4.2 of Granlund and Montgomery, "Division by invariant integers using
// multiplication" (PLDI 1994), the method compilers use when d is a constant. The sum mulhi + n can
// need N + 1 bits; quotient() avoids that, as the paper does, by halving the difference first:
// t = mulhi(m, n), q = (t + ((n - t) >> 1)) >> (l - 1) for l >= 1 (for d = 1, m = 1 and l = 0: q = n).
//
// Exact for every dividend, so an index decomposed this way is the same index: a kernel that switches
// to it computes the same bits. tests/kernels/test_divisor.cpp checks both widths against `/` on the
// CPU (which runs exactly this code) over every divisor to 4096, the powers of two and their
// neighbours, the largest divisors, and the dividends at and around each multiple of d.
#pragma once
#include <cstdint>

#include "kernels/error.h"
#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels {

// The 128-bit product the 64-bit magic number needs on the host (GCC and Clang; __extension__ keeps
// -Wpedantic quiet about a type ISO C++ does not have).
__extension__ typedef unsigned __int128 DivisorWide;

class Divisor {
 public:
  Divisor() = default;  // divides by 1 (trivial, so that a struct holding one can be a kernel argument)

  // d in [1, 2^32 - 1]; the magic numbers are computed here, on the host.
  explicit Divisor(int64_t d) {
    HL_CHECK(d >= 1 && d <= int64_t{0xffffffff}, "Divisor: the divisor must be in [1, 2^32 - 1], got ", d);
    d_ = static_cast<uint32_t>(d);
    while ((uint64_t{1} << l_) < d_) ++l_;  // l = ceil(log2 d), 0 for d = 1
    const uint64_t excess = (uint64_t{1} << l_) - d_;  // 2^l - d, in [0, d)
    // 2^32 (2^l - d) / d < 2^32 and 2^64 (2^l - d) / d < 2^64: both fit their widths.
    m32_ = static_cast<uint32_t>((excess << 32) / d_ + 1);
    m64_ = static_cast<uint64_t>(((static_cast<DivisorWide>(excess) << 64) / d_) + 1);
  }

  HL_HOST_DEVICE uint32_t value() const { return d_; }

  // n / d for a 32-bit dividend.
  HL_HOST_DEVICE uint32_t quotient(uint32_t n) const {
    const uint32_t t = mulhi(m32_, n);
    return l_ == 0 ? n : (t + ((n - t) >> 1)) >> (l_ - 1);
  }
  // n / d for a 64-bit dividend.
  HL_HOST_DEVICE uint64_t quotient(uint64_t n) const {
    const uint64_t t = mulhi(m64_, n);
    return l_ == 0 ? n : (t + ((n - t) >> 1)) >> (l_ - 1);
  }

 private:
  HL_HOST_DEVICE static uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
  }
  HL_HOST_DEVICE static uint64_t mulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    return static_cast<uint64_t>((static_cast<DivisorWide>(a) * b) >> 64);
#endif
  }

  uint32_t d_ = 1;
  uint32_t l_ = 0;
  uint32_t m32_ = 1;
  uint64_t m64_ = 1;
};

// n / d and n % d for non-negative int dividends (what index decompositions hold).
HL_HOST_DEVICE int divide(int n, const Divisor& d) { return static_cast<int>(d.quotient(static_cast<uint32_t>(n))); }
HL_HOST_DEVICE int64_t divide(int64_t n, const Divisor& d) {
  return static_cast<int64_t>(d.quotient(static_cast<uint64_t>(n)));
}

}  // namespace hl::kernels
