// The dynamic loss scaler's rule (loss scaling is paper §3.2, which uses a constant scale; this rule
// for changing it is PyTorch GradScaler's; DESIGN.md §3), as one function that the CPU path and
// the CUDA kernel both call, so that the CPU tests prove the logic the GPU runs.
//
// Why it lives on the device: deciding the next scale needs the found-inf flag, and reading that
// flag to the host would stall the CPU until the whole backward pass has run on the GPU (one host
// synchronization per step). Keeping the scale, its counters and the flag in device memory lets the
// host queue step after step without ever waiting; a value reaches the host only when printed.
#pragma once
#include <cstdint>

#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels {

// The configuration of the rule (host-known, passed by value to the kernel).
struct ScalerRule {
  bool dynamic = true;  // false: a static scale (or none): only the bookkeeping below runs
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  double min_scale = 0.0;
  double max_scale = 3.4028234663852886e38;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;
  bool consecutive_hysteresis = false;
};

// Everything that decides future scales; lives in device memory (five 8-byte fields).
struct ScalerState {
  double scale = 65536.0;       // a double, so that min/max bounds that are not f32 values stay exact
  int64_t growth_tracker = 0;   // consecutive clean steps since the last growth or overflow
  int64_t hysteresis_left = 1;  // overflows still tolerated before a backoff (DeepSpeed)
  int64_t skipped = 0;          // steps skipped on overflow so far
  int64_t last_skipped = 0;     // 1 when the last step was skipped
};

// End one step: record whether it overflowed, then (dynamic only) grow or back off the scale.
// The scale is an f32 in the arithmetic, as in PyTorch: growth is refused when the grown f32 is not
// finite. With hysteresis h, h overflows are tolerated (skipped, no backoff) before one backoff;
// `consecutive`: a clean step refills the allowance; a growth always refills it.
HL_HOST_DEVICE void scaler_rule(const ScalerRule& r, ScalerState& st, bool found_inf) {
  st.last_skipped = found_inf ? 1 : 0;
  if (found_inf) ++st.skipped;
  if (!r.dynamic) return;
  const float s = static_cast<float>(st.scale);
  if (found_inf) {
    st.growth_tracker = 0;
    if (st.hysteresis_left <= 1) {
      const double backed = static_cast<double>(s * static_cast<float>(r.backoff_factor));
      st.scale = backed > r.min_scale ? backed : r.min_scale;  // max(backed, min)
    } else {
      --st.hysteresis_left;  // tolerate this overflow (DeepSpeed's delayed shift)
    }
    return;
  }
  if (r.consecutive_hysteresis) st.hysteresis_left = r.hysteresis;
  if (++st.growth_tracker >= r.growth_interval) {
    const float grown = s * static_cast<float>(r.growth_factor);
    // isfinite without <cmath> (the same on host and device): x - x is 0 only for finite x.
    if (grown - grown == 0.0f) st.scale = static_cast<double>(grown) < r.max_scale ? static_cast<double>(grown) : r.max_scale;
    st.growth_tracker = 0;
    st.hysteresis_left = r.hysteresis;  // a growth refills the overflow allowance
  }
}

}  // namespace hl::kernels
