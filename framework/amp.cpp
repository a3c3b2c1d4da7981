#include "framework/amp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "framework/autograd.h"
#include "framework/ops.h"

namespace hl::amp {

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "fp16") return Precision::fp16;
  if (s == "mixed") return Precision::mixed;
  throw Error("parse_precision: unknown precision '" + s + "' (expected fp32, fp16 or mixed)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::mixed: return "mixed";
  }
  return "?";
}

namespace {

double parse_number(const std::string& text, const std::string& spec) {
  return detail::parse_double(text, "loss scale '" + spec + "'");
}

// interval and hysteresis are counts: 2.5 is an error, not 2.
int64_t parse_count(double v, const std::string& key, const std::string& spec) {
  HL_CHECK(v == std::floor(v) && std::abs(v) < 9.0e18, "loss scale '", spec, "': ", key,
           " must be a whole number, got ", v);
  return static_cast<int64_t>(v);
}

}  // namespace

ScalerConfig ScalerConfig::parse(const std::string& spec) {
  ScalerConfig c;
  bool init_given = false;
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string args = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "none") {
    HL_CHECK(args.empty(), "loss scale '", spec, "': none takes no arguments");
    c.kind = Kind::none;
    c.init_scale = 1.0;
  } else if (kind == "static") {
    c.kind = Kind::fixed;
    HL_CHECK(!args.empty(), "loss scale '", spec, "': static needs a scale, e.g. static:1024");
    c.init_scale = parse_number(args, spec);
  } else if (kind == "dynamic") {
    c.kind = Kind::dynamic;
    std::stringstream ss(args);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      if (item == "consecutive") {
        c.consecutive_hysteresis = true;
        continue;
      }
      const size_t eq = item.find('=');
      HL_CHECK(eq != std::string::npos, "loss scale '", spec, "': expected key=value, got '", item, "'");
      const std::string key = item.substr(0, eq);
      const double v = parse_number(item.substr(eq + 1), spec);
      if (key == "init") c.init_scale = v, init_given = true;
      else if (key == "growth") c.growth_factor = v;
      else if (key == "backoff") c.backoff_factor = v;
      else if (key == "interval") c.growth_interval = parse_count(v, key, spec);
      else if (key == "min") c.min_scale = v;
      else if (key == "max") c.max_scale = v;
      else if (key == "hysteresis") c.hysteresis = parse_count(v, key, spec);
      else throw Error("loss scale '" + spec + "': unknown key '" + key +
                       "' (init, growth, backoff, interval, min, max, hysteresis, consecutive)");
    }
  } else {
    throw Error("loss scale '" + spec + "': expected none, static:S or dynamic[:key=value,...]");
  }
  HL_CHECK(c.min_scale >= 0.0 && c.min_scale <= c.max_scale, "loss scale '", spec, "': needs 0 <= min <= max");
  // An init left to its default starts inside the bounds given (dynamic:min=4,max=4 runs at 4); one
  // given outside them is refused (it would run there until the first growth or backoff).
  if (c.kind == Kind::dynamic && !init_given) c.init_scale = std::clamp(c.init_scale, c.min_scale, c.max_scale);
  HL_CHECK(std::isfinite(c.init_scale) && c.init_scale > 0 && std::isfinite(static_cast<float>(c.init_scale)),
           "loss scale '", spec, "': the scale must be a positive finite f32, got ", c.init_scale);
  HL_CHECK(c.init_scale >= kSmallestScale, "loss scale '", spec, "': the scale must be at least 2^-111 (",
           kSmallestScale, "), got ", c.init_scale, ": unscaling by a smaller one can overflow FP32 (amp.h)");
  HL_CHECK(c.growth_factor > 1.0, "loss scale '", spec, "': growth must be > 1");
  HL_CHECK(c.backoff_factor > 0.0 && c.backoff_factor < 1.0, "loss scale '", spec, "': backoff must be in (0, 1)");
  HL_CHECK(c.growth_interval >= 1, "loss scale '", spec, "': interval must be >= 1");
  HL_CHECK(c.hysteresis >= 1, "loss scale '", spec, "': hysteresis must be >= 1");
  HL_CHECK(c.kind != Kind::dynamic || (c.min_scale <= c.init_scale && c.init_scale <= c.max_scale), "loss scale '",
           spec, "': init ", c.init_scale, " is outside [min, max] = [", c.min_scale, ", ", c.max_scale, "]");
  return c;
}

