// Tutorials 01 (FP16 numbers) and 02 (autograd): the programs run, print the right numbers, and
// reject bad flags; and every number chapter 01 quotes holds for hl::half itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "framework/gradcheck.h"
#include "framework/ops.h"
#include "framework/tensor.h"
#include "kernels/half.h"
#include "tests/test_util.h"

namespace {

using hl::test::run_command;
const std::string kFp16Numbers = hl::test::tutorial_program("01_fp16_numbers");
const std::string kAutograd = hl::test::tutorial_program("02_autograd");

// The first line of `out` that starts with `prefix` ("" when there is none).
std::string line_starting(const std::string& out, const std::string& prefix) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

// The text of the section whose heading starts with `heading` ("== 5."), up to the next heading.
std::string section(const std::string& out, const std::string& heading) {
  const size_t begin = out.find("\n" + heading);
  if (begin == std::string::npos) return "";
  const size_t end = out.find("\n== ", begin + 1);
  return out.substr(begin + 1, end == std::string::npos ? std::string::npos : end - begin - 1);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

float h(float x) { return hl::round_to_half(x); }

// ---- 01_fp16_numbers: the program -------------------------------------------------------------------

class Fp16NumbersTutorial : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { result_ = run_command(kFp16Numbers + " --smoke"); }
  static std::pair<int, std::string> result_;
  const std::string& out() const { return result_.second; }
};
std::pair<int, std::string> Fp16NumbersTutorial::result_;

TEST_F(Fp16NumbersTutorial, SmokeRunSucceeds) { EXPECT_EQ(result_.first, 0) << out(); }

TEST_F(Fp16NumbersTutorial, RangeAndPrecision) {
  const auto largest = fields(line_starting(out(), "largest finite"));
  ASSERT_EQ(largest.size(), 5u) << out();
  EXPECT_EQ(largest[2], "65504");
  EXPECT_EQ(largest[3], "3.4028235e+38");
  EXPECT_TRUE(contains(line_starting(out(), "smallest normal"), "6.103515625e-05 (2^-14)")) << out();
  EXPECT_TRUE(contains(line_starting(out(), "smallest subnormal"), "(2^-24)")) << out();
  EXPECT_TRUE(contains(line_starting(out(), "smallest subnormal"), "(2^-149)")) << out();
  EXPECT_TRUE(contains(out(), "fp16 largest finite = (2 - 2^-10) x 2^15 = 65504 (bits 0x7BFF)")) << out();
  // The whole line: "61440 normal" alone would also be found in "-61440 normal".
  EXPECT_TRUE(contains(out(), "\nall 65536 fp16 bit patterns: 61440 normal, 2046 subnormal, 2 zeros, 2 infinities, "
                              "2046 NaN; 0 fail the round trip through float\n"))
      << out();

  const std::string eps = line_starting(out(), "machine epsilon");
  EXPECT_TRUE(contains(eps, "0.0009765625 (2^-10)") && contains(eps, "(2^-23)") && contains(eps, "(2^-52)")) << eps;
  EXPECT_EQ(fields(line_starting(out(), "significant bits")), (std::vector<std::string>{"significant", "bits", "11", "24", "53"}));
  // bits x log10(2), each column its own format's bits.
  EXPECT_EQ(fields(line_starting(out(), "decimal digits")),
            (std::vector<std::string>{"decimal", "digits", "(bits", "x", "0.301)", "3.31", "7.22", "15.95"}));
  const auto prints = fields(line_starting(out(), "0.123456789 prints as"));
  ASSERT_EQ(prints.size(), 6u) << out();
  EXPECT_EQ(prints[3], "0.1235");
  EXPECT_EQ(prints[4], "0.12345679");
  EXPECT_EQ(prints[5], "0.123456789");
  EXPECT_TRUE(contains(line_starting(out(), "stored value (20 digits)"), "0.12347412109375")) << out();
}

// Section 1's table: each format's width is 1 sign bit + its exponent and mantissa bits.
TEST_F(Fp16NumbersTutorial, FormatsTableAddsUpTheBits) {
  const std::string formats = section(out(), "== 1.");
  EXPECT_EQ(fields(line_starting(formats, "fp16 ")), (std::vector<std::string>{"fp16", "16", "5", "10", "15"}));
  EXPECT_EQ(fields(line_starting(formats, "fp32 ")), (std::vector<std::string>{"fp32", "32", "8", "23", "127"}));
  EXPECT_EQ(fields(line_starting(formats, "fp64 ")), (std::vector<std::string>{"fp64", "64", "11", "52", "1023"}));
}

TEST_F(Fp16NumbersTutorial, SubnormalsLoseOneBitPerHalving) {
  const std::string subnormals = section(out(), "== 4.");
  EXPECT_TRUE(contains(line_starting(subnormals, "2^-14 "), "0x0400") && contains(line_starting(subnormals, "2^-14 "), "normal"));
  // The normal rows keep all 11 bits (implicit 1 + 10), the smallest normal included.
  for (const char* normal : {"2^-13 ", "2^-14 "}) {
    const auto row = fields(line_starting(subnormals, normal));
    ASSERT_GE(row.size(), 5u) << out();
    EXPECT_EQ(row[3], "normal") << normal;
    EXPECT_EQ(row[4], "11") << normal;
  }
  const auto sub15 = fields(line_starting(subnormals, "2^-15 "));
  ASSERT_GE(sub15.size(), 5u) << out();
  EXPECT_EQ(sub15[1], "0x0200");
  EXPECT_EQ(sub15[3], "subnormal");
  EXPECT_EQ(sub15[4], "10");
  const auto sub24 = fields(line_starting(subnormals, "2^-24 "));
  ASSERT_GE(sub24.size(), 5u) << out();
  EXPECT_EQ(sub24[1], "0x0001");
  EXPECT_EQ(sub24[4], "1");
  const auto sub26 = fields(line_starting(subnormals, "2^-26 "));
  ASSERT_GE(sub26.size(), 5u) << out();
  EXPECT_EQ(sub26[2], "0");
  EXPECT_EQ(sub26[3], "zero");
  EXPECT_EQ(sub26[4], "0");  // no significant bit left
  // The error columns: b significant bits bound the relative error of rounding to 2^-b, and the error
  // of fp16(y), y = x * pi/2, stays within it; with no bit left the bound is 100%, and at 2^-26, y
  // rounds to 0, an error of 1.
  for (int k = 13; k <= 24; ++k) {
    const auto row = fields(line_starting(subnormals, "2^-" + std::to_string(k) + " "));
    ASSERT_EQ(row.size(), 8u) << out();
    EXPECT_EQ(row[5] + " " + row[6], "<= 2^-" + row[4]) << "2^-" << k;
    EXPECT_LE(std::stod(row[7]), std::ldexp(1.0, -std::stoi(row[4]))) << "2^-" << k;
  }
  EXPECT_TRUE(ends_with(line_starting(subnormals, "2^-13 "), " 3.1e-04")) << out();
  EXPECT_TRUE(ends_with(line_starting(subnormals, "2^-24 "), " <= 2^-1          2.7e-01")) << out();
  EXPECT_TRUE(ends_with(line_starting(subnormals, "2^-25 "), " up to 100%       2.7e-01")) << out();
  EXPECT_TRUE(ends_with(line_starting(subnormals, "2^-26 "), " up to 100%       1.0e+00")) << out();
}

TEST_F(Fp16NumbersTutorial, RoundsToNearestEven) {
  const std::string rounding = section(out(), "== 5.");
  EXPECT_TRUE(ends_with(line_starting(rounding, "2049 "), "tie -> even (2048)     2048 (2^11)")) << out();
  EXPECT_TRUE(ends_with(line_starting(rounding, "2051 "), "tie -> even (2052)     2052")) << out();
  // Whole rows: the input, its value, the two fp16 neighbours, where it falls and what is stored. Above
  // 65504 there is no next fp16 number; the neighbour shown is where the spacing below (32) leads.
  using Row = std::vector<std::string>;
  EXPECT_EQ(fields(line_starting(rounding, "2049 ")),
            (Row{"2049", "2049", "2048", "..", "2050", "tie", "->", "even", "(2048)", "2048", "(2^11)"})) << out();
  EXPECT_EQ(fields(line_starting(rounding, "65519 ")),
            (Row{"65519", "65519", "65504", "..", "65536", "nearer", "the", "lower", "65504"})) << out();
  EXPECT_EQ(fields(line_starting(rounding, "65520 ")),
            (Row{"65520", "65520", "65504", "..", "65536", "tie", "->", "even", "(65536)", "inf"})) << out();
  EXPECT_TRUE(ends_with(line_starting(rounding, "2^-25 "), "tie -> even (0)        0")) << out();
  EXPECT_TRUE(ends_with(line_starting(rounding, "1.5 x 2^-25 "), "(2^-24)")) << out();
  EXPECT_TRUE(ends_with(line_starting(rounding, "1 + 2^-11 "), " 1")) << out();
  // A value fp16 holds exactly is marked so, between the two copies of itself.
  const std::vector<std::string> exact{"65504", "65504", "65504", "exact", "65504"};
  EXPECT_EQ(fields(line_starting(rounding, "65504 ")), exact) << out();
}

// Section 7 (b): the table shows steps 1, 4, 8, 12 and 16; the fp16 weight never moves, the fp32
// master takes every update (16 x 2^-12 = 2^-8), and from step 4 on its fp16 copy shows it.
TEST_F(Fp16NumbersTutorial, MasterWeightKeepsTheUpdatesFp16Loses) {
  const std::string updates = section(out(), "== 7.");
  using Row = std::vector<std::string>;
  std::vector<Row> rows;
  std::istringstream in(updates);
  for (std::string line; std::getline(in, line);) {
    const Row f = fields(line);
    if (f.size() == 4 && !f[0].empty() && std::isdigit(static_cast<unsigned char>(f[0][0]))) rows.push_back(f);
  }
  EXPECT_EQ(rows, (std::vector<Row>{{"1", "1", "1.000244140625", "1"},
                                    {"4", "1", "1.0009765625", "1.0009765625"},
                                    {"8", "1", "1.001953125", "1.001953125"},
                                    {"12", "1", "1.0029296875", "1.0029296875"},
                                    {"16", "1", "1.00390625", "1.00390625"}}))
      << out();
  EXPECT_TRUE(contains(updates, "after 16 updates: fp16 weight 1, fp32 master 1.00390625 (= 1 + 2^-8)")) << out();
}

TEST_F(Fp16NumbersTutorial, SwampingCutOffIs2048) {
  // Columns: ratio, u, fp16(1 + u), verdict for w = 1, "|", fp16(1.9 + u), verdict for w = 1.9.
  const std::string swamping = section(out(), "== 6.");
  auto verdicts = [&](const std::string& ratio) {
    const auto f = fields(line_starting(swamping, ratio + " "));
    return f.size() == 7 ? std::make_pair(f[3], f[6]) : std::make_pair(std::string("?"), std::string("?"));
  };
  EXPECT_EQ(verdicts("1024"), std::make_pair(std::string("kept"), std::string("kept"))) << out();
  // Whole rows: each sum w + u rounded to fp16, for w = 1 and for w = fp16(1.9) = 1.900390625.
  using Row = std::vector<std::string>;
  EXPECT_EQ(fields(line_starting(swamping, "256 ")),
            (Row{"256", "0.00390625", "1.00390625", "kept", "|", "1.908203125", "kept"})) << out();
  EXPECT_EQ(fields(line_starting(swamping, "4096 ")),
            (Row{"4096", "0.000244140625", "1", "LOST", "|", "1.900390625", "LOST"})) << out();
  EXPECT_EQ(verdicts("2047"), std::make_pair(std::string("kept"), std::string("kept"))) << out();
  EXPECT_EQ(verdicts("2048"), std::make_pair(std::string("LOST"), std::string("kept"))) << out();
  EXPECT_EQ(verdicts("3000"), std::make_pair(std::string("LOST"), std::string("kept"))) << out();
  EXPECT_EQ(verdicts("4096"), std::make_pair(std::string("LOST"), std::string("LOST"))) << out();
}

TEST_F(Fp16NumbersTutorial, MasterWeightsKeepTheUpdates) {
  EXPECT_TRUE(contains(out(), "lr*g = 1e-08 in fp32, 0 in fp16")) << out();
  EXPECT_TRUE(contains(out(), "after 16 updates: fp16 weight 1, fp32 master 1.00390625 (= 1 + 2^-8)")) << out();
}

TEST_F(Fp16NumbersTutorial, Fp16AccumulationStallsAt2048) {
  const std::string accumulation = section(out(), "== 8.");
  EXPECT_EQ(fields(line_starting(accumulation, "2048 ")), (std::vector<std::string>{"2048", "2048", "2048"})) << out();
  EXPECT_EQ(fields(line_starting(accumulation, "4096 ")), (std::vector<std::string>{"4096", "2048", "4096"})) << out();
  // Those five sums and no others: the table is short on purpose.
  std::vector<std::string> counts;
  std::istringstream rows(accumulation);
  for (std::string row; std::getline(rows, row);)
    if (!row.empty() && std::isdigit(static_cast<unsigned char>(row[0]))) counts.push_back(fields(row)[0]);
  EXPECT_EQ(counts, (std::vector<std::string>{"1024", "2048", "2049", "3000", "4096"})) << out();
  EXPECT_TRUE(contains(out(), "the fp16 sum stalls at 2048: from addition 2049 on")) << out();
  EXPECT_TRUE(contains(out(), "halfling: sum(f16[4096] on cpu of ones) = 4096, returned as f32")) << out();
}

TEST_F(Fp16NumbersTutorial, ExpOverflowsAndSoftmaxNeedsFp32) {
  EXPECT_TRUE(contains(line_starting(out(), "exp(12)"), "fp16: inf")) << out();
  EXPECT_TRUE(contains(line_starting(out(), "exp(11)"), "fp16: 59872")) << out();
  EXPECT_TRUE(contains(out(), "with exp stored in fp16: [nan, 0, 0]")) << out();
  EXPECT_TRUE(contains(out(), "in fp32:                 [0.7310553, 0.2689402, 4.491759e-06]")) << out();
  EXPECT_TRUE(contains(out(), "returned as f32")) << out();
}

TEST(Fp16NumbersFlags, ValueAndBits) {
  struct Case {
    const char* args;
    std::vector<const char*> parts;  // each must appear in the output
  };
  const Case cases[] = {
      {"--value 0.123456789",
       {"fp16  prints as 0.1235\n      stored value 0.12347412109375",
        "bits 0 01011 1111100111  = +2^(11-15) x 1.1111100111b", "fp32  prints as 0.12345679\n",
        "fp64  prints as 0.123456789\n"}},
      {"--value 65520", {"overflow: too large for fp16"}},
      // The largest finite number: an exponent of 30, one below all ones, and every mantissa bit set.
      {"--bits 0x7BFF",
       {"fp16 bits 0 11110 1111111111  = +2^(30-15) x 1.1111111111b\n", "value     65504 (exactly 65504)"}},
      // The special patterns: an exponent of all ones (inf, NaN by the mantissa), of 0 with a mantissa
      // of 0 (the zeros), and the smallest normal (an exponent of 1, a mantissa of 0).
      {"--bits 0x7C00", {"fp16 bits 0 11111 0000000000  = +inf (exponent all ones)\nvalue     inf\n"}},
      {"--bits 0xFC00", {"fp16 bits 1 11111 0000000000  = -inf (exponent all ones)\nvalue     -inf\n"}},
      {"--bits 0x7E00", {"fp16 bits 0 11111 1000000000  = NaN (exponent all ones, mantissa != 0)\nvalue     nan\n"}},
      {"--bits 0x8000", {"fp16 bits 1 00000 0000000000  = -0\nvalue     -0 (exactly -0)\n"}},
      {"--bits 0x0400", {"fp16 bits 0 00001 0000000000  = +2^(1-15) x 1.0000000000b\n"}},
      {"--bits 0001", {"+2^-14 x 0.0000000001b  (subnormal)", "exactly 5.9604644775390625e-08"}},
      // A negative number: the sign bit is read apart from the exponent.
      {"--bits 0xBC00", {"fp16 bits 1 01111 0000000000  = -2^(15-15) x 1.0000000000b\n", "value     -1 (exactly -1)"}},
      // The shortest decimal is tried from 1 digit on: 2^-23 reads back from "1e-07" (1.68 x 2^-24
      // rounds to 2 x 2^-24), so 2 digits ("1.2e-07") are not needed.
      {"--bits 0x0002", {"value     1e-07 (exactly 1.1920928955078125e-07)"}},
      // At 65504 the next value up is inf: the spacing shown is the binade's, 32. Elsewhere it is the
      // spacing to the next value up: 2^-10 above 1.
      {"--value 65504", {"spacing of fp16 numbers here: 32\n"}},
      {"--value 1",
       {"spacing of fp16 numbers here: 0.0009765625\n", "spacing of fp32 numbers here: 1.1920928955078125e-07\n",
        "spacing of fp64 numbers here: 2.220446049250313e-16\n"}},
      // The rounding error is stored minus exact, signed, and relative to the exact value.
      {"--value 0.1",
       {"rounding error -2.44e-05 (relative -2.44e-04); spacing of fp16 numbers here: 6.103515625e-05\n",
        "rounding error +1.49e-09 (relative +1.49e-08); spacing of fp32",
        "rounding error +5.55e-18 (relative +5.55e-17); spacing of fp64"}},
      // The last pattern is a valid one (a NaN).
      {"--bits 0xFFFF", {"fp16 bits 1 11111 1111111111  = NaN (exponent all ones, mantissa != 0)\nvalue     nan\n"}},
      {"--bits 0X3C00", {"value     1 (exactly 1)"}},  // the prefix may be 0X
  };
  for (const Case& c : cases) {
    const auto [status, out] = run_command(kFp16Numbers + " " + c.args);
    EXPECT_EQ(status, 0) << c.args << ": " << out;
    for (const char* part : c.parts) EXPECT_TRUE(contains(out, part)) << c.args << ": '" << part << "' in\n" << out;
  }
  // Infinity itself is no overflow, and has no rounding error to show.
  const auto [status, out] = run_command(kFp16Numbers + " --value inf");
  EXPECT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "fp16  prints as inf\n")) << out;
  EXPECT_FALSE(contains(out, "overflow")) << out;
  EXPECT_FALSE(contains(out, "rounding error")) << out;
}

