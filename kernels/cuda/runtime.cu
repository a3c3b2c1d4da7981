// The CUDA side of kernels/runtime.h: finding a usable GPU, raw memory, copies and the halfling stream.
//
// The probe must never crash or throw: a CUDA build runs on laptops and CI machines without a driver
// (DESIGN.md §2, "falls back to the CPU with a one-line notice"), so every failure becomes a reason
// string. Everything else throws hl::Error with a message that says what to do next.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"
#include "kernels/runtime.h"

namespace hl::runtime {

namespace {

// Tensor Cores with FP16 inputs need compute capability 7.0 (paper §3.3 on Volta).
constexpr int kMinComputeCapability = 70;

// Does nothing. Asking for its attributes tells whether this build holds machine code (or PTX to
// compile) that the GPU can run: a card older than every architecture in CMAKE_CUDA_ARCHITECTURES has
// none, and every launch would then fail with "no kernel image is available".
__global__ void probe_kernel() {}

struct Probe {
  bool available = false;
  std::string reason;      // why not, when !available
  std::string description; // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 80 GiB)" when available
  int capability = 0;      // 10 * major + minor
  int sm_count = 0;        // streaming multiprocessors
  int shared_per_block = 0;  // bytes of shared memory a block may have, once allowed (the opt-in maximum)
};

Probe run_probe() {
  Probe p;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it, so that it is not reported by the next unrelated check
    p.reason = detail::concat("cudaGetDeviceCount failed: ", cudaGetErrorString(status), " (",
                              cudaGetErrorName(status), "); no usable CUDA driver or device");
    return p;
  }
  if (count == 0) {
    p.reason = "no CUDA device found";
    return p;
  }
  cudaDeviceProp prop{};
  const cudaError_t prop_status = cudaGetDeviceProperties(&prop, 0);
  if (prop_status != cudaSuccess) {
    cudaGetLastError();
    p.reason = detail::concat("cudaGetDeviceProperties(0) failed: ", cudaGetErrorString(prop_status));
    return p;
  }
  const int capability = 10 * prop.major + prop.minor;
  if (capability < kMinComputeCapability) {
    p.reason = detail::concat(prop.name, " has compute capability ", prop.major, ".", prop.minor,
                              "; halfling needs 7.0 or newer (FP16 Tensor Cores)");
    return p;
  }
  cudaFuncAttributes attributes{};
  const cudaError_t image_status = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (image_status != cudaSuccess) {
    cudaGetLastError();
    p.reason = detail::concat(prop.name, " has compute capability ", prop.major, ".", prop.minor,
                              ", and this build has no code for it (", cudaGetErrorString(image_status),
                              "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=", capability,
                              " (CUDA 13 compiles for 7.5 and newer only)");
    return p;
  }
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.0f", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  p.available = true;
  p.capability = capability;
  p.sm_count = prop.multiProcessorCount;
  p.shared_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
  p.description = detail::concat(prop.name, " (sm_", capability, ", ", prop.multiProcessorCount, " SMs, ", gib,
                                 " GiB)");
#ifdef HALFLING_CUDA_CHECK_ONLY
  // A build made where no GPU was visible compiles device code at -O0, to check it, not to run it
  // (CMakeLists.txt, HALFLING_CUDA_CHECK_ONLY). It computes the same results, many times slower: say so
  // once, and in the description that every benchmark and tutorial prints with its numbers.
  p.description += " [UNOPTIMIZED compile-check build]";
  std::fprintf(stderr,
               "halfling: warning: this library's CUDA code was compiled unoptimized, as a compile check "
               "(HALFLING_CUDA_CHECK_ONLY, set by scripts/build.sh where no GPU was visible): results are "
               "right but every kernel is slow. Rebuild on this machine in a fresh build directory, or "
               "configure with -DHALFLING_CUDA_CHECK_ONLY=OFF -DCMAKE_CUDA_ARCHITECTURES=%d.\n",
               capability);
#endif
  return p;
}

// Probed once, on first use (thread-safe static initialization).
const Probe& probe() {
  static const Probe p = run_probe();
  return p;
}

void require_cuda(const char* op) {
  HL_CHECK(probe().available, op, ": CUDA is not available (", probe().reason,
           "); use the CPU device or run on a machine with a GPU");
}

}  // namespace

bool cuda_compiled() { return true; }

bool cuda_available() {
  try {
    return probe().available;
  } catch (...) {  // std::bad_alloc from the strings is the only thing that could escape
    return false;
  }
}

std::string cuda_unavailable_reason() { return probe().available ? std::string() : probe().reason; }

std::string cuda_device_description() {
  require_cuda("cuda_device_description");
  return probe().description;
}

int cuda_compute_capability() { return probe().available ? probe().capability : 0; }

int cuda_sm_count() { return probe().available ? probe().sm_count : 0; }

int cuda_max_shared_memory_per_block() { return probe().available ? probe().shared_per_block : 0; }

