// CUDA graphs (framework/cuda_graph.h) and what they rest on:
//  - the caching allocator's private pools (framework/device.h), over a counting host backend, so
//    that the rules that keep a graph's memory its own are checked on every machine;
//  - the loss scaler's recording hooks (framework/amp.h), on the CPU, where a "recorded" step really
//    runs: recording, then replayed_update(), must leave the state of an ordinary step;
//  - the graph itself on a GPU (skipped without one): a replay reruns the recorded kernels on the
//    memory they were recorded with, the pool keeps that memory from other tensors, and what cannot be
//    recorded (a wait for the device, a timing event, freed memory) is refused with the call's name.
// The trainer's use of it (TrainOptions::cuda_graph, the same bits as the usual loop) is tested in
// tests/tutorials/test_trainer.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <limits>
#include <utility>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "framework/amp.h"
#include "framework/cuda_graph.h"
#include "framework/device.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/ops_cnn.h"
#include "framework/optim.h"
#include "framework/tensor.h"
#include "kernels/runtime.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

// f() throws an hl::Error whose message contains `text`.
template <class F>
void expect_error(F&& f, const std::string& text) {
  const std::string message = hl::test::error_of(std::forward<F>(f));
  EXPECT_NE(message.find(text), std::string::npos) << "expected an error containing '" << text << "', got: " << message;
}

// ---- private pools, over a counting host backend --------------------------------------------------------

int g_allocs = 0, g_frees = 0;
void* counting_alloc(size_t n) {
  ++g_allocs;
  return ::operator new(n);
}
void counting_free(void* p) {
  ++g_frees;
  ::operator delete(p);
}

struct PoolFixture : ::testing::Test {
  void SetUp() override { g_allocs = g_frees = 0; }
  // The freed block x of 4096 bytes, now pool `last`'s alone, is not handed to an ordinary tensor
  // while that pool lives, and serves everyone once it is released. Empties the cache.
  void expect_reserved_until_released(int last, void* x) {
    void* y = a.allocate(4096);
    EXPECT_NE(y, x) << "x went to an ordinary tensor while pool " << last << "'s graph addresses it";
    a.release_pool(last);
    void* z = a.allocate(4096);
    EXPECT_EQ(z, x) << "with pool " << last << " gone, x serves everyone";
    a.deallocate(y);
    a.deallocate(z);
    a.release_cached();
    EXPECT_EQ(g_frees, g_allocs) << "every block went back to the backend";
  }
  CachingAllocator a{counting_alloc, counting_free};
};

// While recording, the pool takes blocks (its own cached ones first, then the common cache's, then
// new ones) and keeps every block the recording thread frees, even one from before; afterwards none
// of them is handed to an allocation outside the pool, until the pool is released.
TEST_F(PoolFixture, RecordedBlocksStayThePoolsUntilItIsReleased) {
  void* before = a.allocate(1000);   // live before the recording (a recorded kernel may read it)
  void* cached = a.allocate(4096);
  a.deallocate(cached);              // in the common cache
  const int pool = a.create_pool();
  a.begin_pool_capture(pool);
  void* from_cache = a.allocate(4096);
  EXPECT_EQ(from_cache, cached) << "a recording may take a block of the common cache";
  void* tmp = a.allocate(2000);
  a.deallocate(tmp);
  void* again = a.allocate(2000);
  EXPECT_EQ(again, tmp) << "within a recording, the pool reuses its blocks (stream order holds inside a graph)";
  a.deallocate(before);  // freed while recording: the recording may have read it
  a.deallocate(again);
  a.end_pool_capture();
  const size_t r1000 = CachingAllocator::round_size(1000), r2000 = CachingAllocator::round_size(2000);
  EXPECT_EQ(a.pool_cached_bytes(pool), r1000 + r2000);
  EXPECT_EQ(a.pool_live_bytes(pool), CachingAllocator::round_size(4096)) << "from_cache is live in the pool";

  // Outside the recording, the same sizes come from the backend, never from the pool.
  const int allocs = g_allocs;
  void* other1000 = a.allocate(1000);
  void* other2000 = a.allocate(2000);
  EXPECT_NE(other1000, before);
  EXPECT_NE(other2000, tmp);
  EXPECT_EQ(g_allocs, allocs + 2);
  // A live pool block freed after the recording goes back to the pool, not to the common cache.
  a.deallocate(from_cache);
  EXPECT_EQ(a.pool_live_bytes(pool), 0u);
  void* other4096 = a.allocate(4096);
  EXPECT_NE(other4096, from_cache);

  // release_cached gives back only the common cache: the pool's blocks are still the graph's.
  a.deallocate(other1000);
  a.deallocate(other2000);
  a.deallocate(other4096);
  const int frees = g_frees;
  a.release_cached();
  EXPECT_EQ(g_frees, frees + 3);
  EXPECT_EQ(a.pool_cached_bytes(pool), r1000 + r2000 + CachingAllocator::round_size(4096));

  // Released: the pool's blocks serve everyone again.
  a.release_pool(pool);
  EXPECT_EQ(a.pool_cached_bytes(pool), 0u);
  const int allocs_after = g_allocs;
  void* reused = a.allocate(2000);
  EXPECT_EQ(reused, tmp);
  EXPECT_EQ(g_allocs, allocs_after);
  a.deallocate(reused);
  EXPECT_EQ(a.stats().current_bytes, 0u);
  a.release_cached();
  EXPECT_EQ(g_frees, g_allocs) << "every block went back to the backend";
}

