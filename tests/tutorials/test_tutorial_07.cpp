// Tutorial 07 (convolutional networks): the LeNet smoke run trains in mixed precision and reports its
// accuracy; the VGG-small smoke run makes its mixed-precision steps on CIFAR-10 with augmentation, on
// subsets that hold every class (an explicit --max-steps wins over the smoke run's 2); fp32 trains
// without loss scaling; --conv pins a convolution variant and refuses an unknown one; --max-steps below
// 1 or past 2^40 is refused; --help shows the chapter's defaults.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "datasets/dataloader.h"
#include "datasets/dataset.h"
#include "datasets/mnist.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "framework/tensor.h"
#include "tests/datasets/data_files.h"  // TempDir, write_file
#include "tests/test_util.h"
#include "tests/tutorials/csv_reader.h"
#include "tutorials/common/trainer.h"

namespace {

std::pair<int, std::string> run07(const std::string& args) {
  return hl::test::run_command(hl::test::tutorial_program("07_conv_lenet") + " " + args);
}

TEST(Tutorial07, LenetSmokeRunInMixedPrecision) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const hl::test::TempDir tmp;
  const std::string csv = (std::filesystem::path(tmp.str()) / "07.csv").string();
  // No --precision: mixed with dynamic scaling is the chapter's default (asserted below).
  const auto [status, out] = run07("--smoke --device cpu --csv " + csv + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  // --csv: one row per epoch, with the steps the scaler skipped and its scale at the epoch's end.
  const auto rows = hl::test::read_csv_file(csv);
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"epoch", "train_loss", "train_acc", "test_acc", "seconds",
                                               "images_per_second", "skipped_steps", "loss_scale"}));
  ASSERT_EQ(rows[1].size(), 8u);
  EXPECT_EQ(rows[1][0], "1");
  const int skipped = std::stoi(rows[1][6]);
  const double scale = std::stod(rows[1][7]);
  EXPECT_TRUE(skipped >= 0 && skipped <= 4) << rows[1][6];  // 4 steps in the smoke epoch
  // Dynamic scaling from 65536: halved once per skipped step, not yet grown (interval 2000).
  EXPECT_EQ(scale, std::ldexp(65536.0, -skipped)) << rows[1][7];
  char shown[64];
  std::snprintf(shown, sizeof shown, "skipped %d  scale %g\n", skipped, scale);
  EXPECT_NE(out.find(shown), std::string::npos) << shown << " in\n" << out;
  EXPECT_NE(out.find("lenet on MNIST, 512 train / 500 test images"), std::string::npos) << out;
  EXPECT_NE(out.find("precision mixed, loss scale dynamic:init=65536,interval=2000"), std::string::npos) << out;
  EXPECT_NE(out.find("Conv2d(32 -> 64, 5x5, stride 1x1, pad 2x2)  51264"), std::string::npos) << out;
  EXPECT_NE(out.find("convolution variant: im2col"), std::string::npos) << out;
  // DESIGN.md section 4's constant rate unless --schedule says otherwise (512 smoke images: 4 steps).
  EXPECT_NE(out.find("learning rate: constant, peak 0.05, warm-up 0 steps, 4 steps in all"), std::string::npos) << out;
  EXPECT_NE(out.find("final test accuracy"), std::string::npos) << out;
  // The test set was evaluated: a model that has trained 4 steps gets some of 500 digits right (0.00%
  // would mean nothing was evaluated), and the log, the epoch line and the last line agree.
  const double test_acc = std::stod(rows[1][3]);
  EXPECT_GT(test_acc, 0.0) << out;
  char acc[64];
  std::snprintf(acc, sizeof acc, "test acc %.2f%%", 100 * test_acc);
  EXPECT_NE(out.find(acc), std::string::npos) << acc << " in\n" << out;
  std::snprintf(acc, sizeof acc, "final test accuracy %.2f%% after 1 epoch(s)", 100 * test_acc);
  EXPECT_NE(out.find(acc), std::string::npos) << acc << " in\n" << out;
}

