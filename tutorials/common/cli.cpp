#include "tutorials/common/cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>

#include <stdlib.h>  // mkstemp
#include <unistd.h>

#include "framework/amp.h"
#include "framework/autograd.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"

namespace hl::tutorial {

namespace {
// Numbers are read the way kernels/dtype.cpp's parse_double and parse_int64 read them: the whole text is
// the number, in decimal (strtod for reals; an optional sign and digits for integers). CLI11 alone calls
// "abc" "not in range", takes "-1" as the seed 2^64 - 1 (strtoull negates it), saturates a seed past
// 2^64 - 1, and reads "010" as octal 8. Each validator below checks the text, then rewrites it in the
// one form CLI11's own conversion reads back as the same value (so they are added with transform():
// check() marks a validator as unable to change the text).

std::string in_quotes(const std::string& text) { return "'" + text + "'"; }

// "a", "a or b", "a, b or c".
std::string one_of(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

// A device's variant names for an error message, or why there are none.
std::string known_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? std::string("none: this family has one implementation there") : out;
}

// The environment variable that pins a registry's variant (HALFLING_GEMM, ...).
template <class Args>
const char* env_var_of(const kernels::Registry<Args>&) {
  return Args::env_var;
}

// An optional sign, then at least one digit and nothing else. Past 2^64 - 1 `overflow` is set (and
// `magnitude` means nothing).
bool read_decimal(const std::string& text, bool& negative, uint64_t& magnitude, bool& overflow) {
  size_t i = 0;
  negative = false;
  magnitude = 0;
  overflow = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  if (i == text.size()) return false;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    if (__builtin_mul_overflow(magnitude, uint64_t{10}, &magnitude) ||
        __builtin_add_overflow(magnitude, static_cast<uint64_t>(text[i] - '0'), &magnitude))
      overflow = true;
  }
  return true;
}

enum class Real { ok, not_a_number, overflow };

// strtod over the whole text. A leading blank, which strtod would skip, is refused: the value is the
// number alone, as read_decimal takes it. Underflow reads as 0 or a subnormal (1e-400 is a number, and
// finite); overflow (1e400) is reported apart, as parse_double does.
Real read_real(const std::string& text, double& v) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return Real::not_a_number;
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  v = std::strtod(begin, &end);
  if (end != begin + text.size()) return Real::not_a_number;
  return errno == ERANGE && std::isinf(v) ? Real::overflow : Real::ok;
}
}  // namespace

// An integer flag in [lo, hi]: "'abc' is not a number", "'2.5' is not an integer (decimal digits only)",
// "'-1' is out of range (0 to 18446744073709551615)". CLI11 prefixes the flag's name.
CLI::Validator integer_in(const std::string& type, int64_t lo, uint64_t hi) {
  const std::string range = " (" + std::to_string(lo) + " to " + std::to_string(hi) + ")";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        bool negative = false, overflow = false;
        uint64_t mag = 0;
        if (!read_decimal(text, negative, mag, overflow)) {
          double v = 0;
          if (read_real(text, v) == Real::not_a_number) return in_quotes(text) + " is not a number";
          return in_quotes(text) + " is not an integer (decimal digits only)";
        }
        const bool below_zero = negative && mag != 0;
        // lo's magnitude as unsigned, without negating INT64_MIN in signed arithmetic.
        const uint64_t lo_mag = lo < 0 ? uint64_t(-(lo + 1)) + 1 : uint64_t(lo);
        const bool in_range =
            !overflow && (below_zero ? lo < 0 && mag <= lo_mag : mag <= hi && (lo <= 0 || mag >= lo_mag));
        if (!in_range) return in_quotes(text) + " is out of range" + range;
        text = (below_zero ? "-" : "") + std::to_string(mag);
        return std::string();
      },
      type + " in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// A real flag in [lo, hi], finite (CLI11's Range lets NaN through: every comparison with NaN is false).
CLI::Validator real_in(double lo, double hi) {
  char bounds[64];
  std::snprintf(bounds, sizeof bounds, "%g to %g", lo, hi);
  const std::string range = std::string(" (") + bounds + ")";
  char shown[64];  // the help's form, as CLI11's Range writes it
  std::snprintf(shown, sizeof shown, "FLOAT in [%g - %g]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        double v = 0;
        switch (read_real(text, v)) {
          case Real::not_a_number: return in_quotes(text) + " is not a number";
          case Real::overflow: return in_quotes(text) + " is out of range" + range;
          case Real::ok: break;
        }
        if (!std::isfinite(v)) return "must be a finite number, got " + in_quotes(text);
        if (v < lo || v > hi) return in_quotes(text) + " is out of range" + range;
        // 17 significant digits read back as exactly v, also through CLI11's strtold then double.
        char exact[32];
        std::snprintf(exact, sizeof exact, "%.17g", v);
        text = exact;
        return std::string();
      },
      shown);
}

