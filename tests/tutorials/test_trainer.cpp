// The training and evaluation loops every tutorial and bench/train share (tutorials/common/trainer.h),
// on a small synthetic data set so they run everywhere: what an EpochResult counts, the order and the
// arguments of the callbacks, clipping of the unscaled gradients, the epoch's sample order, and the
// modes (train/eval, recording/no-grad) each loop runs the model in.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "datasets/dataloader.h"
#include "framework/amp.h"
#include "framework/autograd.h"
#include "framework/profiler.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/optim.h"
#include "framework/tensor.h"
#include "kernels/runtime.h"
#include "tests/test_util.h"
#include "tutorials/common/trainer.h"

namespace {

using hl::Tensor;
namespace tut = hl::tutorial;

// Flatten + Linear(4, 3), recording how each forward pass ran: in training mode or not, with the
// graph recorded or not, how many samples, and the first pixel of each batch (which sample led it).
class Probe : public hl::nn::Module {
 public:
  explicit Probe(hl::Generator& gen) : linear_(std::make_shared<hl::nn::Linear>(4, 3, gen)) {
    register_module("0", linear_);
  }
  Tensor forward(const Tensor& x) override {
    modes.push_back(training());
    grad_modes.push_back(hl::grad_enabled());
    samples += x.shape()[0];
    first_pixels.push_back(x.to_vector()[0]);
    return (*linear_)(hl::reshape(x, {x.shape()[0], 4}));
  }
  std::string name() const override { return "Probe"; }
  void forget() {
    modes.clear();
    grad_modes.clear();
    first_pixels.clear();
    samples = 0;
  }

  std::vector<bool> modes, grad_modes;
  std::vector<float> first_pixels;
  int64_t samples = 0;

 private:
  std::shared_ptr<hl::nn::Linear> linear_;
};

// n images [1, 2, 2] of normal noise (every first pixel distinct) and labels in [0, 3).
hl::data::Dataset synthetic(int64_t n, uint64_t seed) {
  hl::Generator gen(seed);
  hl::data::Dataset ds;
  ds.images = Tensor::randn({n, 1, 2, 2}, gen);
  std::vector<float> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<float>((i * 7 + static_cast<int64_t>(seed)) % 3));
  ds.labels = Tensor::from_vector(labels, {n}).to(hl::DType::i32);
  ds.num_classes = 3;
  return ds;
}

std::vector<std::vector<float>> grads_of(const hl::nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad().to_vector());
  return out;
}

std::vector<std::vector<float>> values_of(const hl::nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector());
  return out;
}

tut::TrainOptions quiet() {
  tut::TrainOptions o;
  o.progress = false;
  return o;
}

// 10 samples in batches of 4, 4 and 2. With lr = 0 the model never changes, so the epoch's loss and
// accuracy must equal those of the whole set at once: the loss is a mean over images, each batch's
// mean weighted by its size (an unweighted mean of the three batch means would differ).
TEST(Trainer, EpochResultIsTheMeanOverImagesOfEveryBatch) {
  hl::Generator gen(3);
  Probe model(gen);
  const hl::data::Dataset ds = synthetic(10, 4);
  hl::data::DataLoader loader(ds, {.batch_size = 4, .shuffle = false});
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.0});
  const tut::EpochResult r = tut::train_epoch(model, sgd, loader, 0, quiet());
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.images, 10);
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_GT(r.seconds, 0.0);
  EXPECT_DOUBLE_EQ(r.images_per_second, 10.0 / r.seconds);

  hl::NoGradGuard no_grad;
  const Tensor logits = model(ds.images);
  const double whole_loss = hl::cross_entropy(logits, ds.labels).item();
  const double whole_accuracy = hl::correct_count(logits, ds.labels).item() / 10.0;
  EXPECT_NEAR(r.loss, whole_loss, 1e-6 * whole_loss) << "f32 sums of three batches";
  EXPECT_EQ(r.accuracy, whole_accuracy);
  // The check above can tell a weighted mean from an unweighted one: the last batch's mean differs.
  const double first_two = hl::cross_entropy(model(ds.images.slice_rows(0, 8)), ds.labels.slice_rows(0, 8)).item();
  const double last = hl::cross_entropy(model(ds.images.slice_rows(8, 10)), ds.labels.slice_rows(8, 10)).item();
  EXPECT_GT(std::abs((2 * first_two + last) / 3 - whole_loss), 1e-3);
}