// Only the recording thread's allocations join the pool: another thread (the DataLoader's prefetch
// worker) allocates and frees through the common cache meanwhile.
TEST_F(PoolFixture, OtherThreadsKeepTheCommonCacheDuringARecording) {
  const int pool = a.create_pool();
  a.begin_pool_capture(pool);
  void* worker_block = nullptr;
  std::thread worker([&] {
    worker_block = a.allocate(3000);
    a.deallocate(worker_block);
  });
  worker.join();
  a.end_pool_capture();
  EXPECT_EQ(a.pool_cached_bytes(pool), 0u) << "the worker's block is not the pool's";
  void* p = a.allocate(3000);
  EXPECT_EQ(p, worker_block) << "it went to the common cache";
  a.deallocate(p);
  a.release_pool(pool);
  a.release_cached();
}

// A live block of a released pool is an ordinary block: freed later, it goes to the common cache.
TEST_F(PoolFixture, LiveBlocksOfAReleasedPoolBecomeOrdinary) {
  const int pool = a.create_pool();
  a.begin_pool_capture(pool);
  void* kept = a.allocate(1500);  // e.g. a gradient that outlives the recorded step
  a.end_pool_capture();
  a.release_pool(pool);
  a.deallocate(kept);
  void* p = a.allocate(1500);
  EXPECT_EQ(p, kept);
  a.deallocate(p);
  a.release_cached();
}

// Two graphs alive: a block of graph P that graph Q's recording frees (Q may have read it) stays P's,
// and is not handed to an ordinary tensor while either graph may still address it: releasing P hands
// it to Q, and only releasing Q too makes it ordinary. Either order of release, and either order of
// creation (the first round's Q is pool 1, the first of the allocator).
TEST_F(PoolFixture, ABlockOfOneGraphFreedWhileAnotherRecordsStaysReservedForBoth) {
  for (const bool p_made_first : {false, true})
  for (const bool p_first : {true, false}) {
    const int first_made = a.create_pool(), second_made = a.create_pool();
    const int P = p_made_first ? first_made : second_made, Q = p_made_first ? second_made : first_made;
    if (!p_made_first && p_first) {
      ASSERT_EQ(Q, 1);
    }
    a.begin_pool_capture(P);
    void* x = a.allocate(4096);  // made by P's recording (an output tensor kept outside the step)
    a.end_pool_capture();
    a.begin_pool_capture(Q);
    a.deallocate(x);  // Q's recording reads x, and its last reference dies inside it
    a.end_pool_capture();
    EXPECT_EQ(a.pool_cached_bytes(P), CachingAllocator::round_size(4096)) << "x stays P's";
    const int first = p_first ? P : Q, second = p_first ? Q : P;
    a.release_pool(first);
    void* y = a.allocate(4096);  // an ordinary tensor
    EXPECT_NE(y, x) << "x went to an ordinary tensor while graph " << (p_first ? "Q" : "P") << " addresses it";
    EXPECT_EQ(a.pool_cached_bytes(second), CachingAllocator::round_size(4096)) << "x is the other pool's now";
    a.release_pool(second);
    void* z = a.allocate(4096);
    EXPECT_EQ(z, x) << "with both graphs gone, x serves everyone";
    a.deallocate(y);
    a.deallocate(z);
    a.release_cached();  // the next round starts from an empty cache
  }
  EXPECT_EQ(a.stats().current_bytes, 0u);
  EXPECT_EQ(g_frees, g_allocs) << "every block went back to the backend";
}

