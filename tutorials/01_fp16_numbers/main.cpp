// Tutorial 01: FP16, FP32 and FP64 side by side. Every number printed here is computed while the
// program runs, with hl::half (kernels/half.h), float and double; no GPU is needed.
// The chapter is tutorials/01_fp16_numbers/README.md.
#include <CLI/CLI.hpp>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "framework/ops.h"
#include "framework/tensor.h"
#include "kernels/half.h"

using namespace hl;

namespace {

// ---- small helpers ---------------------------------------------------------------------------------

double half_value(uint16_t bits) { return static_cast<double>(half_bits_to_float(bits)); }

// What storing x to FP16 gives back (one rounding, to nearest even).
double to_fp16(double x) { return half_value(double_to_half_bits(x)); }

// The shortest decimal that reads back as the same value: what a well-behaved print shows.
std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
std::string shortest(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
// For FP16 there is no std::to_chars: try 1, 2, ... significant digits until the decimal rounds
// back to the same half. This is why FP16 "prints as" about 4 digits. Whole numbers keep all their
// integer digits (65504, not 6.55e+04), as a reader would write them.
std::string shortest_half(uint16_t bits) {
  const double v = half_value(bits);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const int integer_digits = std::fabs(v) >= 1.0 ? static_cast<int>(std::floor(std::log10(std::fabs(v)))) + 1 : 1;
  for (int digits = integer_digits; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (double_to_half_bits(std::strtod(buf, nullptr)) == bits) break;
  }
  return buf;
}

// Up to 20 significant digits (exact for every half; enough to see where float and double stop).
std::string digits20(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.20g", v);
  return buf;
}

// "2^-24" when v is a power of two far from 1, else "".
std::string as_power_of_two(double v) {
  if (!(v > 0) || std::isinf(v)) return "";
  int e = 0;
  const double m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  return m == 0.5 && std::abs(e - 1) >= 10 ? "2^" + std::to_string(e - 1) : "";
}

std::string with_power(const std::string& text, double v) {
  const std::string p = as_power_of_two(v);
  return p.empty() ? text : text + " (" + p + ")";
}

std::string binary(uint64_t bits, int width) {
  std::string s;
  for (int i = width - 1; i >= 0; --i) s += ((bits >> i) & 1u) ? '1' : '0';
  return s;
}

std::string hex16(uint16_t bits) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%04X", bits);
  return buf;
}

void heading(const std::string& title) { std::printf("\n== %s ==\n", title.c_str()); }

// The three layouts. These are the definitions of the formats; everything derived from them below
// (range, epsilon, rounding) is computed, not typed in.
struct Layout {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int total_bits() const { return 1 + exponent_bits + mantissa_bits; }
};
constexpr Layout kFp16{"fp16", 5, 10};
constexpr Layout kFp32{"fp32", 8, std::numeric_limits<float>::digits - 1};
constexpr Layout kFp64{"fp64", 11, std::numeric_limits<double>::digits - 1};
static_assert(kFp32.exponent_bits + kFp32.mantissa_bits + 1 == 32 && kFp64.exponent_bits + kFp64.mantissa_bits + 1 == 64);

// "0 01011 1111100111" and the formula that reads it.
std::string decode(const Layout& l, uint64_t bits) {
  const uint64_t sign = bits >> (l.exponent_bits + l.mantissa_bits);
  const uint64_t exp = (bits >> l.mantissa_bits) & ((uint64_t{1} << l.exponent_bits) - 1);
  const uint64_t mant = bits & ((uint64_t{1} << l.mantissa_bits) - 1);
  const uint64_t exp_all_ones = (uint64_t{1} << l.exponent_bits) - 1;
  std::string s = binary(sign, 1) + " " + binary(exp, l.exponent_bits) + " " + binary(mant, l.mantissa_bits) + "  = ";
  const std::string sgn = sign ? "-" : "+";
  if (exp == exp_all_ones) return s + (mant ? "NaN (exponent all ones, mantissa != 0)" : sgn + "inf (exponent all ones)");
  if (exp == 0 && mant == 0) return s + sgn + "0";
  if (exp == 0) {
    return s + sgn + "2^" + std::to_string(1 - l.bias()) + " x 0." + binary(mant, l.mantissa_bits) + "b  (subnormal)";
  }
  return s + sgn + "2^(" + std::to_string(exp) + "-" + std::to_string(l.bias()) + ") x 1." +
         binary(mant, l.mantissa_bits) + "b";
}

// ---- the sections ------------------------------------------------------------------------------------

void formats() {
  heading("1. Three formats: 1 sign bit, then exponent bits, then mantissa bits");
  std::printf("%-6s %5s %9s %9s %6s\n", "format", "bits", "exponent", "mantissa", "bias");
  for (const Layout& l : {kFp16, kFp32, kFp64})
    std::printf("%-6s %5d %9d %9d %6d\n", l.name, l.total_bits(), l.exponent_bits, l.mantissa_bits, l.bias());
  std::printf("value = (-1)^sign x 2^(exponent - bias) x 1.mantissa   (exponent 0: subnormal, 2^(1-bias) x 0.mantissa)\n");
}

void range() {
  heading("2. Range");
  const double h_max = half_value(0x7BFF), h_min_normal = half_value(0x0400), h_min_sub = half_value(0x0001);
  using F = std::numeric_limits<float>;
  using D = std::numeric_limits<double>;
  std::printf("%-20s %-32s %-26s %s\n", "", "fp16", "fp32", "fp64");
  std::printf("%-20s %-32s %-26s %s\n", "largest finite", shortest(h_max).c_str(), shortest(F::max()).c_str(),
              shortest(D::max()).c_str());
  std::printf("%-20s %-32s %-26s %s\n", "smallest normal", with_power(shortest(h_min_normal), h_min_normal).c_str(),
              with_power(shortest(F::min()), F::min()).c_str(), with_power(shortest(D::min()), D::min()).c_str());
  std::printf("%-20s %-32s %-26s %s\n", "smallest subnormal", with_power(shortest(h_min_sub), h_min_sub).c_str(),
              with_power(shortest(F::denorm_min()), F::denorm_min()).c_str(),
              with_power(shortest(D::denorm_min()), D::denorm_min()).c_str());
  int e = 0;
  std::frexp(h_max, &e);
  std::printf("fp16 largest finite = (2 - 2^-%d) x 2^%d = %s (bits %s)\n", kFp16.mantissa_bits, e - 1,
              shortest(h_max).c_str(), hex16(0x7BFF).c_str());

  // Every one of the 65,536 FP16 bit patterns, classified, and each checked to survive
  // half -> float -> half unchanged (NaNs compared as NaNs).
  int normal = 0, subnormal = 0, zero = 0, infinite = 0, nan = 0, round_trip_failures = 0;
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = half_bits_to_float(bits);
    if (std::isnan(f)) ++nan;
    else if (std::isinf(f)) ++infinite;
    else if (f == 0.0f) ++zero;
    else if (std::fabs(f) < h_min_normal) ++subnormal;
    else ++normal;
    const uint16_t back = float_to_half_bits(f);
    if (back != bits && !(std::isnan(f) && std::isnan(half_bits_to_float(back)))) ++round_trip_failures;
  }
  std::printf("all 65536 fp16 bit patterns: %d normal, %d subnormal, %d zeros, %d infinities, %d NaN; "
              "%d fail the round trip through float\n",
              normal, subnormal, zero, infinite, nan, round_trip_failures);
}

