// Tutorial 08 (softmax): the --smoke run succeeds and prints the numbers the chapter quotes — FP16's
// exp(12) overflow and the NaN of the no-max FP16 softmax, the exact FP32 answer, every rung within
// tolerance, the fused cross-entropy equal to the unfused one — and the --softmax flag is checked.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace {

using hl::test::run_command;
const std::string kProgram = hl::test::tutorial_program("08_softmax");

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class Tutorial08 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { result_ = run_command(kProgram + " --smoke --device cpu"); }
  static std::pair<int, std::string> result_;
  const std::string& out() const { return result_.second; }
};
std::pair<int, std::string> Tutorial08::result_;

TEST_F(Tutorial08, SmokeRunSucceeds) {
  EXPECT_EQ(result_.first, 0) << out();
  EXPECT_TRUE(contains(out(), "\nall checks passed")) << out();
  EXPECT_FALSE(contains(out(), "FAIL")) << out();
}

TEST_F(Tutorial08, Fp16OverflowLesson) {
  EXPECT_TRUE(contains(out(), "exp(11) = 59874.1 -> FP16 59872\n")) << out();
  EXPECT_TRUE(contains(out(), "exp(12) = 162754.8 -> FP16 inf (overflow)\n")) << out();
  EXPECT_TRUE(contains(out(), "naive_fp16_nomax on cpu, logits [12, 1, 0, -1] -> [nan, 0, 0, 0]\n")) << out();
  // exp(12 - 12) / (1 + e^-11 + e^-12 + e^-13) and so on, in FP32.
  EXPECT_TRUE(contains(out(), "max-subtracted, FP32 math -> [0.999975, 1.67013e-05, 6.14406e-06, 2.26027e-06]"))
      << out();
  // The largest of the four errors against the float64 softmax, not the last one. The CPU computes in
  // double and rounds once to f32, so the value is the same on every machine.
  EXPECT_TRUE(contains(out(), "2.26027e-06]  max error 1.2e-08: OK\n")) << out();
}

TEST_F(Tutorial08, RungsAndCrossEntropyChecked) {
  std::istringstream in(out());
  int rung_rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("reference ", 0) == 0) {
      ++rung_rows;
      EXPECT_TRUE(line.size() >= 2 && line.substr(line.size() - 2) == "OK") << line;
      // The worst relative error of the FP16 output is one rounding, 2^-11 = 4.88e-04 (at most 2^-10
      // passes). The logits come from a fixed seed, so the value is exact on every machine.
      std::istringstream fields(line);
      std::string rung, shape, err;
      fields >> rung >> shape >> err;
      EXPECT_EQ(err, "4.88e-04") << line;
    }
  }
  EXPECT_EQ(rung_rows, 2) << out();  // the two smoke shapes
  // On the CPU the section names the rungs a GPU would time.
  EXPECT_TRUE(contains(out(), "\n(on a GPU this section times naive, block_row, warp_row, register_warp")) << out();
  EXPECT_TRUE(contains(out(), "cross_entropy on cpu runs: reference (fused)")) << out();
  EXPECT_TRUE(contains(out(), "|diff| 0.0e+00: OK")) << out();  // both paths compute in double on the CPU
  // Every element of the gradient compared; the largest is S / batch = 1024 / 128 (|p - onehot| <= 1).
  EXPECT_TRUE(contains(out(), "max |fused - unfused| 0.0e+00 of max |grad| 8: OK\n")) << out();
  EXPECT_TRUE(contains(out(), "nothing [128, 10] kept but the logits\n")) << out();
}

// Without --smoke the CPU runs shapes of its own (the GPU's would take minutes here), still within
// tolerance, and the loss section takes the larger batch. About 5 s on 2 cores.
TEST(Tutorial08Flags, FullCpuRunTakesTheCpuShapes) {
  const auto [status, out] = run_command(kProgram + " --device cpu");
  EXPECT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "\nall checks passed")) << out;
  std::istringstream in(out);
  std::vector<std::string> shapes;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string rung, shape;
    if (fields >> rung >> shape && rung == "reference") shapes.push_back(shape);
  }
  EXPECT_EQ(shapes, (std::vector<std::string>{"1024x10", "256x1024", "8x32768"})) << out;
  EXPECT_TRUE(contains(out, "nothing [1024, 10] kept but the logits\n")) << out;
}

TEST(Tutorial08Flags, SoftmaxFlagIsCheckedAndListed) {
  const auto bad = run_command(kProgram + " --smoke --device cpu --softmax no_such_rung");
  EXPECT_EQ(bad.first, 1) << bad.second;  // the status of an error, not of a crash
  EXPECT_TRUE(contains(bad.second, "--softmax: no variant 'no_such_rung' on cpu (known: reference, naive_fp16_nomax)"))
      << bad.second;
  const auto list = run_command(kProgram + " --list-variants");
  EXPECT_EQ(list.first, 0) << list.second;
  EXPECT_TRUE(contains(list.second, "softmax on cpu:") && contains(list.second, "naive_fp16_nomax")) << list.second;
  // Pinning the teaching rung: section 1 still shows the FP32 answer, the loss section says why it
  // cannot run, and the program does not crash.
  const auto pinned = run_command(kProgram + " --smoke --device cpu --softmax naive_fp16_nomax");
  EXPECT_EQ(pinned.first, 0) << pinned.second;
  EXPECT_TRUE(contains(pinned.second, "cross-entropy with --softmax naive_fp16_nomax")) << pinned.second;
}

// The ladder catches a wrong rung. tests/preload/wrong_rungs.cpp, loaded with LD_PRELOAD, adds the CPU
// softmax rung "wrong_row", which leaves one row of its output unwritten: the first, the middle or the last
// (HALFLING_WRONG_ROW), or only the output's first element (a check from element 1 on would pass it). The
// output is poisoned with NaN before each rung, and the largest error keeps a NaN wherever it comes, so the
// rung's error is NaN and its check fails on both shapes; the program says so and exits 1. The reference
// rung still passes.
TEST(Tutorial08Flags, AWrongRungIsCaught) {
  for (const std::string which : {"first", "middle", "last", "first_element"}) {
    const auto [status, out] = run_command("HALFLING_WRONG_ROW=" + which + " LD_PRELOAD=" +
                                           HALFLING_WRONG_RUNGS_LIBRARY + " " + kProgram + " --smoke --device cpu");
    EXPECT_EQ(status, 1) << which << "\n" << out;
    EXPECT_TRUE(contains(out, "\nSOME CHECKS FAILED\n")) << which << "\n" << out;
    std::istringstream in(out);
    int wrong_rows = 0, reference_rows = 0;
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string rung, shape, err;
      if (!(fields >> rung >> shape >> err) || (rung != "wrong_row" && rung != "reference")) continue;
      const std::string check = line.substr(line.find_last_of(' ') + 1);
      if (rung == "wrong_row") {
        ++wrong_rows;
        EXPECT_EQ(err, "nan") << which << ": " << line;
        EXPECT_EQ(check, "FAIL") << which << ": " << line;
      } else {
        ++reference_rows;
        EXPECT_EQ(check, "OK") << which << ": " << line;
      }
    }
    EXPECT_EQ(wrong_rows, 2) << which << "\n" << out;  // the two smoke shapes
    EXPECT_EQ(reference_rows, 2) << which << "\n" << out;
  }
}

}  // namespace
