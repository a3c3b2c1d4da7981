// The files a tutorial writes at the end of a run (--save, --csv) are checked before anything else:
// a path that cannot be written is refused up front, naming the flag and the path, before the data
// loads (once, --save was checked only after the whole training run, and the trained model was lost).
// The check leaves nothing behind. Also: a misspelt HALFLING_* variant name stops a program before
// its data loads, naming the variable.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class TutorialOutputPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("halfling_outpaths_" + std::to_string(hl::test::fresh_seed()));
    fs::create_directories(dir_ / "out");
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A smoke run on the CPU with no data: whatever is checked before the data loads fails first.
  std::pair<int, std::string> run(const std::string& program, const std::string& args) const {
    return hl::test::run_command(hl::test::tutorial_program(program) + " --smoke --device cpu --data '" +
                                 (dir_ / "no_data").string() + "' " + args);
  }
  fs::path dir_;
};

TEST_F(TutorialOutputPaths, SaveIsCheckedBeforeTheDataLoads) {
  for (const std::string program : {"03_mlp_mnist", "07_conv_lenet", "09_cifar10_vgg"}) {
    SCOPED_TRACE(program);
    const std::string missing = (dir_ / "nodir" / "m.safetensors").string();
    auto [status, out] = run(program, "--save '" + missing + "'");
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, program + ": --save: cannot write " + missing + ": the folder " +
                                  (dir_ / "nodir").string() + " does not exist"))
        << out;
    EXPECT_FALSE(contains(out, "no_data")) << "the data was not loaded first:\n" << out;
    EXPECT_FALSE(fs::exists(dir_ / "nodir")) << "no folder made";

    std::tie(status, out) = run(program, "--save '" + (dir_ / "out").string() + "'");
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, "--save: cannot write " + (dir_ / "out").string() + ": it is a folder")) << out;

    // A good path passes the check, which leaves no file behind: the run then stops at the missing data.
    const std::string good = (dir_ / "out" / "m.safetensors").string();
    std::tie(status, out) = run(program, "--save '" + good + "'");
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, "no_data")) << out;
    EXPECT_TRUE(fs::is_empty(dir_ / "out")) << "the check left a file behind";
  }
}

TEST_F(TutorialOutputPaths, CsvIsCheckedBeforeTheDataLoads) {
  for (const std::string program : {"03_mlp_mnist", "05_mixed_precision", "06_loss_scaling", "07_conv_lenet",
                                    "09_cifar10_vgg"}) {
    SCOPED_TRACE(program);
    const std::string missing = (dir_ / "nodir" / "log.csv").string();
    const std::string extra = program == "06_loss_scaling" ? " --out '" + (dir_ / "out").string() + "'" : "";
    auto [status, out] = run(program, "--csv '" + missing + "'" + extra);
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, program + ": --csv: cannot write " + missing + ": the folder " +
                                  (dir_ / "nodir").string() + " does not exist"))
        << out;
    EXPECT_FALSE(contains(out, "no_data")) << "the data was not loaded first:\n" << out;

    const std::string good = (dir_ / "out" / "log.csv").string();
    std::tie(status, out) = run(program, "--csv '" + good + "'" + extra);
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, "no_data")) << out;
    EXPECT_FALSE(fs::exists(good)) << "the check left a file behind";
  }
}

// HALFLING_BN has no CPU variants: a typo in it used to pass unnoticed on a CPU run. Now every family's
// variable is checked against every device's names, before the data loads.
TEST_F(TutorialOutputPaths, MisspeltVariantEnvironmentStopsTheRunFirst) {
  for (const std::string var : {"HALFLING_BN", "HALFLING_GEMM", "HALFLING_CONV", "HALFLING_SOFTMAX"}) {
    SCOPED_TRACE(var);
    const std::string cmd = var + "=bogus " + hl::test::tutorial_program("07_conv_lenet") +
                            " --smoke --device cpu --model vgg_small --data '" + (dir_ / "no_data").string() + "'";
    const auto [status, out] = hl::test::run_command(cmd);
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, "07_conv_lenet: " + var + "=bogus: no ")) << out;
    EXPECT_TRUE(contains(out, "variant of that name on any device (known on cpu: ")) << out;
    EXPECT_FALSE(contains(out, "no_data")) << out;
  }
  // A CUDA name on a CPU run is no typo: the run goes on (to the missing data, here).
  const auto [status, out] = hl::test::run_command("HALFLING_BN=per_channel " +
                                                   hl::test::tutorial_program("07_conv_lenet") +
                                                   " --smoke --device cpu --model vgg_small --data '" +
                                                   (dir_ / "no_data").string() + "'");
  EXPECT_EQ(status, 1) << out;
  EXPECT_TRUE(contains(out, "no_data")) << out;
  EXPECT_FALSE(contains(out, "HALFLING_BN")) << out;
}

}  // namespace