void precision() {
  heading("3. Precision");
  const double h_eps = half_value(static_cast<uint16_t>(float_to_half_bits(1.0f) + 1)) - 1.0;
  const float f_eps = std::nextafter(1.0f, 2.0f) - 1.0f;
  const double d_eps = std::nextafter(1.0, 2.0) - 1.0;
  auto bits_of = [](double eps) { return 1 - std::ilogb(eps); };  // 1 implicit + mantissa bits
  std::printf("%-30s %-22s %-24s %s\n", "", "fp16", "fp32", "fp64");
  std::printf("%-30s %-22s %-24s %s\n", "machine epsilon", with_power(shortest(h_eps), h_eps).c_str(),
              with_power(shortest(f_eps), f_eps).c_str(), with_power(shortest(d_eps), d_eps).c_str());
  std::printf("%-30s %-22d %-24d %d\n", "significant bits", bits_of(h_eps), bits_of(f_eps), bits_of(d_eps));
  std::printf("%-30s %-22.2f %-24.2f %.2f\n", "decimal digits (bits x 0.301)", bits_of(h_eps) * std::log10(2.0),
              bits_of(f_eps) * std::log10(2.0), bits_of(d_eps) * std::log10(2.0));
  const char* text = "0.123456789";
  const double x64 = std::strtod(text, nullptr);
  const float x32 = std::strtof(text, nullptr);
  const uint16_t x16 = double_to_half_bits(x64);
  std::printf("%-30s %-22s %-24s %s\n", "0.123456789 prints as", shortest_half(x16).c_str(), shortest(x32).c_str(),
              shortest(x64).c_str());
  std::printf("%-30s %-22s %-24s %s\n", "stored value (20 digits)", digits20(half_value(x16)).c_str(),
              digits20(x32).c_str(), digits20(x64).c_str());
}