TEST(Trainer, MaxStepsEndsTheEpochEarly) {
  hl::Generator gen(3);
  Probe model(gen);
  hl::data::DataLoader loader(synthetic(10, 4), {.batch_size = 4, .shuffle = false});
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.1});
  tut::TrainOptions o = quiet();
  o.max_steps = 2;
  EXPECT_EQ(tut::steps_per_epoch(loader, o), 2);
  tut::EpochResult r = tut::train_epoch(model, sgd, loader, 0, o);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.images, 8);
  EXPECT_EQ(model.samples, 8);

  o.max_steps = 7;  // more than the loader has: its 3 batches
  EXPECT_EQ(tut::steps_per_epoch(loader, o), 3);
  EXPECT_EQ(tut::train_epoch(model, sgd, loader, 1, o).steps, 3);

  // No step at all: nothing is averaged (no 0/0), and the model is never called.
  o.max_steps = 0;
  model.forget();
  const std::vector<std::vector<float>> before = values_of(model);
  r = tut::train_epoch(model, sgd, loader, 2, o);
  EXPECT_EQ(r.steps, 0);
  EXPECT_EQ(r.images, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_EQ(r.images_per_second, 0.0);
  EXPECT_EQ(model.samples, 0);
  EXPECT_EQ(values_of(model), before);

  // One image, one step: averaged like any other epoch.
  hl::data::DataLoader single(synthetic(1, 4), {.batch_size = 1});
  hl::optim::SGD frozen(model.parameters(), {.lr = 0.0});
  r = tut::train_epoch(model, frozen, single, 0, quiet());
  EXPECT_EQ(r.images, 1);
  hl::NoGradGuard no_grad;
  const Tensor logits = model(single.dataset().images);
  EXPECT_FLOAT_EQ(static_cast<float>(r.loss),
                  static_cast<float>(hl::cross_entropy(logits, single.dataset().labels).item()));
  EXPECT_EQ(r.accuracy, hl::correct_count(logits, single.dataset().labels).item());
  EXPECT_EQ(tut::evaluate(model, single), r.accuracy) << "a set of one sample evaluates too";
}

// Each step: the gradients after_backward sees are that step's alone (zero_grad ran first), then
// on_step_end, then after_step; all with the step's index in the epoch.
TEST(Trainer, CallbacksRunInOrderAndEachStepStartsFromZeroGradients) {
  hl::Generator gen(5);
  Probe model(gen);
  hl::data::DataLoader loader(synthetic(8, 6), {.batch_size = 8, .shuffle = false});  // one batch
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.0});
  std::vector<std::string> events;
  std::vector<std::vector<std::vector<float>>> seen;
  tut::TrainOptions o = quiet();
  o.after_backward = [&](int64_t step) {
    events.push_back("backward " + std::to_string(step));
    seen.push_back(grads_of(model));
  };
  o.on_step_end = [&](int64_t step) { events.push_back("end " + std::to_string(step)); };
  o.after_step = [&](int64_t step, bool applied) {
    events.push_back("after " + std::to_string(step) + (applied ? " applied" : " skipped"));
  };
  tut::train_epoch(model, sgd, loader, 0, o);
  tut::train_epoch(model, sgd, loader, 1, o);
  const std::vector<std::string> want = {"backward 0", "end 0", "after 0 applied",
                                         "backward 0", "end 0", "after 0 applied"};
  EXPECT_EQ(events, want);
  ASSERT_EQ(seen.size(), 2u);
  // lr = 0 and the same batch: the same gradients, not the first ones accumulated twice.
  EXPECT_EQ(seen[0], seen[1]);
  bool nonzero = false;
  for (float g : seen[0][0]) nonzero = nonzero || g != 0.0f;
  EXPECT_TRUE(nonzero);
}

