// Tutorial 04 (the GEMM ladder): the smoke run prints one checked, timed row per variant; --gemm picks
// one; a bad name is refused with the list of known ones; on a GPU every CUDA rung passes its check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/runtime.h"
#include "tests/test_util.h"

namespace {

std::pair<int, std::string> run04(const std::string& args) {
  return hl::test::run_command(hl::test::tutorial_program("04_gemm_ladder") + " " + args);
}

// The table row of `variant` for the shape named `shape` ("" when absent), split into words.
std::vector<std::string> row(const std::string& out, const std::string& shape, const std::string& variant) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(shape + " ", 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (std::find(w.begin(), w.end(), variant) != w.end()) return w;
  }
  return {};
}

// Fields after the variant name: rel.err, ok, ms, TFLOP/s (or "declines: ..." / "skipped ...").
std::vector<std::string> after(const std::vector<std::string>& w, const std::string& variant) {
  const auto it = std::find(w.begin(), w.end(), variant);
  return it == w.end() ? std::vector<std::string>{} : std::vector<std::string>(it + 1, w.end());
}

TEST(Tutorial04, SmokeRunChecksEveryCpuVariant) {
  const auto [status, out] = run04("--smoke --device cpu");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("note: the CUDA rungs"), std::string::npos) << out;
  const auto names = hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu);
  ASSERT_FALSE(names.empty());
  for (const std::string shape : {"square 64", "MLP fc1 forward"}) {
    for (const std::string& v : names) {
      const auto f = after(row(out, shape, v), v);
      ASSERT_FALSE(f.empty()) << shape << " / " << v << " missing:\n" << out;
      if (f[0] == "declines:") continue;  // e.g. an AVX-512 micro-kernel on a CPU without AVX-512
      ASSERT_GE(f.size(), 4u) << shape << " / " << v << "\n" << out;
      EXPECT_EQ(f[1], "yes") << shape << " / " << v << "\n" << out;
      EXPECT_LE(std::stod(f[0]), 1e-4) << shape << " / " << v;
      // FP32 accumulation is never exact against float64 on random data: an error of 0 would mean the
      // comparison compared nothing.
      EXPECT_GT(std::stod(f[0]), 0.0) << shape << " / " << v;
      EXPECT_GT(std::stod(f[3]), 0.0) << shape << " / " << v << ": TFLOP/s";
      // TFLOP/s = 2MNK / time, from the row's own M, N, K and ms: within the rounding of the printed ms
      // (4 decimals) and TFLOP/s (3 digits).
      const auto w = row(out, shape, v);
      const auto at = static_cast<size_t>(std::find(w.begin(), w.end(), v) - w.begin());
      const double flops = 2 * std::stod(w[at - 3]) * std::stod(w[at - 2]) * std::stod(w[at - 1]);
      const double ms = std::stod(f[2]), tflops = std::stod(f[3]);
      EXPECT_NEAR(tflops, flops / (ms * 1e-3) / 1e12, tflops * (0.006 + 0.00006 / ms)) << shape << " / " << v;
      // A timed call takes time: at 0.0000 ms (no call timed) the TFLOP/s would be infinite, and the check
      // above would pass with an infinite tolerance.
      EXPECT_GT(ms, 0.0) << shape << " / " << v << "\n" << out;
    }
  }
  EXPECT_NE(out.find("\ninputs f16, C f32, FP32 accumulation"), std::string::npos) << out;  // the default
  // The op column, after the name's words: A * B, and the forward pass's A * B^T.
  EXPECT_EQ(row(out, "square 64", "blocked").at(2), "NN") << out;
  EXPECT_EQ(row(out, "MLP fc1 forward", "blocked").at(3), "NT") << out;
  // The reference and the default blocked GEMM always run.
  EXPECT_EQ(after(row(out, "MLP fc1 forward", "reference"), "reference").at(1), "yes") << out;
  EXPECT_EQ(after(row(out, "MLP fc1 forward", "blocked"), "blocked").at(1), "yes") << out;
}

