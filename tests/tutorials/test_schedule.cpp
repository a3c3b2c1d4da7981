// The learning-rate schedules of the tutorials and bench/train (tutorials/common/schedule.h): the
// values of each kind, bad settings refused, the flags turned into a schedule, and a training run
// made to follow it step by step across epochs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "datasets/dataloader.h"
#include "framework/amp.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "framework/tensor.h"
#include "tests/test_util.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/schedule.h"
#include "tutorials/common/trainer.h"

namespace {

using hl::tutorial::LrSchedule;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::cosine;
  s.peak = 0.1;
  s.final_lr = 0.001;
  s.warmup_steps = 4;
  s.total_steps = 14;
  // Linear warm-up: peak * (step+1) / warmup, never 0.
  for (int64_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(s.at(i), 0.1 * static_cast<double>(i + 1) / 4.0) << i;
  // Cosine over steps 4..13: the peak at the first, final_lr at the last, the midpoint halfway.
  EXPECT_DOUBLE_EQ(s.at(4), 0.1);
  EXPECT_NEAR(s.at(13), 0.001, 1e-15);
  for (int64_t i = 4; i < 14; ++i) {
    const double t = static_cast<double>(i - 4) / 9.0;
    EXPECT_NEAR(s.at(i), 0.001 + 0.5 * (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * t)), 1e-15) << i;
    if (i > 4) {
      EXPECT_LT(s.at(i), s.at(i - 1)) << "the cosine decays monotonically";
    }
  }
  EXPECT_DOUBLE_EQ(s.at(100), s.at(13));  // past the end: the last value
  EXPECT_TRUE(contains(s.str(), "cosine, peak 0.1 -> 0.001, warm-up 4 steps, 14 steps in all")) << s.str();
}

TEST(LrSchedule, StepDecayAndConstant) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::step;
  s.peak = 0.2;
  s.warmup_steps = 0;
  s.total_steps = 101;  // t = step / 100
  EXPECT_DOUBLE_EQ(s.at(0), 0.2);
  EXPECT_DOUBLE_EQ(s.at(49), 0.2);
  EXPECT_NEAR(s.at(50), 0.02, 1e-17);
  EXPECT_NEAR(s.at(74), 0.02, 1e-17);
  EXPECT_NEAR(s.at(75), 0.002, 1e-18);
  EXPECT_NEAR(s.at(100), 0.002, 1e-18);
  s.kind = LrSchedule::Kind::constant;
  s.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(s.at(0), 0.02);
  EXPECT_DOUBLE_EQ(s.at(9), 0.2);
  EXPECT_DOUBLE_EQ(s.at(60), 0.2);
}