// An inf injected into a gradient at step 1: that step is skipped and reported, and each epoch's
// skipped_steps counts its own skips only (the scaler's count runs on across epochs).
TEST(Trainer, SkippedStepsAreCountedPerEpoch) {
  hl::Generator gen(5);
  Probe model(gen);
  hl::data::DataLoader loader(synthetic(8, 6), {.batch_size = 2, .shuffle = false});  // 4 steps
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.1});
  hl::amp::LossScaler scaler(hl::amp::ScalerConfig::parse("dynamic"));
  tut::TrainOptions o = quiet();
  o.scaler = &scaler;
  bool inject = true;
  o.after_backward = [&](int64_t step) {
    if (!inject || step != 1) return;
    Tensor g = model.parameters()[0].grad();
    std::vector<float> v = g.to_vector();
    v[0] = std::numeric_limits<float>::infinity();
    g.copy_(Tensor::from_vector(v, g.shape()));
  };
  std::vector<bool> applied;
  o.after_step = [&](int64_t, bool a) { applied.push_back(a); };
  const tut::EpochResult first = tut::train_epoch(model, sgd, loader, 0, o);
  EXPECT_EQ(first.skipped_steps, 1);
  EXPECT_EQ(first.steps, 4);
  EXPECT_EQ(applied, (std::vector<bool>{true, false, true, true}));
  inject = false;
  const tut::EpochResult second = tut::train_epoch(model, sgd, loader, 1, o);
  EXPECT_EQ(second.skipped_steps, 0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

// clip_grad_norm clips the true gradients: with a loss scale of 1024 they are unscaled first, and
// the step is the one the unscaled run takes. Bit for bit: S is a power of two, so scaling and
// unscaling are exact here.
TEST(Trainer, ClipGradNormClipsTheUnscaledGradients) {
  const hl::data::Dataset ds = synthetic(4, 8);
  const double max_norm = 1e-3;  // far below these gradients' norm: the clip is active
  auto run = [&](hl::amp::LossScaler* scaler, std::vector<std::vector<float>>& grads) {
    hl::Generator gen(9);
    auto model = std::make_shared<Probe>(gen);
    hl::data::DataLoader loader(ds, {.batch_size = 4, .shuffle = false});
    hl::optim::SGD sgd(model->parameters(), {.lr = 1.0});
    tut::TrainOptions o = quiet();
    o.scaler = scaler;
    o.clip_grad_norm = max_norm;
    o.after_backward = [&](int64_t) { grads = grads_of(*model); };
    grads.clear();
    const std::vector<std::vector<float>> w0 = values_of(*model);
    tut::train_epoch(*model, sgd, loader, 0, o);
    return std::make_pair(w0, values_of(*model));
  };
  std::vector<std::vector<float>> plain_grads, scaled_grads;
  const auto [w0, plain] = run(nullptr, plain_grads);
  hl::amp::LossScaler scaler(hl::amp::ScalerConfig::parse("static:1024"));
  const auto [w0_again, scaled] = run(&scaler, scaled_grads);
  ASSERT_EQ(w0, w0_again);
  ASSERT_EQ(plain_grads.size(), 2u);

  // The backward of the scaled loss gives 1024x the gradients, exactly.
  double sq = 0.0;
  for (size_t p = 0; p < plain_grads.size(); ++p) {
    for (size_t i = 0; i < plain_grads[p].size(); ++i) {
      EXPECT_EQ(scaled_grads[p][i], 1024.0f * plain_grads[p][i]) << "param " << p << " [" << i << "]";
      sq += static_cast<double>(plain_grads[p][i]) * plain_grads[p][i];
    }
  }
  const double factor = max_norm / (std::sqrt(sq) + 1e-6);  // PyTorch's rule
  ASSERT_LT(factor, 0.01);
  for (size_t p = 0; p < w0.size(); ++p) {
    for (size_t i = 0; i < w0[p].size(); ++i) {
      const double want = w0[p][i] - factor * plain_grads[p][i];
      EXPECT_NEAR(plain[p][i], want, 1e-6 + 1e-6 * std::abs(want)) << "param " << p << " [" << i << "]";
    }
  }
  EXPECT_EQ(scaled, plain);
}

// train_epoch puts the model in training mode and the loader at the epoch it is given (whose
// shuffled order it follows), recording the graph; evaluate runs every sample once in eval mode
// without a graph, from the start of the loader whatever state it was left in, and leaves the model
// in the mode it found (training, here; EvaluateLeavesTheModelInTheModeItFound has eval).
TEST(Trainer, ModesAndTheEpochsSampleOrder) {
  hl::Generator gen(11);
  Probe model(gen);
  const hl::data::Dataset ds = synthetic(12, 12);
  hl::data::DataLoader loader(ds, {.batch_size = 3, .shuffle = true, .seed = 5});
  const std::vector<int64_t> order0 = loader.order();
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.0});
  model.eval();
  tut::train_epoch(model, sgd, loader, 3, quiet());
  EXPECT_EQ(loader.epoch(), 3);
  ASSERT_NE(loader.order(), order0) << "the test needs epochs 0 and 3 to be shuffled differently";
  const std::vector<float> pixels = ds.images.to_vector();
  std::vector<float> want;
  for (size_t b = 0; b < 4; ++b) want.push_back(pixels[static_cast<size_t>(loader.order()[3 * b]) * 4]);
  EXPECT_EQ(model.first_pixels, want);
  EXPECT_EQ(model.modes, std::vector<bool>(4, true));
  EXPECT_EQ(model.grad_modes, std::vector<bool>(4, true));

  // Leave the loader in the middle of an epoch, then evaluate: all 12 samples, once each.
  tut::TrainOptions one = quiet();
  one.max_steps = 1;
  tut::train_epoch(model, sgd, loader, 4, one);
  model.forget();
  const double acc = tut::evaluate(model, loader);
  EXPECT_EQ(model.samples, 12);
  EXPECT_EQ(model.modes, std::vector<bool>(4, false));
  EXPECT_EQ(model.grad_modes, std::vector<bool>(4, false));
  EXPECT_TRUE(model.training());
  EXPECT_TRUE(hl::grad_enabled());
  {
    hl::NoGradGuard no_grad;
    EXPECT_EQ(acc, hl::correct_count(model(ds.images), ds.labels).item() / 12.0);
  }
  EXPECT_EQ(tut::evaluate(model, loader), acc) << "a second evaluation starts over";
}

