// The scope profiler (framework/profiler.h says what it measures and what it costs).
//
// State: one tree of named nodes shared by all threads, under one mutex (scopes are few per step: a
// lock per scope costs nothing next to the kernels they time), and per thread the stack of scopes
// open on it. Device timing keeps pairs of CUDA events pending until rows() (or a full queue)
// resolves them, so recording a scope never waits for the GPU.
#include "framework/profiler.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "kernels/error.h"
#include "kernels/runtime.h"

namespace hl::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

struct Node {
  std::string name;
  std::vector<int> children;  // in first-seen order
  int64_t calls = 0;
  double host_ms = 0.0;
  double device_ms = 0.0;
};

struct Pending {
  int node;
  void* start;
  void* end;
};

// Events pending before rows() must wait: 4096 scopes is about 40 steps of VGG-small.
constexpr size_t kMaxPending = 4096;

struct State {
  std::mutex mu;
  uint64_t epoch = 0;  // bumped by start(): scopes begun before it are dropped when they end
  bool device = false;
  std::vector<Node> nodes;
  std::vector<int> roots;
  std::vector<Pending> pending;
  std::vector<void*> free_events;  // reused across scopes and runs (never destroyed: they live as long
                                   // as the process, like the CUDA context)
};

State& state() {
  static State* s = new State();  // leaked on purpose: scopes may end during static destruction
  return *s;
}

struct ThreadStack {
  uint64_t epoch = 0;
  std::vector<int> open;
};
thread_local ThreadStack t_stack;

void* acquire_event(State& s) {
  if (!s.free_events.empty()) {
    void* e = s.free_events.back();
    s.free_events.pop_back();
    return e;
  }
  return runtime::cuda_timing_event_create();
}

// Wait for the last pending event (the stream is in order, so every earlier one is done too), then
// add each pair's elapsed time to its node.
void resolve_locked(State& s) {
  if (s.pending.empty()) return;
  runtime::cuda_event_synchronize(s.pending.back().end);
  for (const Pending& p : s.pending) {
    s.nodes[static_cast<size_t>(p.node)].device_ms += runtime::cuda_event_elapsed_ms(p.start, p.end);
    s.free_events.push_back(p.start);
    s.free_events.push_back(p.end);
  }
  s.pending.clear();
}

int child_named(State& s, int parent, const std::string& name) {
  const auto siblings = [&]() -> std::vector<int>& {
    return parent < 0 ? s.roots : s.nodes[static_cast<size_t>(parent)].children;
  };
  for (int id : siblings())
    if (s.nodes[static_cast<size_t>(id)].name == name) return id;
  const int id = static_cast<int>(s.nodes.size());
  Node n;
  n.name = name;
  s.nodes.push_back(std::move(n));  // may move every node: look the sibling list up again after it
  siblings().push_back(id);
  return id;
}

}  // namespace

void start(bool device_timing) {
  HL_CHECK(!device_timing || runtime::cuda_available(),
           "profiler: device timing needs a CUDA GPU (", runtime::cuda_unavailable_reason(), ")");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  // Events of the previous run that are still pending are simply reused: recording an event again
  // replaces its earlier position in the stream.
  for (const Pending& p : s.pending) {
    s.free_events.push_back(p.start);
    s.free_events.push_back(p.end);
  }
  s.pending.clear();
  s.nodes.clear();
  s.roots.clear();
  s.device = device_timing;
  ++s.epoch;
  detail::g_enabled.store(true, std::memory_order_relaxed);
}

void stop() { detail::g_enabled.store(false, std::memory_order_relaxed); }

bool device_timing() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.device;
}

void Scope::begin(const std::string& name) {
  State& s = state();
  bool device = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (t_stack.epoch != s.epoch) {  // scopes left open on this thread by an earlier run
      t_stack.open.clear();
      t_stack.epoch = s.epoch;
    }
    device = s.device;
    if (device) event0_ = acquire_event(s);  // first: if it fails, nothing is open yet
    const int parent = t_stack.open.empty() ? -1 : t_stack.open.back();
    node_ = child_named(s, parent, name);
    t_stack.open.push_back(node_);
    epoch_ = s.epoch;
  }
  if (device) {
    try {
      runtime::cuda_event_record(event0_);
    } catch (...) {
      // The constructor fails, so no destructor will close this scope: take it off the thread's open
      // scopes (or every later scope would nest under it) and give its event back.
      std::lock_guard<std::mutex> lock(s.mu);
      if (epoch_ == s.epoch && !t_stack.open.empty() && t_stack.open.back() == node_) t_stack.open.pop_back();
      s.free_events.push_back(event0_);
      node_ = -1;
      event0_ = nullptr;
      throw;
    }
  }
  uncaught_ = std::uncaught_exceptions();
  t0_ = std::chrono::steady_clock::now();
}

