// Runs of f16 <-> f32 conversions for the CPU backend's hot loops (GEMM packing, convolution
// epilogues): same bits as kernels/half.h, value for value.
//
// On x86 CPUs with F16C (every one since 2012-13) the conversion is one instruction per 8 values
// (vcvtph2ps / vcvtps2ph), against about fifteen vector instructions per 4 values for the branch-free
// software version in cpu_common.h (SSE2 has no conversion of its own). The hardware rounds to nearest
// even with gradual underflow, exactly like float_to_half_bits, and quiets NaNs the same way when it
// narrows. It differs in one place: widening a *signaling* NaN, it sets the quiet bit, which the
// software definition does not. A block of 8 that holds one is widened in software instead, so
// the result is the definition's, bit for bit (tests/kernels/test_half.cpp checks all inputs).
//
// Elsewhere (ARM, or an x86 CPU without F16C) the branch-free functions run, which the compiler
// vectorizes.
#include <cstdint>

#include "kernels/cpu/cpu_common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HL_HAVE_F16C_PATH 1
#endif

namespace hl::kernels::cpu {

namespace {

#if HL_HAVE_F16C_PATH
// F16C is read from CPUID leaf 1 directly: clang's __builtin_cpu_supports does not know it. AVX is
// asked of the builtin, which also checks that the OS saves the 256-bit registers.
bool cpu_has_f16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return yes;
}

// Widens whole blocks of 8 and returns how many values it did (the caller does the rest).
// (__m128i is declared may_alias, so it may read and write hl::half arrays.)
__attribute__((target("avx,f16c"))) int64_t widen_f16c(const half* src, float* dst, int64_t n) {
  const __m128i magnitude = _mm_set1_epi16(0x7FFF), inf = _mm_set1_epi16(0x7C00), quiet_nan = _mm_set1_epi16(0x7E00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    // Signaling NaN: magnitude in (0x7C00, 0x7E00), exponent all ones, quiet bit clear. The
    // magnitudes are below 0x8000, so the signed 16-bit comparisons are exact.
    const __m128i mag = _mm_and_si128(h, magnitude);
    const __m128i signaling = _mm_and_si128(_mm_cmpgt_epi16(mag, inf), _mm_cmplt_epi16(mag, quiet_nan));
    if (!_mm_testz_si128(signaling, signaling)) {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = f16_to_f32(src[j].bits);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) int64_t narrow_f16c(const float* src, half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  return i;
}
#endif

}  // namespace

void widen_f16_run(const half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if HL_HAVE_F16C_PATH
  if (cpu_has_f16c()) i = widen_f16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i].bits);
}

void narrow_f16_run(const float* src, half* dst, int64_t n) {
  int64_t i = 0;
#if HL_HAVE_F16C_PATH
  if (cpu_has_f16c()) i = narrow_f16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = half::from_bits(f32_to_f16(src[i]));
}

}  // namespace hl::kernels::cpu
