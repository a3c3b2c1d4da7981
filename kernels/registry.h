// The variant registry (DESIGN.md §2): every op family keeps named versions of its kernel side by
// side, so tests run them all against the CPU reference, benchmarks time them all, and a tutorial can
// pick one (`--gemm wmma`, or the family's environment variable, e.g. HALFLING_GEMM=naive).
//
// A variant registers itself from its own source file:
//
//   HL_REGISTER_VARIANT(GemmArgs, {"naive", DeviceType::cuda, 10, "one thread per output", run, nullptr});
//
// A variant registered with opt_in = true runs only when asked for by name: a new rung lands that way
// until its tests, the sanitizers and its benchmark have run on a GPU (the project's rule for every
// CUDA kernel), and is promoted by clearing the flag. Until then the automatic choice stays on the
// rungs that have been verified, whatever their priorities. A verified rung that measured slower
// than the rungs the automatic choice already has may stay opt-in too, kept as a lesson (its
// registration says so).
//
// halfling is built as a shared library, so every registration in every file runs at load time.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/nocuda/cuda_variant_names.h"

namespace hl::kernels {

template <class Args>
struct Variant {
  std::string name;
  DeviceType device;
  int priority;         // the default is the highest-priority variant that supports the arguments
  std::string summary;  // one line for listings: what this rung changes
  void (*run)(const Args&);
  // nullptr when the variant can compute these arguments, else the reason it cannot.
  const char* (*unsupported)(const Args&);
  bool opt_in = false;  // true: chosen only by name (explicit, set_default or the environment), never automatically
};

template <class Args>
class Registry {
 public:
  static Registry& instance() {
    static Registry r;
    return r;
  }

  void add(Variant<Args> v) {
    HL_CHECK(find(v.name, v.device) == nullptr, Args::family, ": variant '", v.name, "' registered twice for ",
             device_name(v.device));
    variants_.push_back(std::move(v));
    std::stable_sort(variants_.begin(), variants_.end(),
                     [](const Variant<Args>& a, const Variant<Args>& b) { return a.priority > b.priority; });
  }

  // All variants, highest priority first.
  const std::vector<Variant<Args>>& all() const { return variants_; }

  std::vector<std::string> names(DeviceType dev) const {
    std::vector<std::string> out;
    for (const auto& v : variants_)
      if (v.device == dev) out.push_back(v.name);
    return out;
  }

  const Variant<Args>* find(const std::string& name, DeviceType dev) const {
    for (const auto& v : variants_)
      if (v.name == name && v.device == dev) return &v;
    return nullptr;
  }

  // Which variant runs: an explicit name, else the one set with set_default(), else the
  // environment variable Args::env_var, else the highest-priority variant that supports args and is
  // not opt_in. A pinned name (set_default or the environment) applies only on the devices that have
  // a variant of that name: `--gemm wmma_pipelined` pins the GPU's GEMM and leaves CPU GEMMs (a tensor on the
  // host, a gradient check) to the automatic choice. That holds in a CPU-only build too, which knows
  // the CUDA names without their variants (known_anywhere). An explicit name must exist on the device.
  const Variant<Args>& select(const Args& args, const std::string& requested = "") const {
    const DeviceType dev = args.device;
    std::string name = requested;
    if (name.empty()) {
      std::string pinned = default_name_;
      if (pinned.empty()) {
        const char* env = std::getenv(Args::env_var);
        if (env != nullptr) pinned = env;
      }
      if (!pinned.empty() && (find(pinned, dev) != nullptr || !known_anywhere(pinned))) name = pinned;
    }
    if (!name.empty()) {
      const Variant<Args>* v = find(name, dev);
      if (v == nullptr) {
        std::string known;
        for (const auto& n : names(dev)) known += (known.empty() ? "" : ", ") + n;
        throw Error(detail::concat(Args::family, ": no variant named '", name, "'", pin_origin(name), " on ",
                                   device_name(dev), " (known: ", known, "; set with --", Args::family, " or ",
                                   Args::env_var, ")"));
      }
      if (v->unsupported != nullptr) {
        if (const char* why = v->unsupported(args)) {
          throw Error(detail::concat(Args::family, ": variant '", name, "'", pin_origin(name), " cannot run ",
                                     args.describe(), ": ", why));
        }
      }
      return *v;
    }
    // When none can, the reasons say what to change: each different one, in priority order, after the
    // first variant that gave it.
    std::string reasons;
    std::vector<std::string> seen;
    for (const auto& v : variants_) {
      if (v.device != dev || v.opt_in) continue;
      const char* why = v.unsupported != nullptr ? v.unsupported(args) : nullptr;
      if (why == nullptr) return v;
      if (std::find(seen.begin(), seen.end(), why) != seen.end()) continue;
      seen.emplace_back(why);
      reasons += detail::concat(reasons.empty() ? "" : "; ", v.name, ": ", why);
    }
    throw Error(detail::concat(Args::family, ": no ", device_name(dev), " variant can run ", args.describe(),
                               reasons.empty() ? "" : " (", reasons, reasons.empty() ? "" : ")"));
  }

  // Whether any device has a variant of this name (a typo in a pinned name must still be an error).
  bool known_anywhere(const std::string& name) const {
    for (const auto& v : variants_)
      if (v.name == name) return true;
    return cuda_name(name);
  }

  // Whether a CUDA build has a variant of this name: registered here, or, in a CPU-only build, which
  // registers no CUDA variant, listed in kernels/nocuda/cuda_variant_names.h.
  bool cuda_name(const std::string& name) const {
    return find(name, DeviceType::cuda) != nullptr || is_cuda_variant_name(Args::family, name);
  }

  // Where a name came from when it is the pinned one, for errors: " (pinned by --gemm or set_default)"
  // or " (from HALFLING_GEMM)", else "". A user who forgot an exported variable sees it named.
  std::string pin_origin(const std::string& name) const {
    if (!default_name_.empty())
      return name == default_name_ ? detail::concat(" (pinned by --", Args::family, " or set_default)") : "";
    const char* env = std::getenv(Args::env_var);
    return env != nullptr && name == env ? detail::concat(" (from ", Args::env_var, ")") : "";
  }

  // Pin the variant used when no explicit name is given ("" restores automatic selection).
  void set_default(const std::string& name) { default_name_ = name; }
  const std::string& default_name() const { return default_name_; }

 private:
  std::vector<Variant<Args>> variants_;
  std::string default_name_;
};

}  // namespace hl::kernels

#define HL_REG_CAT2(a, b) a##b
#define HL_REG_CAT(a, b) HL_REG_CAT2(a, b)
#define HL_REGISTER_VARIANT(ArgsType, ...)                                       \
  static const bool HL_REG_CAT(hl_registered_variant_, __COUNTER__) =           \
      (::hl::kernels::Registry<ArgsType>::instance().add(::hl::kernels::Variant<ArgsType> __VA_ARGS__), true)
