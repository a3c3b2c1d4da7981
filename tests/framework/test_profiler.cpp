// The scope profiler (framework/profiler.h): the tree it builds, the "(other)" rows, per-step
// division in the report, restarts, threads, the scopes the framework opens itself (Sequential
// layers, backward nodes), and device timing on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "framework/autograd.h"
#include "framework/cuda_graph.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/profiler.h"
#include "kernels/error.h"
#include "tests/test_util.h"

namespace hl {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const profiler::Row* find_row(const std::vector<profiler::Row>& rows, const std::string& name, int depth) {
  for (const auto& r : rows)
    if (r.name == name && r.depth == depth) return &r;
  return nullptr;
}

// Every test leaves the profiler off, so the other tests of this executable run unprofiled.
class Profiler : public ::testing::Test {
 protected:
  void TearDown() override { profiler::stop(); }
};

TEST_F(Profiler, NothingIsRecordedWhileOff) {
  profiler::start(false);
  profiler::stop();
  { profiler::Scope s("ignored"); }
  EXPECT_FALSE(profiler::enabled());
  EXPECT_TRUE(profiler::rows().empty());
}

// A process starts with the profiler off and without device timing: checked in a fresh process (the
// "threadsafe" death-test style runs this test alone in a new one), before any start().
TEST_F(Profiler, AProcessStartsWithTheProfilerOff) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        { profiler::Scope s("before any start"); }
        std::exit(!profiler::enabled() && !profiler::device_timing() && profiler::rows().empty() ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST_F(Profiler, NestedScopesFormATreeWithInclusiveTimesAndAnOtherRow) {
  profiler::start(false);
  {
    profiler::Scope outer("outer");
    for (int i = 0; i < 3; ++i) {
      profiler::Scope inner("inner");
      sleep_ms(2);
    }
    { profiler::Scope b("second child"); }
    sleep_ms(3);  // outer's own time, outside its children
  }
  { profiler::Scope again("outer"); }  // same name at the root: the same node, called twice
  profiler::stop();
  const std::vector<profiler::Row> rows = profiler::rows();
  ASSERT_EQ(rows.size(), 4u);  // outer, inner, second child, (other)
  EXPECT_EQ(rows[0].name, "outer");
  EXPECT_EQ(rows[0].depth, 0);
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_EQ(rows[1].name, "inner");
  EXPECT_EQ(rows[1].depth, 1);
  EXPECT_EQ(rows[1].calls, 3);
  EXPECT_GE(rows[1].host_ms, 6.0);  // three sleeps of 2 ms
  EXPECT_EQ(rows[2].name, "second child");
  EXPECT_EQ(rows[3].name, "(other)");
  EXPECT_EQ(rows[3].depth, 1);
  EXPECT_EQ(rows[3].calls, 0);
  EXPECT_GE(rows[3].host_ms, 3.0);  // the 3 ms sleep outside the children
  EXPECT_NEAR(rows[0].host_ms, rows[1].host_ms + rows[2].host_ms + rows[3].host_ms, 1e-9);
  for (const auto& r : rows) EXPECT_EQ(r.device_ms, 0.0) << r.name << ": no device timing was asked for";
}

TEST_F(Profiler, ReportDividesByStepsAndSharesAddUp) {
  profiler::start(false);
  for (int step = 0; step < 4; ++step) {
    profiler::Scope s("step");
    {
      profiler::Scope f("forward");
      sleep_ms(1);
    }
  }
  profiler::stop();
  const std::string per_step = profiler::report(4);
  EXPECT_NE(per_step.find("4 steps, calls and milliseconds per step"), std::string::npos) << per_step;
  EXPECT_NE(per_step.find("host = CPU time inside the scope"), std::string::npos) << "the header names the clock";
  EXPECT_EQ(per_step.find("device ms"), std::string::npos) << "no device column without device timing";
  // "step" is the only root: 100% of the time; each scope ran once per step.
  const size_t step_line = per_step.find("\nstep ");
  ASSERT_NE(step_line, std::string::npos) << per_step;
  const std::string line = per_step.substr(step_line + 1, per_step.find('\n', step_line + 1) - step_line - 1);
  EXPECT_NE(line.find(" 1.00 "), std::string::npos) << line;
  EXPECT_NE(line.find("100.0%"), std::string::npos) << line;
  // Its host time is per step too: the total over 4 steps, divided by 4, printed to 3 decimals.
  std::istringstream fields(line);
  std::string name, calls;
  double host_per_step = -1.0;
  fields >> name >> calls >> host_per_step;
  const std::vector<profiler::Row> rows = profiler::rows();
  ASSERT_FALSE(rows.empty());
  EXPECT_NEAR(host_per_step, rows[0].host_ms / 4.0, 0.0006) << line;
  EXPECT_NE(per_step.find("\n  forward "), std::string::npos) << "children are indented: " << per_step;
  // The scope column is as wide as its longest entry, indentation included ("  forward", 9), so the
  // columns line up: the column header and every row have the same length.
  const size_t header_at = per_step.find("\nscope");
  ASSERT_NE(header_at, std::string::npos) << per_step;
  const std::string header = per_step.substr(header_at + 1, per_step.find('\n', header_at + 1) - header_at - 1);
  EXPECT_EQ(header, "scope         calls    host ms   share");
  EXPECT_EQ(line.size(), header.size()) << line;
  const std::string totals = profiler::report(0);
  EXPECT_NE(totals.find("totals, in milliseconds"), std::string::npos) << totals;
  const size_t total_line = totals.find("\nstep ");
  ASSERT_NE(total_line, std::string::npos) << totals;
  const std::string step_total = totals.substr(total_line + 1, totals.find('\n', total_line + 1) - total_line - 1);
  EXPECT_NE(step_total.find(" 4 "), std::string::npos) << "4 calls in all: " << step_total;
}

// The share column is each row's part of the roots' time, whatever the tree below them: with two
// roots, one of them without children, the roots' shares add up to 100%. One step is "1 step".
TEST_F(Profiler, SharesOfSeveralRootsAddUp) {
  profiler::start(false);
  {
    profiler::Scope a("first root");
    profiler::Scope c("its child");
    sleep_ms(2);
  }
  {
    profiler::Scope b("second root");
    sleep_ms(2);
  }
  profiler::stop();
  const std::string out = profiler::report(1);
  EXPECT_NE(out.find("# profile: 1 step, calls and milliseconds per step;"), std::string::npos) << out;
  double roots = 0.0;
  for (const char* name : {"\nfirst root ", "\nsecond root "}) {
    const size_t at = out.find(name);
    ASSERT_NE(at, std::string::npos) << out;
    const size_t end = out.find('\n', at + 1);
    const size_t pct = out.rfind('%', end);
    const size_t before = out.rfind(' ', pct);
    ASSERT_TRUE(pct != std::string::npos && pct > at && before > at) << out;
    const double share = std::strtod(out.c_str() + before + 1, nullptr);
    EXPECT_GT(share, 0.0) << name << out;  // each root slept 2 ms
    roots += share;
  }
  EXPECT_NEAR(roots, 100.0, 0.2) << out;  // two shares printed to 0.1
}

// A scope name too long for the 72-column scope field is cut, with "..." at its end, so the other
// columns stay where they are.
TEST_F(Profiler, LongScopeNamesAreCutToTheColumn) {
  const std::string long_name(100, 'x');
  profiler::start(false);
  {
    profiler::Scope s("root" + long_name);
  }
  profiler::stop();
  const std::string out = profiler::report(0);
  const std::string cut = "root" + long_name.substr(0, 72 - 3 - 4) + "...";
  const size_t at = out.find("\n" + cut + " ");
  EXPECT_NE(at, std::string::npos) << out;
  // The column header: "scope" padded to 72, then calls (9), host ms (10) and share (7), one space before each.
  const size_t header_at = out.find("\nscope");
  ASSERT_NE(header_at, std::string::npos) << out;
  EXPECT_EQ(out.find('\n', header_at + 1) - header_at - 1, 72u + 1 + 9 + 1 + 10 + 1 + 7) << out;
}

TEST_F(Profiler, StartClearsAndAScopeOpenAcrossARestartIsDropped) {
  profiler::start(false);
  { profiler::Scope s("first run"); }
  {
    profiler::Scope open("open across the restart");
    profiler::start(false);
    profiler::Scope fresh("second run");
  }  // `fresh` ends, then `open`, which belongs to the first run: dropped, not misfiled
  { profiler::Scope after("after"); }
  profiler::stop();
  const std::vector<profiler::Row> rows = profiler::rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name, "second run");
  EXPECT_EQ(rows[0].depth, 0);
  EXPECT_EQ(rows[1].name, "after");
  EXPECT_EQ(rows[1].depth, 0) << "the dropped scope must not stay on the stack as a parent";
}

TEST_F(Profiler, ScopesOnAnotherThreadAreRootsOfTheirOwn) {
  profiler::start(false);
  {
    profiler::Scope main_scope("main");
    std::thread worker([] { profiler::Scope s("worker"); });
    worker.join();
  }
  profiler::stop();
  const std::vector<profiler::Row> rows = profiler::rows();
  ASSERT_NE(find_row(rows, "main", 0), nullptr);
  ASSERT_NE(find_row(rows, "worker", 0), nullptr) << "a thread's scopes do not nest under another thread's";
}

TEST_F(Profiler, SequentialLayersAndBackwardNodesOpenTheirOwnScopes) {
  Generator gen(7);
  nn::Sequential model({std::make_shared<nn::Linear>(6, 5, gen), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(5, 3, gen)});
  model.fuse_linear_relu();
  const Tensor x = Tensor::randn({4, 6}, gen);
  profiler::start(false);
  for (int step = 0; step < 2; ++step) {
    profiler::Scope s("step");
    Tensor loss = sum(model(x));
    loss.backward();
  }
  profiler::stop();
  const std::vector<profiler::Row> rows = profiler::rows();
  const profiler::Row* fused = find_row(rows, "(0) Linear(6 -> 5)+ReLU", 1);
  ASSERT_NE(fused, nullptr) << profiler::report(2);
  EXPECT_EQ(fused->calls, 2);
  ASSERT_NE(find_row(rows, "(2) Linear(5 -> 3)", 1), nullptr) << profiler::report(2);
  const profiler::Row* backward = find_row(rows, "backward", 1);
  ASSERT_NE(backward, nullptr) << profiler::report(2);
  EXPECT_EQ(backward->calls, 2);
  // Backward nodes are named by op and the shape of their first input.
  EXPECT_NE(find_row(rows, "linear_relu [4, 6]", 2), nullptr) << profiler::report(2);
  EXPECT_NE(find_row(rows, "linear [4, 5]", 2), nullptr) << profiler::report(2);
}

// Two layers of one name are two rows, by their index (LeNet's two pools made one row of two calls).
TEST_F(Profiler, TwoLayersOfOneNameAreTwoRows) {
  nn::Sequential model({std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::MaxPool2d>(2)});
  profiler::start(false);
  (void)model(Tensor::zeros({1, 1, 4, 4}));
  profiler::stop();
  const std::vector<profiler::Row> rows = profiler::rows();
  for (const char* name : {"(0) MaxPool2d(2x2)", "(1) MaxPool2d(2x2)"}) {
    const profiler::Row* r = find_row(rows, name, 0);
    ASSERT_NE(r, nullptr) << name << " in\n" << profiler::report(1);
    EXPECT_EQ(r->calls, 1) << name;
  }
}

TEST_F(Profiler, DeviceTimingWithoutAGpuIsAClearError) {
  if (runtime::cuda_available()) GTEST_SKIP() << "a GPU is present: device timing is allowed";
  try {
    profiler::start(true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("profiler: device timing needs a CUDA GPU"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(profiler::enabled()) << "a refused start leaves the profiler off";
}

TEST_F(Profiler, DeviceTimingMeasuresWorkQueuedInsideTheScope) {
  HL_REQUIRE_CUDA();
  // 64 Mi f32 elements: each add reads 512 MiB and writes 256 MiB, far longer than launch overhead
  // but short enough for a test.
  const Tensor a = Tensor::ones({64 << 20}, DType::f32, Device::cuda);
  Tensor b = add(a, a);  // warm-up: kernel loading
  runtime::cuda_synchronize();
  profiler::start(true);
  {
    profiler::Scope s("adds");
    for (int i = 0; i < 4; ++i) b = add(b, a);
  }
  { profiler::Scope empty("empty"); }
  const std::vector<profiler::Row> rows = profiler::rows();  // waits for the GPU
  profiler::stop();
  const profiler::Row* adds = find_row(rows, "adds", 0);
  const profiler::Row* empty = find_row(rows, "empty", 0);
  ASSERT_NE(adds, nullptr);
  ASSERT_NE(empty, nullptr);
  // 4 x 768 MiB at no more than 10 TB/s (above any GPU's memory bandwidth) takes at least 0.3 ms.
  EXPECT_GT(adds->device_ms, 0.3);
  EXPECT_LT(empty->device_ms, adds->device_ms / 10) << "an empty scope spans almost no stream time";
  const Tensor h = b.to(Device::cpu);
  const float* p = static_cast<const float*>(h.data_ptr());
  EXPECT_EQ(p[0], 6.0f) << "the profiled work still computed";
  EXPECT_EQ(p[h.numel() - 1], 6.0f);
}

// A scope that cannot record its start event (inside a CUDA graph recording, which refuses event records)
// fails in its constructor, so no destructor closes it: it must not stay open on the thread, or every
// later scope would be counted as its child.
TEST_F(Profiler, ADeviceScopeThatCannotBeginLeavesNoScopeOpen) {
  HL_REQUIRE_CUDA();
  profiler::start(true);
  CudaGraph g;
  bool began = false;
  EXPECT_THROW(g.capture([&] {
    profiler::Scope s("inside");
    began = true;
  }),
               Error);
  EXPECT_FALSE(began);
  { profiler::Scope after("after"); }
  const std::vector<profiler::Row> rows = profiler::rows();
  profiler::stop();
  const profiler::Row* after = find_row(rows, "after", 0);
  ASSERT_NE(after, nullptr) << "'after' was nested under the scope that failed to begin";
  EXPECT_EQ(after->calls, 1);
}

}  // namespace
}  // namespace hl