// With --cuda-graph each rate change records the training step again (trainer.h): rate_changes counts
// them, and bench/train prints the notice when there is any.
TEST(LrSchedule, RateChangesAndTheCudaGraphNotice) {
  const auto make = [](LrSchedule::Kind kind, double peak, int64_t warmup, int64_t total) {
    LrSchedule s;
    s.kind = kind;
    s.peak = peak;
    s.final_lr = 0.0;
    s.warmup_steps = warmup;
    s.total_steps = total;
    return s;
  };
  using K = LrSchedule::Kind;
  EXPECT_EQ(make(K::constant, 0.05, 0, 1407).rate_changes(), 0);
  EXPECT_EQ(make(K::constant, 0.05, 1, 20).rate_changes(), 0) << "a 1-step warm-up is at the peak already";
  EXPECT_EQ(make(K::constant, 0.05, 5, 20).rate_changes(), 4) << "warm-up steps 1-4; step 5 stays at the peak";
  EXPECT_EQ(make(K::cosine, 0.05, 0, 10).rate_changes(), 9) << "every step of a cosine";
  // Tutorial 09's smoke shape (peak 0.5, exact in binary): 1/6, 1/3, 0.5, then the cosine from the peak the
  // warm-up reached: 0.5, 0.25, 0. (At 09's peak 0.1 the last warm-up step is 0.1 * 3 / 3 = 0.10000000000000002,
  // not 0.1, so the cosine's first step is a change too: rates are compared as the trainer compares them.)
  EXPECT_EQ(make(K::cosine, 0.5, 3, 6).rate_changes(), 4);
  EXPECT_EQ(make(K::cosine, 0.1, 3, 6).rate_changes(), 5);
  EXPECT_EQ(make(K::step, 0.05, 0, 100).rate_changes(), 2) << "the two milestones";
  EXPECT_EQ(make(K::cosine, 0.0, 0, 10).rate_changes(), 0) << "a peak of 0: every rate 0";
  EXPECT_EQ(make(K::cosine, 0.05, 0, 1).rate_changes(), 0);

  EXPECT_EQ(hl::tutorial::cuda_graph_schedule_notice(make(K::constant, 0.05, 0, 1407)), "");
  const std::string notice = hl::tutorial::cuda_graph_schedule_notice(make(K::cosine, 0.05, 0, 1407));
  EXPECT_TRUE(contains(notice, "note: --cuda-graph with a learning rate that changes at 1406 of the run's 1407 steps"))
      << notice;
  EXPECT_TRUE(contains(notice, "each change records the step again")) << notice;
  EXPECT_TRUE(contains(notice, "--schedule constant and no warm-up")) << notice;
  EXPECT_EQ(notice.find('\n'), std::string::npos) << "one line";
}

TEST(LrSchedule, BadSettingsAreRefused) {
  EXPECT_THROW(LrSchedule::parse_kind("linear"), hl::Error);
  try {
    LrSchedule::parse_kind("linear");
  } catch (const hl::Error& e) {
    EXPECT_TRUE(contains(e.what(), "--schedule: unknown schedule 'linear' (known: constant, cosine, step)")) << e.what();
  }
  LrSchedule s;
  s.total_steps = 10;
  s.warmup_steps = 11;
  EXPECT_THROW(s.at(0), hl::Error);
  s.warmup_steps = 2;
  s.total_steps = 0;
  EXPECT_THROW(s.at(0), hl::Error);
  s.total_steps = 10;
  s.final_lr = 0.5;  // above the peak
  EXPECT_THROW(s.at(0), hl::Error);
  s.final_lr = 0;
  s.peak = std::nan("");
  EXPECT_THROW(s.at(0), hl::Error);
  s.peak = 0.1;
  EXPECT_THROW(s.at(-1), hl::Error);
  EXPECT_NO_THROW(s.at(0));
}

TEST(LrSchedule, APeakOfZeroIsEveryRateZero) {
  // --lr 0 trains nothing, as it did before the schedules: allowed, not an error.
  LrSchedule s;
  s.kind = LrSchedule::Kind::cosine;
  s.peak = 0.0;
  s.total_steps = 5;
  s.warmup_steps = 2;
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(s.at(i), 0.0) << i;
  s.peak = -0.1;  // below final_lr = 0
  EXPECT_THROW(s.at(0), hl::Error);
}