TEST(Tutorial04, GemmFlagPicksOneVariantAndRefusesUnknownNames) {
  const auto [status, out] = run04("--smoke --device cpu --gemm reference");
  ASSERT_EQ(status, 0) << out;
  EXPECT_FALSE(row(out, "square 64", "reference").empty()) << out;
  EXPECT_TRUE(row(out, "square 64", "blocked").empty()) << out;
  const auto [bad_status, bad] = run04("--smoke --device cpu --gemm no_such_gemm");
  EXPECT_EQ(bad_status, 1) << bad;
  EXPECT_NE(bad.find("--gemm: no variant 'no_such_gemm'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("reference"), std::string::npos) << bad;  // the known names are listed
}

// --f32-inputs hands the variants f32 A and B (the same FP16-rounded values, so the same checks pass);
// every CPU variant takes them.
TEST(Tutorial04, F32InputsFlagChangesTheInputType) {
  const auto [status, out] = run04("--smoke --device cpu --f32-inputs");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("\ninputs f32, C f32, FP32 accumulation"), std::string::npos) << out;
  for (const std::string& v : hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu)) {
    const auto f = after(row(out, "MLP fc1 forward", v), v);
    ASSERT_FALSE(f.empty()) << v << " missing:\n" << out;
    if (f[0] == "declines:") continue;  // an instruction set this CPU lacks
    ASSERT_GE(f.size(), 4u) << v << "\n" << out;
    EXPECT_EQ(f[1], "yes") << v << "\n" << out;
  }
}

// Without --smoke the CPU runs two more shapes, among them the weight gradient's A^T * B (the only
// transposed A, so the float64 reference's transposed indexing is checked only here). One variant
// keeps it short.
TEST(Tutorial04, FullRunChecksTheWeightGradientLayout) {
  const auto [status, out] = run04("--device cpu --gemm blocked");
  ASSERT_EQ(status, 0) << out;
  for (const std::string shape : {"square 64", "MLP fc1 forward", "MLP fc1 weight grad", "square 512"}) {
    const auto f = after(row(out, shape, "blocked"), "blocked");
    ASSERT_GE(f.size(), 4u) << shape << "\n" << out;
    EXPECT_EQ(f[1], "yes") << shape << "\n" << out;
    EXPECT_LE(std::stod(f[0]), 1e-4) << shape;
  }
  EXPECT_EQ(row(out, "MLP fc1 weight grad", "blocked").at(4), "TN") << out;  // after the 4 words of the name
  // The times are per call: the run times 200 calls of the small square and 3 of the large one (the
  // repetitions aim at 1e9 flops a batch), and a 512^3 GEMM takes hundreds of times longer than a 64^3
  // one. A time per batch, or one multiplied by the repetitions, would put the small square above.
  const double small_ms = std::stod(after(row(out, "square 64", "blocked"), "blocked").at(2));
  const double large_ms = std::stod(after(row(out, "square 512", "blocked"), "blocked").at(2));
  EXPECT_GT(large_ms, 10 * small_ms) << out;
}

// The ladder's point: a wrong rung is caught. tests/preload/wrong_rungs.cpp, loaded with LD_PRELOAD, adds the
// CPU rung "wrong_row", which leaves one row of C unwritten (the last, or HALFLING_WRONG_ROW's first, second
// or middle), or only C's first element (first_element). It runs last, after the reference rung has left the
// right answer in C, so only the poison the program writes into C before each rung shows the row it missed:
// its error is NaN and its check fails, the program says so and exits 1, and the right rungs still pass.
// Shapes of up to 256 rows are checked in every row (the smoke run's two); the larger ones of the full run
// in a sample of rows that takes the first, the middle and the last.
TEST(Tutorial04, AWrongRungIsCaught) {
  const std::string program =
      std::string("LD_PRELOAD=") + HALFLING_WRONG_RUNGS_LIBRARY + " " + hl::test::tutorial_program("04_gemm_ladder");
  const auto wrong_row_fails = [](const std::string& out, const std::string& shape) {
    const auto f = after(row(out, shape, "wrong_row"), "wrong_row");
    ASSERT_GE(f.size(), 2u) << shape << "\n" << out;
    EXPECT_TRUE(std::isnan(std::stod(f[0]))) << shape << "\n" << out;
    EXPECT_EQ(f[1], "NO") << shape << "\n" << out;
  };
  for (const std::string which : {"last", "second"}) {
    SCOPED_TRACE("HALFLING_WRONG_ROW=" + which);
    const auto [status, out] =
        hl::test::run_command("HALFLING_WRONG_ROW=" + which + " " + program + " --smoke --device cpu");
    EXPECT_EQ(status, 1) << out;
    EXPECT_NE(out.find("\nSOME VARIANT IS WRONG\n"), std::string::npos) << out;
    for (const std::string shape : {"square 64", "MLP fc1 forward"}) {
      wrong_row_fails(out, shape);
      EXPECT_EQ(after(row(out, shape, "reference"), "reference").at(1), "yes") << shape << "\n" << out;
      EXPECT_EQ(after(row(out, shape, "blocked"), "blocked").at(1), "yes") << shape << "\n" << out;
    }
  }
  for (const std::string which : {"first", "middle", "last", "first_element"}) {
    SCOPED_TRACE("HALFLING_WRONG_ROW=" + which);
    const auto [status, out] =
        hl::test::run_command("HALFLING_WRONG_ROW=" + which + " " + program + " --device cpu --gemm wrong_row");
    EXPECT_EQ(status, 1) << out;
    for (const std::string shape : {"square 64", "MLP fc1 forward", "MLP fc1 weight grad", "square 512"})
      wrong_row_fails(out, shape);
  }
}