// A model loaded for inference is in eval mode: evaluating it must not hand it back in training mode,
// where batch norm would update its running statistics on the next forward pass. Also when
// evaluate throws (a loader with no batches).
TEST(Trainer, EvaluateLeavesTheModelInTheModeItFound) {
  hl::Generator gen(3);
  Probe model(gen);
  const hl::data::Dataset ds = synthetic(6, 4);
  hl::data::DataLoader loader(ds, {.batch_size = 4});
  model.eval();
  tut::evaluate(model, loader);
  EXPECT_FALSE(model.training()) << "an eval-mode model came back in training mode";
  model.train();
  tut::evaluate(model, loader);
  EXPECT_TRUE(model.training());
  EXPECT_EQ(model.modes, std::vector<bool>(4, false)) << "both evaluations ran in eval mode";

  model.eval();
  const hl::data::Dataset two = synthetic(2, 5);
  hl::data::DataLoader empty(two, {.batch_size = 4, .drop_last = true});
  EXPECT_NE(hl::test::error_of([&] { tut::evaluate(model, empty); }).find("no batches"), std::string::npos);
  EXPECT_FALSE(model.training()) << "the mode is put back when evaluate throws";
}

// fp32 trains without loss scaling (DESIGN.md §3) in every program; fp16 and mixed take the spec. An
// explicit --loss-scale with fp32 is not dropped silently: a note says it is not used.
TEST(Trainer, LossScaleForFp32IsNone) {
  using hl::amp::Precision;
  testing::internal::CaptureStdout();
  EXPECT_EQ(tut::loss_scale_for(Precision::fp32, "dynamic"), "none");
  EXPECT_EQ(tut::loss_scale_for(Precision::fp32, "none", true), "none");
  EXPECT_EQ(tut::loss_scale_for(Precision::mixed, "static:1024", true), "static:1024");
  EXPECT_EQ(tut::loss_scale_for(Precision::fp16, "dynamic"), "dynamic");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "") << "a note only for an explicit, unused scale";
  testing::internal::CaptureStdout();
  EXPECT_EQ(tut::loss_scale_for(Precision::fp32, "static:8", true), "none");
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "note: --loss-scale static:8 is not used: fp32 trains without loss scaling (DESIGN.md §3)\n");
}