std::string ScalerConfig::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::fixed: return "static:" + detail::exact(init_scale);
    case Kind::dynamic: {
      // Every setting that differs from its default, so that two configs with the same str() run the
      // same rule (LossScaler::load_state compares them).
      const ScalerConfig d;
      std::string s = "dynamic:init=" + detail::exact(init_scale) + ",interval=" + std::to_string(growth_interval);
      if (growth_factor != d.growth_factor) s += ",growth=" + detail::exact(growth_factor);
      if (backoff_factor != d.backoff_factor) s += ",backoff=" + detail::exact(backoff_factor);
      if (min_scale != d.min_scale) s += ",min=" + detail::exact(min_scale);
      if (max_scale != d.max_scale) s += ",max=" + detail::exact(max_scale);
      if (hysteresis != 1) s += ",hysteresis=" + std::to_string(hysteresis);
      if (consecutive_hysteresis) s += ",consecutive";
      return s;
    }
  }
  return "?";
}

LossScaler::LossScaler(ScalerConfig config) : config_(config) {
  kernels::ScalerState st;
  st.scale = config_.kind == ScalerConfig::Kind::none ? 1.0 : config_.init_scale;
  st.hysteresis_left = config_.hysteresis;
  state_ = detail::raw_tensor(&st, sizeof st, Device::cpu);
  scale32_ = Tensor::full({}, st.scale, DType::f32, Device::cpu);
  flag_ = Tensor::zeros({}, DType::i32, Device::cpu);
}

LossScaler::LossScaler(const LossScaler& o)
    : config_(o.config_), steps_(o.steps_), history_len_(o.history_len_), stage_(o.stage_),
      unscaled_opt_(o.unscaled_opt_), state_(o.state_.clone()), scale32_(o.scale32_.clone()),
      flag_(o.flag_.clone()), history_(o.history_.defined() ? o.history_.clone() : Tensor()),
      history_cache_(o.history_cache_) {}

LossScaler& LossScaler::operator=(const LossScaler& o) {
  if (this != &o) *this = LossScaler(o);  // copy, then move into place
  return *this;
}

kernels::ScalerRule ScalerConfig::rule() const {
  kernels::ScalerRule r;
  r.dynamic = kind == Kind::dynamic;
  r.growth_factor = growth_factor;
  r.backoff_factor = backoff_factor;
  r.min_scale = std::max(min_scale, kSmallestScale);  // the floor of every scale (amp.h)
  r.max_scale = max_scale;
  r.growth_interval = growth_interval;
  r.hysteresis = hysteresis;
  r.consecutive_hysteresis = consecutive_hysteresis;
  return r;
}

void LossScaler::place_on(Device dev) const {
  if (state_.device() == dev) return;
  // Once per run in practice (the state starts on the CPU and follows the model to the GPU).
  state_ = state_.to(dev);
  scale32_ = scale32_.to(dev);
  flag_ = flag_.to(dev);
  if (history_.defined()) history_ = history_.to(dev);
}

kernels::ScalerState LossScaler::read_state() const {
  kernels::ScalerState st;
  detail::read_raw(state_, &st, sizeof st);  // the synchronization the getters document
  return st;
}

double LossScaler::get_scale() const { return read_state().scale; }
int64_t LossScaler::skipped_steps() const { return read_state().skipped; }
bool LossScaler::last_step_skipped() const { return read_state().last_skipped != 0; }
int64_t LossScaler::growth_tracker() const { return read_state().growth_tracker; }
int64_t LossScaler::hysteresis_left() const { return read_state().hysteresis_left; }