void subnormals() {
  heading("4. Subnormals: gradual underflow in fp16");
  std::printf("Below 2^-14 the exponent field is 0 and the leading 1 is gone: each halving costs one bit.\n");
  std::printf("The last columns store y = x * pi/2 (a value with many bits) and measure what is left of it.\n");
  std::printf("%-6s %-8s %-24s %-10s %-12s %-16s %s\n", "x", "bits", "fp16(x)", "kind", "significant", "error bound",
              "error of fp16(y)");
  const double half_pi = std::acos(0.0);
  for (int k = 13; k <= 26; ++k) {
    const double x = std::ldexp(1.0, -k);
    const uint16_t bits = double_to_half_bits(x);
    // Significant bits: 11 for a normal number (implicit 1 + 10); for a subnormal, the position of
    // the highest set mantissa bit.
    const int significant = bits == 0 ? 0 : (bits >= 0x0400 ? kFp16.mantissa_bits + 1 : std::bit_width(bits));
    const double y = half_pi * x;
    char err[32];
    std::snprintf(err, sizeof err, "%.1e", std::fabs(to_fp16(y) - y) / y);
    const char* kind = bits >= 0x0400 ? "normal" : (bits == 0 ? "zero" : "subnormal");
    // Rounding to nearest with b significant bits is off by at most half a unit in the last place:
    // a relative error of 2^-b.
    const std::string bound = significant > 0 ? "<= 2^-" + std::to_string(significant) : "up to 100%";
    std::printf("2^-%-3d %-8s %-24s %-10s %-12d %-16s %s\n", k, hex16(bits).c_str(), shortest(half_value(bits)).c_str(),
                kind, significant, bound.c_str(), err);
  }
  std::printf("Without subnormals (flush to zero) everything below 2^-14 = %s would already be 0.\n",
              shortest(half_value(0x0400)).c_str());
}

// Where x falls between its two fp16 neighbours, and which one round-to-nearest-even picks.
void rounding_row(const std::string& label, double x) {
  const uint16_t bits = double_to_half_bits(x);
  const double r = half_value(bits);
  std::string between, position;
  if (r == x) {
    between = shortest(x);
    position = "exact";
  } else {
    const uint16_t below_bits = r < x ? bits : static_cast<uint16_t>(bits - 1);
    const double lo = half_value(below_bits);
    double hi = half_value(static_cast<uint16_t>(below_bits + 1));
    // Above 65504 fp16 has no next number; the step it would have is the spacing just below.
    if (std::isinf(hi)) hi = lo + (lo - half_value(static_cast<uint16_t>(below_bits - 1)));
    between = shortest(lo) + " .. " + shortest(hi);
    const double dlo = x - lo, dhi = hi - x;
    if (dlo == dhi) {
      // A tie goes to the neighbour whose last mantissa bit is 0.
      position = std::string("tie -> even (") + ((below_bits & 1u) == 0 ? shortest(lo) : shortest(hi)) + ")";
    } else {
      position = dlo < dhi ? "nearer the lower" : "nearer the upper";
    }
  }
  std::printf("%-14s %-24s %-36s %-22s %s\n", label.c_str(), shortest(x).c_str(), between.c_str(), position.c_str(),
              with_power(shortest(r), r).c_str());
}