void add_common_flags(CLI::App& app, CommonFlags& f, const std::vector<std::string>& precisions) {
  app.add_option("--device", f.device, "cpu, cuda or auto (cuda when a GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "gpu", "auto"}))
      ->capture_default_str();
  // The modes this program has, not every mode there is (03 and 08 train in fp32 only, 04 is fp16).
  app.add_option("--precision", f.precision,
                 "arithmetic: " + one_of(precisions) + (precisions.size() == 1 ? " (the only mode here)" : ""))
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
  app.add_option("--epochs", f.epochs, "passes over the training set")
      ->transform(integer_in("INT", 1, 100000))
      ->each([&f](const std::string&) { f.epochs_given = true; })
      ->capture_default_str();
  app.add_option("--batch", f.batch, "batch size")->transform(integer_in("INT", 1, 1 << 20))->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate")->transform(real_in(0.0, 100.0))->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->transform(real_in(0.0, 1.0))->capture_default_str();
  app.add_option("--seed", f.seed, "seed for initialization and shuffling")
      ->transform(integer_in("UINT", 0, UINT64_MAX))
      ->capture_default_str();
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
      ->transform(real_in(0.0, 1000.0))
      ->capture_default_str();
}

namespace {

// A registry's environment variable, when set, must name a variant that some device has.
template <class Args>
void check_environment_of(const kernels::Registry<Args>& registry) {
  const char* env = std::getenv(Args::env_var);
  if (env == nullptr || *env == '\0' || registry.known_anywhere(env)) return;
  // The CUDA names: registered in a CUDA build; in a CPU-only one, those a CUDA build registers.
  std::vector<std::string> cuda = registry.names(DeviceType::cuda);
  if (cuda.empty())
    for (std::string_view n : kernels::cuda_variant_names(Args::family)) cuda.emplace_back(n);
  throw Error(std::string(Args::env_var) + "=" + env + ": no " + Args::family +
              " variant of that name on any device (known on cpu: " + known_names(registry.names(DeviceType::cpu)) +
              "; on cuda: " + known_names(cuda) + "; unset " + Args::env_var + " for the automatic choice)");
}

}  // namespace

Device apply_common_flags(const CommonFlags& f) {
  const Device dev = parse_device(f.device);
  set_detect_anomaly(f.detect_anomaly);
  check_variant_environment();
  // The GPU was asked for (or "auto" found none) and the CPU runs instead. The command was written for
  // a GPU, so a CUDA variant it names is dropped with a notice rather than refused: `--device cuda
  // --gemm wmma_pipelined` runs on a laptop too (DESIGN.md §2). With --device cpu it is refused below.
  const bool fell_back = dev == Device::cpu && f.device != "cpu";
  const auto drop = [](const std::string& what) {
    std::cerr << "halfling: " << what << " is a CUDA variant, and this run is on the CPU: ignored (the CPU's "
              << "automatic choice runs)\n";
  };
  // Pin a registry's default after checking the name exists on this device.
  const auto pin = [&](auto& registry, const std::string& name, const char* flag) {
    if (name.empty()) {
      // The environment's pin is the registry's to apply, and on the CPU it skips a CUDA name; after a
      // fallback, say so here once, as for the flag.
      const char* env_var = env_var_of(registry);
      const char* env = std::getenv(env_var);
      const auto cpu = registry.names(dev);
      if (fell_back && env != nullptr && *env != '\0' && std::find(cpu.begin(), cpu.end(), env) == cpu.end() &&
          registry.cuda_name(env))
        drop(std::string(env_var) + "=" + env);
      return;
    }
    const auto names = registry.names(dev);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      if (fell_back && registry.cuda_name(name)) {
        drop(std::string(flag) + " " + name);
        return;
      }
      throw Error(std::string(flag) + ": no variant '" + name + "' on " + device_name(dev) + " (known: " +
                  known_names(names) + ")");
    }
    registry.set_default(name);
  };
  pin(kernels::GemmRegistry::instance(), f.gemm, "--gemm");
  pin(kernels::SoftmaxRegistry::instance(), f.softmax, "--softmax");
  pin(kernels::ConvRegistry::instance(), f.conv, "--conv");
  pin(kernels::BatchNormRegistry::instance(), f.bn, "--bn");
  return dev;
}

int64_t smoke_epochs(const CommonFlags& f, int64_t smoke_default) { return f.epochs_given ? f.epochs : smoke_default; }

void check_variant_environment() {
  check_environment_of(kernels::GemmRegistry::instance());
  check_environment_of(kernels::SoftmaxRegistry::instance());
  check_environment_of(kernels::ConvRegistry::instance());
  check_environment_of(kernels::BatchNormRegistry::instance());
}

void check_writable(const std::string& flag, const std::string& path, WrittenBy how) {
  namespace fs = std::filesystem;
  const auto fail = [&](const std::string& why) { throw Error(flag + ": cannot write " + path + ": " + why); };
  if (path.empty()) fail("no file name given");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) fail("it is a folder (give a file name in it)");
  const bool exists = fs::exists(st);
  if (exists && how == WrittenBy::stream) {  // only asked: a FIFO is not opened, a file not truncated
    if (::access(path.c_str(), W_OK) != 0) fail(std::strerror(errno));
    return;
  }
  const fs::path parent = fs::path(path).parent_path();
  const fs::path folder = parent.empty() ? fs::path(".") : parent;
  if (!exists && !fs::is_directory(folder, ec))
    fail("the folder " + folder.string() + (fs::exists(folder, ec) ? " is not a folder" : " does not exist"));
  // A hidden file made in the folder and removed at once, as AtomicFile makes its temporary: the one
  // test that sees permissions, ACLs and read-only file systems alike, and never touches `path`.
  std::string tmpl = (folder / ("." + fs::path(path).filename().string() + ".check.XXXXXX")).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) fail("cannot create a file in " + folder.string() + ": " + std::strerror(errno));
  ::close(fd);
  ::unlink(tmpl.c_str());
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
