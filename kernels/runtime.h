// The device runtime as seen by the rest of halfling: is there a GPU, raw device memory, copies,
// the one stream per device, synchronization. Implemented by kernels/cuda/runtime.cu in CUDA builds
// and by kernels/nocuda/runtime_nocuda.cpp in CPU-only builds, where every CUDA entry point throws,
// as it does in a CUDA build without a usable GPU, so that a CPU path that calls one fails the same way
// in both. The exceptions answer without a device, the same in both builds: the queries
// (cuda_compiled, cuda_available, cuda_unavailable_reason, cuda_compute_capability, cuda_sm_count,
// cuda_max_shared_memory_per_block, cuda_sync_count, cuda_capturing, cuda_free_count); freeing or
// destroying a null pointer; the noexcept cleanups cuda_capture_abort and cuda_graph_destroy (nothing
// can be open or recorded there); and the out-of-memory hooks at the end, which the framework's
// allocator sets up on every build (with no device there is nothing cached to give back).
//
// Raw allocation here is deliberately dumb (one cudaMalloc per call); the caching allocator that
// keeps cudaMalloc off the training hot path lives in framework/device.h on top of it.
#pragma once
#include <cstddef>
#include <string>

namespace hl::runtime {

// True when halfling was compiled with CUDA support.
bool cuda_compiled();
// True when CUDA support is compiled in AND a usable GPU (compute capability >= 7.0) is present.
// Never throws and never crashes without a driver: the probe result is cached.
bool cuda_available();
// Why CUDA is not available ("halfling was built without CUDA", "no CUDA driver", ...), or "".
std::string cuda_unavailable_reason();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 80 GiB)"; throws if !cuda_available().
std::string cuda_device_description();
// Compute capability as 10*major+minor (90 for H100); 0 when unavailable.
int cuda_compute_capability();
// Streaming multiprocessors of the device; 0 when unavailable.
int cuda_sm_count();
// The most shared memory one block may have on the device, once a kernel allows it (the opt-in maximum,
// 227 KiB on an H100); 0 when unavailable.
int cuda_max_shared_memory_per_block();

// Raw device memory (no caching). Throws hl::Error naming the size on failure.
void* cuda_malloc(size_t bytes);
void cuda_free(void* ptr);
// Pinned (page-locked) host memory, for asynchronous copies.
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* ptr);

enum class CopyKind { host_to_device, device_to_host, device_to_device };
// Asynchronous on the halfling stream; device_to_host callers must synchronize() before reading.
void cuda_memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind);
void cuda_memset_async(void* dst, int value, size_t bytes);
// Wait for all work queued on the halfling stream.
void cuda_synchronize();
// How many times the calling host thread has waited for the device so far: cuda_synchronize(), event
// waits and cuda_free() (cudaFree synchronizes the device). Per thread, so the DataLoader's prefetch
// worker does not count. For tests that a training step never waits
// (tests/framework/test_amp_nosync.cpp); 0 without CUDA.
int64_t cuda_sync_count();
// The halfling stream (a cudaStream_t), as an opaque pointer so that .cpp files need no CUDA headers.
// While the calling thread records a CUDA graph (below), its capture stream instead: every launch of
// that thread is then recorded, and other threads (the DataLoader's prefetch worker) go on using the
// halfling stream itself.
void* cuda_stream();

// CUDA events (cudaEvent_t, opaque like the stream): a marker in the halfling stream that the host
// can wait for. The DataLoader records one after each batch's host-to-device copy and waits on it
// before it refills that pinned buffer, so the copy never reads a half-overwritten batch.
// Created with timing disabled (cheaper to record and wait on).
void* cuda_event_create();
void cuda_event_destroy(void* event);
void cuda_event_record(void* event);       // at the current end of the halfling stream
void cuda_event_synchronize(void* event);  // block the calling host thread until the stream gets there
bool cuda_event_query(void* event);        // true once reached (and for an event never recorded)
// The same with timing enabled, for the profiler (framework/profiler.h): the GPU time between two
// recorded events, in milliseconds. Both must have been reached (cuda_event_synchronize on `end`).
void* cuda_timing_event_create();
float cuda_event_elapsed_ms(void* start, void* end);

// CUDA graphs (framework/cuda_graph.h builds on these): the work one host thread queues is recorded
// once, not run, and replayed later with one launch. cuda_capture_begin() gives the calling thread a
// capture stream of its own (cuda_stream() returns it) in relaxed capture mode; cuda_capture_end()
// instantiates what was recorded and returns the executable graph (a cudaGraphExec_t, opaque).
// While a thread records, anything of that thread that would wait for the device or touch host
// memory throws hl::Error naming the call, instead of breaking the capture obscurely: cuda_synchronize,
// cuda_event_synchronize, cuda_event_record, cuda_free, cuda_host_free, and copies to or from the
// host (a recorded copy would re-read the same host bytes at every replay). cuda_malloc is allowed.
void cuda_capture_begin();
void* cuda_capture_end();
// End a recording after an error, discarding it; never throws. Does nothing when none is open.
void cuda_capture_abort() noexcept;
bool cuda_capturing();  // the calling thread is recording
// Queue one replay on the halfling stream (ordered after everything queued before it).
void cuda_graph_launch(void* exec);
// Free an executable graph; a replay still running finishes first (the driver defers the free).
void cuda_graph_destroy(void* exec) noexcept;
// How many times device memory has gone back to the driver (cuda_free), process-wide. A recorded graph
// holds raw addresses: when this count moves, memory it may use can be gone (a scratch buffer that
// grew, a cache released after an out-of-memory error), and the graph must be recorded again.
int64_t cuda_free_count();

// Out of device memory. Two caches hold device memory that nothing may be using: the caching
// allocator's free blocks (framework/device.h) and the kernels' grow-only scratch buffers
// (kernels/cuda/scratch.cuh). When one cannot get memory, it has the other give its unused memory back
// (the allocator its own cache too), then retries once; not while the calling thread records a CUDA
// graph, which cannot free memory. The framework registers its cache's release here, since kernels/
// cannot call framework/ (one function; a second call replaces it, and the previous one is returned,
// for tests).
using CachedBlocksRelease = void (*)();
CachedBlocksRelease cuda_set_cached_blocks_release(CachedBlocksRelease release);
// Calls the function registered above, if any (from a scratch buffer that could not grow).
void cuda_release_cached_blocks();
// Frees every scratch buffer that no call is using at this moment (a buffer whose lock another thread
// holds is skipped); the next call that needs one allocates it again. From the allocator's retry; never
// from a thread that holds a scratch buffer's lock (scratch.cuh says why).
void cuda_release_scratch();

}  // namespace hl::runtime
