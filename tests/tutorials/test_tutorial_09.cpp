// Tutorial 09 (VGG-small on CIFAR-10): the smoke run trains in mixed precision with batch norm in FP32, follows the schedule, writes its CSV and its grid of
// augmented images; fp32 keeps everything in FP32 without masters; bad flags and a folder without
// CIFAR-10 give clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/cifar10.h"
#include "datasets/dataloader.h"
#include "datasets/image.h"
#include "tests/datasets/data_files.h"  // TempDir, write_file
#include "tests/test_util.h"
#include "tutorials/common/models.h"
#include "tutorials/common/trainer.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::pair<int, std::string> run09(const std::string& args) {
  return hl::test::run_command(hl::test::tutorial_program("09_cifar10_vgg") + " " + args);
}

// The augmentation grid (--samples): row 1 holds the first training image of each class, in class
// order, as stored; rows 2-4 what the loader's crop (pad 4) + flip made of the same image, so each of
// those tiles is the stored image shifted by at most 4 pixels each way, mirrored or not (the padding's
// pixels are not compared). Tiles are 32x32 images enlarged 3x, 2 pixels apart.
void check_augmentation_grid(const hl::data::Image& grid, const std::string& cifar_dir) {
  const hl::data::Dataset train = hl::data::load_cifar10(cifar_dir, hl::data::Split::train);
  const std::vector<int32_t> labels = train.labels.to_int();
  const auto at = [&grid](int row, int col, int64_t x, int64_t y, int ch) {
    return grid.pixels[static_cast<size_t>(((2 + row * 98 + y * 3) * grid.width + 2 + col * 98 + x * 3) * 3 + ch)];
  };
  int moved = 0;
  for (int c = 0; c < 8; ++c) {
    const auto first = std::find(labels.begin(), labels.end(), c);
    ASSERT_NE(first, labels.end()) << "class " << c;
    const int64_t i = first - labels.begin();
    const hl::data::Image src =
        hl::data::tensor_to_image(train.images.slice_rows(i, i + 1).reshape({3, 32, 32}), train.norm);
    const auto px = [&src](int64_t x, int64_t y, int ch) {
      return src.pixels[static_cast<size_t>((y * 32 + x) * 3 + ch)];
    };
    // Whether the tile at (row, col) is src mirrored (or not) and shifted by (dx, dy).
    const auto shows = [&](int row, bool flip, int dx, int dy) {
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) {
          const int64_t sx = (flip ? 31 - x : x) + dx, sy = y + dy;
          if (sx < 0 || sx >= 32 || sy < 0 || sy >= 32) continue;
          for (int ch = 0; ch < 3; ++ch)
            if (at(row, c, x, y, ch) != px(sx, sy, ch)) return false;
        }
      return true;
    };
    EXPECT_TRUE(shows(0, false, 0, 0)) << "row 1, tile " << c + 1 << ": not the first image of class " << c;
    for (int row = 1; row <= 3; ++row) {
      bool found = false;
      for (int flip = 0; flip <= 1 && !found; ++flip)
        for (int dy = -4; dy <= 4 && !found; ++dy)
          for (int dx = -4; dx <= 4 && !found; ++dx)
            if (shows(row, flip == 1, dx, dy)) {
              found = true;
              moved += flip == 1 || dx != 0 || dy != 0;
            }
      EXPECT_TRUE(found) << "row " << row + 1 << ", tile " << c + 1 << ": not a crop + flip of class " << c
                         << "'s image";
    }
  }
  EXPECT_GT(moved, 0) << "none of the 24 augmented tiles was moved or mirrored";
}

