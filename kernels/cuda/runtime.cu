// The CUDA side of kernels/runtime.h: finding a usable GPU, raw memory, copies and the halfling stream.
//
// The probe must never crash or throw: a CUDA build runs on laptops and CI machines without a driver
// (DESIGN.md §2, "falls back to the CPU with a one-line notice"), so every failure becomes a reason
// string. Everything else throws hl::Error with a message that says what to do next.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/common.cuh"
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
  p.description = detail::concat(prop.name, " (sm_", capability, ", ", prop.multiProcessorCount, " SMs, ", gib,
                                 " GiB)");
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

void* cuda_stream() {
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

namespace {
// Per host thread: the DataLoader's prefetch worker waits on its copy events by design, and those
// waits must not show up as waits of the training thread that asks.
thread_local int64_t t_syncs = 0;
void count_sync() { ++t_syncs; }
}  // namespace

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
  count_sync();  // cudaFreeHost waits for the device, like cudaFree
  const cudaError_t status = cudaFreeHost(ptr);
  if (status == cudaErrorCudartUnloading) return;
  HL_CUDA_CHECK(status);
}

void cuda_memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
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
  HL_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(cuda_stream())));
}

void cuda_synchronize() {
  require_cuda("cuda_synchronize");
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
  HL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(cuda_stream())));
}

void cuda_event_synchronize(void* event) {
  count_sync();
  HL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

bool cuda_event_query(void* event) {
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

}  // namespace hl::runtime