TEST(LrSchedule, FromFlags) {
  hl::tutorial::CommonFlags f;
  EXPECT_EQ(f.schedule, "constant") << "the default is DESIGN.md section 4's constant rate";
  EXPECT_EQ(f.warmup_epochs, 0.0);
  f.lr = 0.05;
  f.schedule = "cosine";
  f.warmup_epochs = 0.5;
  LrSchedule s = hl::tutorial::schedule_from_flags(f, 469, 5);
  EXPECT_EQ(s.kind, LrSchedule::Kind::cosine);
  EXPECT_EQ(s.peak, 0.05);
  EXPECT_EQ(s.final_lr, 0.0);
  EXPECT_EQ(s.total_steps, 2345);
  EXPECT_EQ(s.warmup_steps, 234) << "half an epoch of 469 steps, rounded down to whole steps";
  EXPECT_EQ(s.at(2344), 0.0) << "the cosine ends at 0";
  // A warm-up longer than the run covers all of it.
  f.warmup_epochs = 7;
  EXPECT_EQ(hl::tutorial::schedule_from_flags(f, 10, 3).warmup_steps, 30);
  f.warmup_epochs = 0;
  f.schedule = "step";
  s = hl::tutorial::schedule_from_flags(f, 10, 4);
  EXPECT_EQ(s.kind, LrSchedule::Kind::step);
  EXPECT_EQ(s.warmup_steps, 0);
  EXPECT_TRUE(contains(s.str(), "step, peak 0.05, warm-up 0 steps, 40 steps in all")) << s.str();

  const auto refused = [](hl::tutorial::CommonFlags bad, int64_t steps, int64_t epochs, const std::string& part) {
    try {
      hl::tutorial::schedule_from_flags(bad, steps, epochs);
      ADD_FAILURE() << "accepted; expected an error naming '" << part << "'";
    } catch (const hl::Error& e) {
      EXPECT_TRUE(contains(e.what(), part)) << "'" << part << "' in: " << e.what();
    }
  };
  hl::tutorial::CommonFlags bad = f;
  bad.schedule = "linear";
  refused(bad, 10, 1, "--schedule: unknown schedule 'linear'");
  bad = f;
  bad.warmup_epochs = -1;
  refused(bad, 10, 1, "--warmup-epochs");
  bad.warmup_epochs = std::nan("");
  refused(bad, 10, 1, "--warmup-epochs");
  refused(f, 0, 1, "at least one step");
  refused(f, 10, 0, "at least one step");
  bad = f;
  bad.lr = std::nan("");
  refused(bad, 10, 1, "LrSchedule");
}

// follow_schedule drives a real optimizer: its rate before the first step is step 0's, and after
// each on_step_end (the trainer calls it after every step, across epochs) the next step's.
TEST(LrSchedule, FollowScheduleSetsEachStepsRateAndChainsTheCallbackBefore) {
  hl::Tensor w = hl::Tensor::zeros({3}, hl::DType::f32, hl::Device::cpu);
  w.requires_grad_();
  hl::optim::SGD sgd({w}, {.lr = 123.0, .momentum = 0.9});
  LrSchedule s;
  s.kind = LrSchedule::Kind::cosine;
  s.peak = 0.05;
  s.warmup_steps = 3;
  s.total_steps = 12;
  hl::tutorial::TrainOptions opts;
  std::vector<int64_t> seen;
  opts.on_step_end = [&](int64_t step) {
    seen.push_back(step);
    EXPECT_EQ(sgd.lr(), s.at(static_cast<int64_t>(seen.size()) - 1)) << "the earlier callback runs first";
  };
  hl::tutorial::follow_schedule(opts, sgd, s);
  EXPECT_EQ(sgd.lr(), s.at(0));
  // Three epochs of four steps: the trainer's index restarts each epoch, the schedule's does not.
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t i = 0; i < 4; ++i) {
      opts.on_step_end(i);
      const int64_t global = epoch * 4 + i + 1;
      EXPECT_EQ(sgd.lr(), s.at(global)) << "after global step " << global - 1;
    }
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(seen.back(), 3);
  EXPECT_EQ(sgd.lr(), s.at(11)) << "past the end: the last value";
}

