#include "framework/cuda_graph.h"

#include "framework/device.h"
#include "kernels/error.h"
#include "kernels/runtime.h"

namespace hl {

void CudaGraph::capture(const std::function<void()>& record) {
  HL_CHECK(runtime::cuda_available(), "CudaGraph::capture: CUDA is not available (",
           runtime::cuda_unavailable_reason(), "); graphs record GPU work only");
  HL_CHECK(!runtime::cuda_capturing(), "CudaGraph::capture: this thread is already recording a CUDA graph (recordings "
           "do not nest)");
  reset();
  CachingAllocator& alloc = allocator(Device::cuda);
  const int pool = alloc.create_pool();
  alloc.begin_pool_capture(pool);
  void* exec = nullptr;
  // Counted before the recording starts: memory given back to the driver while it runs (from another
  // thread: this one's frees are refused while it records) may be memory it addresses.
  const int64_t frees = runtime::cuda_free_count();
  try {
    runtime::cuda_capture_begin();
    record();
    exec = runtime::cuda_capture_end();
  } catch (...) {
    runtime::cuda_capture_abort();
    alloc.end_pool_capture();
    // Nothing recorded runs, so nothing can still use the pool's memory.
    alloc.release_pool(pool);
    throw;
  }
  alloc.end_pool_capture();
  exec_ = exec;
  pool_ = pool;
  frees_at_capture_ = frees;
  ++captures_;
}

void CudaGraph::replay() {
  HL_CHECK(exec_ != nullptr, "CudaGraph::replay: nothing has been recorded (call capture first)");
  // A stale recording may write through a pointer to memory the driver has since handed out again:
  // silent corruption, so it is refused rather than left to the caller to check.
  HL_CHECK(!stale(), "CudaGraph::replay: device memory went back to the driver since the recording (a scratch "
           "buffer grew, or the cache was released), and the graph may address it; record it again (capture)");
  runtime::cuda_graph_launch(exec_);
  ++replays_;
}

bool CudaGraph::stale() const { return exec_ != nullptr && runtime::cuda_free_count() != frees_at_capture_; }

void CudaGraph::reset() {
  if (exec_ != nullptr) runtime::cuda_graph_destroy(exec_);
  exec_ = nullptr;
  if (pool_ != 0) allocator(Device::cuda).release_pool(pool_);
  pool_ = 0;
}

}  // namespace hl