// Releasing P leaves Q's blocks Q's, live and cached alike, and makes P's live block ordinary.
TEST_F(PoolFixture, ReleasingOnePoolLeavesAnothersBlocksAlone) {
  const int P = a.create_pool(), Q = a.create_pool();
  a.begin_pool_capture(P);
  void* p = a.allocate(1000);
  a.end_pool_capture();
  a.begin_pool_capture(Q);
  void* q = a.allocate(2000);
  a.deallocate(a.allocate(3000));  // a temporary of Q's recording: cached in Q
  a.end_pool_capture();
  const size_t r2000 = CachingAllocator::round_size(2000), r3000 = CachingAllocator::round_size(3000);
  a.release_pool(P);
  EXPECT_EQ(a.pool_live_bytes(Q), r2000);
  EXPECT_EQ(a.pool_cached_bytes(Q), r3000);
  a.deallocate(q);
  EXPECT_EQ(a.pool_live_bytes(Q), 0u);
  EXPECT_EQ(a.pool_cached_bytes(Q), r2000 + r3000) << "q went back to Q's cache";
  void* ordinary = a.allocate(2000);
  EXPECT_NE(ordinary, q);
  a.deallocate(p);
  void* again = a.allocate(1000);
  EXPECT_EQ(again, p) << "P's live block became ordinary";
  a.deallocate(again);
  a.deallocate(ordinary);
  a.release_pool(Q);
  a.release_cached();
  EXPECT_EQ(g_frees, g_allocs);
}

// Blocks of P that Q's recording freed, taken again by P's next recording and live when P is
// released: Q's graph still addresses them, so they pass to Q (here pool 1) live, and go back to Q's
// cache when they are freed. Three of them, so that the release's walk over the pool's blocks must
// go past the first one it hands over.
TEST_F(PoolFixture, ALiveBlockSharedWithAnotherPoolPassesToItWhenItsOwnerIsReleased) {
  const int Q = a.create_pool(), P = a.create_pool();
  ASSERT_EQ(Q, 1);
  const std::vector<size_t> sizes = {4096, 8192, 12288};
  std::vector<void*> xs;
  size_t total = 0;
  a.begin_pool_capture(P);
  for (size_t n : sizes) {
    xs.push_back(a.allocate(n));
    total += CachingAllocator::round_size(n);
  }
  a.end_pool_capture();
  a.begin_pool_capture(Q);
  for (void* x : xs) a.deallocate(x);
  a.end_pool_capture();
  a.begin_pool_capture(P);
  for (size_t i = 0; i < sizes.size(); ++i)
    EXPECT_EQ(a.allocate(sizes[i]), xs[i]) << "P's recording takes its own cached block first";
  a.end_pool_capture();
  a.release_pool(P);
  EXPECT_EQ(a.pool_live_bytes(Q), total) << "every x is Q's now";
  for (void* x : xs) a.deallocate(x);
  EXPECT_EQ(a.pool_cached_bytes(Q), total);
  std::vector<void*> ordinary;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ordinary.push_back(a.allocate(sizes[i]));
    EXPECT_NE(ordinary.back(), xs[i]) << "an x went to an ordinary tensor while Q's graph addresses it";
  }
  a.release_pool(Q);
  for (size_t i = 0; i < sizes.size(); ++i) {
    void* z = a.allocate(sizes[i]);
    EXPECT_EQ(z, xs[i]);
    a.deallocate(z);
    a.deallocate(ordinary[i]);
  }
  a.release_cached();
  EXPECT_EQ(g_frees, g_allocs);
}