void Scope::end() {
  const auto t1 = std::chrono::steady_clock::now();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (epoch_ != s.epoch) {  // begun before a start(): its node is gone
    if (event0_ != nullptr) s.free_events.push_back(event0_);
    return;
  }
  // RAII on one thread closes scopes in reverse order, so this scope is the top of the stack.
  if (!t_stack.open.empty() && t_stack.open.back() == node_) t_stack.open.pop_back();
  Node& n = s.nodes[static_cast<size_t>(node_)];
  ++n.calls;
  n.host_ms += std::chrono::duration<double, std::milli>(t1 - t0_).count();
  if (event0_ != nullptr) {
    void* event1 = nullptr;
    try {
      event1 = acquire_event(s);
      runtime::cuda_event_record(event1);
    } catch (...) {  // this scope's device time is lost (its host time is counted); its events are reused
      s.free_events.push_back(event0_);
      if (event1 != nullptr) s.free_events.push_back(event1);
      throw;
    }
    s.pending.push_back({node_, event0_, event1});
    if (s.pending.size() >= kMaxPending) resolve_locked(s);
  }
}

std::vector<Row> rows() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  resolve_locked(s);
  std::vector<Row> out;
  // Depth-first, with an "(other)" row after the children of every node that has any.
  auto visit = [&](auto&& self, int id, int depth) -> void {
    const Node& n = s.nodes[static_cast<size_t>(id)];
    out.push_back({n.name, depth, n.calls, n.host_ms, n.device_ms});
    if (n.children.empty()) return;
    double host = n.host_ms, dev = n.device_ms;
    for (int c : n.children) {
      self(self, c, depth + 1);
      host -= s.nodes[static_cast<size_t>(c)].host_ms;
      dev -= s.nodes[static_cast<size_t>(c)].device_ms;
    }
    // Children run inside their parent, so the rest is >= 0 but for clock rounding.
    out.push_back({"(other)", depth + 1, 0, std::max(host, 0.0), std::max(dev, 0.0)});
  };
  for (int r : s.roots) visit(visit, r, 0);
  return out;
}

std::string report(int64_t steps) {
  const std::vector<Row> table = rows();
  const bool device = device_timing();
  const double per = steps > 0 ? static_cast<double>(steps) : 1.0;
  double total = 0.0;  // the roots' time on the clock the share column uses
  for (const Row& r : table)
    if (r.depth == 0) total += device ? r.device_ms : r.host_ms;

  size_t width = 5;  // "scope"
  for (const Row& r : table) width = std::max(width, 2 * static_cast<size_t>(r.depth) + r.name.size());
  width = std::min<size_t>(width, 72);

  std::string out;
  char line[256];
  const std::string what = steps > 0 ? hl::detail::concat(steps, steps == 1 ? " step" : " steps",
                                                          ", calls and milliseconds per step")
                                      : std::string("totals, in milliseconds");
  std::snprintf(line, sizeof line, "# profile: %s; host = CPU time inside the scope%s (framework/profiler.h)\n",
                what.c_str(), device ? ", device = GPU stream time from its first to its last queued work" : "");
  out += line;
  std::snprintf(line, sizeof line, "%-*s %9s %10s%s %7s\n", static_cast<int>(width), "scope", "calls", "host ms",
                device ? "  device ms" : "", "share");
  out += line;
  for (const Row& r : table) {
    std::string name = std::string(2 * static_cast<size_t>(r.depth), ' ') + r.name;
    if (name.size() > width) name = name.substr(0, width - 3) + "...";
    const double t = device ? r.device_ms : r.host_ms;
    char calls[32] = "";
    if (r.calls > 0) std::snprintf(calls, sizeof calls, steps > 0 ? "%.2f" : "%.0f", static_cast<double>(r.calls) / per);
    char dev[32] = "";
    if (device) std::snprintf(dev, sizeof dev, " %10.3f", r.device_ms / per);
    std::snprintf(line, sizeof line, "%-*s %9s %10.3f%s %6.1f%%\n", static_cast<int>(width), name.c_str(), calls,
                  r.host_ms / per, dev, total > 0.0 ? 100.0 * t / total : 0.0);
    out += line;
  }
  return out;
}

}  // namespace hl::profiler
