// CUDA graphs: record the kernels a piece of host code queues once, then replay them with one launch.
//
// Why: a training step of a small model is hundreds of short kernels, and on a fast GPU the host can
// fall behind queueing them (MLP-512 `mixed` on an H200: about 200 us per step, most of it launch
// overhead; docs/performance.md). A replayed graph costs one launch for the whole step.
//
// What a recording keeps: the kernels and their arguments, including every raw pointer. So a replay
// reads and writes exactly the memory the recording addressed, with the values of every host-side
// argument (sizes, learning rate, seeds) that the recording saw. That makes three rules:
//  1. Inputs go into tensors that stay put (copy each new batch into the same tensor before a
//     replay), and results are accumulated in place into tensors that stay put.
//  2. Every block of device memory the recording allocated or freed stays reserved for the graph
//     until it is destroyed: the graph owns a private pool of the caching allocator
//     (CachingAllocator::create_pool in framework/device.h). With several graphs alive, a block of
//     one graph that another's recording freed stays reserved until both are destroyed.
//  3. Whatever a host-side value decides must not change between replays, or the graph must be
//     recorded again: stale() says when device memory went back to the driver (a scratch buffer
//     grew, or an out-of-memory retry gave cached memory back), and the caller compares its own
//     settings (the trainer: the learning rate).
// Waits for the device, host copies and timing events inside a recording throw hl::Error naming the
// call (kernels/runtime.h). So does running out of device memory while recording: device memory
// cannot be freed then, so the allocator's cached blocks and the scratch buffers stay where they are
// (outside a recording they would be given back and the allocation retried); recording a step that
// has run once without the graph finds the memory it needs in the cache. The trainer
// (tutorials/common/trainer.h, TrainOptions::cuda_graph) is the user: it records one training step and
// replays it for the epoch's batches.
#pragma once
#include <cstdint>
#include <functional>

namespace hl {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph() { reset(); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `record` with the calling thread's launches recorded instead of run (nothing it queues
  // executes now) and its device allocations in this graph's private pool, then instantiates the
  // graph. Replaces an earlier recording. If `record` throws, or the recording cannot be
  // instantiated, nothing is kept and the error propagates.
  void capture(const std::function<void()>& record);
  // Queue one replay on the halfling stream. Throws if nothing is recorded, or if the recording is stale.
  void replay();
  bool captured() const { return exec_ != nullptr; }
  // Device memory went back to the driver since the recording began (from any thread): it may address
  // freed memory, and replay() refuses it.
  bool stale() const;
  // Drop the recording and give the pool back (replays already queued finish first).
  void reset();
  int64_t captures() const { return captures_; }  // successful capture() calls
  int64_t replays() const { return replays_; }

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
  int pool_ = 0;
  int64_t frees_at_capture_ = 0;
  int64_t captures_ = 0, replays_ = 0;
};

}  // namespace hl
