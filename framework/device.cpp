#include "framework/device.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <new>

#include "kernels/error.h"
#include "kernels/runtime.h"

// AddressSanitizer's manual poisoning (no-ops in ordinary builds; HL_ASAN: device.h).
#if defined(HL_ASAN)
#include <sanitizer/asan_interface.h>
#define HL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define HL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define HL_POISON(p, n) ((void)(p), (void)(n))
#define HL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace hl {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "auto") return runtime::cuda_available() ? Device::cuda : Device::cpu;
  if (name == "cuda" || name == "gpu") {
    if (runtime::cuda_available()) return Device::cuda;
    static bool told = false;  // one notice per process is enough
    if (!told) {
      std::cerr << "halfling: CUDA requested but unavailable (" << runtime::cuda_unavailable_reason()
                << "); running on the CPU\n";
      told = true;
    }
    return Device::cpu;
  }
  throw Error("parse_device: unknown device '" + name + "' (expected cpu, cuda or auto)");
}

bool cuda_available() { return runtime::cuda_available(); }

// ---- caching allocator -----------------------------------------------------------------------------

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmall = 512;
  constexpr size_t kLarge = size_t(1) << 20;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  size_t p = kLarge;
  while (p < bytes) p <<= 1;
  return p;
}

CachingAllocator::~CachingAllocator() {
  // Process exit: the CUDA context may already be gone, so only return host memory.
  try {
    release_cached();
  } catch (...) {
  }
}

namespace {
// The allocator and pool the calling thread records into (begin_pool_capture), if any.
thread_local const CachingAllocator* t_capture_owner = nullptr;
thread_local int t_capture_pool = 0;

// Takes a cached block of exactly `size` out of `blocks`, or returns null.
void* take(std::multimap<size_t, void*>& blocks, size_t size) {
  auto it = blocks.find(size);
  if (it == blocks.end()) return nullptr;
  void* ptr = it->second;
  blocks.erase(it);
  return ptr;
}
}  // namespace

int CachingAllocator::capturing_pool() const { return t_capture_owner == this ? t_capture_pool : 0; }

CachingAllocator::Pool& CachingAllocator::pool(int id) {
  auto it = pools_.find(id);
  HL_CHECK(it != pools_.end(), "CachingAllocator: no memory pool ", id, " (released already?)");
  return it->second;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  const int capture = capturing_pool();
  // A cached block of exactly this rounded size (rounding makes exact matches common): while
  // recording, the pool's own first, then the common cache.
  void* ptr = capture != 0 ? take(pool(capture).free_blocks, size) : nullptr;
  if (ptr == nullptr) ptr = take(free_blocks_, size);
  if (ptr == nullptr) {
    try {
      ptr = raw_alloc_(size);
    } catch (const Error&) {
      // Out of memory: give the cache back and try once more before failing.
      release_cached_locked();
      ptr = raw_alloc_(size);
    }
    stats_.reserved_bytes += size;
    stats_.backend_allocs += 1;
  }
  live_[ptr] = size;
  if (capture != 0) pool_of_[ptr] = capture;
  if (host_memory_) {
    HL_UNPOISON(ptr, bytes);
    HL_POISON(static_cast<char*>(ptr) + bytes, size - bytes);  // the rounding slack
  }
  stats_.current_bytes += size;
  if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours: never free what we did not allocate
  stats_.current_bytes -= it->second;
  if (host_memory_) HL_POISON(ptr, it->second);  // cached, not free: any use now is a use after free
  // A pool's block goes back to its pool; while recording, so does any block this thread frees.
  const auto member = pool_of_.find(ptr);
  int owner = member != pool_of_.end() ? member->second : capturing_pool();
  if (owner != 0 && pools_.count(owner) == 0) owner = 0;  // defensive: a released pool owns nothing
  if (owner != 0) {
    pool_of_[ptr] = owner;
    pools_[owner].free_blocks.emplace(it->second, ptr);
  } else {
    free_blocks_.emplace(it->second, ptr);
  }
  live_.erase(it);
}

int CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = next_pool_++;
  pools_[id];
  return id;
}

