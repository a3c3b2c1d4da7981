#include "tutorials/common/schedule.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>

#include "kernels/error.h"

namespace hl::tutorial {

LrSchedule::Kind LrSchedule::parse_kind(const std::string& s) {
  if (s == "constant") return Kind::constant;
  if (s == "cosine") return Kind::cosine;
  if (s == "step") return Kind::step;
  throw Error("--schedule: unknown schedule '" + s + "' (known: constant, cosine, step)");
}

const char* LrSchedule::kind_name(Kind k) {
  switch (k) {
    case Kind::constant: return "constant";
    case Kind::cosine: return "cosine";
    case Kind::step: return "step";
  }
  return "?";
}

double LrSchedule::at(int64_t step) const {
  HL_CHECK(total_steps >= 1, "LrSchedule: total_steps must be >= 1, got ", total_steps);
  HL_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps, "LrSchedule: warmup_steps (", warmup_steps,
           ") must be in [0, total_steps = ", total_steps, "]");
  // A peak of 0 is allowed (--lr 0 trains nothing, as it always has): every rate is then 0.
  HL_CHECK(std::isfinite(peak) && std::isfinite(final_lr) && final_lr >= 0 && final_lr <= peak,
           "LrSchedule: need 0 <= final_lr <= peak, got peak ", peak, ", final_lr ", final_lr);
  HL_CHECK(step >= 0, "LrSchedule::at: negative step ", step);
  step = std::min(step, total_steps - 1);
  // Warm-up: step 0 runs at peak/warmup_steps, step warmup_steps-1 at the peak (never at 0: a step
  // at learning rate 0 would be wasted).
  if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = total_steps - warmup_steps;
  const double t = decay_steps > 1 ? static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - 1) : 0.0;
  switch (kind) {
    case Kind::constant: return peak;
    case Kind::cosine: return final_lr + 0.5 * (peak - final_lr) * (1.0 + std::cos(std::numbers::pi * t));
    case Kind::step: return peak * (t < 0.5 ? 1.0 : (t < 0.75 ? 0.1 : 0.01));
  }
  return peak;
}

std::string LrSchedule::str() const {
  return detail::concat(kind_name(kind), ", peak ", peak, kind == Kind::cosine ? detail::concat(" -> ", final_lr) : "",
                        ", warm-up ", warmup_steps, " steps, ", total_steps, " steps in all");
}

int64_t LrSchedule::rate_changes() const {
  int64_t changes = 0;
  double before = at(0);
  for (int64_t step = 1; step < total_steps; ++step) {
    const double rate = at(step);
    if (rate != before) ++changes;
    before = rate;
  }
  return changes;
}

std::string cuda_graph_schedule_notice(const LrSchedule& s) {
  const int64_t changes = s.rate_changes();
  if (changes == 0) return "";
  return detail::concat("note: --cuda-graph with a learning rate that changes at ", changes, " of the run's ",
                        s.total_steps, " steps (", s.str(), "): the rate is a by-value argument of the recorded ",
                        "update kernel, so each change records the step again (a capture and an instantiation, ",
                        "slower than launching it); time the graph with --schedule constant and no warm-up");
}

LrSchedule schedule_from_flags(const CommonFlags& f, int64_t steps_per_epoch, int64_t epochs) {
  HL_CHECK(steps_per_epoch >= 1 && epochs >= 1, "--schedule: need at least one step and one epoch, got ",
           steps_per_epoch, " step(s) per epoch and ", epochs, " epoch(s)");
  HL_CHECK(std::isfinite(f.warmup_epochs) && f.warmup_epochs >= 0, "--warmup-epochs: must be >= 0, got ",
           f.warmup_epochs);
  LrSchedule s;
  s.kind = LrSchedule::parse_kind(f.schedule);
  s.peak = f.lr;
  s.total_steps = steps_per_epoch * epochs;
  // A warm-up longer than the run covers the whole run (the rate reaches the peak at the last step).
  s.warmup_steps = std::min(s.total_steps, static_cast<int64_t>(f.warmup_epochs * static_cast<double>(steps_per_epoch)));
  s.at(0);  // the checks of LrSchedule::at (a finite peak, ...), before any training
  return s;
}

void follow_schedule(TrainOptions& opts, optim::Optimizer& opt, const LrSchedule& s) {
  opt.set_lr(s.at(0));
  // The run's global step, across epochs (train_epoch's index restarts at 0 each epoch), lives with
  // the callback; a copy of opts shares it, so call this once per training run.
  auto next = std::make_shared<int64_t>(0);
  opts.on_step_end = [&opt, s, next, before = opts.on_step_end](int64_t step) {
    if (before) before(step);
    opt.set_lr(s.at(++*next));
  };
}

LrSchedule follow_schedule_flags(TrainOptions& opts, optim::Optimizer& opt, const CommonFlags& f,
                                 const data::DataLoader& loader, int64_t epochs) {
  // At least one step, so that a run of --max-steps 0 (which trains nothing) still has a schedule.
  const LrSchedule s = schedule_from_flags(f, std::max<int64_t>(1, steps_per_epoch(loader, opts)), epochs);
  follow_schedule(opts, opt, s);
  return s;
}

}  // namespace hl::tutorial