class Tutorial09 : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = hl::test::data_dir("cifar10");
    dir_ = fs::temp_directory_path() / ("halfling_t09_" + std::to_string(hl::test::fresh_seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string data_;
  fs::path dir_;
};

TEST_F(Tutorial09, SmokeRunInMixedPrecision) {
  if (data_.empty()) GTEST_SKIP() << "CIFAR-10 not found: see datasets/fetch.sh cifar10";
  const std::string csv = (dir_ / "log.csv").string(), png = (dir_ / "aug.png").string();
  const auto [status, out] = run09("--smoke --device cpu --data " + data_ + " --csv " + csv + " --samples " + png);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "VGG-small on CIFAR-10 (")) << out;
  EXPECT_TRUE(contains(out, "520 train / 100 test images, 2 epoch(s), batch 16, device cpu, precision mixed, loss scale dynamic"))
      << out;
  // §3.3: FP16 convolution weights, FP32 batch norm (parameters and running statistics), FP32 masters.
  EXPECT_TRUE(contains(out, "dtypes: layer 0 Conv2d(3 -> 64, 3x3, stride 1x1, pad 1x1, no bias): weight f16")) << out;
  EXPECT_TRUE(contains(out, "dtypes: layer 1 BatchNorm2d(64): weight f32, bias f32, running_mean f32, running_var f32")) << out;
  EXPECT_TRUE(contains(out, "optimizer: SGD, momentum 0.9, weight decay 0.0005, master weights FP32")) << out;
  EXPECT_TRUE(contains(out, "learning rate: cosine, peak 0.1 -> 0, warm-up 3 steps, 6 steps in all")) << out;
  EXPECT_TRUE(contains(out, "epoch 1/2  lr 0.0333")) << out;  // step 0 of a 3-step warm-up
  EXPECT_TRUE(contains(out, "epoch 2/2  lr 0.1000")) << out;  // step 3: the peak, where the cosine starts
  EXPECT_TRUE(contains(out, "final test accuracy")) << out;
  EXPECT_TRUE(contains(out, "peak memory")) << out;
  EXPECT_TRUE(contains(out, " / 6\n")) << out;  // skipped steps out of 2 epochs x 3 steps

  // The CSV: a header and one row per epoch, the loss finite, the accuracy a fraction.
  std::ifstream in(csv);
  ASSERT_TRUE(in.good()) << csv;
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header, "epoch,lr,train_loss,train_acc,test_acc,seconds,images_per_second,skipped_steps,loss_scale,peak_mib");
  int rows = 0;
  double best = 0, seconds = 0, last_peak = 0, last_acc = 0;
  while (std::getline(in, line)) {
    ++rows;
    std::stringstream ss(line);
    std::vector<double> v;
    for (std::string cell; std::getline(ss, cell, ',');) v.push_back(std::stod(cell));
    ASSERT_EQ(v.size(), 10u) << line;
    // The epoch's line shows the row's accuracies (in percent) and images per second.
    const size_t at = out.find("epoch " + std::to_string(rows) + "/2  lr ");
    ASSERT_NE(at, std::string::npos) << out;
    double train_acc = 0, test_acc = 0, epoch_img_s = 0;
    ASSERT_EQ(std::sscanf(out.c_str() + at,
                          "epoch %*d/2  lr %*f  loss %*f  train acc %lf%%  test acc %lf%%  %*f s  (%lf img/s)",
                          &train_acc, &test_acc, &epoch_img_s),
              3)
        << out;
    EXPECT_NEAR(train_acc, 100 * v[3], 0.006) << line;
    EXPECT_NEAR(test_acc, 100 * v[4], 0.006) << line;
    EXPECT_NEAR(epoch_img_s, v[6], 0.5 + 1e-5 * v[6]) << line;
    best = std::max(best, v[4]), seconds += v[5], last_peak = v[9], last_acc = v[4];
    EXPECT_EQ(v[0], rows);
    EXPECT_TRUE(std::isfinite(v[2])) << line;
    EXPECT_GE(v[4], 0.0);
    EXPECT_LE(v[4], 1.0);
    EXPECT_GT(v[9], 0.0) << "peak memory";
  }
  EXPECT_EQ(rows, 2);
  // The last line sums the epochs up: the last and the best test accuracy, the mean epoch time, the
  // training steps' peak (the running peak the last epoch reports), the skipped steps.
  const size_t last = out.find("final test accuracy ");
  ASSERT_NE(last, std::string::npos) << out;
  double acc = 0, best_shown = 0, img_s = 0, s_per_epoch = 0, peak = 0;
  long long epochs = 0, skipped = 0, steps = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + last,
                        "final test accuracy %lf%% (best %lf%%) after %lld epoch(s); %lf img/s, "
                        "%lf s per epoch on cpu; peak memory %lf MiB; skipped steps %lld / %lld",
                        &acc, &best_shown, &epochs, &img_s, &s_per_epoch, &peak, &skipped, &steps),
            8)
      << out;
  EXPECT_NEAR(acc, 100 * last_acc, 0.006);
  EXPECT_NEAR(best_shown, 100 * best, 0.006);
  EXPECT_EQ(epochs, 2);
  EXPECT_NEAR(s_per_epoch, seconds / 2, 0.051);
  EXPECT_NEAR(peak, last_peak, 0.051);
  EXPECT_EQ(skipped, 0);
  EXPECT_EQ(steps, 6);
  // Images per second over the run: 2 epochs x 3 steps x 16 images over the epochs' seconds.
  EXPECT_NEAR(img_s, 96 / seconds, 0.5 + 1e-3 * img_s) << out;

  // The augmentation grid: 4 rows of 8 tiles, each a 32x32 image enlarged 3x.
  const hl::data::Image grid = hl::data::read_image(png);
  const hl::data::Image expect =
      hl::data::make_grid(std::vector<hl::data::Image>(32, hl::data::Image{96, 96, 3, std::vector<uint8_t>(96 * 96 * 3)}), 8);
  ASSERT_EQ(grid.width, expect.width);
  ASSERT_EQ(grid.height, expect.height);
  ASSERT_EQ(grid.channels, 3);
  check_augmentation_grid(grid, data_);
}