// What the LeNet smoke run prints in fp32 is the chapter's recipe, computed again here with the library:
// the first 512 training and 500 test images, LeNet from the seed with fused Conv2d/Linear + ReLU, SGD
// (lr 0.05, momentum 0.9), batches of 128 in a shuffled order. Two epochs of 2 steps, so that the last
// line's seconds per epoch is a mean.
TEST(Tutorial07, LenetFp32SmokeRunIsTheChaptersRecipe) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const hl::test::TempDir tmp;
  const std::string csv = tmp / "07.csv";
  const auto [status, out] =
      run07("--smoke --epochs 2 --max-steps 2 --device cpu --precision fp32 --csv " + csv + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  const auto rows = hl::test::read_csv_file(csv);
  ASSERT_EQ(rows.size(), 3u) << out;

  using namespace hl;
  const data::Dataset train = data::load_mnist(dir, data::Split::train).subset(0, 512);
  const data::Dataset test = data::load_mnist(dir, data::Split::test).subset(0, 500);
  Generator gen(0);
  auto model = nn::lenet(gen);
  model->fuse_linear_relu(true);
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader train_loader(train, {.batch_size = 128, .shuffle = true, .seed = 0});
  data::DataLoader test_loader(test, {.batch_size = 500, .shuffle = false});
  tutorial::TrainOptions quiet;
  quiet.progress = false;
  quiet.max_steps = 2;
  double seconds = 0.0;
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, epoch, quiet);
    const double test_acc = tutorial::evaluate(*model, test_loader);
    const auto& row = rows[static_cast<size_t>(epoch)];
    ASSERT_EQ(row.size(), 8u);
    // The file keeps 6 significant digits: the loss to a relative 1e-5, accuracies (k/256, k/500) to 1e-6.
    EXPECT_NEAR(std::stod(row[1]), r.loss, 1e-5 * r.loss) << "epoch " << epoch << "\n" << out;
    EXPECT_NEAR(std::stod(row[2]), r.accuracy, 1e-6) << "epoch " << epoch << "\n" << out;
    EXPECT_NEAR(std::stod(row[3]), test_acc, 1e-6) << "epoch " << epoch << "\n" << out;
    // The epoch line shows the same accuracies, in % with two decimals.
    char accuracies[64];
    std::snprintf(accuracies, sizeof accuracies, "train acc %.2f%%  test acc %.2f%%", 100 * r.accuracy,
                  100 * test_acc);
    EXPECT_NE(out.find(accuracies), std::string::npos) << accuracies << " in\n" << out;
    seconds += std::stod(row[4]);
  }
  // The last line: the mean of the epochs' seconds, printed with one decimal.
  EXPECT_NEAR(hl::test::shown_seconds_per_epoch(out, 2, "cpu"), seconds / 2, 0.05 + 1e-6) << out;
}

// The loss scaler is in the loop: from a scale of 2^30, the first step's FP16 gradients overflow
// (softmax minus one-hot over 128 is about 1e-3, times 2^30), the step is skipped and the scale halved.
TEST(Tutorial07, MixedSmokeRunSkipsAnOverflowingStep) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const hl::test::TempDir tmp;
  const std::string csv = tmp / "07.csv";
  const auto [status, out] =
      run07("--smoke --max-steps 2 --device cpu --loss-scale dynamic:init=1073741824 --csv " + csv + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  const auto rows = hl::test::read_csv_file(csv);
  ASSERT_EQ(rows.size(), 2u) << out;
  ASSERT_EQ(rows[1].size(), 8u);
  EXPECT_GE(std::stoi(rows[1][6]), 1) << out;
  const double scale = std::ldexp(1.0, 30 - std::stoi(rows[1][6]));  // halved once per skipped step
  EXPECT_NEAR(std::stod(rows[1][7]), scale, 1e-5 * scale) << out;     // the file keeps 6 significant digits
}

