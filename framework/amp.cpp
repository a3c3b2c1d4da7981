#include "framework/amp.h"

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
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (...) {
  }
  throw Error("loss scale '" + spec + "': '" + text + "' is not a number");
}

}  // namespace

ScalerConfig ScalerConfig::parse(const std::string& spec) {
  ScalerConfig c;
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
      if (key == "init") c.init_scale = v;
      else if (key == "growth") c.growth_factor = v;
      else if (key == "backoff") c.backoff_factor = v;
      else if (key == "interval") c.growth_interval = static_cast<int64_t>(v);
      else if (key == "min") c.min_scale = v;
      else if (key == "max") c.max_scale = v;
      else if (key == "hysteresis") c.hysteresis = static_cast<int64_t>(v);
      else throw Error("loss scale '" + spec + "': unknown key '" + key +
                       "' (init, growth, backoff, interval, min, max, hysteresis, consecutive)");
    }
  } else {
    throw Error("loss scale '" + spec + "': expected none, static:S or dynamic[:key=value,...]");
  }
  HL_CHECK(std::isfinite(c.init_scale) && c.init_scale > 0 && std::isfinite(static_cast<float>(c.init_scale)),
           "loss scale '", spec, "': the scale must be a positive finite f32, got ", c.init_scale);
  HL_CHECK(c.growth_factor > 1.0, "loss scale '", spec, "': growth must be > 1");
  HL_CHECK(c.backoff_factor > 0.0 && c.backoff_factor < 1.0, "loss scale '", spec, "': backoff must be in (0, 1)");
  HL_CHECK(c.growth_interval >= 1, "loss scale '", spec, "': interval must be >= 1");
  HL_CHECK(c.hysteresis >= 1, "loss scale '", spec, "': hysteresis must be >= 1");
  HL_CHECK(c.min_scale >= 0.0 && c.min_scale <= c.max_scale, "loss scale '", spec, "': needs 0 <= min <= max");
  return c;
}

std::string ScalerConfig::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::fixed: return "static:" + detail::exact(init_scale);
    case Kind::dynamic: {
      std::string s = "dynamic:init=" + detail::exact(init_scale) + ",interval=" + std::to_string(growth_interval);
      if (hysteresis != 1) s += ",hysteresis=" + std::to_string(hysteresis);
      if (consecutive_hysteresis) s += ",consecutive";
      return s;
    }
  }
  return "?";
}

LossScaler::LossScaler(ScalerConfig config)
    : config_(config), scale_(config.kind == ScalerConfig::Kind::none ? 1.0 : config.init_scale),
      hysteresis_left_(config.hysteresis) {}

Tensor LossScaler::scale(const Tensor& loss) const {
  HL_CHECK(loss.defined(), "LossScaler::scale: the loss is undefined");
  if (config_.kind == ScalerConfig::Kind::none) return loss;
  return mul(loss, scale_);
}

void LossScaler::unscale(optim::Optimizer& opt) {
  HL_CHECK(stage_ == Stage::ready, "LossScaler::unscale: already ",
           stage_ == Stage::unscaled ? "unscaled" : "stepped",
           " this step; call update() first (unscaling twice would divide the gradients by S twice)");
  const Device dev = opt.params()[0].device();
  if (!flag_.defined() || flag_.device() != dev) flag_ = Tensor::zeros({}, DType::i32, dev);
  flag_.zero_();
  // 1/S is exact for power-of-two scales, so unscaling then adds no rounding of its own.
  opt.unscale_grads(static_cast<float>(1.0 / scale_), flag_.data<int32_t>());
  stage_ = Stage::unscaled;
  unscaled_opt_ = &opt;
}

bool LossScaler::step(optim::Optimizer& opt) {
  HL_CHECK(stage_ != Stage::stepped, "LossScaler::step: already stepped this step; call update() first");
  if (stage_ == Stage::ready) unscale(opt);
  HL_CHECK(unscaled_opt_ == &opt, "LossScaler::step: unscale() was called for another optimizer");
  // None checks nothing (like training without a scaler): a NaN goes straight into the weights.
  found_inf_ = config_.kind != ScalerConfig::Kind::none && flag_.item() != 0.0;  // the one host sync
  if (found_inf_) {
    opt.skip_step();
  } else {
    opt.step();
  }
  stage_ = Stage::stepped;
  return !found_inf_;
}

void LossScaler::update() {
  HL_CHECK(stage_ == Stage::stepped, "LossScaler::update: no step() since the last update()");
  history_.push_back(scale_);
  ++steps_;
  last_skipped_ = found_inf_;
  if (found_inf_) ++skipped_;
  stage_ = Stage::ready;
  unscaled_opt_ = nullptr;
  if (config_.kind != ScalerConfig::Kind::dynamic) return;

  // The scale is an f32, as in PyTorch: growth is refused when the grown f32 is not finite.
  const float s = static_cast<float>(scale_);
  if (found_inf_) {
    growth_tracker_ = 0;
    if (hysteresis_left_ <= 1) {
      scale_ = std::max(static_cast<double>(s * static_cast<float>(config_.backoff_factor)), config_.min_scale);
    } else {
      --hysteresis_left_;  // tolerate this overflow (DeepSpeed's delayed shift)
    }
    return;
  }
  if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
  if (++growth_tracker_ >= config_.growth_interval) {
    const float grown = s * static_cast<float>(config_.growth_factor);
    if (std::isfinite(grown)) scale_ = std::min(static_cast<double>(grown), config_.max_scale);
    growth_tracker_ = 0;
    hysteresis_left_ = config_.hysteresis;  // a growth refills the overflow allowance
  }
}

std::map<std::string, std::string> LossScaler::state() const {
  HL_CHECK(stage_ == Stage::ready, "LossScaler::state: save between steps (after update())");
  return {{"config", config_.str()},
          {"scale", detail::exact(scale_)},
          {"growth_tracker", std::to_string(growth_tracker_)},
          {"hysteresis_left", std::to_string(hysteresis_left_)},
          {"steps", std::to_string(steps_)},
          {"skipped", std::to_string(skipped_)}};
}

void LossScaler::load_state(const std::map<std::string, std::string>& s) {
  auto get = [&](const std::string& k) {
    auto it = s.find(k);
    HL_CHECK(it != s.end(), "LossScaler::load_state: the state has no '", k, "'");
    return it->second;
  };
  HL_CHECK(get("config") == config_.str(), "LossScaler::load_state: the state was saved by a '", get("config"),
           "' scaler, this one is '", config_.str(), "'");
  scale_ = std::stod(get("scale"));
  growth_tracker_ = std::stoll(get("growth_tracker"));
  hysteresis_left_ = std::stoll(get("hysteresis_left"));
  steps_ = std::stoll(get("steps"));
  skipped_ = std::stoll(get("skipped"));
  stage_ = Stage::ready;
}

}  // namespace hl::amp