// RFC 4180: a field with a comma, a double quote or a line break is quoted, its quotes doubled; any
// other field is written as it is (so the CSV files of runs without such labels do not change).
TEST(Trainer, CsvFieldQuotesAsRfc4180) {
  EXPECT_EQ(tut::csv_field("fp32"), "fp32");
  EXPECT_EQ(tut::csv_field("mixed + dynamic"), "mixed + dynamic");
  EXPECT_EQ(tut::csv_field(""), "");
  EXPECT_EQ(tut::csv_field("mixed, no scaling"), "\"mixed, no scaling\"");
  EXPECT_EQ(tut::csv_field("mixed dynamic:init=1e9,hysteresis=2"), "\"mixed dynamic:init=1e9,hysteresis=2\"");
  EXPECT_EQ(tut::csv_field("a \"b\""), "\"a \"\"b\"\"\"");
  EXPECT_EQ(tut::csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(tut::csv_field("cr\r"), "\"cr\r\"");
}

// Numbers in the CSV files read back exactly, in as few digits as that takes: a loss scale of 2^21 is
// 2097152 (six digits wrote 2.09715e+06), a test accuracy of 743/1000 is 0.743.
TEST(Trainer, CsvNumberReadsBackExactly) {
  EXPECT_EQ(tut::csv_number(2097152.0), "2097152");
  EXPECT_EQ(tut::csv_number(16773120.0), "16773120");
  EXPECT_EQ(tut::csv_number(743.0 / 1000), "0.743");
  EXPECT_EQ(tut::csv_number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(tut::csv_number(0.0), "0");
  EXPECT_EQ(tut::csv_number(-2.5), "-2.5");
  EXPECT_EQ(tut::csv_number(1e300), "1e+300");
  EXPECT_EQ(tut::csv_number(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(tut::csv_number(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(tut::csv_number(std::numeric_limits<double>::quiet_NaN()), "nan");
  const std::vector<double> edge = {std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::min(),
                                    -std::numeric_limits<double>::min(), std::numeric_limits<double>::max(),
                                    -std::numeric_limits<double>::max(), std::nextafter(1.0, 2.0)};
  for (const double x : edge) EXPECT_EQ(std::strtod(tut::csv_number(x).c_str(), nullptr), x) << tut::csv_number(x);
  // Fresh random doubles of every magnitude: the bits of each come back.
  hl::Generator gen(hl::test::fresh_seed());
  for (int i = 0; i < 2000; ++i) {
    const double x = std::ldexp(gen.uniform() * 2 - 1, static_cast<int>(gen.below(2001)) - 1000);
    const std::string text = tut::csv_number(x);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), x) << text;
    EXPECT_LE(text.size(), 24u) << text;
  }
}

TEST(Trainer, ProgressLine) {
  EXPECT_EQ(tut::progress_line(2, 3, 10, 384, 1.5, 0.125),
            "epoch 2 [#########                     ] 3/10  loss 0.1250  256 img/s  ETA 3.5 s   ");
  // Nothing done yet: an empty bar, no speed, no ETA (no division by zero).
  EXPECT_EQ(tut::progress_line(0, 0, 4, 0, 0.0, 0.0),
            "epoch 0 [                              ] 0/4  loss 0.0000  0 img/s  ETA 0.0 s   ");
  EXPECT_EQ(tut::progress_line(0, 0, 1, 0, 0.0, 0.0),
            "epoch 0 [                              ] 0/1  loss 0.0000  0 img/s  ETA 0.0 s   ");
  EXPECT_EQ(tut::progress_line(1, 4, 4, 512, 2.0, 1.5),
            "epoch 1 [##############################] 4/4  loss 1.5000  256 img/s  ETA 0.0 s   ");
  EXPECT_EQ(tut::progress_line(1, 0, 0, 0, 0.0, 0.0),
            "epoch 1 [##############################] 0/0  loss 0.0000  0 img/s  ETA 0.0 s   ")
      << "an epoch of no steps is complete";
  // One step of 100 in 1.25 s: 99 more take 123.75 s.
  EXPECT_EQ(tut::progress_line(0, 1, 100, 128, 1.25, 2.5),
            "epoch 0 [                              ] 1/100  loss 2.5000  102 img/s  ETA 2 min 03 s   ");
  // Under a second: 64 images in 0.5 s are 128 a second.
  EXPECT_EQ(tut::progress_line(0, 1, 2, 64, 0.5, 0.0),
            "epoch 0 [###############               ] 1/2  loss 0.0000  128 img/s  ETA 0.5 s   ");
  // A diverged run's loss prints whole, however long.
  const std::string huge = tut::progress_line(0, 1, 1, 1, 1.0, 1e300);
  EXPECT_GT(huge.size(), 300u);
  EXPECT_EQ(huge.substr(huge.size() - 12), "ETA 0.0 s   ");
}

// The bar is drawn only with progress on and stderr a terminal: here a pseudo-terminal stands in
// for stderr. With progress off nothing is written; with it on, a step that ends more than 0.25 s
// after the last draw redraws the bar (steps done, the mean loss so far), and the epoch ends by
// blanking it.
TEST(Trainer, ProgressBarOnlyOnATerminal) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0) << "posix_openpt";
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const int terminal = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  ASSERT_EQ(fcntl(master, F_SETFL, O_NONBLOCK), 0);
  auto run = [&](bool progress) {
    hl::Generator gen(13);
    Probe model(gen);
    hl::data::DataLoader loader(synthetic(6, 14), {.batch_size = 2, .shuffle = false});  // 3 steps
    hl::optim::SGD sgd(model.parameters(), {.lr = 0.0});
    tut::TrainOptions o;
    o.progress = progress;
    o.on_step_end = [](int64_t step) {
      if (step < 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    };
    std::fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    dup2(terminal, STDERR_FILENO);
    tut::train_epoch(model, sgd, loader, 7, o);
    std::fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    hl::NoGradGuard no_grad;
    const Tensor x = loader.dataset().images.slice_rows(0, 2), y = loader.dataset().labels.slice_rows(0, 2);
    return hl::cross_entropy(model(x), y).item();
  };
  run(false);
  const double first_loss = run(true);
  // The kernel hands what the terminal side wrote to the other side asynchronously: read until the
  // blanking that ends the epoch (" \r") has arrived, or 5 s have passed.
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline && !(out.size() >= 2 && out.ends_with(" \r"))) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(master, buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  // Both runs wrote to the same terminal: with progress off, nothing (one epoch's bars in all).
  EXPECT_TRUE(out.starts_with("\repoch 7 [")) << "nothing arrived, or something else did: " << out;
  EXPECT_EQ(out.find("] 1/3  "), out.rfind("] 1/3  ")) << "progress off drew a bar too: " << out;
  char loss[32];
  std::snprintf(loss, sizeof loss, "loss %.4f", first_loss);
  EXPECT_NE(out.find("\repoch 7 [##########"), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("] 1/3  ").append(loss)), std::string::npos) << "after step 0's 0.3 s: " << out;
  EXPECT_NE(out.find("] 2/3  "), std::string::npos) << "after step 1's 0.3 s: " << out;
  // "\r" bar "\r" bar ... "\r" blank "\r": the blank as wide as the widest bar, all spaces.
  std::vector<std::string> parts;
  for (size_t at = 0, next; at < out.size(); at = next) {
    next = out.find('\r', at + 1);
    if (next == std::string::npos) next = out.size();
    parts.push_back(out.substr(at, next - at));
  }
  ASSERT_GE(parts.size(), 4u) << out;
  EXPECT_EQ(parts.back(), "\r") << "the cursor is left at the start of the line";
  const std::string& blank = parts[parts.size() - 2];
  size_t widest = 0;
  for (size_t k = 0; k + 2 < parts.size(); ++k) widest = std::max(widest, parts[k].size());
  EXPECT_EQ(blank, std::string(1, '\r').append(widest - 1, ' ')) << "the bar blanked";
  close(terminal);
  close(master);
}

// keep_on_device for the CPU leaves the data sets where they are (the same storage, no copy).
TEST(Trainer, KeepOnDeviceForTheCpuMovesNothing) {
  hl::data::Dataset train = synthetic(10, 4), test = synthetic(6, 5);
  const Tensor cpu_images = train.images, cpu_labels = test.labels;
  tut::keep_on_device(train, test, hl::Device::cpu);
  EXPECT_EQ(train.images.data_ptr(), cpu_images.data_ptr()) << "on the CPU nothing moves";
  EXPECT_EQ(test.labels.data_ptr(), cpu_labels.data_ptr()) << "on the CPU nothing moves";
  EXPECT_EQ(train.images.device(), hl::Device::cpu);
}

// The data sets put on the GPU whole, and an epoch there gives the CPU's counts and (to f16/f32
// kernel rounding) its loss.
TEST(Trainer, KeepOnDeviceAndACudaEpoch) {
  HL_REQUIRE_CUDA();
  hl::data::Dataset train = synthetic(10, 4), test = synthetic(6, 5);
  tut::keep_on_device(train, test, hl::Device::cuda);
  EXPECT_EQ(train.images.device(), hl::Device::cuda);
  EXPECT_EQ(train.labels.device(), hl::Device::cuda);
  EXPECT_EQ(test.images.device(), hl::Device::cuda);
  EXPECT_EQ(test.labels.device(), hl::Device::cuda);
  auto epoch = [&](hl::Device dev) {
    hl::Generator gen(3);
    Probe model(gen);
    model.to(dev);
    hl::data::DataLoader loader(train.to(dev), {.batch_size = 4, .shuffle = false, .device = dev});
    hl::optim::SGD sgd(model.parameters(), {.lr = 0.0});
    return tut::train_epoch(model, sgd, loader, 0, quiet());
  };
  const tut::EpochResult cpu = epoch(hl::Device::cpu), gpu = epoch(hl::Device::cuda);
  EXPECT_EQ(gpu.steps, 3);
  EXPECT_EQ(gpu.images, 10);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss) << "f32 math on both";
  EXPECT_EQ(gpu.accuracy, cpu.accuracy);
}

// ---- TrainOptions::cuda_graph ---------------------------------------------------------------------------

// Everything a run's future depends on, as bytes: the parameters, the optimizer's state tensors and
// the loss scaler's state and history.
struct RunState {
  std::vector<std::vector<uint8_t>> tensors;
  std::map<std::string, std::string> scaler;
  std::vector<double> history;
  bool operator==(const RunState&) const = default;
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.detach().to(hl::Device::cpu);
  const uint8_t* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// Two epochs of a small `mixed` classifier on the GPU (fused Linear + ReLU, FP32 masters, SGD with
// momentum, a dynamic loss scale that starts at 2^24, high enough for the FP16 gradients to overflow,
// so that steps are skipped on the device, and grows every 3 clean steps; 133 samples in batches of 16: 8 full batches and a partial one), with the learning
// rate changed after step 3 of the first epoch. Returns the state after training and each epoch's
// result.
std::pair<RunState, std::vector<tut::EpochResult>> mixed_run(bool cuda_graph) {
  const hl::Device dev = hl::Device::cuda;
  hl::Generator gen(11);
  auto model = std::make_shared<hl::nn::Sequential>();
  model->add(std::make_shared<hl::nn::Flatten>());
  model->add(std::make_shared<hl::nn::Linear>(4, 32, gen));
  model->add(std::make_shared<hl::nn::ReLU>());
  model->add(std::make_shared<hl::nn::Linear>(32, 3, gen));
  model->fuse_linear_relu(true);
  model->to(dev);
  hl::optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  model->to(hl::DType::f16);
  hl::amp::LossScaler scaler(hl::amp::ScalerConfig::parse("dynamic:init=16777216,interval=3"));
  hl::data::Dataset ds = synthetic(133, 9);
  ds = ds.to(dev);
  hl::data::DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .seed = 3, .device = dev,
                                   .dtype = hl::DType::f16});
  tut::TrainOptions o = quiet();
  o.scaler = &scaler;
  o.cuda_graph = cuda_graph;
  int64_t epoch_now = 0;
  o.on_step_end = [&](int64_t step) {
    if (epoch_now == 0 && step == 3) sgd.set_lr(0.02);
  };
  std::vector<tut::EpochResult> results;
  for (epoch_now = 0; epoch_now < 2; ++epoch_now)
    results.push_back(tut::train_epoch(*model, sgd, loader, epoch_now, o));
  RunState st;
  for (const Tensor& p : model->parameters()) st.tensors.push_back(bytes_of(p));
  for (const auto& [name, t] : sgd.state().tensors) st.tensors.push_back(bytes_of(t));
  st.scaler = scaler.state();
  st.history = scaler.scale_history();
  return {st, results};
}