// DESIGN.md §3: fp32 has no loss scaling. An explicit --loss-scale is not used then, and a note says so.
TEST(Tutorial07, Fp32TrainsWithoutLossScaling) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] =
      run07("--smoke --max-steps 1 --device cpu --precision fp32 --loss-scale static:8 --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("precision fp32, loss scale none"), std::string::npos) << out;
  EXPECT_NE(out.find("note: --loss-scale static:8 is not used: fp32 trains without loss scaling"), std::string::npos)
      << out;
  EXPECT_NE(out.find("scale 1\n"), std::string::npos) << out;
  // Without the flag there is nothing to note.
  const auto [plain_status, plain] = run07("--smoke --max-steps 1 --device cpu --precision fp32 --data " + dir);
  ASSERT_EQ(plain_status, 0) << plain;
  EXPECT_NE(plain.find("precision fp32, loss scale none"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("note: --loss-scale"), std::string::npos) << plain;
}

// The chapter's defaults (README: "`--epochs` (5 here)", mixed precision), as --help shows them.
TEST(Tutorial07, HelpShowsTheChaptersDefaults) {
  const auto [status, out] = run07("--help");
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(hl::test::help_default(out, "--epochs"), "5") << out;
  EXPECT_EQ(hl::test::help_default(out, "--precision"), "mixed") << out;
  EXPECT_EQ(hl::test::help_default(out, "--loss-scale"), "dynamic") << out;
}

// Below 1, and past 2^40 (far above any run, far below int64's end). A missing --data folder makes an
// accepted value fail fast, and without naming the flag.
TEST(Tutorial07, MaxStepsOutOfRangeIsRefused) {
  for (const char* bad : {"0", "-7", "1099511627777"}) {
    const auto [status, out] = run07(std::string("--device cpu --data /nonexistent/halfling --max-steps ") + bad);
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(out.find("--max-steps"), std::string::npos) << out;
  }
}

TEST(Tutorial07, ConvFlagPinsAVariantAndRefusesUnknownOnes) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [s1, o1] = run07("--device cpu --conv no_such_conv --data " + dir);
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("--conv: no variant 'no_such_conv' on cpu (known:"), std::string::npos) << o1;
  const auto [s2, o2] = run07("--device cpu --list-variants");
  EXPECT_EQ(s2, 0) << o2;
  EXPECT_NE(o2.find("conv on cpu:"), std::string::npos) << o2;
  EXPECT_NE(o2.find("im2col"), std::string::npos) << o2;
  // A CUDA build lists its variants too (no GPU needed), marking those that run only by name: no
  // convolution rung since rung 4b ran on an H100 (2026-11-27), softmax's cluster_row and packed_warp
  // (verified, slower where timed) and packed_kept (new on 2026-11-28, not yet run on a GPU), and not
  // packed_row or packed_online (verified and promoted after their H100 runs).
  if (hl::runtime::cuda_compiled()) {
    EXPECT_NE(o2.find("implicit_gemm_wmma  (priority 30)  "), std::string::npos) << o2;
    EXPECT_NE(o2.find("implicit_gemm_nhwc_wgrad  (priority 41)  "), std::string::npos) << o2;
    EXPECT_NE(o2.find("implicit_gemm_nhwc  (priority 40)  "), std::string::npos) << o2;
    EXPECT_NE(o2.find("implicit_gemm_table  (priority 35)  "), std::string::npos) << o2;
    EXPECT_NE(o2.find("cluster_row  (priority 33, opt-in: by name only)"), std::string::npos) << o2;
    EXPECT_NE(o2.find("packed_row  (priority 34)  "), std::string::npos) << o2;
    EXPECT_NE(o2.find("packed_warp  (priority 36, opt-in: by name only)"), std::string::npos) << o2;
    EXPECT_NE(o2.find("packed_online  (priority 32)  "), std::string::npos) << o2;
    EXPECT_NE(o2.find("packed_kept  (priority 31, opt-in: by name only)"), std::string::npos) << o2;
  }
}