void rounding() {
  heading("5. Rounding: to nearest, ties to even (fp16)");
  std::printf("%-14s %-24s %-36s %-22s %s\n", "input", "value", "fp16 neighbours", "position", "stored in fp16");
  rounding_row("2049", 2049);
  rounding_row("2051", 2051);
  rounding_row("65504", 65504);
  rounding_row("65519", 65519);
  rounding_row("65520", 65520);
  rounding_row("2^-24", std::ldexp(1.0, -24));
  rounding_row("2^-25", std::ldexp(1.0, -25));
  rounding_row("1.5 x 2^-25", 1.5 * std::ldexp(1.0, -25));
  rounding_row("1 + 2^-11", 1.0 + std::ldexp(1.0, -11));
  rounding_row("0.1", 0.1);
}

void swamping() {
  heading("6. Swamping: an update u is lost when the weight w is 2048 = 2^11 times larger");
  std::printf("fp16 keeps 11 significant bits, so an update smaller than half the spacing around w\n"
              "(w x 2^-11 for w = 1) rounds away. Each sum is computed exactly, then stored to fp16.\n");
  const double w1 = 1.0, w2 = to_fp16(1.9);
  std::printf("%-7s %-26s %-14s %-7s| %-16s %s\n", "", "w = 1", "", "", ("w = " + shortest(w2)).c_str(), "");
  std::printf("%-7s %-26s %-14s %-7s| %-16s %s\n", "w/u", "u = w/(w/u)", "fp16(w + u)", "update", "fp16(w + u)", "update");
  for (double ratio : {256.0, 1024.0, 2000.0, 2047.0, 2048.0, 2049.0, 3000.0, 4096.0, 8192.0}) {
    const double u1 = w1 / ratio, u2 = w2 / ratio;
    const double s1 = to_fp16(w1 + u1), s2 = to_fp16(w2 + u2);
    std::printf("%-7g %-26s %-14s %-7s| %-16s %s\n", ratio, shortest(u1).c_str(), shortest(s1).c_str(),
                s1 == w1 ? "LOST" : "kept", shortest(s2).c_str(), s2 == w2 ? "LOST" : "kept");
  }
  std::printf("For w = 1 (a power of two) the cut-off is exactly 2048; for other w it lies between 2048 and 4096.\n");
}

void lost_updates() {
  heading("7. Why w + lr*g is lost in fp16 (paper section 3.1)");
  // (a) The update itself underflows.
  const double lr = 0.01, g = 1e-6;
  const float update32 = static_cast<float>(lr) * static_cast<float>(g);
  std::printf("(a) lr = %s, g = %s: lr*g = %s in fp32, %s in fp16 (smaller than half of 2^-24 = %s)\n",
              shortest(lr).c_str(), shortest(g).c_str(), shortest(update32).c_str(),
              shortest(to_fp16(update32)).c_str(), shortest(half_value(0x0001)).c_str());

  // (b) The update is representable, but the weight swamps it: 1 / 2^-12 = 4096 > 2048.
  const double u = std::ldexp(1.0, -12);
  std::printf("(b) w = 1, 16 updates of u = 2^-12 = %s (w/u = %g > 2048):\n", shortest(u).c_str(), 1.0 / u);
  std::printf("    %-6s %-26s %-24s %s\n", "step", "fp16 weight, no master", "fp32 master weight", "fp16 copy of the master");
  float w16 = 1.0f;   // pure fp16: the weight itself is fp16, every update rounds it back
  float master = 1.0f;  // mixed precision: an fp32 master copy takes the update
  for (int step = 1; step <= 16; ++step) {
    w16 = round_to_half(w16 + static_cast<float>(u));
    master += static_cast<float>(u);
    if (step == 1 || step % 4 == 0) {
      std::printf("    %-6d %-26s %-24s %s\n", step, shortest(double{w16}).c_str(), shortest(double{master}).c_str(),
                  shortest(double{round_to_half(master)}).c_str());
    }
  }
  std::printf("    after 16 updates: fp16 weight %s, fp32 master %s (= 1 + 2^%d)\n", shortest(double{w16}).c_str(),
              shortest(double{master}).c_str(), std::ilogb(master - 1.0f));
}