// A block of P shared with two other graphs, Q and R (each recording freed it once): releasing Q
// forgets Q alone, so R still keeps it from ordinary use after P is released too.
TEST_F(PoolFixture, ABlockSharedWithTwoPoolsStaysReservedUntilAllAreReleased) {
  const int P = a.create_pool(), Q = a.create_pool(), R = a.create_pool();
  a.begin_pool_capture(P);
  void* x = a.allocate(4096);
  a.end_pool_capture();
  for (const int sharer : {Q, R}) {
    a.begin_pool_capture(sharer);
    a.deallocate(x);
    a.end_pool_capture();
    a.begin_pool_capture(P);  // P's next recording takes x again
    ASSERT_EQ(a.allocate(4096), x);
    a.end_pool_capture();
  }
  a.release_pool(Q);
  a.release_pool(P);
  EXPECT_EQ(a.pool_live_bytes(R), CachingAllocator::round_size(4096)) << "x is R's now";
  a.deallocate(x);
  expect_reserved_until_released(R, x);
}

// A block of P freed by ordinary code goes back to P's cache, and P's next recording takes it again.
// Shared after that with Q's recording, it still passes to Q when P is released: the free outside any
// recording made nobody a sharer.
TEST_F(PoolFixture, ABlockFreedOutsideARecordingThenSharedPassesToTheSharer) {
  const int P = a.create_pool();
  a.begin_pool_capture(P);
  void* x = a.allocate(4096);
  a.end_pool_capture();
  a.deallocate(x);  // the output tensor dies in ordinary code
  EXPECT_EQ(a.pool_cached_bytes(P), CachingAllocator::round_size(4096));
  a.begin_pool_capture(P);  // P recorded again: its own block first
  EXPECT_EQ(a.allocate(4096), x);
  a.end_pool_capture();
  const int Q = a.create_pool();
  a.begin_pool_capture(Q);
  a.deallocate(x);
  a.end_pool_capture();
  a.release_pool(P);
  EXPECT_EQ(a.pool_cached_bytes(Q), CachingAllocator::round_size(4096)) << "x is Q's now";
  expect_reserved_until_released(Q, x);
}

// A pool released by one thread while another still records into it (a misuse that release_pool can
// only refuse on the recording thread itself): a block the recording frees afterwards goes to the
// common cache, not to a pool that no longer exists (or to another).
TEST_F(PoolFixture, ABlockFreedIntoAPoolReleasedMeanwhileBecomesOrdinary) {
  const int pool = a.create_pool();  // pool 1: the first of this allocator
  ASSERT_EQ(pool, 1);
  void* x = a.allocate(4096);  // allocated before the recording
  std::promise<void> recording, released;
  std::thread recorder([&] {
    a.begin_pool_capture(pool);
    recording.set_value();
    released.get_future().wait();
    a.deallocate(x);
    a.end_pool_capture();
  });
  recording.get_future().wait();
  a.release_pool(pool);
  released.set_value();
  recorder.join();
  EXPECT_EQ(a.pool_cached_bytes(pool), 0u) << "the released pool came back";
  void* y = a.allocate(4096);
  EXPECT_EQ(y, x) << "x went to the common cache";
  a.deallocate(y);
  a.release_cached();
  EXPECT_EQ(g_frees, g_allocs);
}

