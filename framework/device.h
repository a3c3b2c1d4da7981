// Devices and device memory.
//
// Device selection never crashes: asking for "cuda" on a machine without a usable GPU (or in a
// CPU-only build) falls back to the CPU with a one-line notice on stderr (DESIGN.md §2).
//
// GPU memory comes from a caching allocator: freed blocks are kept in per-size free lists and
// handed out again, so cudaMalloc is not on the training hot path (every step allocates the same
// sizes). It reports current and peak bytes, which the mixed-precision lessons measure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/dtype.h"

// HL_ASAN: defined in AddressSanitizer builds (scripts/sanitize.sh), where the CPU allocator poisons the
// memory it keeps (device.cpp). g++ says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define HL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HL_ASAN 1
#endif
#endif

namespace hl {

using Device = DeviceType;

// "cpu" -> cpu; "cuda"/"gpu" -> cuda if available, else cpu with a one-line notice; "auto" -> cuda
// when available, else cpu, with the same notice in a CUDA build (silently in a CPU-only one). One
// notice per process at most. Anything else throws hl::Error.
Device parse_device(const std::string& name);
// True when tensors can be placed on the GPU.
bool cuda_available();

struct MemoryStats {
  size_t current_bytes = 0;   // bytes held by live tensors
  size_t peak_bytes = 0;      // high-water mark of current_bytes since the last reset
  size_t reserved_bytes = 0;  // bytes obtained from the backend (live + cached)
  size_t backend_allocs = 0;  // how many times the backend (cudaMalloc) was called
};

// A caching allocator over any raw backend. Block sizes are rounded up so that slightly different
// sizes share cached blocks (a cached block is reused for exactly its own size class): up to 1 MiB to a
// multiple of 512 bytes; above, to one of four classes per power of two, 2^k times 1.25, 1.5, 1.75 or
// 2, so that rounding costs at most 25% of a large request (a power of two would cost up to 2x, and
// refuse a 65 GiB tensor on an 80 GiB GPU).
//
// Out of memory: the backend's failure is retried once, after the cached blocks have gone back to the
// backend and `release_elsewhere` (if given) has freed what other caches hold (the GPU allocator: the
// CUDA kernels' scratch buffers, kernels/cuda/scratch.cuh). Not while the calling thread records into
// a pool (below): a CUDA graph recording cannot free device memory, so the error is reported as it is.
// Either way the error names the bytes asked for, and the block size they were rounded to.
class CachingAllocator {
 public:
  using RawAlloc = void* (*)(size_t);
  using RawFree = void (*)(void*);
  using ReleaseElsewhere = void (*)();
  // host_memory: the blocks are ordinary host memory, so under AddressSanitizer the slack past each
  // request and every cached (freed) block are poisoned: an overrun or a use after free is reported
  // instead of landing silently in memory the allocator still owns.
  CachingAllocator(RawAlloc alloc, RawFree free, bool host_memory = false, ReleaseElsewhere release_elsewhere = nullptr)
      : raw_alloc_(alloc), raw_free_(free), release_elsewhere_(release_elsewhere), host_memory_(host_memory) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes);
  void deallocate(void* ptr);
  // Return every cached (unused) block to the backend. Blocks kept for a pool (below) stay. A block
  // whose free throws stays cached (and counted in reserved_bytes), and the error propagates.
  void release_cached();
  MemoryStats stats() const;
  void reset_peak();
  // The block size of a request (above). Throws hl::Error for a request no size class can hold
  // (beyond 1.75 * 2^63 bytes, where the rounding would overflow).
  static size_t round_size(size_t bytes);

  // Private pools, for CUDA graphs (framework/cuda_graph.h). A recorded graph replays with the raw
  // addresses it was recorded with, so every block it may touch must stay its own until it is
  // destroyed: never handed to another tensor in between, where a replay would overwrite it.
  //  - While the calling thread records into pool P (begin_pool_capture), its allocations become P's
  //    (taken from P's cached blocks first, then from the common cache or the backend), and every
  //    block it frees goes to P's cache, even one allocated before (the recording may have read it).
  //  - Afterwards, a block of P that any thread frees goes back to P's cache, where only a later
  //    recording into P can take it.
  //  - A block of P freed while the thread records into another pool Q stays P's, and Q's graph
  //    addresses it too: it is then kept from ordinary use until both P and Q are released.
  //  - release_pool(P), once the graph is gone: P's cached blocks join the common cache, and its live
  //    blocks become ordinary ones, except those another pool still shares (above), which pass to it.
  //    Replays already queued stay safe: later work on the same stream runs after them.
  // Other threads (the DataLoader's prefetch worker) allocate from the common cache meanwhile.
  int create_pool();
  void begin_pool_capture(int pool);  // the calling thread; one pool at a time
  void end_pool_capture();
  void release_pool(int pool);
  // Blocks of `pool`: cached (free) and live, in bytes.
  size_t pool_cached_bytes(int pool) const;
  size_t pool_live_bytes(int pool) const;

 private:
  struct Pool {
    std::multimap<size_t, void*> free_blocks;  // size -> block
  };
  // Returns the cached blocks to the backend; call with mu_ held.
  void release_cached_locked();
  // A new block of `size` bytes (round_size(bytes)) from the backend, with the out-of-memory retry
  // (above); call with mu_ held.
  void* backend_allocate_locked(size_t bytes, size_t size, bool recording);
  // The pool the calling thread records into here, or 0.
  int capturing_pool() const;
  Pool& pool(int id);  // call with mu_ held; throws for an unknown id

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  ReleaseElsewhere release_elsewhere_;
  bool host_memory_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_blocks_;  // size -> block
  std::map<void*, size_t> live_;              // block -> size
  std::map<int, Pool> pools_;                 // id -> pool
  std::map<void*, int> pool_of_;              // block -> pool id, for blocks that belong to a pool
  // block -> the other pools whose recordings freed it (they address it too); live pools only
  std::map<void*, std::vector<int>> shared_with_;
  int next_pool_ = 1;
  MemoryStats stats_;
};

// The process-wide allocator for a device (the CPU one caches 64-byte-aligned host blocks too; under
// AddressSanitizer the cached ones are poisoned).
CachingAllocator& allocator(Device d);
MemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);

// A block of memory on one device, shared by every tensor that views it.
class Storage {
 public:
  Storage(size_t bytes, Device d);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Counts the writes made through Tensor::copy_ and fill_ (a parameter loaded from a checkpoint, or
  // set by hand) and an optimizer's updates, not the kernels that write through raw pointers (an op's
  // output). An optimizer with FP32 master weights compares it with what it last saw, and re-reads
  // the master of a parameter written behind its back (framework/optim.h); backward() refuses a graph
  // whose saved tensors were written since the forward pass (framework/autograd.h).
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  // A parameter converted or moved in place (nn::Module::to) gets new storage with the same values:
  // it keeps the old storage's count, so that the conversion is not taken for a write.
  void set_version(uint64_t v) { version_ = v; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
};

// Copy bytes between any two devices (synchronous from the host's point of view when the
// destination is host memory).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);

}  // namespace hl