void accumulation() {
  heading("8. Accumulating in fp16 stalls (paper section 3.3)");
  float acc16 = 0.0f;  // an fp16 accumulator: every partial sum is stored back to fp16
  float acc32 = 0.0f;
  int stalled_at_step = 0;
  std::printf("%-8s %-16s %s\n", "ones", "fp16 running sum", "fp32 running sum");
  for (int i = 1; i <= 4096; ++i) {
    const float next = round_to_half(acc16 + 1.0f);
    if (next == acc16 && stalled_at_step == 0) stalled_at_step = i;
    acc16 = next;
    acc32 += 1.0f;
    if (i == 1024 || i == 2048 || i == 2049 || i == 3000 || i == 4096)
      std::printf("%-8d %-16s %s\n", i, shortest(acc16).c_str(), shortest(acc32).c_str());
  }
  std::printf("the fp16 sum stalls at %s: from addition %d on, 2048 + 1 = 2049 is a tie and rounds back to 2048\n",
              shortest(acc16).c_str(), stalled_at_step);
  const Tensor ones = Tensor::ones({4096}, DType::f16);
  const Tensor total = sum(ones);  // halfling reduces f16 in f32 or wider and returns f32
  std::printf("halfling: sum(%s of ones) = %s, returned as %s\n", ones.describe().c_str(),
              shortest(total.item()).c_str(), dtype_name(total.dtype()));
}

void overflow() {
  heading("9. exp overflows fp16: why softmax runs in fp32 (paper section 3.3)");
  for (double x : {10.0, 11.0, 11.09, 11.1, 12.0}) {
    const double e = std::exp(x);
    std::printf("exp(%s) %-*s = %-20s fp16: %-8s fp32: %s\n", shortest(x).c_str(), static_cast<int>(5 - shortest(x).size()),
                "", shortest(e).c_str(), shortest(to_fp16(e)).c_str(), shortest(static_cast<float>(e)).c_str());
  }
  std::printf("exp(x) overflows fp16 from x = ln(65520) = %.4f on (65504 is the largest finite fp16)\n", std::log(65520.0));

  // softmax([12, 11, 0]) three ways.
  const std::vector<float> logits{12.0f, 11.0f, 0.0f};
  std::vector<float> e16, e32;
  float sum16 = 0.0f, sum32 = 0.0f;
  for (float z : logits) {
    e16.push_back(round_to_half(std::exp(z)));  // exp stored to fp16: inf for 12
    sum16 = round_to_half(sum16 + e16.back());
    e32.push_back(std::exp(z));
    sum32 += e32.back();
  }
  std::printf("softmax([12, 11, 0]) with exp stored in fp16: [");
  for (size_t i = 0; i < logits.size(); ++i) std::printf("%s%s", i ? ", " : "", shortest_half(float_to_half_bits(e16[i] / sum16)).c_str());
  std::printf("]   (inf / inf = nan)\n");
  std::printf("softmax([12, 11, 0]) in fp32:                 [");
  for (size_t i = 0; i < logits.size(); ++i) std::printf("%s%s", i ? ", " : "", shortest(e32[i] / sum32).c_str());
  std::printf("]\n");
  const Tensor z16 = Tensor::from_vector(logits, {1, 3}, DType::f16);
  const Tensor p = exp(log_softmax(z16));  // halfling subtracts the row max and works in f32
  std::printf("halfling exp(log_softmax(%s)) = %s, returned as %s\n", z16.describe().c_str(), p.str().c_str(),
              dtype_name(p.dtype()));
}