void CachingAllocator::begin_pool_capture(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  pool(id);  // throws for an unknown pool
  HL_CHECK(t_capture_owner == nullptr, "CachingAllocator::begin_pool_capture: this thread already records into pool ",
           t_capture_pool);
  t_capture_owner = this;
  t_capture_pool = id;
}

void CachingAllocator::end_pool_capture() {
  if (t_capture_owner != this) return;
  t_capture_owner = nullptr;
  t_capture_pool = 0;
}

void CachingAllocator::release_pool(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(id);
  if (it == pools_.end()) return;
  HL_CHECK(capturing_pool() != id, "CachingAllocator::release_pool: pool ", id, " is being recorded into");
  free_blocks_.merge(it->second.free_blocks);
  pools_.erase(it);
  for (auto m = pool_of_.begin(); m != pool_of_.end();) m = m->second == id ? pool_of_.erase(m) : std::next(m);
}

size_t CachingAllocator::pool_cached_bytes(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = pools_.find(id);
  size_t total = 0;
  if (it != pools_.end())
    for (const auto& [size, ptr] : it->second.free_blocks) total += size;
  return total;
}

size_t CachingAllocator::pool_live_bytes(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [ptr, owner] : pool_of_) {
    if (owner != id) continue;
    const auto live = live_.find(ptr);
    if (live != live_.end()) total += live->second;
  }
  return total;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

// A cached block may still be read by a kernel queued before its tensor died. The CUDA backend's
// free is cudaFree, which waits for the device first (runtime.h counts it as a wait), so no block is
// freed under a kernel. Each entry leaves the list before its free: if a free throws, the list holds
// only blocks that are still allocated, never one that was freed.
void CachingAllocator::release_cached_locked() {
  while (!free_blocks_.empty()) {
    const auto [size, ptr] = *free_blocks_.begin();
    free_blocks_.erase(free_blocks_.begin());
    stats_.reserved_bytes -= size;
    if (host_memory_) HL_UNPOISON(ptr, size);
    raw_free_(ptr);
  }
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
}

namespace {
void* host_alloc(size_t bytes) {
  // 64-byte alignment: whole cache lines, and enough for any SIMD load.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw Error(detail::concat("allocate: out of host memory for ", bytes, " bytes"));
  return p;
}
void host_free(void* p) { std::free(p); }
}  // namespace

CachingAllocator& allocator(Device d) {
  // Leaked on purpose: tensors destroyed during static destruction must still find their allocator.
  static CachingAllocator* cpu = new CachingAllocator(host_alloc, host_free, /*host_memory=*/true);
  static CachingAllocator* gpu = new CachingAllocator(runtime::cuda_malloc, runtime::cuda_free);
  return d == Device::cpu ? *cpu : *gpu;
}

MemoryStats memory_stats(Device d) { return allocator(d).stats(); }
void reset_peak_memory(Device d) { allocator(d).reset_peak(); }

// ---- storage -----------------------------------------------------------------------------------------

Storage::Storage(size_t bytes, Device d) : bytes_(bytes), device_(d) {
  HL_CHECK(d == Device::cpu || runtime::cuda_available(), "Storage: cannot allocate ", bytes,
           " bytes on cuda: ", runtime::cuda_unavailable_reason());
  ptr_ = allocator(d).allocate(bytes);
}

Storage::~Storage() { allocator(device_).deallocate(ptr_); }

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::cpu && src_dev == Device::cpu) {
    // memmove: the two may be overlapping views of one storage (Tensor::copy_ between slices of a
    // tensor), where memcpy is undefined behaviour. It costs the same when they do not overlap.
    std::memmove(dst, src, bytes);
    return;
  }
  using runtime::CopyKind;
  const CopyKind kind = dst_dev == Device::cpu   ? CopyKind::device_to_host
                        : src_dev == Device::cpu ? CopyKind::host_to_device
                                                 : CopyKind::device_to_device;
  runtime::cuda_memcpy_async(dst, src, bytes, kind);
  // The host reads (or may free) its side right after: wait. Device-to-device stays asynchronous.
  if (kind != CopyKind::device_to_device) runtime::cuda_synchronize();
}

}  // namespace hl