TEST_F(Tutorial09, Fp32KeepsEverythingFp32WithoutMastersAndSavesAModelCard) {
  if (data_.empty()) GTEST_SKIP() << "CIFAR-10 not found: see datasets/fetch.sh cifar10";
  const std::string ckpt = (dir_ / "vgg.safetensors").string();
  // An explicit --loss-scale is not used with fp32 (DESIGN.md §3), and a note says so.
  const auto [status, out] = run09("--smoke --max-steps 1 --device cpu --precision fp32 --loss-scale static:8 "
                                   "--schedule step --samples '' --data " + data_ + " --save " + ckpt);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "precision fp32, loss scale none")) << out;
  EXPECT_TRUE(contains(out, "note: --loss-scale static:8 is not used: fp32 trains without loss scaling")) << out;
  EXPECT_TRUE(contains(out, "no bias): weight f32")) << out;
  EXPECT_TRUE(contains(out, "BatchNorm2d(64): weight f32")) << out;
  EXPECT_TRUE(contains(out, "master weights none")) << out;
  EXPECT_TRUE(contains(out, "learning rate: step, peak 0.1, warm-up 1 steps, 2 steps in all")) << out;
  EXPECT_FALSE(contains(out, "augmentation samples")) << out;
  EXPECT_TRUE(contains(out, "saved the model to " + ckpt)) << out;
  // Tutorial 10 can rebuild it: VGG-small by name, its batch-norm statistics included.
  const hl::tutorial::LoadedModel lm = hl::tutorial::load_model(ckpt);
  EXPECT_EQ(lm.card.model, "vgg_small");
  EXPECT_EQ(lm.card.dataset, "cifar10");
  EXPECT_EQ(lm.card.channels, 3);
  EXPECT_EQ(lm.card.height, 32);
  EXPECT_EQ(lm.card.width, 32);
  EXPECT_EQ(lm.card.class_names.size(), 10u);
  EXPECT_EQ(lm.card.class_names[0], "airplane");
  bool moved = false;  // two training steps moved the running mean away from its initial zeros
  for (const auto& [name, t] : lm.model->named_buffers())
    if (name == "1.running_mean")
      for (float v : t.to_vector()) moved = moved || v != 0.0f;
  EXPECT_TRUE(moved) << "BatchNorm2d's running statistics were not saved and loaded";
  // The final test accuracy is the model's on the smoke test set (the first 10 images of each class),
  // evaluated again here on the saved model: fp32 keeps no other copy of the weights.
  const size_t at = out.find("final test accuracy ");
  ASSERT_NE(at, std::string::npos) << out;
  const hl::data::Dataset test =
      hl::tutorial::balanced_subset(hl::data::load_cifar10(data_, hl::data::Split::test), 10);
  hl::data::DataLoader loader(test, {.batch_size = 500, .shuffle = false});
  char shown[64];
  std::snprintf(shown, sizeof shown, "final test accuracy %.2f%%", 100 * hl::tutorial::evaluate(*lm.model, loader));
  EXPECT_EQ(out.substr(at, std::string(shown).size()), shown) << out;
}