const std::vector<double>& LossScaler::scale_history() const {
  const int64_t have = static_cast<int64_t>(history_cache_.size());
  if (have < history_len_) {  // read back only the entries not read yet
    const std::vector<double> more = history_.slice_rows(have, history_len_).to_double();
    history_cache_.insert(history_cache_.end(), more.begin(), more.end());
  }
  return history_cache_;
}

Tensor LossScaler::scale(const Tensor& loss) const {
  HL_CHECK(loss.defined(), "LossScaler::scale: the loss is undefined");
  if (config_.kind == ScalerConfig::Kind::none) return loss;
  place_on(loss.device());
  // loss * S with S read on the device (a tensor op, no host read). S is an f32 like the loss:
  // the product is the same as multiplying by the scalar float(S); an f16 loss is rounded back to
  // f16, as a scalar multiply would store it.
  Tensor out = mul(loss, scale32_);
  return out.dtype() == loss.dtype() ? out : out.to(loss.dtype());
}

void LossScaler::unscale(optim::Optimizer& opt) {
  HL_CHECK(stage_ == Stage::ready, "LossScaler::unscale: already ",
           stage_ == Stage::unscaled ? "unscaled" : "stepped",
           " this step; call update() first (unscaling twice would divide the gradients by S twice)");
  place_on(opt.params()[0].device());
  flag_.zero_();
  // The kernel computes float(1.0 / S) from the device scale: 1/S is exact for power-of-two scales,
  // so unscaling then adds no rounding of its own.
  opt.unscale_grads_by(scale_device(), flag_.data<int32_t>());
  stage_ = Stage::unscaled;
  unscaled_opt_ = &opt;
}

void LossScaler::step(optim::Optimizer& opt) {
  HL_CHECK(stage_ != Stage::stepped, "LossScaler::step: already stepped this step; call update() first");
  if (stage_ == Stage::ready) unscale(opt);
  HL_CHECK(unscaled_opt_ == &opt, "LossScaler::step: unscale() was called for another optimizer");
  // None checks nothing (like training without a scaler): a NaN goes straight into the weights.
  // Otherwise the optimizer's kernels read the flag on the device: no host synchronization.
  opt.step_unless(config_.kind == ScalerConfig::Kind::none ? nullptr : flag_.data<int32_t>());
  stage_ = Stage::stepped;
}

void LossScaler::reserve_history() {
  // The history's capacity is managed here, on the host, which knows the step index; growing it is
  // a device-to-device copy (asynchronous), amortized by doubling.
  const int64_t cap = history_.defined() ? history_.numel() : 0;
  if (history_len_ >= cap) {
    Tensor bigger = Tensor::empty({std::max<int64_t>(256, 2 * cap)}, DType::f64, state_.device());
    if (cap > 0) bigger.slice_rows(0, cap).copy_(history_);
    history_ = bigger;
  }
}

void LossScaler::update() {
  HL_CHECK(stage_ == Stage::stepped, "LossScaler::update: no step() since the last update()");
  const Device dev = state_.device();
  double* slot = nullptr;
  if (recording_) {
    slot = replay_slot_.data<double>();  // replayed_update() files it after each replay
  } else {
    reserve_history();
    slot = history_.data<double>() + history_len_;
  }
  kernels::scaler_update(dev, config_.rule(), state_device(),
                         config_.kind == ScalerConfig::Kind::none ? nullptr : flag_.data<int32_t>(),
                         scale32_.data<float>(), slot);
  if (!recording_) {
    ++history_len_;
    ++steps_;
  }
  stage_ = Stage::ready;
  unscaled_opt_ = nullptr;
}

