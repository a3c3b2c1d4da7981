// The arithmetic of the benchmarks' rows, without CUDA (loader_throughput and the CPU tests in
// tests/bench/test_bench_stats.cpp use it too): the median of the samples, the check of a row's output
// against the reference computed in the same run, and whether a row and its copy-bandwidth yardstick
// are served from the same memory (the L2 or not).
//
// The median is what DESIGN.md §6 asks for: the middle value of an odd number of samples, the mean of
// the two middle values of an even number, as Python's statistics.median (bench/pytorch/softmax.py)
// takes it. The programs used to take the upper of the two middle values and call it the median.
// bench/train.cpp keeps its upper median of epochs on purpose, as the PyTorch script it is compared with
// does, and does not use this.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace hl::bench {

// The median of `samples` (a copy, sorted here). None of no samples: NaN.
template <class T>
double median(std::vector<T> samples) {
  if (samples.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(samples.begin(), samples.end());
  const size_t mid = samples.size() / 2;
  const double upper = static_cast<double>(samples[mid]);
  if (samples.size() % 2 == 1) return upper;
  return (static_cast<double>(samples[mid - 1]) + upper) / 2.0;
}

// The command that made a result, as "# command: ARGS..." for its header (DESIGN.md §6: a committed
// result names the GPU, the date and the command), each argument in single quotes where a shell would
// read it otherwise, so the line can be pasted back to run it again.
inline std::string command_line(int argc, const char* const* argv) {
  std::string line = "# command:";
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool plain = !arg.empty() && arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                             "0123456789_./,=:+-%@") == std::string::npos;
    line += ' ';
    if (plain) {
      line += arg;
      continue;
    }
    line += '\'';
    for (char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

// How many back-to-back calls one timed sample holds, given the time of one call timed alone: enough
// that the sample lasts at least `target_ms`, at most `max_calls`, at least 1. A call timed alone
// between two events also times the host's launch of it, since the stream is idle when the first event
// is recorded: a few microseconds, which on a 10-microsecond GEMM of an MNIST layer is a third of the
// number and flatters the slower side of a ratio. Back to back, the launches queue ahead of the GPU,
// as they do in training, and the sample divided by its calls is the time per call. A call that takes
// `target_ms` or more is timed alone, as before. A time that is not positive (below the events'
// resolution) or not a number gets `max_calls`.
inline int calls_per_sample(double one_call_ms, double target_ms = 0.2, int max_calls = 100) {
  if (max_calls < 1) return 1;
  if (!(one_call_ms > 0)) return max_calls;
  const double calls = std::ceil(target_ms / one_call_ms);
  if (!(calls < static_cast<double>(max_calls))) return max_calls;
  return calls < 1 ? 1 : static_cast<int>(calls);
}

// The calls per sample for `sample(calls)`, which times `calls` back-to-back calls and returns the
// milliseconds per call: one call timed alone, and if that took `target_ms` or more, 1 (a slow call,
// direct convolution's at 4 ms, costs one call more than before); else calls_per_sample of the median
// of three calls timed alone (the first call after the warm-up can be an outlier).
template <class Sample>
int calls_for(Sample&& sample, double target_ms = 0.2, int max_calls = 100) {
  const double first = sample(1);
  if (first >= target_ms) return 1;
  return calls_per_sample(median(std::vector<double>{first, sample(1), sample(1)}), target_ms, max_calls);
}

// A row's check run (DESIGN.md §6: the output poisoned with NaN before the run, every element checked),
// against the reference: the vendor library's output for the same problem in the same run, or nullptr
// where there is none (the library's own row, or a run without it). `bad`: the elements that are not
// finite where the reference's are (every one, without a reference); `nan`: how many of those are NaN,
// the poison, so most likely never written; `diff`: ||out - ref|| / ||ref|| over the elements finite in
// both (0 without a reference).
struct OutputCheck {
  int64_t bad = 0, nan = 0;
  double diff = 0;
};

inline OutputCheck check_output(const std::vector<double>& out, const std::vector<double>* ref) {
  OutputCheck c;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (ref != nullptr && !std::isfinite((*ref)[i])) continue;
    if (!std::isfinite(out[i])) {
      ++c.bad;
      if (std::isnan(out[i])) ++c.nan;
      continue;
    }
    if (ref == nullptr) continue;
    const double d = out[i] - (*ref)[i];
    num += d * d;
    den += (*ref)[i] * (*ref)[i];
  }
  c.diff = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

// Why a row is WRONG, or "" if it is not: an element that is not finite where the reference's is, or
// (with a reference, named `ref_name`; nullptr without one) a difference above `tol`.
inline std::string wrong_because(const OutputCheck& c, size_t n, const char* ref_name, double tol) {
  char why[256] = "";
  if (c.bad > 0) {
    std::snprintf(why, sizeof why, "%lld of %zu outputs not finite%s%s%s (%lld NaN: not written?)",
                  static_cast<long long>(c.bad), n, ref_name != nullptr ? " where " : "",
                  ref_name != nullptr ? ref_name : "", ref_name != nullptr ? "'s are" : "",
                  static_cast<long long>(c.nan));
  } else if (ref_name != nullptr && !(c.diff <= tol)) {
    std::snprintf(why, sizeof why, "differs from %s by %.1e (||out - ref|| / ||ref||), above %.0e", ref_name, c.diff,
                  tol);
  }
  return why;
}

// Whether a working set of `bytes`, touched again and again by back-to-back calls, is served from the L2
// rather than from device memory: when it takes at most 3/4 of the L2. Not all of it: the L2 holds other
// lines too and does not evict in perfect LRU order, so a set just under its size is mostly gone before
// it is read again. (On an H100, with 50 MB of L2: bn_bench's copy of two 16.8 MB tensors, about two
// thirds of it, ran at 3737 GB/s, above the 3.35 TB/s of its HBM; a batch-norm backward over three such
// tensors needs all of it.)
inline bool fits_in_l2(double bytes, int64_t l2) { return l2 > 0 && bytes <= 0.75 * static_cast<double>(l2); }

// The note at the end of a row (two spaces first) whose kernel and yardstick (the device copy) fall on
// either side of fits_in_l2: one is served from the L2 and the other from device memory, so the row's
// %copy is not a like-for-like ratio. "" when both fit or neither does.
inline const char* l2_note(double kernel_bytes, double copy_bytes, int64_t l2) {
  const bool kernel = fits_in_l2(kernel_bytes, l2), copy = fits_in_l2(copy_bytes, l2);
  if (kernel == copy) return "";
  return copy ? "  L2: yardstick fits, kernel does not" : "  L2: kernel fits, yardstick does not";
}

}  // namespace hl::bench