// The same run with and without the graph gives the same bits: the replays run the same kernels with
// the same arguments, the scaler's host bookkeeping follows every replay, and a new learning rate is
// recorded again. Each epoch: its first step runs as usual, 7 full batches replay, the partial one runs
// as usual.
TEST(Trainer, CudaGraphGivesTheUsualLoopsBits) {
  HL_REQUIRE_CUDA();
  const auto [plain, plain_epochs] = mixed_run(false);
  const auto [graphed, graph_epochs] = mixed_run(true);
  EXPECT_TRUE(graphed == plain) << "parameters, optimizer state or scaler state differ";
  EXPECT_EQ(graphed.history, plain.history);
  ASSERT_EQ(graph_epochs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(graph_epochs[e].loss, plain_epochs[e].loss) << e;
    EXPECT_EQ(graph_epochs[e].accuracy, plain_epochs[e].accuracy) << e;
    EXPECT_EQ(graph_epochs[e].skipped_steps, plain_epochs[e].skipped_steps) << e;
    EXPECT_EQ(graph_epochs[e].steps, 9) << e;
    EXPECT_EQ(graph_epochs[e].graph_replays, 7) << e;
    EXPECT_EQ(plain_epochs[e].graph_replays, 0) << e;
  }
  EXPECT_EQ(graph_epochs[0].graph_captures, 2) << "recorded at step 1, again at step 4 for the new rate";
  EXPECT_EQ(graph_epochs[1].graph_captures, 1);
  EXPECT_GT(graph_epochs[0].skipped_steps, 0) << "the run must exercise skipped steps inside replays";
  EXPECT_EQ(graphed.history.size(), 18u);
}

