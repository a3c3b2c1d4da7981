// End to end: MLP-512 learns MNIST in FP32 on the CPU, and the tutorial program behaves.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "datasets/dataloader.h"
#include "datasets/mnist.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "tests/test_util.h"
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
  const auto [status, out] = run_command(kProgram + " --smoke --device cpu --data " + hl::test::data_dir("mnist"));
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("epoch 1/1"), std::string::npos) << out;
  EXPECT_NE(out.find("final test accuracy"), std::string::npos) << out;
  EXPECT_NE(out.find("learning rate: constant, peak 0.05, warm-up 0 steps, 16 steps in all"), std::string::npos) << out;
  const auto [s2, o2] = run_command(kProgram + " --smoke --device cpu --schedule step --warmup-epochs 0.5 --data " +
                                    hl::test::data_dir("mnist"));
  EXPECT_EQ(s2, 0) << o2;
  EXPECT_NE(o2.find("learning rate: step, peak 0.05, warm-up 8 steps, 16 steps in all"), std::string::npos) << o2;
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
