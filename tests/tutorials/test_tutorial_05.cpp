// Tutorial 05 (mixed precision): the smoke run prints the four-way table for MLP-512 and for LeNet;
// bad flags are refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/test_util.h"

namespace {

std::pair<int, std::string> run05(const std::string& args) {
  return hl::test::run_command(hl::test::tutorial_program("05_mixed_precision") + " " + args);
}

TEST(Tutorial05, SmokeRunPrintsTheComparisonTable) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] = run05("--smoke --device cpu --data " + dir);
  ASSERT_EQ(status, 0) << out;
  for (const char* row : {"| fp32 | FP32 | FP32 weights | none |", "| fp16 weights | FP16 | FP16 weights | dynamic",
                          "| mixed, no scaling | FP16 | FP32 masters | none |", "| mixed + dynamic | FP16 | FP32 masters | dynamic"}) {
    EXPECT_NE(out.find(row), std::string::npos) << row << "\n" << out;
  }
  // The activation-memory column and the paper's comparison (issue #5: at most 0.55x of fp32). Every
  // activation MLP-512 keeps for backward is FP16 in `mixed`, half the bytes of FP32, so the ratio
  // cannot fall below 0.5 by more than the allocator's 512-byte rounding; the loss and the softmax
  // statistics stay FP32 but are a few hundred bytes next to the 128 KiB hidden layers.
  // Each run follows the chapter's default schedule: DESIGN.md's lr 0.05 as the peak of a cosine
  // decay over the run (2048 smoke images: 16 steps).
  size_t schedules = 0;
  const std::string sched = "learning rate: cosine, peak 0.05 -> 0, warm-up 0 steps, 16 steps in all";
  for (size_t at = out.find(sched); at != std::string::npos; at = out.find(sched, at + 1)) ++schedules;
  EXPECT_EQ(schedules, 4u) << out;
  EXPECT_NE(out.find("| activations (MiB) |"), std::string::npos) << out;
  const std::string key = "activation memory, mixed + dynamic / fp32: ";
  const size_t at = out.find(key);
  ASSERT_NE(at, std::string::npos) << out;
  const double ratio = std::stod(out.substr(at + key.size()));
  EXPECT_GE(ratio, 0.49) << out;
  EXPECT_LE(ratio, 0.55) << out;
}

TEST(Tutorial05, LenetSmokeRunPrintsTheSameTable) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  // Two steps per configuration: LeNet costs ~0.5 s per 128-image step on a CPU, and the test is
  // about the program (the same four runs, the same table for the second model), not the accuracy.
  const auto [status, out] = run05("--smoke --model lenet --max-steps 2 --device cpu --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("LeNet on MNIST, 512 train / 256 test images"), std::string::npos) << out;
  for (const char* row : {"| fp32 | FP32 | FP32 weights | none |", "| fp16 weights | FP16 | FP16 weights | dynamic",
                          "| mixed, no scaling | FP16 | FP32 masters | none |", "| mixed + dynamic | FP16 | FP32 masters | dynamic"}) {
    EXPECT_NE(out.find(row), std::string::npos) << row << "\n" << out;
  }
  // Every run made exactly its two steps ("skipped / steps" in the last column).
  size_t rows = 0;
  for (size_t at = out.find(" / 2 |"); at != std::string::npos; at = out.find(" / 2 |", at + 1)) ++rows;
  EXPECT_EQ(rows, 4u) << out;
  auto [s1, o1] = run05("--model resnet --smoke");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("--model"), std::string::npos) << o1;
}

TEST(Tutorial05, SingleConfigurationAndBadFlags) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] = run05("--smoke --device cpu --single --precision mixed --loss-scale static:1024 --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("| mixed static:1024 | FP16 | FP32 masters | static:1024 |"), std::string::npos) << out;
  const auto [s0, o0] = run05("--smoke --device cpu --single --schedule constant --max-steps 3 --data " + dir);
  ASSERT_EQ(s0, 0) << o0;
  EXPECT_NE(o0.find("learning rate: constant, peak 0.05, warm-up 0 steps, 3 steps in all"), std::string::npos) << o0;
  auto [s1, o1] = run05("--loss-scale dynamic:bogus=1");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("--loss-scale"), std::string::npos) << o1;
  EXPECT_NE(o1.find("bogus"), std::string::npos) << o1;
  auto [s2, o2] = run05("--precision bf16");
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("--precision"), std::string::npos) << o2;
  auto [s3, o3] = run05("--schedule linear");
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("--schedule"), std::string::npos) << o3;
  auto [s4, o4] = run05("--warmup-epochs -1");
  EXPECT_NE(s4, 0);
  EXPECT_NE(o4.find("--warmup-epochs"), std::string::npos) << o4;
}

}  // namespace