// A CUDA name given with --device cuda on a machine without a GPU is dropped with a notice (not
// refused), and every CPU variant runs instead.
TEST(Tutorial04, CudaNameAfterAFallbackRunsTheCpuVariants) {
  if (hl::runtime::cuda_available()) GTEST_SKIP() << "a GPU is present: --device cuda does not fall back";
  const auto [status, out] = run04("--smoke --device cuda --gemm wmma");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("--gemm wmma is a CUDA variant, and this run is on the CPU: ignored"), std::string::npos)
      << out;
  for (const std::string& v : hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu))
    EXPECT_FALSE(row(out, "square 64", v).empty()) << v << " missing:\n" << out;
}

// The chapter's list of flags: the program trains nothing, so --precision takes only fp16 (FP32 inputs
// are --f32-inputs), and --loss-scale, --schedule and --warmup-epochs are not flags of it; the other
// training flags it shares with the tutorials are accepted and do nothing (no --csv file is written).
TEST(Tutorial04, TakesTheFlagsTheChapterLists) {
  EXPECT_EQ(hl::test::help_default(run04("--help").second, "--precision"), "fp16");
  const auto [ps, po] = run04("--precision fp32");
  EXPECT_EQ(ps, 105) << po;  // CLI11's validation error
  EXPECT_NE(po.find("--precision: fp32 not in {fp16}"), std::string::npos) << po;
  for (const std::string flags : {"--loss-scale dynamic", "--schedule cosine", "--warmup-epochs 1"}) {
    const auto [status, out] = run04(flags);
    EXPECT_EQ(status, 109) << flags << ": CLI11's 'not expected' error\n" << out;
    EXPECT_NE(out.find(flags.substr(0, flags.find(' '))), std::string::npos) << out;
  }
  const std::string csv = (std::filesystem::temp_directory_path() /
                           ("halfling_t04_" + std::to_string(hl::test::fresh_seed()) + ".csv")).string();
  const auto [status, out] = run04("--smoke --device cpu --gemm reference --precision fp16 --epochs 3 --batch 7 "
                                   "--lr 0.5 --momentum 0 --csv " + csv);
  EXPECT_EQ(status, 0) << out;
  EXPECT_FALSE(row(out, "square 64", "reference").empty()) << out;
  EXPECT_FALSE(std::filesystem::exists(csv)) << "--csv is accepted and ignored";
  std::filesystem::remove(csv);
}

TEST(Tutorial04, EveryCudaRungPassesOnTheGpu) {
  HL_REQUIRE_CUDA();
  const auto [status, out] = run04("--smoke --device cuda");
  ASSERT_EQ(status, 0) << out;
  for (const std::string& v : hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cuda)) {
    const auto f = after(row(out, "MLP fc1 forward", v), v);
    ASSERT_GE(f.size(), 4u) << v << "\n" << out;
    EXPECT_EQ(f[1], "yes") << v << "\n" << out;
  }
  EXPECT_NE(out.find("vs cuBLAS"), std::string::npos) << out;
}

}  // namespace
