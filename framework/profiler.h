// Where does a training step's time go? A scope profiler small enough to read, for bench/train
// --profile and for anyone who wants a table instead of a guess (DESIGN.md §6: measure, then change).
//
//   profiler::start(/*device_timing=*/true);
//   { profiler::Scope s("forward"); logits = model(x); }
//   ...
//   std::puts(profiler::report(steps).c_str());
//
// Scopes nest: each one is a node in a tree keyed by its path ("step" > "forward" > "Conv2d(...)"),
// and the report prints the tree with calls, host time and device time per step. The framework opens
// scopes in three places, so any model gets a profile without changes:
//   - nn::Sequential::forward: one per layer, named by its index and the layer, as Module::summary()
//     lists it ("(3) Conv2d(...)", "+ReLU" when fused);
//   - Tensor::backward: "backward", and inside it one per graph node, named by the op and the shape of
//     its first input ("conv2d [128, 64, 32, 32]");
//   - the tutorials' trainer: "step" and, inside, "forward", "loss", "backward", "optimizer".
//
// Two clocks, because on a GPU they answer different questions:
//   - host: wall time the CPU spends inside the scope. On the GPU that is mostly issuing kernels,
//     which return before the work is done.
//   - device (start(true), CUDA only): time on the halfling stream between two CUDA events recorded
//     at the scope's start and end, i.e. from the moment the GPU reaches the scope's first queued work
//     to the moment it finishes the last. A GPU that idles inside the scope, waiting for the host to
//     queue more, counts that idle time: a scope whose device time is close to its host time is
//     launch-bound.
// Times are inclusive. A scope with children gets an "(other)" row: its time outside them.
//
// Cost: when profiling is off, a Scope is one relaxed atomic load. When on, two clock reads and, with
// device timing, two cudaEventRecord calls (a few microseconds of host time each); pending events are
// resolved every 4096 scopes, which waits for the GPU. So a profiled run is slower than a plain one:
// take speed numbers from a run without --profile, and use the profile for proportions.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace hl::profiler {

namespace detail {
extern std::atomic<bool> g_enabled;
}

// Clear everything collected so far and start collecting. device_timing needs CUDA and a GPU
// (throws hl::Error naming the profiler otherwise).
void start(bool device_timing);
// Stop collecting; what was collected stays readable until the next start().
void stop();
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
bool device_timing();

// RAII: times the code between construction and destruction under `name`, nested in the scopes
// open on this thread. Does nothing when profiling is off.
class Scope {
 public:
  explicit Scope(const std::string& name) {
    if (enabled()) begin(name);
  }
  // end() can fail (a CUDA error, an event record refused inside a graph recording). Outside unwinding
  // the error propagates from here, as any other. While an exception unwinds the stack it is dropped:
  // a second exception would end the process (std::terminate) and lose the first, which after a kernel
  // fault is that fault's message, and every later CUDA call (this one) returns the same error anyway.
  ~Scope() noexcept(false) {
    if (node_ < 0) return;
    if (std::uncaught_exceptions() > uncaught_) {
      try {
        end();
      } catch (...) {
      }
    } else {
      end();
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void begin(const std::string& name);
  void end();
  int node_ = -1;
  int uncaught_ = 0;    // std::uncaught_exceptions() when the scope began
  uint64_t epoch_ = 0;  // the start() this scope belongs to (a scope that spans a restart is dropped)
  std::chrono::steady_clock::time_point t0_;
  void* event0_ = nullptr;
};

// One row of the tree, in print order (depth-first, children in the order they were first seen).
struct Row {
  std::string name;   // the scope's own name, or "(other)"
  int depth = 0;      // 0 for a root
  int64_t calls = 0;  // 0 for "(other)"
  double host_ms = 0.0;
  double device_ms = 0.0;  // 0 without device timing
};

// Waits for the GPU where device events are still pending, then returns the tree.
std::vector<Row> rows();
// The tree as a table. steps > 0 divides calls and times by it ("per step"); 0 prints totals.
std::string report(int64_t steps);

}  // namespace hl::profiler