namespace {

cudaStream_t halfling_stream() {
  // Created on first use: non-blocking, so it never synchronizes with the legacy default stream that
  // libraries or user code may be using. Never destroyed: it lives as long as the process.
  static cudaStream_t stream = [] {
    require_cuda("cuda_stream");
    cudaStream_t s = nullptr;
    HL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

// The capture stream of a thread that records a CUDA graph (cuda_capture_begin), else null. Per
// thread, so that the DataLoader's prefetch worker keeps queueing its copies on the halfling stream,
// where they run, instead of into the recording.
thread_local cudaStream_t t_capture = nullptr;

// Per host thread: the DataLoader's prefetch worker waits on its copy events by design, and those
// waits must not show up as waits of the training thread that asks.
thread_local int64_t t_syncs = 0;
void count_sync() { ++t_syncs; }

std::atomic<int64_t> g_frees{0};

// What may not happen while this thread records: the call would wait for the device (which a
// recording cannot), or free memory the recording may address.
void refuse_while_capturing(const char* op, const char* why) {
  HL_CHECK(t_capture == nullptr, op, " while this thread records a CUDA graph (framework/cuda_graph.h): ", why,
           ". A recorded step must queue device work only; run this outside the recording (or the step without "
           "a graph)");
}

}  // namespace

void* cuda_stream() { return t_capture != nullptr ? t_capture : halfling_stream(); }

int64_t cuda_sync_count() { return t_syncs; }

void* cuda_malloc(size_t bytes) {
  require_cuda("cuda_malloc");
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    constexpr double kMiB = 1024.0 * 1024.0;
    throw Error(detail::concat("cuda_malloc: cannot allocate ", bytes, " bytes (", bytes / kMiB, " MiB): ",
                               cudaGetErrorString(status), "; the GPU has ", free_bytes / kMiB, " MiB free of ",
                               total_bytes / kMiB, " MiB (try a smaller batch size)"));
  }
  return ptr;
}

// cudaErrorCudartUnloading: the process is exiting and the runtime is already gone; static objects
// that free memory from their destructors must not turn a clean exit into a crash.
void cuda_free(void* ptr) {
  if (ptr == nullptr) return;
  refuse_while_capturing("cuda_free", "cudaFree waits for the device, and the recording may address this memory "
                                      "(a scratch buffer that grew? an eager step before recording sizes them)");
  g_frees.fetch_add(1, std::memory_order_relaxed);
  count_sync();  // cudaFree waits for the device
  const cudaError_t status = cudaFree(ptr);
  if (status == cudaErrorCudartUnloading) return;
  HL_CUDA_CHECK(status);
}

void* cuda_host_alloc(size_t bytes) {
  require_cuda("cuda_host_alloc");
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t status = cudaMallocHost(&ptr, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Error(detail::concat("cuda_host_alloc: cannot allocate ", bytes, " bytes of pinned host memory: ",
                               cudaGetErrorString(status)));
  }
  return ptr;
}

void cuda_host_free(void* ptr) {
  if (ptr == nullptr) return;
  refuse_while_capturing("cuda_host_free", "cudaFreeHost waits for the device");
  count_sync();  // cudaFreeHost waits for the device, like cudaFree
  const cudaError_t status = cudaFreeHost(ptr);
  if (status == cudaErrorCudartUnloading) return;
  HL_CUDA_CHECK(status);
}

void cuda_memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  require_cuda("cuda_memcpy_async");  // else cuda_stream() would name itself in the error
  if (kind != CopyKind::device_to_device)
    refuse_while_capturing("cuda_memcpy_async", "a recorded copy to or from host memory would copy the same host "
                                                "bytes again at every replay");
  cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
  switch (kind) {
    case CopyKind::host_to_device: k = cudaMemcpyHostToDevice; break;
    case CopyKind::device_to_host: k = cudaMemcpyDeviceToHost; break;
    case CopyKind::device_to_device: k = cudaMemcpyDeviceToDevice; break;
  }
  HL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(cuda_stream())));
}

void cuda_memset_async(void* dst, int value, size_t bytes) {
  if (bytes == 0) return;
  require_cuda("cuda_memset_async");
  HL_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(cuda_stream())));
}

void cuda_synchronize() {
  require_cuda("cuda_synchronize");
  refuse_while_capturing("cuda_synchronize", "a wait for the device (a value read back to the host?)");
  count_sync();
  HL_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(cuda_stream())));
}

void* cuda_event_create() {
  require_cuda("cuda_event_create");
  cudaEvent_t e = nullptr;
  HL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void* cuda_timing_event_create() {
  require_cuda("cuda_timing_event_create");
  cudaEvent_t e = nullptr;
  HL_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

float cuda_event_elapsed_ms(void* start, void* end) {
  require_cuda("cuda_event_elapsed_ms");
  float ms = 0.0f;
  HL_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

void cuda_event_destroy(void* event) {
  if (event == nullptr) return;
  const cudaError_t status = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorCudartUnloading) return;  // process exit, as in cuda_free
  HL_CUDA_CHECK(status);
}

void cuda_event_record(void* event) {
  require_cuda("cuda_event_record");
  refuse_while_capturing("cuda_event_record", "an event recorded into the graph would mark no point the host can "
                                              "wait on (the profiler's timing events?)");
  HL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(cuda_stream())));
}

