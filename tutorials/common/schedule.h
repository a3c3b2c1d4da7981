// Learning-rate schedules for the tutorials, evaluated per optimizer step: a linear warm-up from
// lr/warmup_steps to the peak, then cosine decay to final_lr (or step decay by 10x at 50% and 75% of
// the steps after the warm-up). Set each step's value with Optimizer::set_lr (framework/optim.h).
//
// Why a warm-up: a freshly initialized network with batch norm takes large, badly conditioned steps
// at the peak learning rate; growing the rate over the first epochs avoids an early divergence.
// Why decay: the last epochs at a small rate settle the weights into the minimum the large rate
// found (the step decay is the classic CIFAR recipe; the cosine is smoother and needs no milestones).
#pragma once
#include <cstdint>
#include <string>

#include "framework/optim.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/trainer.h"

namespace hl::tutorial {

struct LrSchedule {
  enum class Kind { constant, cosine, step };
  Kind kind = Kind::cosine;
  double peak = 0.1;            // the rate after warm-up
  double final_lr = 0.0;        // cosine: the rate at the last step
  int64_t warmup_steps = 0;     // linear warm-up over these first steps (0: none)
  int64_t total_steps = 1;      // the whole run

  // Throws hl::Error("--schedule: ...") for anything but constant | cosine | step.
  static Kind parse_kind(const std::string& s);
  static const char* kind_name(Kind k);
  // The learning rate of step `step` (0-based; steps past the end keep the last value). Throws
  // hl::Error when the schedule is inconsistent (total_steps < 1, warm-up longer than the run, ...).
  double at(int64_t step) const;
  // "cosine, peak 0.1, warm-up 782 steps, 11730 steps in all"
  std::string str() const;
  // How many steps run at another rate than the step before them: 0 for a constant rate, every
  // warm-up step after the first and every decay step of a cosine, the milestones of a step
  // schedule. With TrainOptions::cuda_graph each is one more recording of the step (trainer.h).
  // Evaluates at() once per step of the run.
  int64_t rate_changes() const;
};

// What --cuda-graph costs with schedule `s`, as the one line bench/train prints: "" when the rate
// never changes; else a note that each of the rate_changes() records the step again (the learning
// rate is a by-value argument of the recorded update kernel, kernels/optim.h), and how to time the
// graph alone.
std::string cuda_graph_schedule_notice(const LrSchedule& s);

// The schedule --schedule / --warmup-epochs ask for (tutorial::add_schedule_flags): peak f.lr over
// `epochs` epochs of `steps_per_epoch` optimizer steps, the warm-up rounded down to whole steps.
// Checked here, before any training: hl::Error names what is wrong.
LrSchedule schedule_from_flags(const CommonFlags& f, int64_t steps_per_epoch, int64_t epochs);

// Make a training run follow `s`: sets opt's rate to step 0's now, and after every step (applied or
// skipped by the loss scaler: the schedule counts steps, not updates) sets the next step's, through
// opts.on_step_end, which needs no host synchronization. A callback already there runs first. `opt`
// must outlive the training that uses opts.
void follow_schedule(TrainOptions& opts, optim::Optimizer& opt, const LrSchedule& s);

// Both: the flags' schedule over `epochs` epochs of the steps train_epoch runs on `loader` with opts
// (set opts.max_steps first), followed by opt. Returns it, for the programs to print.
LrSchedule follow_schedule_flags(TrainOptions& opts, optim::Optimizer& opt, const CommonFlags& f,
                                 const data::DataLoader& loader, int64_t epochs);

}  // namespace hl::tutorial