// --value X: X in the three formats, with bits and rounding error.
void show_value(const std::string& text) {
  // The reference is the decimal read at the widest precision this machine has (long double).
  char* end = nullptr;
  const long double exact = std::strtold(text.c_str(), &end);
  const double x64 = std::strtod(text.c_str(), nullptr);
  const float x32 = std::strtof(text.c_str(), nullptr);
  const uint16_t x16 = double_to_half_bits(x64);
  heading("--value " + text);
  auto report = [&](const Layout& l, double stored, const std::string& prints_as, uint64_t bits, double ulp) {
    std::printf("%s  prints as %s\n", l.name, prints_as.c_str());
    std::printf("      stored value %s\n", digits20(stored).c_str());
    std::printf("      bits %s\n", decode(l, bits).c_str());
    if (std::isfinite(stored) && std::isfinite(static_cast<double>(exact))) {
      const long double err = static_cast<long double>(stored) - exact;
      std::printf("      rounding error %+.2Le", err);
      if (exact != 0) std::printf(" (relative %+.2Le)", err / exact);
      std::printf("; spacing of %s numbers here: %s\n", l.name, shortest(ulp).c_str());
    } else if (std::isinf(stored) && std::isfinite(static_cast<double>(exact))) {
      std::printf("      overflow: too large for %s\n", l.name);
    }
  };
  const double v16 = half_value(x16);
  const uint16_t abs16 = x16 & 0x7FFF;
  // The spacing to the next value up; at 65504, the largest finite one, the next is inf: the spacing
  // below (32) is the binade's, as the rounding section uses it.
  const double ulp16 = abs16 >= 0x7C00   ? 0.0
                       : abs16 == 0x7BFF ? half_value(abs16) - half_value(static_cast<uint16_t>(abs16 - 1))
                                         : half_value(static_cast<uint16_t>(abs16 + 1)) - half_value(abs16);
  report(kFp16, v16, shortest_half(x16), x16, ulp16);
  report(kFp32, x32, shortest(x32), std::bit_cast<uint32_t>(x32),
         std::nextafter(std::fabs(x32), std::numeric_limits<float>::infinity()) - std::fabs(x32));
  report(kFp64, x64, shortest(x64), std::bit_cast<uint64_t>(x64),
         std::nextafter(std::fabs(x64), std::numeric_limits<double>::infinity()) - std::fabs(x64));
}

// --bits 0xHHHH: decode one half bit pattern.
void show_bits(uint16_t bits) {
  heading("--bits " + hex16(bits));
  const double v = half_value(bits);
  std::printf("fp16 bits %s\n", decode(kFp16, bits).c_str());
  if (std::isfinite(v)) std::printf("value     %s (exactly %s)\n", shortest_half(bits).c_str(), digits20(v).c_str());
  else std::printf("value     %s\n", shortest_half(bits).c_str());
}

// Parse "0x3C00" / "3C00" into 16 bits; throws CLI::ValidationError naming the flag otherwise.
uint16_t parse_bits(const std::string& s) {
  const std::string digits = s.rfind("0x", 0) == 0 || s.rfind("0X", 0) == 0 ? s.substr(2) : s;
  unsigned value = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size() || value > 0xFFFF) {
    throw CLI::ValidationError("--bits", "'" + s + "' is not a 16-bit hex pattern (0x0000 .. 0xFFFF), e.g. 0x3C00");
  }
  return static_cast<uint16_t>(value);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 01: FP16 vs FP32 vs FP64, computed live"};
  bool smoke = false;
  std::string value, bits_text, section = "all";
  app.add_flag("--smoke", smoke, "the same tour (it already runs in milliseconds); accepted so CI runs every tutorial alike");
  app.add_option("--value", value, "print X in fp16, fp32 and fp64 with bits and rounding error (hex floats like 0x1p-24 work)")
      ->check([](const std::string& s) -> std::string {
        char* end = nullptr;
        std::strtod(s.c_str(), &end);
        return (s.empty() || *end != '\0') ? "'" + s + "' is not a number (e.g. 0.1, 1e-8, 65520, 0x1p-24)" : "";
      });
  app.add_option("--bits", bits_text, "decode an fp16 bit pattern, e.g. 0x3C00");
  app.add_option("--section", section, "show one section only")
      ->check(CLI::IsMember({"all", "formats", "range", "precision", "subnormals", "rounding", "swamping", "updates",
                             "accumulation", "overflow"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    if (!bits_text.empty()) parse_bits(bits_text);  // validate before printing anything
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    std::printf("halfling 01_fp16_numbers: IEEE binary16 (hl::half), float and double, computed on this machine\n");
    if (!value.empty() || !bits_text.empty()) {  // the explorer flags replace the tour
      if (!value.empty()) show_value(value);
      if (!bits_text.empty()) show_bits(parse_bits(bits_text));
      return 0;
    }
    const bool all = section == "all";
    if (all || section == "formats") formats();
    if (all || section == "range") range();
    if (all || section == "precision") precision();
    if (all || section == "subnormals") subnormals();
    if (all || section == "rounding") rounding();
    if (all || section == "swamping") swamping();
    if (all || section == "updates") lost_updates();
    if (all || section == "accumulation") accumulation();
    if (all || section == "overflow") overflow();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "01_fp16_numbers: %s\n", e.what());
    return 1;
  }
}