TEST(Fp16NumbersFlags, SectionShowsThatSectionAlone) {
  const auto [status, out] = run_command(kFp16Numbers + " --section rounding");
  EXPECT_EQ(status, 0) << out;
  std::vector<std::string> headings;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("== ", 0) == 0) headings.push_back(line.substr(0, 5));
  EXPECT_EQ(headings, std::vector<std::string>{"== 5."}) << out;
}

TEST(Fp16NumbersFlags, RejectsInvalidFlagsClearly) {
  // 0x100000000 overflows the parser's unsigned: refused as well, not read as 0.
  for (const char* flags : {"--bits 0x10000", "--bits 0x100000000", "--bits 0xZZ", "--value abc", "--value 1.5x",
                            "--section nope"}) {
    const std::string args = flags;
    const auto [status, out] = run_command(kFp16Numbers + " " + args);
    EXPECT_NE(status, 0) << args;
    const std::string flag = args.substr(0, args.find(' '));
    EXPECT_TRUE(contains(out, flag)) << args << ": " << out;
  }
  const auto [status, out] = run_command(kFp16Numbers + " --no-such-flag");
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(out, "--no-such-flag")) << out;
}

// ---- 01_fp16_numbers: the chapter's claims, checked on hl::half directly ---------------------------

TEST(Fp16NumbersClaims, RangeAndEpsilon) {
  EXPECT_EQ(hl::half_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(hl::half_bits_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(hl::half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(hl::half_bits_to_float(0x3C01) - 1.0f, std::ldexp(1.0f, -10));
  EXPECT_EQ(std::nextafter(1.0f, 2.0f) - 1.0f, std::ldexp(1.0f, -23));
  EXPECT_EQ(hl::double_to_half_bits(0.123456789), 0x2FE7);
  EXPECT_EQ(static_cast<double>(hl::half_bits_to_float(0x2FE7)), 0.12347412109375);
}

TEST(Fp16NumbersClaims, RoundingTable) {
  EXPECT_EQ(h(2049.0f), 2048.0f);
  EXPECT_EQ(h(2051.0f), 2052.0f);
  EXPECT_EQ(h(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(h(65520.0f)));
  EXPECT_EQ(h(std::ldexp(1.0f, -25)), 0.0f);
  EXPECT_EQ(h(1.5f * std::ldexp(1.0f, -25)), std::ldexp(1.0f, -24));
  EXPECT_EQ(h(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(h(static_cast<float>(std::exp(11.0))), 59872.0f);
  EXPECT_TRUE(std::isinf(h(static_cast<float>(std::exp(12.0)))));
}

// "exp overflows": e^x passes 65504 at x = ln 65504 = 11.08987, but FP16 rounds it back to 65504 below
// ln 65520 = 11.09011 (65520, halfway to the 65536 FP16 does not have, is the first value that rounds to
// inf). So exp(11.09) = 65512.7 and exp(11.0901) = 65519.3 are still 65504 in FP16; exp(11.0902) is inf.
TEST(Fp16NumbersClaims, ExpOverflowsFromLn65520) {
  EXPECT_NEAR(std::log(65504.0), 11.08987, 5e-6);
  EXPECT_NEAR(std::log(65520.0), 11.09011, 5e-6);
  EXPECT_LT(std::exp(11.0898), 65504.0);
  EXPECT_GT(std::exp(11.0899), 65504.0);
  EXPECT_EQ(hl::double_to_half_bits(std::exp(11.0899)), 0x7BFF);  // above 65504, rounds back to it
  EXPECT_NEAR(std::exp(11.09), 65512.7, 0.05);
  EXPECT_EQ(hl::double_to_half_bits(std::exp(11.09)), 0x7BFF);
  EXPECT_EQ(hl::double_to_half_bits(std::exp(11.0901)), 0x7BFF);  // 11.0901 < ln 65520
  EXPECT_EQ(hl::double_to_half_bits(std::exp(11.0902)), 0x7C00);  // 11.0902 > ln 65520: inf
  EXPECT_EQ(hl::double_to_half_bits(65520.0), 0x7C00);
  EXPECT_EQ(hl::double_to_half_bits(std::nextafter(65520.0, 0.0)), 0x7BFF);
}

// The significant digits of a printed number ("-1.2345e-05" -> 5, "65504" -> 5, "0.001" -> 1).
int significant_digits(const std::string& text) {
  std::string digits;
  for (char c : text.substr(0, text.find_first_of("eE")))
    if (c >= '0' && c <= '9') digits += c;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 1;  // "0"
  const size_t last = digits.find_last_not_of('0');
  return static_cast<int>(last - first + 1);
}

// The numbers of a printed 1-d tensor, "tensor([a, b, ...], f16[n])", as text.
std::vector<std::string> printed_values(const std::string& printed) {
  const size_t open = printed.find('['), close = printed.find(']');
  std::vector<std::string> values;
  std::istringstream in(printed.substr(open + 1, close - open - 1));
  for (std::string v; std::getline(in, v, ',');) values.push_back(v.substr(v.find_first_not_of(' ')));
  return values;
}

// Chapter 01: halfling's tensor printing shows each value as the shortest decimal that reads back as the
// same value of its dtype (a whole part in full: 65504, not 6.55e+04), which takes at most 5 significant
// digits in f16 and 9 in f32 (max_digits10). Every finite f16, and 20,000 random finite f32.
TEST(Fp16NumbersClaims, TensorPrintingReadsBackInAtMost5DigitsForF16And9ForF32) {
  std::vector<double> halves;
  for (uint32_t bits = 0; bits < 0x10000; ++bits)
    if ((bits & 0x7C00) != 0x7C00) halves.push_back(hl::half_bits_to_float(static_cast<uint16_t>(bits)));
  const auto n16 = static_cast<int64_t>(halves.size());
  ASSERT_EQ(n16, 63488);
  const auto f16 = printed_values(hl::Tensor::from_vector(halves, {n16}, hl::DType::f16).str(1 << 20));
  ASSERT_EQ(f16.size(), halves.size());
  int most16 = 0;
  for (size_t i = 0; i < halves.size(); ++i) {
    const int d = significant_digits(f16[i]);
    most16 = std::max(most16, d);
    ASSERT_LE(d, 5) << f16[i];
    ASSERT_EQ(hl::double_to_half_bits(std::strtod(f16[i].c_str(), nullptr)), hl::double_to_half_bits(halves[i]))
        << f16[i] << " does not read back as " << halves[i];
  }
  EXPECT_EQ(most16, 5) << "some f16 value needs all 5 digits";
  EXPECT_EQ(f16[static_cast<size_t>(std::find(halves.begin(), halves.end(), 65504.0) - halves.begin())], "65504");

  std::mt19937 rng(hl::test::fresh_seed());
  std::vector<double> floats;
  while (floats.size() < 20000) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) floats.push_back(v);
  }
  const auto f32 = printed_values(
      hl::Tensor::from_vector(floats, {static_cast<int64_t>(floats.size())}, hl::DType::f32).str(1 << 20));
  ASSERT_EQ(f32.size(), floats.size());
  int most32 = 0;
  for (size_t i = 0; i < floats.size(); ++i) {
    const int d = significant_digits(f32[i]);
    most32 = std::max(most32, d);
    ASSERT_LE(d, 9) << f32[i];
    const float back = std::strtof(f32[i].c_str(), nullptr), want = static_cast<float>(floats[i]);
    ASSERT_EQ(std::memcmp(&back, &want, sizeof back), 0) << f32[i] << " does not read back as " << floats[i];
  }
  EXPECT_EQ(most32, 9) << "some f32 value needs all 9 digits";
}

TEST(Fp16NumbersClaims, SwampingUpdatesAndStall) {
  // For w = 1: an update survives up to w/u = 2047 and is lost from 2048 on.
  EXPECT_NE(hl::double_to_half_bits(1.0 + 1.0 / 2047), hl::double_to_half_bits(1.0));
  EXPECT_EQ(hl::double_to_half_bits(1.0 + 1.0 / 2048), hl::double_to_half_bits(1.0));
  // 0.01 * 1e-6 underflows to zero in fp16 (it is below 2^-25).
  EXPECT_EQ(h(0.01f * 1e-6f), 0.0f);
  // 1 + 16 updates of 2^-12: lost in fp16, kept by an fp32 master copy.
  float w16 = 1.0f, master = 1.0f;
  for (int i = 0; i < 16; ++i) {
    w16 = h(w16 + std::ldexp(1.0f, -12));
    master += std::ldexp(1.0f, -12);
  }
  EXPECT_EQ(w16, 1.0f);
  EXPECT_EQ(master, 1.00390625f);
  EXPECT_EQ(h(master), 1.00390625f);
  // 4096 ones: an fp16 accumulator stalls at 2048.
  float acc16 = 0.0f, acc32 = 0.0f;
  for (int i = 0; i < 4096; ++i) {
    acc16 = h(acc16 + 1.0f);
    acc32 += 1.0f;
  }
  EXPECT_EQ(acc16, 2048.0f);
  EXPECT_EQ(acc32, 4096.0f);
}

// ---- 02_autograd ---------------------------------------------------------------------------------------

class AutogradTutorial : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { result_ = run_command(kAutograd + " --smoke"); }
  static std::pair<int, std::string> result_;
  const std::string& out() const { return result_.second; }
};
std::pair<int, std::string> AutogradTutorial::result_;

TEST_F(AutogradTutorial, SmokeRunSucceeds) {
  EXPECT_EQ(result_.first, 0) << out();
  EXPECT_TRUE(contains(out(), "every correct op passed gradcheck, and the wrong backward was caught")) << out();
}

TEST_F(AutogradTutorial, ForwardValuesAndHandDerivedGradients) {
  // y = sum((a*b + a)^2), a = [1, 2, -3], b = [0.5, -1.5, 2]:
  // dy/da = 2(ab+a)(b+1) = [4.5, 1, -54], dy/db = 2(ab+a)a = [3, -4, 54].
  EXPECT_TRUE(contains(out(), "  y = sum(e) = 84.25\n")) << out();
  const std::string ga = line_starting(out(), "  dy/da");
  EXPECT_TRUE(contains(ga, "autograd [4.5, 1, -54]") && contains(ga, "= [4.5, 1, -54]") &&
              ends_with(ga, "max difference 0"))
      << ga;
  const std::string gb = line_starting(out(), "  dy/db");
  EXPECT_TRUE(contains(gb, "autograd [3, -4, 54]") && contains(gb, "= [3, -4, 54]") && ends_with(gb, "max difference 0"))
      << gb;
  // The neuron: z = 0.625, dL/dz = 2(0.625 - 1) = -0.75.
  EXPECT_TRUE(contains(out(), "z = x . w + b = 0.625, h = relu(z) = 0.625, L = 0.140625")) << out();
  for (const char* g : {"  dL/dw", "  dL/db", "  dL/dx"})
    EXPECT_TRUE(ends_with(line_starting(out(), g), "max difference 0")) << out();
  EXPECT_TRUE(contains(line_starting(out(), "  dL/dw"), "autograd [-0.75, -1.5, -2.25]")) << out();
}

TEST_F(AutogradTutorial, GraphAccumulationReleaseAndNoGrad) {
  // The whole graph, every input of every node, `a` twice (it is used twice), the last child of each
  // node drawn with a corner.
  EXPECT_TRUE(contains(out(), "  y = sum(...)\n"
                              "  `- e = pow(...)\n"
                              "     `- d = add(...)\n"
                              "        |- c = mul(...)\n"
                              "        |  |- a  (leaf, requires grad)\n"
                              "        |  `- b  (leaf, requires grad)\n"
                              "        `- a  (leaf, requires grad)\n"))
      << out();
  EXPECT_TRUE(contains(out(), "a.grad = [9, 2, -108]")) << out();
  EXPECT_TRUE(contains(out(), "the graph through 'sum' was already freed by an earlier backward()")) << out();
  // sum(a*b) = 0.5 - 3 - 6: NoGradGuard changes what is recorded, not the value.
  EXPECT_TRUE(contains(out(), "under NoGradGuard: z = sum(a*b) = -8.5, z.requires_grad() = false, node recorded: no"))
      << out();
  EXPECT_TRUE(contains(out(), "a.detach() shares a's storage (same pointer) and requires_grad = false")) << out();
  EXPECT_TRUE(contains(out(), "does not require grad")) << out();
  EXPECT_TRUE(contains(out(), "p = sum(a*b); b.fill_(1); p.backward() -> hl::Error:\n  backward: 'mul' needs its "
                              "operand b ('b', f32[3] on cpu) as it was in the forward pass, but it has been "
                              "written in place since"))
      << out();
}

TEST_F(AutogradTutorial, GradcheckPassesCorrectOpsAndFailsTheWrongOne) {
  int passes = 0;
  for (const char* op : {"a*b (broadcast", "a/b", "exp(a)", "log(a)", "pow(a, 3)", "relu(a)", "sum(a, dim 1)",
                         "mean(a)", "matmul(a, b)", "linear(x, W, b)", "log_softmax(z)", "cross_entropy(z, labels)",
                         "square(a), correct backward"}) {
    const std::string line = line_starting(out(), op);
    EXPECT_TRUE(ends_with(line, "PASS")) << op << ": " << line;
    const auto f = fields(line);
    if (f.size() >= 2) {
      EXPECT_LT(std::stod(f[f.size() - 2]), 1e-6) << line;
    }
    passes += ends_with(line, "PASS");
  }
  EXPECT_EQ(passes, 13);
  EXPECT_TRUE(ends_with(line_starting(out(), "square(a), backward without the 2"), "FAIL")) << out();
  EXPECT_TRUE(contains(out(), "input 0 element 0: analytic")) << out();
  // gradcheck's report, every line of it indented whole.
  EXPECT_TRUE(contains(out(), "\n  input 0 f64[4] on cpu: worst element 0 |analytic - numeric| = ")) << out();
}

TEST(AutogradTutorialFlags, OtherSeedsPassToo) {
  const auto [status, out] = run_command(kAutograd + " --seed 12345");
  EXPECT_EQ(status, 0) << out;
}

TEST(AutogradTutorialFlags, RejectsInvalidFlagsClearly) {
  for (const char* flags : {"--eps 0", "--eps 1", "--eps abc", "--seed -x"}) {
    const std::string args = flags;
    const auto [status, out] = run_command(kAutograd + " " + args);
    EXPECT_NE(status, 0) << args;
    const std::string flag = args.substr(0, args.find(' '));
    EXPECT_TRUE(contains(out, flag)) << args << ": " << out;
  }
}

// The chapter: "--seed must be a non-negative integer. A bad value stops the program with a message that
// names the flag and a non-zero exit status." A plain uint64_t option took -1 as 2^64 - 1 and ran.
TEST(AutogradTutorialFlags, NegativeSeedIsRefused) {
  for (const char* bad : {"-1", "-0x1", "1.5", "18446744073709551616"}) {
    const auto [status, out] = run_command(kAutograd + " --seed " + bad);
    EXPECT_EQ(status, 105) << bad << ": CLI11's validation error\n" << out;
    EXPECT_TRUE(contains(out, "--seed")) << out;
    EXPECT_FALSE(contains(out, "halfling 02_autograd:")) << bad << ": the walk-through ran\n" << out;
  }
  const auto [status, out] = run_command(kAutograd + " --seed -1");
  EXPECT_TRUE(contains(out, "'-1' is out of range (0 to 18446744073709551615)")) << out;
}

// At an --eps far from the default, correct ops fail too: their reports come under a heading of their
// own, not under the deliberately wrong op's ("numeric = 2 x analytic").
TEST(AutogradTutorialFlags, CorrectOpsFailingAtAnExtremeEpsAreReportedApart) {
  const auto [status, out] = run_command(kAutograd + " --eps 1e-2");
  EXPECT_EQ(status, 2) << out;
  const size_t wrong = out.find("what a wrong gradient looks like"), apart = out.find("correct ops that failed");
  ASSERT_NE(wrong, std::string::npos) << out;
  ASSERT_NE(apart, std::string::npos) << out;
  EXPECT_LT(wrong, apart) << out;
  // Under the wrong op's heading, one report (the square's: one input, one "worst element" line); the
  // correct ops' reports, one or more, under the other.
  const auto reports = [](const std::string& part) {
    size_t n = 0;
    for (size_t at = part.find("worst element"); at != std::string::npos; at = part.find("worst element", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(reports(out.substr(wrong, apart - wrong)), 1u) << out;
  EXPECT_GE(reports(out.substr(apart)), 1u) << out;
}

// One correct op failing alone is enough to exit 2: at --eps 1.5e-3, pow(a, 3) is the only one whose
// central difference is off (by eps^2 / 6 times a^3's third derivative, 6: eps^2; the other ops', on
// seed 0's inputs, stay inside the tolerance).
TEST(AutogradTutorialFlags, OneSurpriseIsEnoughToFail) {
  const auto [status, out] = run_command(kAutograd + " --eps 1.5e-3");
  EXPECT_EQ(status, 2) << out;
  EXPECT_TRUE(ends_with(line_starting(out, "pow(a, 3)"), "FAIL")) << out;
  EXPECT_TRUE(contains(out, "\n1 gradient check(s) did not give the expected verdict (try the default --eps 1e-6)\n"))
      << out;
}

// The table's numbers are gradcheck's own on the chapter's inputs, computed again here: each row checks
// the op it names, on inputs drawn in the table's order from Generator(--seed) (first relu's 12 values,
// kept 0.1 away from its kink, with alternating signs), and gradcheck's projection is seeded with --seed
// too. The last two rows, the hand-written square, are the program's own op (checked above).
TEST(AutogradTutorialFlags, GradcheckTableIsTheLibrarysOnTheChaptersInputs) {
  using namespace hl;
  for (const uint64_t seed : {uint64_t{0}, uint64_t{12345}}) {
    // A plain reference, not a structured binding: clang 14 cannot capture those in the lambda below.
    const std::pair<int, std::string> run = run_command(kAutograd + " --seed " + std::to_string(seed));
    const std::string& out = run.second;
    ASSERT_EQ(run.first, 0) << out;
    Generator gen(seed);
    auto rnd = [&gen](const Shape& s, double lo = -1.0, double hi = 1.0) {
      return Tensor::uniform(s, gen, lo, hi, DType::f64);
    };
    std::vector<double> away(12);
    for (size_t i = 0; i < away.size(); ++i) away[i] = (i % 2 ? 1.0 : -1.0) * (0.1 + gen.uniform());
    GradcheckOptions opt;
    opt.eps = 1e-6;
    opt.seed = seed;
    GradcheckOptions skip_labels = opt;
    skip_labels.skip = {1};
    const auto row = [&](const std::string& name, const GradcheckFn& f, const std::vector<Tensor>& inputs,
                         const GradcheckOptions& o) {
      const GradcheckResult r = gradcheck(f, inputs, o);
      char err[32];
      std::snprintf(err, sizeof err, "%.2e", r.max_abs_error);
      const std::string line = line_starting(out, name);
      EXPECT_EQ(fields(line.substr(std::min(name.size(), line.size()))), (std::vector<std::string>{err, "PASS"}))
          << name << ", seed " << seed << "\n" << out;
    };
    {
      const Tensor a = rnd({3, 4}), b = rnd({4});
      row("a*b (broadcast [3,4]*[4])", [](const auto& v) { return mul(v[0], v[1]); }, {a, b}, opt);
    }
    {
      const Tensor a = rnd({3, 4}), b = rnd({3, 4}, 0.5, 2.0);
      row("a/b", [](const auto& v) { return div(v[0], v[1]); }, {a, b}, opt);
    }
    row("exp(a)", [](const auto& v) { return exp(v[0]); }, {rnd({2, 5})}, opt);
    row("log(a), a > 0", [](const auto& v) { return log(v[0]); }, {rnd({2, 5}, 0.5, 2.0)}, opt);
    row("pow(a, 3)", [](const auto& v) { return pow(v[0], 3.0); }, {rnd({2, 5})}, opt);
    row("relu(a)", [](const auto& v) { return relu(v[0]); }, {Tensor::from_vector(away, {3, 4})}, opt);
    row("sum(a, dim 1)", [](const auto& v) { return sum(v[0], {1}); }, {rnd({2, 3, 4})}, opt);
    row("mean(a)", [](const auto& v) { return mean(v[0]); }, {rnd({2, 3, 4})}, opt);
    {
      const Tensor a = rnd({3, 5}), b = rnd({5, 4});
      row("matmul(a, b)", [](const auto& v) { return matmul(v[0], v[1]); }, {a, b}, opt);
    }
    {
      const Tensor x = rnd({4, 6}), w = rnd({3, 6}), b = rnd({3});
      row("linear(x, W, b)", [](const auto& v) { return linear(v[0], v[1], v[2]); }, {x, w, b}, opt);
    }
    row("log_softmax(z)", [](const auto& v) { return log_softmax(v[0]); }, {rnd({3, 5}, -3.0, 3.0)}, opt);
    const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 4, 2}, {3});
    row("cross_entropy(z, labels)", [](const auto& v) { return cross_entropy(v[0], v[1]); },
        {rnd({3, 5}, -3.0, 3.0), labels}, skip_labels);
  }
}

// A misspelt HALFLING_GEMM is refused before the walk-through, naming the variable, and without the
// registry's "set with --gemm" (02 has no --gemm).
TEST(AutogradTutorialFlags, MisspeltVariantEnvironmentIsNamed) {
  const auto [status, out] = run_command("HALFLING_GEMM=bogus " + kAutograd);
  EXPECT_EQ(status, 1) << out;
  EXPECT_TRUE(contains(out, "02_autograd: HALFLING_GEMM=bogus: no gemm variant of that name on any device")) << out;
  EXPECT_FALSE(contains(out, "--gemm")) << out;
  EXPECT_FALSE(contains(out, "halfling 02_autograd:")) << "the walk-through ran\n" << out;
}

// --eps's message shows its real lower bound (CLI::Range printed 1e-12 as "0.000000").
TEST(AutogradTutorialFlags, EpsMessageShowsTheRealBounds) {
  for (const char* bad : {"0", "1e-13", "0.2", "nan"}) {
    const auto [status, out] = run_command(kAutograd + " --eps " + bad);
    EXPECT_EQ(status, 105) << bad << "\n" << out;
    EXPECT_TRUE(contains(out, "--eps")) << out;
    EXPECT_FALSE(contains(out, "0.000000")) << out;
  }
  const auto [status, out] = run_command(kAutograd + " --eps 0");
  EXPECT_TRUE(contains(out, "'0' is out of range (1e-12 to 0.1)")) << out;
  const auto [hstatus, help] = run_command(kAutograd + " --help");
  EXPECT_EQ(hstatus, 0) << help;
  EXPECT_TRUE(contains(help, "FLOAT in [1e-12 - 0.1]")) << help;
}

}  // namespace
