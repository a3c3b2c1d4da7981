#include "tutorials/common/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "framework/amp.h"
#include "framework/autograd.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"

namespace hl::tutorial {

namespace {
// CLI11's Range lets NaN through (every comparison with NaN is false): refuse it explicitly.
const CLI::Validator kFinite(
    [](std::string& text) {
      try {
        if (std::isfinite(std::stod(text))) return std::string();
      } catch (...) {
      }
      return "must be a finite number, got '" + text + "'";
    },
    "FINITE");
}  // namespace

void add_common_flags(CLI::App& app, CommonFlags& f, const std::vector<std::string>& precisions) {
  app.add_option("--device", f.device, "cpu, cuda or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "gpu", "auto"}))
      ->capture_default_str();
  app.add_option("--precision", f.precision, "arithmetic: fp32, fp16 or mixed")
      ->check(CLI::IsMember(precisions))
      ->capture_default_str();
  if (precisions.size() > 1) {
    app.add_option("--loss-scale", f.loss_scale, "none, static:S or dynamic[:init=,interval=,hysteresis=,consecutive]")
        ->check([](const std::string& s) {
          try {
            amp::ScalerConfig::parse(s);
            return std::string();
          } catch (const Error& e) {
            return std::string(e.what());
          }
        })
        ->capture_default_str();
  }
  app.add_option("--epochs", f.epochs, "passes over the training set")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--batch", f.batch, "batch size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate")->check(kFinite & CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->check(kFinite & CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--seed", f.seed, "seed for initialization and shuffling")->capture_default_str();
  app.add_option("--data", f.data, "data directory");
  app.add_option("--gemm", f.gemm, "GEMM variant (see --list-variants); default: the fastest for the device");
  app.add_option("--softmax", f.softmax,
                 "softmax / cross-entropy variant (see --list-variants); default: by shape (fused_xent for the loss)");
  app.add_option("--conv", f.conv, "convolution variant (see --list-variants); default: the fastest for the device");
  app.add_option("--bn", f.bn,
                 "CUDA batch-norm variant (see --list-variants); default: split (per_channel is the readable rung)");
  app.add_option("--csv", f.csv, "write a log of the run to this CSV file, one row per epoch (per run and epoch in 05)");
  app.add_flag("--smoke", f.smoke, "a tiny run on a data subset (seconds on a CPU)");
  app.add_flag("--detect-anomaly", f.detect_anomaly, "stop at the first NaN/inf tensor and name it (slow)");
  app.add_flag("--list-variants", f.list_variants, "list the registered kernel variants and exit");
}

void add_schedule_flags(CLI::App& app, CommonFlags& f) {
  app.add_option("--schedule", f.schedule,
                 "learning-rate schedule, peak --lr: constant, cosine (to 0 at the last step) or step (x0.1 at "
                 "50% and 75% of the run), after the warm-up")
      ->check(CLI::IsMember({"constant", "cosine", "step"}))
      ->capture_default_str();
  app.add_option("--warmup-epochs", f.warmup_epochs, "linear learning-rate warm-up over this many epochs first")
      ->check(kFinite & CLI::Range(0.0, 1000.0))
      ->capture_default_str();
}

Device apply_common_flags(const CommonFlags& f) {
  const Device dev = parse_device(f.device);
  set_detect_anomaly(f.detect_anomaly);
  // Pin a registry's default after checking the name exists on this device.
  const auto pin = [&](auto& registry, const std::string& name, const char* flag) {
    if (name.empty()) return;
    const auto names = registry.names(dev);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      if (known.empty()) known = "none: this family has one implementation there";
      throw Error(std::string(flag) + ": no variant '" + name + "' on " + device_name(dev) + " (known: " + known + ")");
    }
    registry.set_default(name);
  };
  pin(kernels::GemmRegistry::instance(), f.gemm, "--gemm");
  pin(kernels::SoftmaxRegistry::instance(), f.softmax, "--softmax");
  pin(kernels::ConvRegistry::instance(), f.conv, "--conv");
  pin(kernels::BatchNormRegistry::instance(), f.bn, "--bn");
  return dev;
}

namespace {

// One line per variant; an opt-in one (registry.h) says how to ask for it.
template <class V>
void print_variant(const V& v) {
  std::cout << "  " << v.name << "  (priority " << v.priority << (v.opt_in ? ", opt-in: by name only" : "") << ")  "
            << v.summary << "\n";
}

}  // namespace

void print_variants() {
  for (DeviceType d : {DeviceType::cpu, DeviceType::cuda}) {
    std::cout << "gemm on " << device_name(d) << ":\n";
    for (const auto& v : kernels::GemmRegistry::instance().all())
      if (v.device == d) print_variant(v);
  }
  for (DeviceType d : {DeviceType::cpu, DeviceType::cuda}) {
    std::cout << "softmax on " << device_name(d) << ":\n";
    for (const auto& v : kernels::SoftmaxRegistry::instance().all())
      if (v.device == d) print_variant(v);
  }
  for (DeviceType d : {DeviceType::cpu, DeviceType::cuda}) {
    std::cout << "conv on " << device_name(d) << ":\n";
    for (const auto& v : kernels::ConvRegistry::instance().all())
      if (v.device == d) print_variant(v);
  }
  std::cout << "bn on cuda (the CPU has one batch-norm implementation):\n";
  for (const auto& v : kernels::BatchNormRegistry::instance().all())
    if (v.device == DeviceType::cuda) print_variant(v);
  if (!runtime::cuda_available()) std::cout << "(no GPU here: " << runtime::cuda_unavailable_reason() << ")\n";
}

std::string conv_variant_for(Device dev, DType dt) {
  // A 3x3 convolution of one channel: every variant accepts it, so the pick is the family's default.
  kernels::ConvArgs probe;
  probe.device = dev;
  probe.N = probe.C = probe.K = 1;
  probe.H = probe.W = probe.R = probe.S = 3;
  probe.in_type = probe.out_type = dt;
  return kernels::ConvRegistry::instance().select(probe).name;
}

std::string default_data_dir(const std::string& name) {
  const char* env = std::getenv("HALFLING_DATA");
  return (env ? std::string(env) : std::string("data")) + "/" + name;
}

}  // namespace hl::tutorial