TEST(Tutorial07, VggSmallSmokeStepsInMixedPrecision) {
  const std::string dir = hl::test::data_dir("cifar10");
  if (dir.empty()) GTEST_SKIP() << "CIFAR-10 not found: see datasets/fetch.sh";
  // --max-steps 1: an explicit value wins over the smoke run's 2 steps (as in 09 and bench/train).
  const auto [status, out] =
      run07("--smoke --max-steps 1 --device cpu --model vgg_small --precision mixed --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("vgg_small on CIFAR-10, 100 train / 100 test images"), std::string::npos) << out;
  // Every class, counted from the labels: the image folder is sorted by class, and subset(0, 64) of it
  // was 64 airplanes ("test acc 100.00%" after one step).
  EXPECT_NE(out.find("smoke subsets (the first 10 images of each class): 100 train images in 10 classes, "
                     "100 test images in 10 classes\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("learning rate: constant, peak 0.05, warm-up 0 steps, 1 steps in all"), std::string::npos) << out;
  EXPECT_NE(out.find("BatchNorm2d(256)"), std::string::npos) << out;
  EXPECT_NE(out.find("final test accuracy"), std::string::npos) << out;
}

// A VGG-small smoke run on a small binary CIFAR-10 set written here: 50 training records (1 airplane, 4
// automobiles, then 15 birds and 10 each of cats, deer and dogs) and 2 test records (birds). The
// balanced subsets take the first 10 of each class, 45 images; the smoke note counts the classes that
// have images (6, and 1), not every class (10) nor those of two or more (5); batches of 16, and 2 steps
// of the 3 batches unless --max-steps says otherwise.
TEST(Tutorial07, VggSmallSmokeOnASmallSet) {
  const hl::test::TempDir dir;
  std::vector<uint8_t> labels = {0, 1, 1, 1, 1};
  for (const auto& [label, n] : {std::pair<uint8_t, int>{2, 15}, {3, 10}, {4, 10}, {5, 10}})
    labels.insert(labels.end(), static_cast<size_t>(n), label);
  std::mt19937 rng(7);
  for (size_t b = 0; b < 5; ++b) {  // 10 records in each of the five training batches
    const hl::test::Bytes batch(labels.begin() + static_cast<std::ptrdiff_t>(10 * b),
                                labels.begin() + static_cast<std::ptrdiff_t>(10 * b + 10));
    hl::test::write_file(dir / ("data_batch_" + std::to_string(b + 1) + ".bin"), hl::test::cifar10_records(batch, rng));
  }
  hl::test::write_file(dir / "test_batch.bin", hl::test::cifar10_records({2, 2}, rng));
  const auto [status, out] = run07("--smoke --device cpu --model vgg_small --precision fp32 --data " + dir.str());
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("vgg_small on CIFAR-10, 45 train / 2 test images, 1 epoch(s), batch 16, device cpu"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("smoke subsets (the first 10 images of each class): 45 train images in 6 classes, "
                     "2 test images in 1 classes\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("learning rate: constant, peak 0.05, warm-up 0 steps, 2 steps in all"), std::string::npos) << out;
}

// The helper behind it (tutorials/common/trainer.h), on a set sorted by class as the image folder is:
// the first `per_class` of each class, in class order, all of a class when it has fewer; a class with
// none stays empty. A plain subset of the same size holds one class.
TEST(Tutorial07, BalancedSubsetTakesEveryClassOfAClassSortedSet) {
  hl::data::Dataset ds;
  std::vector<float> pixels;
  std::vector<int32_t> labels;
  for (int32_t c = 0; c < 3; ++c)
    for (int i = 0; i < (c == 2 ? 2 : 10); ++i) {  // 10, 10 and 2 images; class 3 has none
      const auto index = static_cast<float>(labels.size());
      pixels.insert(pixels.end(), {index, index, index, -index});  // 1x2x2, the first three hold the index
      labels.push_back(c);
    }
  const auto n = static_cast<int64_t>(labels.size());
  ds.images = hl::Tensor::from_vector(pixels, {n, 1, 2, 2});
  ds.labels = hl::Tensor::from_vector(labels, {n});
  ds.num_classes = 4;
  ds.name = "sorted";
  EXPECT_EQ(hl::tutorial::class_counts(ds.subset(0, 10)), (std::vector<int64_t>{10, 0, 0, 0}));

  const hl::data::Dataset b = hl::tutorial::balanced_subset(ds, 4);
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(b.labels.to_int(), (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(hl::tutorial::class_counts(b), (std::vector<int64_t>{4, 4, 2, 0}));
  EXPECT_EQ(b.images.shape(), (hl::Shape{10, 1, 2, 2}));
  const std::vector<double> x = b.images.to_double();
  const std::vector<double> first{0, 1, 2, 3, 10, 11, 12, 13, 20, 21};  // the images each came from
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(x[4 * i], first[i]) << i;
    EXPECT_EQ(x[4 * i + 3], -first[i]) << i;
  }
  EXPECT_EQ(b.name, "sorted[balanced 10]");
  EXPECT_EQ(b.num_classes, 4);
}

// A set of one image is a subset like any other (named as one, its image's shape kept, height and width
// apart), none per class takes nothing, and labels outside [0, num_classes) are counted nowhere.
TEST(Tutorial07, BalancedSubsetAndClassCountsOfTinySets) {
  hl::data::Dataset one;
  one.images = hl::Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {1, 1, 2, 3});
  one.labels = hl::Tensor::from_vector(std::vector<int32_t>{2}, {1});
  one.num_classes = 3;
  one.name = "one";
  EXPECT_EQ(hl::tutorial::class_counts(one), (std::vector<int64_t>{0, 0, 1}));
  const hl::data::Dataset b1 = hl::tutorial::balanced_subset(one, 3);
  EXPECT_EQ(b1.name, "one[balanced 1]");
  EXPECT_EQ(b1.images.shape(), (hl::Shape{1, 1, 2, 3}));
  EXPECT_EQ(b1.images.to_double(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(b1.labels.to_int(), (std::vector<int32_t>{2}));
  const hl::data::Dataset b0 = hl::tutorial::balanced_subset(one, 0);
  EXPECT_EQ(b0.size(), 0);
  EXPECT_EQ(b0.name, "one[balanced 0]");

  EXPECT_EQ(hl::tutorial::class_counts(hl::data::Dataset()), std::vector<int64_t>()) << "no classes, no counts";
  hl::data::Dataset odd = one;
  odd.images = hl::Tensor::zeros({4, 1, 1, 1});
  odd.labels = hl::Tensor::from_vector(std::vector<int32_t>{-1, 3, 0, 2}, {4});
  EXPECT_EQ(hl::tutorial::class_counts(odd), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(hl::tutorial::balanced_subset(odd, 1).labels.to_int(), (std::vector<int32_t>{0, 2})) << "nor taken";
}

}  // namespace
