// Tutorial 04 (the GEMM ladder): the smoke run prints one checked, timed row per variant; --gemm picks
// one; a bad name is refused with the list of known ones; on a GPU every CUDA rung passes its check.
#include <gtest/gtest.h>

#include <algorithm>
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
      EXPECT_GT(std::stod(f[3]), 0.0) << shape << " / " << v << ": TFLOP/s";
    }
  }
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
  EXPECT_NE(bad_status, 0);
  EXPECT_NE(bad.find("--gemm: no variant 'no_such_gemm'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("reference"), std::string::npos) << bad;  // the known names are listed
}

// The chapter's list of flags: the program trains nothing, so --precision takes only fp16 (FP32 inputs
// are --f32-inputs), and --loss-scale, --schedule and --warmup-epochs are not flags of it; the other
// training flags it shares with the tutorials are accepted and do nothing (no --csv file is written).
TEST(Tutorial04, TakesTheFlagsTheChapterLists) {
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
