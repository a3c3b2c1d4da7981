// End to end: MLP-512 learns MNIST in FP32 on the CPU, and the tutorial program behaves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "datasets/dataloader.h"
#include "datasets/mnist.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "tests/datasets/data_files.h"  // TempDir, idx_bytes, write_idx
#include "tests/test_util.h"
#include "tests/tutorials/mlp_smoke_recipe.h"
#include "tests/tutorials/csv_reader.h"
#include "tutorials/common/trainer.h"

namespace {

using namespace hl;

using hl::test::run_command;
const std::string kProgram = hl::test::tutorial_program("03_mlp_mnist");

// The acceptance bar of the foundation issue: >= 97% test accuracy within 2 epochs, FP32, CPU, with
// the canonical recipe (DESIGN.md §4: batch 128, SGD momentum 0.9, lr 0.05). A single seed sits
// close to the bar (seeds 0-4 measured 96.87 .. 97.72%, see README), so three seeds are trained and
// their mean must clear it, while none may fall below 96.5%.
TEST(MlpMnist, Fp32CpuReaches97PercentInTwoEpochs) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const data::Dataset train = data::load_mnist(dir, data::Split::train);
  const data::Dataset test = data::load_mnist(dir, data::Split::test);
  double sum = 0.0;
  const int seeds = 3;
  for (int seed = 0; seed < seeds; ++seed) {
    Generator gen(static_cast<uint64_t>(seed));
    auto model = nn::mlp512(gen);
    optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    data::DataLoader train_loader(train, {.batch_size = 128, .shuffle = true, .seed = static_cast<uint64_t>(seed)});
    data::DataLoader test_loader(test, {.batch_size = 1000, .shuffle = false});
    tutorial::TrainOptions quiet;
    quiet.progress = false;
    double first_loss = 0.0, last_loss = 0.0;
    for (int epoch = 1; epoch <= 2; ++epoch) {
      const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, epoch, quiet);
      if (epoch == 1) first_loss = r.loss;
      last_loss = r.loss;
    }
    const double acc = tutorial::evaluate(*model, test_loader);
    std::printf("[ seed %d   ] test accuracy %.2f%%, training loss %.4f -> %.4f\n", seed, 100 * acc, first_loss,
                last_loss);
    EXPECT_GE(acc, 0.965) << "seed " << seed;
    EXPECT_LT(last_loss, first_loss);
    sum += acc;
  }
  EXPECT_GE(sum / seeds, 0.97);
}

TEST(MlpMnist, TutorialSmokeRun) {
  if (hl::test::data_dir("mnist").empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const hl::test::TempDir tmp;
  const std::string csv = (std::filesystem::path(tmp.str()) / "03.csv").string();
  const auto [status, out] =
      run_command(kProgram + " --smoke --device cpu --csv " + csv + " --data " + hl::test::data_dir("mnist"));
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("epoch 1/1"), std::string::npos) << out;
  // --csv: one row per epoch under the header, the numbers the epoch line printed.
  const auto rows = hl::test::read_csv_file(csv);
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"epoch", "train_loss", "train_acc", "test_acc", "seconds",
                                               "images_per_second"}));
  ASSERT_EQ(rows[1].size(), 6u);
  EXPECT_EQ(rows[1][0], "1");
  const double loss = std::stod(rows[1][1]), train_acc = std::stod(rows[1][2]), test_acc = std::stod(rows[1][3]);
  EXPECT_GT(loss, 0.0);
  EXPECT_TRUE(train_acc >= 0.0 && train_acc <= 1.0) << rows[1][2];
  EXPECT_TRUE(test_acc >= 0.0 && test_acc <= 1.0) << rows[1][3];
  EXPECT_GT(std::stod(rows[1][4]), 0.0);
  EXPECT_GT(std::stod(rows[1][5]), 0.0);
  // The same epoch as the printed line (which shows 4 decimals of the loss, 2 of each accuracy in %).
  double shown_loss = -1, shown_train = -1, shown_test = -1;
  const size_t at = out.find("epoch 1/1  loss ");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "epoch 1/1  loss %lf  train acc %lf%%  test acc %lf%%", &shown_loss,
                        &shown_train, &shown_test),
            3)
      << out.substr(at, 80);
  // The file keeps 6 significant digits, the line 4 decimals: each is off by at most half its last place.
  const double csv_half_place = 0.5 * std::pow(10.0, std::floor(std::log10(loss)) - 5);
  EXPECT_NEAR(loss, shown_loss, 0.5e-4 + csv_half_place + 1e-12);
  EXPECT_NEAR(100 * train_acc, shown_train, 0.006);
  EXPECT_NEAR(100 * test_acc, shown_test, 0.006);
  EXPECT_NE(out.find("final test accuracy"), std::string::npos) << out;
  EXPECT_NE(out.find("learning rate: constant, peak 0.05, warm-up 0 steps, 16 steps in all"), std::string::npos) << out;
  const auto [s2, o2] = run_command(kProgram + " --smoke --device cpu --schedule step --warmup-epochs 0.5 --data " +
                                    hl::test::data_dir("mnist"));
  EXPECT_EQ(s2, 0) << o2;
  EXPECT_NE(o2.find("learning rate: step, peak 0.05, warm-up 8 steps, 16 steps in all"), std::string::npos) << o2;
}

