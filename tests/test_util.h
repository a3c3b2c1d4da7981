// Helpers shared by every test executable (DESIGN.md §6: fresh random data, poisoned outputs,
// relative error against a float64 reference, CUDA tests that skip with a visible reason).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/runtime.h"

namespace hl::test {

// A seed that differs on every run (so each run sees fresh data) but is printed by the test that
// uses it, so a failure can be reproduced with HALFLING_TEST_SEED=<seed>. A test's later calls derive
// theirs from its first (printed once), so that one seed replays them all.
uint64_t fresh_seed();

// ||out - ref||_2 / ||ref||_2 (returns +inf if any element of out is NaN or inf where ref is finite).
double rel_error(const std::vector<double>& out, const std::vector<double>& ref);

// Random values in [lo, hi), already rounded to what dtype t can hold (so a float64 reference
// computed from them sees exactly the inputs the kernel sees).
std::vector<double> random_values(size_t n, uint64_t seed, double lo, double hi, DType t);

// Run a shell command; returns (exit status, stdout + stderr). The status is -1 when the command did
// not exit normally; *signaled (if given) says whether it died of a signal (a crash).
std::pair<int, std::string> run_command(const std::string& cmd, bool* signaled = nullptr);

// The path of a built tutorial program, e.g. tutorial_program("03_mlp_mnist").
std::string tutorial_program(const std::string& name);

// The default a program's --help (CLI11) shows for a flag: "5" for the line
// "  --epochs INT:INT in [1 - 100000]=5", "dynamic" for "  --loss-scale TEXT=dynamic   none, ..."; ""
// when no line names the flag or the line shows no default.
std::string help_default(const std::string& help, const std::string& flag);

// The seconds per epoch on a training program's last line, "final test accuracy 42.00% after 2 epoch(s),
// 0.3 s per epoch on cpu", for that many epochs and that device; -1 when the output has no such line.
double shown_seconds_per_epoch(const std::string& out, int epochs, const std::string& device);

// Path of a data set fetched by datasets/fetch.sh ($HALFLING_DATA/<name> or <repo>/data/<name>); "" if
// absent, not a folder, or empty (nothing in it but hidden entries, such as a staging folder left by
// an interrupted fetch): an empty folder holds no data set, and the tests that need one skip.
std::string data_dir(const std::string& name);

// Why data_dir(name) is "", for a skip message: "<path> does not exist", "<path> is not a folder" or
// "<path> is empty (a failed datasets/fetch.sh?)"; "" when data_dir(name) is not "".
std::string data_dir_absent_reason(const std::string& name);

// The lowest free file descriptor: the number the next open() gets.
int lowest_free_fd();

// Standard input closed while it lives, put back after (also when an ASSERT ends the test early). The
// situation of a daemon or a job runner: the next file opened gets descriptor 0, and code that takes
// "fd > 0" for "opened" goes wrong.
class StdinClosed {
 public:
  StdinClosed();
  ~StdinClosed();
  StdinClosed(const StdinClosed&) = delete;
  StdinClosed& operator=(const StdinClosed&) = delete;

 private:
  int saved_;  // a copy of descriptor 0, or -1 when it was closed already
};

// The message of the hl::Error that f() throws, or "(no error)": for tests that check what an error
// says, not only that there is one.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hl::test

// Skip the current test, with the reason, when no usable GPU is present.
#define HL_REQUIRE_CUDA()                                                                   \
  do {                                                                                      \
    if (!::hl::runtime::cuda_available())                                                   \
      GTEST_SKIP() << "no CUDA device: " << ::hl::runtime::cuda_unavailable_reason();       \
  } while (0)