// Out of memory while recording: the backend's free is refused during a recording (runtime::cuda_free
// throws), so the retry must not give the cache back. The error says it ran out, for how many bytes,
// and that a graph was being recorded; no cached block is lost and the statistics still add up.
TEST(PoolRecording, OutOfMemoryWhileRecordingKeepsTheCacheAndSaysSo) {
  static bool recording = false;
  static bool full = false;
  static std::set<void*> held;
  held.clear();
  CachingAllocator a(
      [](size_t n) -> void* {
        if (full) throw Error(detail::concat("test backend: cannot allocate ", n, " bytes"));
        void* p = ::operator new(n);
        held.insert(p);
        return p;
      },
      [](void* p) {
        if (recording) throw Error("cuda_free while this thread records a CUDA graph (framework/cuda_graph.h): ...");
        held.erase(p);
        ::operator delete(p);
      });
  a.deallocate(a.allocate(4096));  // one block in the common cache
  const MemoryStats before = a.stats();
  const int pool = a.create_pool();
  a.begin_pool_capture(pool);
  recording = full = true;
  const std::string message = hl::test::error_of([&] { a.allocate(1 << 20); });
  recording = full = false;
  a.end_pool_capture();
  EXPECT_NE(message.find("out of memory for 1048576 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("records a CUDA graph"), std::string::npos) << message;
  EXPECT_NE(message.find("test backend: cannot allocate 1048576 bytes"), std::string::npos) << message;
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.backend_allocs, before.backend_allocs);
  a.release_pool(pool);
  a.release_cached();
  EXPECT_TRUE(held.empty()) << "the cached block was lost, never freed";
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
}

TEST_F(PoolFixture, MisuseIsRefusedWithTheReason) {
  expect_error([&] { a.begin_pool_capture(42); }, "no memory pool 42");
  const int pool = a.create_pool();
  a.begin_pool_capture(pool);
  const int second = a.create_pool();
  expect_error([&] { a.begin_pool_capture(second); }, "already records into pool");
  expect_error([&] { a.release_pool(pool); }, "is being recorded into");
  a.end_pool_capture();
  a.release_pool(pool);
  a.release_pool(second);
  a.release_pool(second);  // twice: nothing left to release
}

// ---- the loss scaler's recording hooks, on the CPU --------------------------------------------------------

// The CPU runs a "recorded" step for real, so a step run between begin_recording() and
// end_recording(), followed by replayed_update(), must leave exactly the state of an ordinary step:
// the same scale, counters, step count and history (including the history's growth past 256).
TEST(LossScalerRecording, ReplayedUpdatesKeepTheStateOfOrdinarySteps) {
  auto run = [](bool recorded) {
    Generator gen(5);
    nn::Linear lin(3, 2, gen);
    optim::SGD sgd(lin.parameters(), {.lr = 0.01});
    amp::LossScaler scaler(amp::ScalerConfig::parse("dynamic:init=1024,interval=3"));
    const Tensor x = Tensor::randn({4, 3}, gen);
    const Tensor y = Tensor::from_vector(std::vector<int32_t>{0, 1, 1, 0}, {4});
    for (int step = 0; step < 300; ++step) {
      // Every 7th step overflows (an inf input), so the scale both grows and backs off.
      const Tensor in = step % 7 == 3 ? mul(x, std::numeric_limits<double>::infinity()) : x;
      if (recorded) scaler.begin_recording(Device::cpu);
      sgd.zero_grad();
      scaler.scale(cross_entropy(lin(in), y)).backward();
      scaler.step(sgd);
      scaler.update();
      if (recorded) {
        scaler.end_recording();
        EXPECT_EQ(scaler.steps(), step) << "a recorded update counts nothing by itself";
        scaler.replayed_update();
      }
    }
    return scaler;
  };
  const amp::LossScaler plain = run(false), replayed = run(true);
  EXPECT_EQ(replayed.steps(), 300);
  EXPECT_EQ(replayed.state(), plain.state());
  EXPECT_EQ(replayed.scale_history(), plain.scale_history());
  ASSERT_EQ(plain.scale_history().size(), 300u);
  EXPECT_GT(plain.skipped_steps(), 0) << "the test must exercise the skipped steps";
}

TEST(LossScalerRecording, MisuseIsRefused) {
  amp::LossScaler scaler;
  expect_error([&] { scaler.replayed_update(); }, "no step has been recorded");
  scaler.begin_recording(Device::cpu);
  expect_error([&] { scaler.replayed_update(); }, "still recording");
  scaler.end_recording();
}

// ---- the graph -------------------------------------------------------------------------------------------

// Without a GPU, a recording is refused before the function runs.
TEST(CudaGraph, WithoutAGpuNothingIsRecorded) {
  if (runtime::cuda_available()) GTEST_SKIP() << "a GPU is present: the GPU tests below cover it";
  CudaGraph g;
  bool ran = false;
  expect_error([&] { g.capture([&] { ran = true; }); }, "CUDA is not available");
  EXPECT_FALSE(ran);
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(runtime::cuda_capturing());
  expect_error([&] { g.replay(); }, "nothing has been recorded");
}

// A replay reruns the recorded kernels on the memory they were recorded with: the recording itself
// computes nothing, and each replay adds into the same accumulator from the input's current values.
TEST(CudaGraph, ReplaysRerunTheRecordedKernelsOnTheSameMemory) {
  HL_REQUIRE_CUDA();
  Tensor x = Tensor::full({1000}, 1.0).to(Device::cuda);
  Tensor acc = Tensor::zeros({1000}, DType::f32, Device::cuda);
  CudaGraph g;
  g.capture([&] { acc.copy_(add(acc, mul(x, 2.0))); });  // a temporary (the product) lives in the pool
  EXPECT_EQ(g.captures(), 1);
  EXPECT_EQ(acc.to_vector()[0], 0.0f) << "recording runs nothing";
  g.replay();
  g.replay();
  x.fill_(5.0);  // an input changed between replays is read by the next one
  g.replay();
  const std::vector<float> v = acc.to_vector();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 2.0f + 2.0f + 10.0f) << i;
  EXPECT_EQ(g.replays(), 3);
  EXPECT_FALSE(g.stale());
}