// What the smoke run prints is the chapter's recipe, computed again here with the library: the first
// 2048 training and 1000 test images, MLP-512 from the seed, SGD (lr 0.05, momentum 0.9), batches of
// 128 in a shuffled order. Two epochs, so that the last line's seconds per epoch is a mean.
TEST(MlpMnist, SmokeRunIsTheChaptersRecipe) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const hl::test::TempDir tmp;
  const std::string csv = tmp / "03.csv";
  const auto [status, out] = run_command(kProgram + " --smoke --epochs 2 --device cpu --csv " + csv + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("halfling 03_mlp_mnist: mnist, 2048 train / 1000 test images, device cpu"), std::string::npos)
      << out;
  const auto rows = hl::test::read_csv_file(csv);
  ASSERT_EQ(rows.size(), 3u) << out;

  hl::test::MlpSmokeRecipe recipe(dir);
  tutorial::TrainOptions quiet;
  quiet.progress = false;
  double seconds = 0.0;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const tutorial::EpochResult r = tutorial::train_epoch(*recipe.model, recipe.sgd, recipe.train_loader, epoch, quiet);
    const double test_acc = tutorial::evaluate(*recipe.model, recipe.test_loader);
    const auto& row = rows[static_cast<size_t>(epoch)];
    ASSERT_EQ(row.size(), 6u);
    // The file keeps 6 significant digits: the loss to a relative 1e-5, accuracies (k/2048, k/1000) to 1e-6.
    EXPECT_NEAR(std::stod(row[1]), r.loss, 1e-5 * r.loss) << "epoch " << epoch;
    EXPECT_NEAR(std::stod(row[2]), r.accuracy, 1e-6) << "epoch " << epoch;
    EXPECT_NEAR(std::stod(row[3]), test_acc, 1e-6) << "epoch " << epoch;
    seconds += std::stod(row[4]);
  }
  // The last line: the mean of the epochs' seconds, printed with one decimal.
  EXPECT_NEAR(hl::test::shown_seconds_per_epoch(out, 2, "cpu"), seconds / 2, 0.05 + 1e-6) << out;
}

// --train-subset N trains on the first N images, 0 (the default) on all of them; checked on a small
// MNIST-shaped set written here (300 training and 100 test images of noise).
TEST(MlpMnist, TrainSubsetTakesTheFirstImages) {
  const hl::test::TempDir dir;
  std::mt19937 rng(7);
  for (const auto& [split, n] : {std::pair<std::string, uint32_t>{"train", 300}, {"t10k", 100}}) {
    hl::test::Bytes pixels(size_t{n} * 28 * 28), labels(n);
    for (auto& p : pixels) p = static_cast<uint8_t>(rng() % 256);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    hl::test::write_idx(dir / (split + "-images-idx3-ubyte"), hl::test::idx_bytes({n, 28, 28}, pixels), false);
    hl::test::write_idx(dir / (split + "-labels-idx1-ubyte"), hl::test::idx_bytes({n}, labels), false);
  }
  const std::string run = kProgram + " --epochs 1 --device cpu --data " + dir.str();
  // (flags, training images): the default, 0, 1, a part, and exactly all (the last image is taken).
  for (const auto& [flags, images] : std::vector<std::pair<std::string, int>>{
           {"", 300}, {" --train-subset 0", 300}, {" --train-subset 1", 1}, {" --train-subset 120", 120},
           {" --train-subset 300", 300}}) {
    const auto [status, out] = run_command(run + flags);
    ASSERT_EQ(status, 0) << flags << "\n" << out;
    EXPECT_NE(out.find("mnist, " + std::to_string(images) + " train / 100 test images"), std::string::npos)
        << flags << "\n" << out;
  }
  for (const char* bad : {"-1", "60001"}) {
    const auto [status, out] = run_command(run + " --train-subset " + bad);
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(out.find("--train-subset"), std::string::npos) << out;
  }
}

TEST(MlpMnist, TutorialRejectsBadInputClearly) {
  auto [s1, o1] = run_command(kProgram + " --precision mixed");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("--precision"), std::string::npos) << o1;
  auto [s2, o2] = run_command(kProgram + " --epochs 0");
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("--epochs"), std::string::npos) << o2;
  auto [s3, o3] = run_command(kProgram + " --data /nonexistent/dir --smoke");
  EXPECT_EQ(s3, 1);
  EXPECT_NE(o3.find("/nonexistent/dir"), std::string::npos) << o3;
  auto [s4, o4] = run_command(kProgram + " --gemm no_such_variant --smoke");
  EXPECT_EQ(s4, 1);
  EXPECT_NE(o4.find("no_such_variant"), std::string::npos) << o4;
  auto [s5, o5] = run_command(kProgram + " --device tpu");
  EXPECT_NE(s5, 0);
  EXPECT_NE(o5.find("--device"), std::string::npos) << o5;
}

}  // namespace
