#include "tutorials/common/schedule.h"

#include <algorithm>
#include <cmath>
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
  HL_CHECK(std::isfinite(peak) && peak > 0 && std::isfinite(final_lr) && final_lr >= 0 && final_lr <= peak,
           "LrSchedule: need 0 <= final_lr <= peak and peak > 0, got peak ", peak, ", final_lr ", final_lr);
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

}  // namespace hl::tutorial