// A CUDA graph of a step that runs on the CPU is refused, on any machine, before the epoch starts.
TEST(Trainer, CudaGraphRefusesACpuLoader) {
  hl::Generator gen(5);
  Probe model(gen);
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.1});
  tut::TrainOptions o = quiet();
  o.cuda_graph = true;
  hl::data::DataLoader cpu_loader(synthetic(8, 6), {.batch_size = 4, .shuffle = false});
  const std::string message = hl::test::error_of([&] { tut::train_epoch(model, sgd, cpu_loader, 0, o); });
  EXPECT_NE(message.find("cuda_graph records the CUDA launches"), std::string::npos) << message;
}

// Host code inside a step cannot be replayed, and the profiler's events cannot be recorded: both are
// refused before the epoch starts (a CPU loader: CudaGraphRefusesACpuLoader). A read back to the host
// inside the step is refused while it is recorded, and leaves the loop usable.
TEST(Trainer, CudaGraphRefusesWhatItCannotReplay) {
  HL_REQUIRE_CUDA();
  hl::Generator gen(5);
  Probe model(gen);
  hl::optim::SGD sgd(model.parameters(), {.lr = 0.1});
  tut::TrainOptions o = quiet();
  o.cuda_graph = true;
  std::string message;
  model.to(hl::Device::cuda);
  hl::data::DataLoader loader(synthetic(8, 6).to(hl::Device::cuda),
                              {.batch_size = 4, .shuffle = false, .device = hl::Device::cuda});
  o.after_backward = [](int64_t) {};
  message = hl::test::error_of([&] { tut::train_epoch(model, sgd, loader, 0, o); });
  EXPECT_NE(message.find("after_backward"), std::string::npos) << message;
  o.after_backward = nullptr;
  hl::profiler::start(false);
  message = hl::test::error_of([&] { tut::train_epoch(model, sgd, loader, 0, o); });
  hl::profiler::stop();
  EXPECT_NE(message.find("profiler"), std::string::npos) << message;
  // Probe reads a pixel back to the host in its forward pass: the recording refuses that wait.
  message = hl::test::error_of([&] { tut::train_epoch(model, sgd, loader, 0, o); });
  EXPECT_NE(message.find("records a CUDA graph"), std::string::npos) << message;
  // After a refused recording, the same loop still trains, with and without a graph.
  hl::nn::Sequential plain;
  plain.add(std::make_shared<hl::nn::Flatten>());
  plain.add(std::make_shared<hl::nn::Linear>(4, 3, gen));
  plain.to(hl::Device::cuda);
  hl::optim::SGD plain_sgd(plain.parameters(), {.lr = 0.1});
  EXPECT_EQ(tut::train_epoch(plain, plain_sgd, loader, 0, o).graph_replays, 1) << "two steps: one as usual, one replayed";
  o.cuda_graph = false;
  EXPECT_EQ(tut::train_epoch(model, sgd, loader, 0, o).steps, 2);
}

TEST(Trainer, FormatSeconds) {
  EXPECT_EQ(tut::format_seconds(0.0), "0.0 s");
  EXPECT_EQ(tut::format_seconds(12.34), "12.3 s");
  EXPECT_EQ(tut::format_seconds(59.9), "59.9 s");
  EXPECT_EQ(tut::format_seconds(60.0), "1 min 00 s");
  EXPECT_EQ(tut::format_seconds(125.0), "2 min 05 s");
  EXPECT_EQ(tut::format_seconds(3661.0), "61 min 01 s");
}

}  // namespace