void cuda_event_synchronize(void* event) {
  require_cuda("cuda_event_synchronize");
  refuse_while_capturing("cuda_event_synchronize", "a wait for the device");
  count_sync();
  HL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

bool cuda_event_query(void* event) {
  require_cuda("cuda_event_query");
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    // Not an error, but some runtimes also leave it as the thread's last error, where the next
    // HL_LAUNCH_CHECK would mistake it for a failed launch; clear it only if it is exactly that.
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  HL_CUDA_CHECK(status);
  return true;
}

// ---- CUDA graphs ---------------------------------------------------------------------------------------

void cuda_capture_begin() {
  require_cuda("cuda_capture_begin");
  HL_CHECK(t_capture == nullptr, "cuda_capture_begin: this thread is already recording a CUDA graph");
  cudaStream_t s = nullptr;
  HL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Relaxed: cudaMalloc stays allowed (the caching allocator may need a new block while a step is
  // recorded); the waits it would also allow are refused above, with a message, before CUDA sees them.
  const cudaError_t status = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    cudaStreamDestroy(s);
    cudaGetLastError();
    throw Error(detail::concat("cuda_capture_begin: cudaStreamBeginCapture failed: ", cudaGetErrorString(status)));
  }
  t_capture = s;
}

void* cuda_capture_end() {
  HL_CHECK(t_capture != nullptr, "cuda_capture_end: this thread is not recording a CUDA graph");
  cudaStream_t s = t_capture;
  t_capture = nullptr;
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(s, &graph);
  cudaStreamDestroy(s);
  if (status != cudaSuccess) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw Error(detail::concat("cuda_capture_end: the recording failed (", cudaGetErrorString(status), ", ",
                               cudaGetErrorName(status),
                               "): something in the step was not recordable, such as work on another stream"));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is a copy
  if (inst != cudaSuccess) {
    cudaGetLastError();
    throw Error(detail::concat("cuda_capture_end: cudaGraphInstantiate failed: ", cudaGetErrorString(inst)));
  }
  return exec;
}

void cuda_capture_abort() noexcept {
  if (t_capture == nullptr) return;
  cudaStream_t s = t_capture;
  t_capture = nullptr;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(s, &graph);  // also ends a capture that an illegal call invalidated
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  cudaGetLastError();  // the failed capture's error is the caller's to report, not the next launch's
}

bool cuda_capturing() { return t_capture != nullptr; }

void cuda_graph_launch(void* exec) {
  require_cuda("cuda_graph_launch");
  HL_CHECK(exec != nullptr, "cuda_graph_launch: no graph");
  HL_CHECK(t_capture == nullptr, "cuda_graph_launch: this thread is recording a CUDA graph");
  HL_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), halfling_stream()));
}

void cuda_graph_destroy(void* exec) noexcept {
  if (exec == nullptr) return;
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  cudaGetLastError();  // cudaErrorCudartUnloading at process exit, as in cuda_free: nothing to report
}

int64_t cuda_free_count() { return g_frees.load(std::memory_order_relaxed); }

// ---- out of memory: the caching allocator's cache and the scratch buffers ------------------------------

namespace {
std::atomic<CachedBlocksRelease> g_cached_blocks_release{nullptr};
}  // namespace

CachedBlocksRelease cuda_set_cached_blocks_release(CachedBlocksRelease release) {
  return g_cached_blocks_release.exchange(release);
}

void cuda_release_cached_blocks() {
  if (const CachedBlocksRelease release = g_cached_blocks_release.load()) release();
}

void cuda_release_scratch() { kernels::cuda::release_idle_scratch(); }

}  // namespace hl::runtime

namespace hl::kernels::cuda {

namespace {
// Leaked, like the buffers' owners: a static Scratch destroyed at exit still finds them.
std::mutex& scratch_list_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<Scratch*>& scratch_list() {
  static auto* list = new std::vector<Scratch*>;
  return *list;
}
}  // namespace

void register_scratch(Scratch* s) {
  const std::lock_guard<std::mutex> lock(scratch_list_mu());
  scratch_list().push_back(s);
}

void unregister_scratch(Scratch* s) {
  const std::lock_guard<std::mutex> lock(scratch_list_mu());
  std::vector<Scratch*>& list = scratch_list();
  list.erase(std::remove(list.begin(), list.end(), s), list.end());
}

// try_lock, never lock: the caller holds the caching allocator's lock, and a thread that holds a
// Scratch's lock may be waiting for that one (a scratch buffer that cannot grow releases the cache). A
// skipped buffer is in use anyway.
void release_idle_scratch() {
  if (runtime::cuda_capturing()) return;  // a recording cannot free (cuda_free refuses)
  const std::lock_guard<std::mutex> lock(scratch_list_mu());
  for (Scratch* s : scratch_list()) {
    std::unique_lock<std::mutex> busy(s->mu, std::try_to_lock);
    if (busy.owns_lock()) s->release();  // cudaFree waits for the kernels that may still read it
  }
}

}  // namespace hl::kernels::cuda