// The pool keeps the recording's temporaries from tensors made between replays: a replay must not
// write into them.
TEST(CudaGraph, TensorsMadeBetweenReplaysAreNotOverwritten) {
  HL_REQUIRE_CUDA();
  const Tensor x = Tensor::full({4096}, 3.0).to(Device::cuda);
  Tensor out = Tensor::zeros({4096}, DType::f32, Device::cuda);
  CudaGraph g;
  g.capture([&] { out.copy_(add(mul(x, 2.0), 1.0)); });  // two temporaries of 4096 floats, then freed
  std::vector<Tensor> others;
  for (int i = 0; i < 4; ++i) others.push_back(Tensor::full({4096}, -7.0).to(Device::cuda));
  g.replay();
  for (const Tensor& t : others)
    for (float v : t.to_vector()) ASSERT_EQ(v, -7.0f);
  for (float v : out.to_vector()) ASSERT_EQ(v, 7.0f);
  g.reset();
  EXPECT_FALSE(g.captured());
}

// What cannot be recorded is refused with the call's name, the recording is discarded, and the
// stream works as before.
TEST(CudaGraph, WaitsInsideARecordingAreRefusedAndLeaveNothingBehind) {
  HL_REQUIRE_CUDA();
  const Tensor x = Tensor::full({16}, 1.0).to(Device::cuda);
  CudaGraph g;
  expect_error([&] { g.capture([&] { (void)sum(x).item(); }); }, "records a CUDA graph");
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(runtime::cuda_capturing());
  expect_error([&] { g.capture([&] { (void)x.to(Device::cpu); }); }, "cuda_memcpy_async");
  expect_error([&] { g.capture([] { runtime::cuda_synchronize(); }); }, "cuda_synchronize");
  void* event = runtime::cuda_event_create();
  expect_error([&] { g.capture([&] { runtime::cuda_event_record(event); }); },
                                    "cuda_event_record");
  runtime::cuda_event_destroy(event);
  Generator gen(1);
  expect_error([&] { g.capture([&] { (void)dropout(x, 0.5, true, gen); }); }, "dropout");
  EXPECT_EQ(sum(x).item(), 16.0) << "the stream still runs work";
}

// Device memory given back to the driver makes a recording stale (it may address it).
TEST(CudaGraph, FreedDeviceMemoryMakesARecordingStale) {
  HL_REQUIRE_CUDA();
  Tensor acc = Tensor::zeros({8}, DType::f32, Device::cuda);
  CudaGraph g;
  g.capture([&] { acc.copy_(add(acc, 1.0)); });
  EXPECT_FALSE(g.stale());
  runtime::cuda_free(runtime::cuda_malloc(256));
  EXPECT_TRUE(g.stale());
  // A replay now could write through a pointer to freed memory: refused, and nothing is queued.
  expect_error([&] { g.replay(); }, "record it again");
  EXPECT_EQ(g.replays(), 0);
  g.capture([&] { acc.copy_(add(acc, 1.0)); });
  EXPECT_FALSE(g.stale());
  EXPECT_EQ(g.captures(), 2);
  g.replay();
  EXPECT_EQ(g.replays(), 1);
  for (float v : acc.to_vector()) ASSERT_EQ(v, 1.0f) << "the new recording's one replay";
}

}  // namespace