// fp32 without --loss-scale: nothing was given, so no note about a scale not being used. On a CIFAR-10
// set written here in the binary format (20 training images of noise, five each of classes 0-3, and 2
// test images), so that the run takes a second, not a VGG-small run on the real subsets.
TEST(Tutorial09Small, Fp32WithoutLossScaleHasNoNote) {
  const hl::test::TempDir dir;
  std::mt19937 rng(9);
  for (int b = 1; b <= 5; ++b) {
    const std::string batch = dir / ("data_batch_" + std::to_string(b) + ".bin");
    hl::test::write_file(batch, hl::test::cifar10_records({0, 1, 2, 3}, rng));
  }
  hl::test::write_file(dir / "test_batch.bin", hl::test::cifar10_records({0, 1}, rng));
  const auto [status, out] =
      run09("--smoke --max-steps 1 --epochs 1 --device cpu --precision fp32 --samples '' --data " + dir.str());
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "20 train / 2 test images")) << out;
  EXPECT_TRUE(contains(out, "precision fp32, loss scale none")) << out;
  EXPECT_FALSE(contains(out, "note: --loss-scale")) << out;
}

// --smoke trains 2 epochs of 3 steps unless told otherwise: an explicit --epochs wins, as an explicit
// --max-steps does (once, --smoke --epochs 1 ran 2 epochs).
TEST_F(Tutorial09, SmokeKeepsAnExplicitEpochCountAndCountsSkippedSteps) {
  if (data_.empty()) GTEST_SKIP() << "CIFAR-10 not found: see datasets/fetch.sh cifar10";
  // A static scale of 2^24 overflows FP16 in every backward pass (the logits' gradient alone reaches
  // 2^24 / 16 x |p - 1|), so the step is skipped and counted.
  const auto [status, out] = run09("--smoke --epochs 1 --max-steps 1 --device cpu --precision mixed "
                                   "--loss-scale static:16777216 --samples '' --data " + data_);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "520 train / 100 test images, 1 epoch(s), batch 16")) << out;
  EXPECT_TRUE(contains(out, "epoch 1/1 ")) << out;
  EXPECT_FALSE(contains(out, "epoch 2/")) << out;
  EXPECT_TRUE(contains(out, "skipped steps 1 / 1\n")) << out;
}

TEST_F(Tutorial09, BadFlagsAndMissingData) {
  auto expect_refused = [](const std::pair<int, std::string>& r, const std::string& part) {
    EXPECT_NE(r.first, 0) << r.second;
    EXPECT_TRUE(contains(r.second, part)) << "'" << part << "' in: " << r.second;
  };
  expect_refused(run09("--schedule linear"), "--schedule");
  expect_refused(run09("--precision bf16"), "--precision");
  expect_refused(run09("--weight-decay -1"), "--weight-decay");
  expect_refused(run09("--loss-scale dynamic:bogus=1"), "bogus");
  expect_refused(run09("--device tpu"), "--device");
  expect_refused(run09("--max-steps 0"), "--max-steps");  // 0 trained nothing, -7 meant the whole epoch
  expect_refused(run09("--max-steps -7"), "--max-steps");
  // Past the cap, 2^40 (far above any run, far below int64's end). The empty --data folder makes an
  // accepted value fail fast, and without naming the flag.
  expect_refused(run09("--data " + dir_.string() + " --max-steps 1099511627777"), "--max-steps");
  // An empty folder: neither the binary batches nor an image folder, and the message says how to get them.
  const auto r = run09("--smoke --device cpu --data " + dir_.string());
  EXPECT_EQ(r.first, 1) << r.second;
  EXPECT_TRUE(contains(r.second, "09_cifar10_vgg: load_cifar10(" + dir_.string() + "): found neither the binary batches"))
      << r.second;
  EXPECT_TRUE(contains(r.second, "datasets/fetch.sh cifar10")) << r.second;
  // The chapter's run: 30 epochs unless --epochs says otherwise.
  const auto help = run09("--help");
  EXPECT_EQ(help.first, 0) << help.second;
  EXPECT_EQ(hl::test::help_default(help.second, "--epochs"), "30") << help.second;
  // And the rest of the chapter's recipe: mixed precision, a cosine decay from 0.1 after a warm-up of
  // 2 epochs (a smoke run caps the warm-up at half its steps, so only --help shows the 2).
  EXPECT_EQ(hl::test::help_default(help.second, "--warmup-epochs"), "2") << help.second;
  EXPECT_EQ(hl::test::help_default(help.second, "--schedule"), "cosine") << help.second;
  EXPECT_EQ(hl::test::help_default(help.second, "--lr"), "0.1") << help.second;
  EXPECT_EQ(hl::test::help_default(help.second, "--precision"), "mixed") << help.second;
}

}  // namespace