// The schedule counts steps, not updates: a step the loss scaler skips on an overflow still moves it
// on, so a skipped step costs its rate (as PyTorch's per-step scheduler does), and the run ends on the
// schedule's last rate. Through the real trainer: an inf injected into a gradient at step 1.
TEST(LrSchedule, ASkippedStepStillAdvancesTheSchedule) {
  hl::data::Dataset ds;
  ds.images = hl::Tensor::from_vector(std::vector<float>(8 * 4, 0.5f), {8, 1, 2, 2});
  ds.labels = hl::Tensor::from_vector(std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1}, {8}).to(hl::DType::i32);
  ds.num_classes = 2;
  hl::data::DataLoader loader(ds, {.batch_size = 2});  // 4 steps per epoch
  hl::Generator gen(1);
  hl::nn::Sequential model;
  model.add(std::make_shared<hl::nn::Flatten>());
  model.add(std::make_shared<hl::nn::Linear>(4, 2, gen));
  hl::optim::SGD sgd(model.parameters(), {.lr = 1.0, .momentum = 0.9});
  hl::amp::LossScaler scaler(hl::amp::ScalerConfig::parse("dynamic"));
  hl::tutorial::CommonFlags f;
  f.lr = 0.1;
  f.schedule = "cosine";
  hl::tutorial::TrainOptions opts;
  opts.progress = false;
  opts.scaler = &scaler;
  opts.after_backward = [&](int64_t step) {
    if (step != 1) return;
    hl::Tensor g = model.parameters()[0].grad();
    std::vector<float> v = g.to_vector();
    v[0] = std::numeric_limits<float>::infinity();
    g.copy_(hl::Tensor::from_vector(v, g.shape()));
  };
  std::vector<double> rates;  // the rate each step ran at, read before the schedule moves it on
  int64_t skipped = 0;
  opts.after_step = [&](int64_t, bool applied) { skipped += applied ? 0 : 1; };
  const LrSchedule s = hl::tutorial::follow_schedule_flags(opts, sgd, f, loader, 2);
  const auto schedule_step = opts.on_step_end;
  opts.on_step_end = [&](int64_t step) {
    rates.push_back(sgd.lr());
    schedule_step(step);
  };
  int64_t total_skipped = 0;
  for (int64_t e = 0; e < 2; ++e) total_skipped += hl::tutorial::train_epoch(model, sgd, loader, e, opts).skipped_steps;
  EXPECT_EQ(skipped, 2) << "one injected overflow per epoch";
  EXPECT_EQ(total_skipped, 2);
  ASSERT_EQ(rates.size(), 8u);
  for (size_t i = 0; i < rates.size(); ++i) EXPECT_EQ(rates[i], s.at(static_cast<int64_t>(i))) << "step " << i;
  EXPECT_EQ(sgd.lr(), s.at(7)) << "after the run: the last step's rate (0)";
}

// The flags' schedule sized by the loader: its batches, or --max-steps when fewer.
TEST(LrSchedule, FollowScheduleFlagsCountsTheStepsTheTrainerRuns) {
  hl::data::Dataset ds;
  ds.images = hl::Tensor::zeros({10, 1, 2, 2}, hl::DType::f32, hl::Device::cpu);
  ds.labels = hl::Tensor::zeros({10}, hl::DType::i32, hl::Device::cpu);
  ds.num_classes = 2;
  hl::data::DataLoader loader(ds, {.batch_size = 4});  // 3 batches, the last of 2
  hl::Tensor w = hl::Tensor::zeros({1}, hl::DType::f32, hl::Device::cpu);
  w.requires_grad_();
  hl::optim::SGD sgd({w}, {.lr = 1.0});
  hl::tutorial::CommonFlags f;
  f.lr = 0.5;
  f.schedule = "cosine";
  hl::tutorial::TrainOptions opts;
  EXPECT_EQ(hl::tutorial::steps_per_epoch(loader, opts), 3);
  EXPECT_EQ(hl::tutorial::follow_schedule_flags(opts, sgd, f, loader, 2).total_steps, 6);
  EXPECT_EQ(sgd.lr(), 0.5);
  hl::tutorial::TrainOptions capped;
  capped.max_steps = 2;
  EXPECT_EQ(hl::tutorial::follow_schedule_flags(capped, sgd, f, loader, 2).total_steps, 4);
  capped.max_steps = 0;  // trains nothing; the schedule still has a step
  EXPECT_EQ(hl::tutorial::follow_schedule_flags(capped, sgd, f, loader, 2).total_steps, 2);
}

}  // namespace
