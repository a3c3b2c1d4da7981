// Flags every tutorial shares (CLI11), with the defaults of DESIGN.md §4, and what they resolve to.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "framework/device.h"

namespace hl::tutorial {

struct CommonFlags {
  std::string device = "auto";      // cpu | cuda | auto
  std::string precision = "fp32";   // fp32 | fp16 | mixed
  std::string loss_scale = "dynamic";  // none | static:S | dynamic[:key=value,...] (fp16 and mixed)
  int64_t epochs = 2;
  int64_t batch = 128;
  double lr = 0.05;
  double momentum = 0.9;
  uint64_t seed = 0;
  std::string data;                 // a data directory; each tutorial documents its default
  std::string gemm;                 // a GEMM variant name (see --list-variants)
  std::string softmax;              // a softmax-family variant name (see --list-variants)
  std::string conv;                 // a convolution variant name (see --list-variants)
  std::string bn;                   // a CUDA batch-norm variant name (see --list-variants)
  std::string csv;                  // write one row per epoch here
  bool smoke = false;               // a tiny subset, seconds on the CPU (what CI runs)
  bool epochs_given = false;        // --epochs was on the command line (smoke_epochs)
  bool detect_anomaly = false;      // stop at the first NaN/inf tensor, naming it (slow: debugging)
  bool list_variants = false;
  // The learning-rate schedule (add_schedule_flags; tutorials/common/schedule.h), peak `lr`.
  std::string schedule = "constant";  // constant | cosine | step
  double warmup_epochs = 0.0;         // a linear warm-up over this many epochs first
};

// Validators for a program's own numeric flags, the ones add_common_flags uses (add them with
// transform(), not check(): they rewrite the text into the one form CLI11 reads back as the value).
// CLI11's plain uint64_t option takes "-1" as 2^64 - 1, and its Range prints 1e-12 as "0.000000";
// these refuse "-1" and say "'0' is out of range (1e-12 to 0.1)", naming the flag.
// An integer in [lo, hi]; `type` is the help's word for it ("INT", "UINT").
CLI::Validator integer_in(const std::string& type, int64_t lo, uint64_t hi);
// A finite real in [lo, hi].
CLI::Validator real_in(double lo, double hi);

// Register the shared flags on app. `precisions` lists the modes this tutorial supports (--help lists
// exactly these).
void add_common_flags(CLI::App& app, CommonFlags& f, const std::vector<std::string>& precisions);

// The epochs of a --smoke run: `smoke_default`, unless --epochs was given, which wins (as an explicit
// --max-steps does).
int64_t smoke_epochs(const CommonFlags& f, int64_t smoke_default);

// Register --schedule and --warmup-epochs (on the programs that train; f's values are the defaults
// shown). tutorial::schedule_from_flags turns them into the per-step rates.
void add_schedule_flags(CLI::App& app, CommonFlags& f);

// Resolve --device (with the CPU fallback notice), --gemm, --softmax, --conv and --bn (pinning each
// registry's default, after checking the name exists on the device), after check_variant_environment().
// Throws hl::Error with the valid choices on a bad value.
Device apply_common_flags(const CommonFlags& f);

// Check HALFLING_GEMM, HALFLING_SOFTMAX, HALFLING_CONV and HALFLING_BN, when set: a name that no device's
// registry of that family knows (a typo) is an hl::Error naming the variable and listing the valid
// names per device. A name some device has is accepted wherever the run is: the registry applies it on
// the devices that have it (kernels/registry.h). apply_common_flags calls this; a program without the
// common flags (tutorial 10) calls it itself, before any kernel runs.
void check_variant_environment();

// How a program writes an output file: in place (an std::ofstream: --csv), or replaced through a
// temporary file in its folder (framework/atomic_file.h: the checkpoints of --save).
enum class WrittenBy { stream, atomic_replace };

// Check, before any data loads or training, that a program can later write the file `path` given
// with `flag`: `path` is not a folder, its folder exists, and the folder can be written to (a
// temporary file is made there and removed at once: nothing is left behind). An existing file
// written in place need only be writable itself (--csv /dev/stdout); it is left as it is. Throws
// hl::Error "<flag>: cannot write <path>: <why>".
void check_writable(const std::string& flag, const std::string& path, WrittenBy how);

// Print every registered GEMM, softmax, convolution and batch-norm variant per device.
void print_variants();

// The convolution variant the registry picks on `dev` for `dt` inputs (after --conv), for the
// tutorials' header lines.
std::string conv_variant_for(Device dev, DType dt);

// Default data directory for a data set: $HALFLING_DATA/<name>, else ./data/<name>.
std::string default_data_dir(const std::string& name);

}  // namespace hl::tutorial
