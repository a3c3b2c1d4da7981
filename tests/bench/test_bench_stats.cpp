// bench/stats.h, the arithmetic of the benchmarks' rows, on the CPU: the median every GPU benchmark and
// loader_throughput report, the check that marks a row WRONG (gemm_bench against cuBLAS, conv_bench
// against cuDNN), and the L2 note of bn_bench, reduce_bench and softmax_bench. A GPU session is short;
// what can go wrong in these without a GPU is checked here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bench/stats.h"

namespace {

using hl::bench::calls_for;
using hl::bench::calls_per_sample;
using hl::bench::check_output;
using hl::bench::command_line;
using hl::bench::fits_in_l2;
using hl::bench::l2_note;
using hl::bench::median;
using hl::bench::OutputCheck;
using hl::bench::wrong_because;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(BenchStats, MedianOfOddEvenOneAndTwoSamples) {
  EXPECT_EQ(median(std::vector<double>{7.0}), 7.0);
  EXPECT_EQ(median(std::vector<double>{3.0, 1.0}), 2.0) << "two samples: their mean, not the larger";
  EXPECT_EQ(median(std::vector<double>{5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median(std::vector<double>{4.0, 1.0, 3.0, 10.0}), 3.5) << "even: the mean of the two middle values";
  EXPECT_EQ(median(std::vector<float>{0.25f, 0.75f}), 0.5) << "float samples (conv_bench's, gemm_bench's)";
  EXPECT_EQ(median(std::vector<int>{2, 9, 4, 4, 1, 8}), 4.0);
  EXPECT_TRUE(std::isnan(median(std::vector<double>{}))) << "no samples, no median";
}

TEST(BenchStats, CallsPerSampleFillTheTargetWithinTheirBounds) {
  EXPECT_EQ(calls_per_sample(0.010), 20) << "a 10-microsecond call: 20 of them fill 0.2 ms";
  EXPECT_EQ(calls_per_sample(0.015), 14) << "rounded up, so a sample is never shorter than the target";
  EXPECT_EQ(calls_per_sample(0.2), 1) << "a call as long as the target is timed alone";
  EXPECT_EQ(calls_per_sample(0.37), 1) << "so is a longer one (a 4096^3 GEMM)";
  EXPECT_EQ(calls_per_sample(0.0001), 100) << "at most max_calls";
  EXPECT_EQ(calls_per_sample(0.0), 100) << "below the events' resolution";
  EXPECT_EQ(calls_per_sample(-1.0), 100);
  EXPECT_EQ(calls_per_sample(std::numeric_limits<double>::quiet_NaN()), 100);
  EXPECT_EQ(calls_per_sample(std::numeric_limits<double>::infinity()), 1);
  EXPECT_EQ(calls_per_sample(0.001, 0.2, 1000), 200) << "another bound";
  EXPECT_EQ(calls_per_sample(0.05, 1.0, 5), 5);
  EXPECT_EQ(calls_per_sample(0.05, 0.2, 0), 1) << "a bound below 1 still times one call";
}

TEST(BenchStats, CallsForTimesASlowCallOnceAndAShortOneThreeTimes) {
  std::vector<int> asked;
  const auto timer = [&asked](std::vector<double> per_call) {
    return [&asked, per_call, i = size_t{0}](int calls) mutable {
      asked.push_back(calls);
      return per_call.at(i++);
    };
  };
  EXPECT_EQ(calls_for(timer({4.5})), 1) << "direct's 4.5 ms backward weight: timed alone";
  EXPECT_EQ(asked, std::vector<int>{1}) << "after one call, not three";
  asked.clear();
  EXPECT_EQ(calls_for(timer({0.2})), 1) << "the target itself";
  asked.clear();
  EXPECT_EQ(calls_for(timer({0.05, 0.01, 0.012})), 17) << "the median of three alone, 0.012 ms: 17 fill 0.2 ms";
  EXPECT_EQ(asked, (std::vector<int>{1, 1, 1}));
  asked.clear();
  EXPECT_EQ(calls_for(timer({0.3, 0.01, 0.01}), 1.0, 50), 50) << "its own target and bound";
}

TEST(BenchStats, CommandLineQuotesWhatAShellWouldReadOtherwise) {
  const char* plain[] = {"build/bench/gemm_bench", "--runs", "10", "--sweep-tiles", "12,19", "--out=f32"};
  EXPECT_EQ(command_line(6, plain), "# command: build/bench/gemm_bench --runs 10 --sweep-tiles 12,19 --out=f32");
  const char* odd[] = {"conv_bench", "--layers", "a b", "it's", "", "$HOME", "x;y"};
  EXPECT_EQ(command_line(7, odd), "# command: conv_bench --layers 'a b' 'it'\\''s' '' '$HOME' 'x;y'");
  EXPECT_EQ(command_line(0, nullptr), "# command:");
}

TEST(BenchStats, CheckCountsWhatWasNotWrittenAndTheDifferenceFromTheReference) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> ref = {1.0, -2.0, 3.0, 4.0};

  // The same values: no difference, nothing wrong.
  const OutputCheck same = check_output(ref, &ref);
  EXPECT_EQ(same.bad, 0);
  EXPECT_EQ(same.diff, 0.0);
  EXPECT_EQ(wrong_because(same, ref.size(), "cuBLAS", 1e-2), "");

  // Two elements left as the poison and one infinite: all three counted, the NaN ones apart, and the
  // difference taken over the one element finite in both.
  const OutputCheck holes = check_output({1.5, nan, nan, inf}, &ref);
  EXPECT_EQ(holes.bad, 3);
  EXPECT_EQ(holes.nan, 2);
  EXPECT_DOUBLE_EQ(holes.diff, 0.5);
  const std::string why = wrong_because(holes, 4, "cuBLAS", 1e-2);
  EXPECT_TRUE(contains(why, "3 of 4 outputs not finite where cuBLAS's are (2 NaN: not written?)")) << why;

  // Where the reference itself is not finite, the output is not held against it.
  const std::vector<double> ref_nan = {nan, -2.0, 3.0, 4.0};
  const OutputCheck both = check_output({nan, -2.0, 3.0, 4.0}, &ref_nan);
  EXPECT_EQ(both.bad, 0);
  EXPECT_EQ(both.diff, 0.0);

  // A difference: ||(0.1, 0, 0, 0)|| / ||ref|| = 0.1 / sqrt(30), about 1.8e-2: WRONG at 1e-2, not at 1e-1.
  const OutputCheck off = check_output({1.1, -2.0, 3.0, 4.0}, &ref);
  EXPECT_NEAR(off.diff, 0.1 / std::sqrt(30.0), 1e-12);
  const std::string why_off = wrong_because(off, 4, "cuDNN", 1e-2);
  EXPECT_TRUE(contains(why_off, "differs from cuDNN by 1.8e-02")) << why_off;
  EXPECT_EQ(wrong_because(off, 4, "cuDNN", 1e-1), "");

  // Without a reference (the library's own row, or a run without it) only what is not finite counts.
  const OutputCheck alone = check_output({1.0, nan, 1e30, -inf}, nullptr);
  EXPECT_EQ(alone.bad, 2);
  EXPECT_EQ(alone.nan, 1);
  const std::string why_alone = wrong_because(alone, 4, nullptr, 1e-2);
  EXPECT_TRUE(contains(why_alone, "2 of 4 outputs not finite (1 NaN: not written?)")) << why_alone;
  EXPECT_EQ(wrong_because(check_output({1.0, 2.0}, nullptr), 2, nullptr, 1e-2), "");
}

// The reviewer's case: VGG-small's first batch norm in f16 (16.8 MB a tensor) on an H100 (50 MiB of L2,
// as the runtime gives it). The copy (2 tensors) fits, the backward (3) does not: its %copy is not like
// for like. The forward touches what the copy touches. reduce_bench's f32 sum over the same shape is the
// reverse: its input alone fits, the copy of it does not.
TEST(BenchStats, L2NoteMarksARowWhoseYardstickIsServedFromOtherMemory) {
  const int64_t l2 = int64_t{50} << 20;
  const double tensor = 128.0 * 64 * 1024 * 2;
  EXPECT_TRUE(fits_in_l2(2 * tensor, l2));
  EXPECT_FALSE(fits_in_l2(3 * tensor, l2)) << "a set just under the L2's size is not served from it";
  EXPECT_EQ(std::string(l2_note(3 * tensor, 2 * tensor, l2)), "  L2: yardstick fits, kernel does not");
  EXPECT_EQ(std::string(l2_note(2 * tensor, 2 * tensor, l2)), "");
  const double f32 = 2 * tensor;
  EXPECT_EQ(std::string(l2_note(f32 + 64 * 4, 2 * f32, l2)), "  L2: kernel fits, yardstick does not");
  EXPECT_EQ(std::string(l2_note(4 * f32, 2 * f32, l2)), "") << "neither fits: like for like";
  EXPECT_EQ(std::string(l2_note(1e3, 1e9, 0)), "") << "an L2 size the runtime did not give: no note";
}

}  // namespace