void LossScaler::begin_recording(Device dev) {
  HL_CHECK(stage_ == Stage::ready, "LossScaler::begin_recording: in the middle of a step (call update() first)");
  place_on(dev);  // before the recording: moving the state is a copy from the host
  if (!replay_slot_.defined() || replay_slot_.device() != dev) replay_slot_ = Tensor::zeros({1}, DType::f64, dev);
  recording_ = true;
}

void LossScaler::end_recording() { recording_ = false; }

void LossScaler::replayed_update() {
  HL_CHECK(!recording_, "LossScaler::replayed_update: still recording (call end_recording() first)");
  HL_CHECK(replay_slot_.defined(), "LossScaler::replayed_update: no step has been recorded");
  reserve_history();
  history_.slice_rows(history_len_, history_len_ + 1).copy_(replay_slot_);
  ++history_len_;
  ++steps_;
}

std::map<std::string, std::string> LossScaler::state() const {
  HL_CHECK(stage_ == Stage::ready, "LossScaler::state: save between steps (after update())");
  const kernels::ScalerState st = read_state();
  return {{"config", config_.str()},
          {"scale", detail::exact(st.scale)},
          {"growth_tracker", std::to_string(st.growth_tracker)},
          {"hysteresis_left", std::to_string(st.hysteresis_left)},
          {"steps", std::to_string(steps_)},
          {"skipped", std::to_string(st.skipped)}};
}

void LossScaler::load_state(const std::map<std::string, std::string>& s) {
  auto get = [&](const std::string& k) {
    auto it = s.find(k);
    HL_CHECK(it != s.end(), "LossScaler::load_state: the state has no '", k, "'");
    return it->second;
  };
  HL_CHECK(get("config") == config_.str(), "LossScaler::load_state: the state was saved by a '", get("config"),
           "' scaler, this one is '", config_.str(), "'");
  // Parse and check everything before changing anything: a bad state leaves the scaler as it was.
  const auto count = [&](const std::string& k) {
    return detail::parse_int64(get(k), "LossScaler::load_state: '" + k + "'");
  };
  kernels::ScalerState st;
  st.scale = detail::parse_double(get("scale"), "LossScaler::load_state: 'scale'");
  st.growth_tracker = count("growth_tracker");
  st.hysteresis_left = count("hysteresis_left");
  st.skipped = count("skipped");
  st.last_skipped = 0;
  const int64_t steps = count("steps");
  HL_CHECK(std::isfinite(st.scale) && st.scale > 0 && std::isfinite(static_cast<float>(st.scale)) &&
               static_cast<float>(st.scale) > 0.0f,
           "LossScaler::load_state: the scale must be a positive finite f32, got ", get("scale"));
  const kernels::ScalerRule rule = config_.rule();
  HL_CHECK(!rule.dynamic || (st.scale >= rule.min_scale && st.scale <= rule.max_scale),
           "LossScaler::load_state: the scale ", get("scale"), " is outside this scaler's [", rule.min_scale, ", ",
           rule.max_scale, "]");
  HL_CHECK(st.scale >= kSmallestScale, "LossScaler::load_state: the scale ", get("scale"), " is below 2^-111 (amp.h)");
  HL_CHECK(st.growth_tracker >= 0 && st.hysteresis_left >= 1 && st.hysteresis_left <= config_.hysteresis &&
               st.skipped >= 0 && steps >= 0 && st.skipped <= steps,
           "LossScaler::load_state: inconsistent counters: growth_tracker ", st.growth_tracker, ", hysteresis_left ",
           st.hysteresis_left, " (hysteresis ", config_.hysteresis, "), skipped ", st.skipped, " of ", steps,
           " steps");
  const Device dev = state_.device();
  state_ = detail::raw_tensor(&st, sizeof st, dev);
  scale32_ = Tensor::full({}, st.scale, DType::f32, dev);
  steps_ = steps;
  stage_ = Stage::ready;
  unscaled_opt_ = nullptr;
}

}  // namespace hl::amp
