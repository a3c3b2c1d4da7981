#include "framework/device.h"

#include <algorithm>
#include <bit>
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

// The one notice per process of DESIGN.md §2: a CUDA build that finds no usable GPU falls back to the
// CPU and says why, whether the GPU was asked for ("cuda") or only preferred ("auto"): a broken driver
// must not pass for a machine without a GPU. A CPU-only build says nothing for "auto" (it has no GPU to
// miss).
static void fall_back_to_the_cpu(const char* asked) {
  static bool told = false;
  if (told) return;
  told = true;
  std::cerr << "halfling: CUDA " << asked << " but unavailable (" << runtime::cuda_unavailable_reason()
            << "); running on the CPU\n";
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "auto") {
    if (runtime::cuda_available()) return Device::cuda;
    if (runtime::cuda_compiled()) fall_back_to_the_cpu("preferred (--device auto)");
    return Device::cpu;
  }
  if (name == "cuda" || name == "gpu") {
    if (runtime::cuda_available()) return Device::cuda;
    fall_back_to_the_cpu("requested");
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
  // 2^k < bytes <= 2^(k+1): round up to a multiple of 2^(k-2), which gives 2^k times 1.25, 1.5, 1.75
  // or 2. Each size maps to one class, so the cache's exact-size lookup still finds reusable blocks.
  const int k = std::bit_width(bytes - 1) - 1;
  const size_t step = size_t(1) << (k - 2);
  size_t rounded = 0;
  // Past 1.75 * 2^63 the class would be 2^64, which size_t cannot hold (and no device has).
  HL_CHECK(!__builtin_add_overflow(bytes, step - 1, &rounded), "CachingAllocator: cannot allocate ", bytes,
           " bytes: larger than any memory (the largest block this allocator can describe is ",
           (size_t(7) << 61), " bytes)");
  return rounded & ~(step - 1);
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

namespace {
// "4096 bytes", or "1048577 bytes (1 MiB), a block of 1310720 bytes with the allocator's rounding".
std::string request_text(size_t bytes, size_t size) {
  std::string text = detail::concat(bytes, " bytes");
  if (bytes >= (size_t(1) << 20)) text += detail::concat(" (", static_cast<double>(bytes) / double(1 << 20), " MiB)");
  if (size != bytes) text += detail::concat(", a block of ", size, " bytes with the allocator's rounding");
  return text;
}
}  // namespace

void* CachingAllocator::backend_allocate_locked(size_t bytes, size_t size, bool recording) {
  std::string first;
  try {
    return raw_alloc_(size);
  } catch (const Error& e) {
    first = e.what();
  }
  // A recording cannot free: cudaFree waits for the device, and runtime::cuda_free refuses it while
  // the thread records. Freeing the cache here would throw that refusal instead of this error, and
  // lose the block it took out of the cache.
  if (recording) {
    throw Error(detail::concat("CachingAllocator: out of memory for ", request_text(bytes, size),
                               " while this thread records a CUDA graph (framework/cuda_graph.h), where the ",
                               "cached blocks cannot go back to the device; a step run once without the graph "
                               "first leaves the memory it needs in the cache: ", first));
  }
  // Out of memory: give the cache (and the caches elsewhere) back and try once more before failing.
  release_cached_locked();
  if (release_elsewhere_ != nullptr) release_elsewhere_();
  try {
    return raw_alloc_(size);
  } catch (const Error& e) {
    throw Error(detail::concat("CachingAllocator: out of memory for ", request_text(bytes, size),
                               ", with every cached block given back: ", e.what()));
  }
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
    ptr = backend_allocate_locked(bytes, size, capture != 0);
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
  // Not a live block: never free what we did not allocate. This also ignores a second free of the same
  // pointer, without an error: Storage, halfling's one caller, frees each block once, and its destructor
  // must not throw. The public API's misuse goes unseen: a stale pointer whose block was handed out
  // again in between cannot be told from the new owner's, and would free that block under it.
  if (it == live_.end()) return;
  stats_.current_bytes -= it->second;
  if (host_memory_) HL_POISON(ptr, it->second);  // cached, not free: any use now is a use after free
  // A pool's block goes back to its pool; while recording, so does any block this thread frees.
  const auto member = pool_of_.find(ptr);
  const int capture = capturing_pool();
  int owner = member != pool_of_.end() ? member->second : capture;
  if (owner != 0 && pools_.count(owner) == 0) owner = 0;  // defensive: a released pool owns nothing
  if (owner != 0) {
    pool_of_[ptr] = owner;
    // Another pool's block, freed by this recording, which may have read it: both graphs address it
    // now. It stays its owner's, and release_pool hands it to this pool instead of to everyone.
    if (capture != 0 && capture != owner) {
      std::vector<int>& sharers = shared_with_[ptr];
      if (std::find(sharers.begin(), sharers.end(), capture) == sharers.end()) sharers.push_back(capture);
    }
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
  // The pool that inherits a block of this one: another live pool whose recording freed it (deallocate),
  // so whose graph still addresses it; 0 when none, and the block becomes ordinary.
  const auto heir = [&](void* ptr) {
    const auto s = shared_with_.find(ptr);
    if (s == shared_with_.end()) return 0;
    for (int other : s->second)
      if (other != id) return other;  // the list holds live pools only (pruned below at each release)
    return 0;
  };
  for (const auto& [size, ptr] : it->second.free_blocks) {
    const int to = heir(ptr);
    if (to != 0) {
      pools_[to].free_blocks.emplace(size, ptr);
      pool_of_[ptr] = to;
    } else {
      free_blocks_.emplace(size, ptr);
      pool_of_.erase(ptr);
    }
  }
  pools_.erase(it);
  for (auto m = pool_of_.begin(); m != pool_of_.end();) {
    if (m->second != id) {
      ++m;
    } else if (const int to = heir(m->first); to != 0) {
      (m++)->second = to;
    } else {
      m = pool_of_.erase(m);
    }
  }
  // Forget this pool as a sharer, and each block's sharing with the pool that now owns it.
  for (auto s = shared_with_.begin(); s != shared_with_.end();) {
    const auto owner = pool_of_.find(s->first);
    std::erase_if(s->second, [&](int p) { return p == id || (owner != pool_of_.end() && p == owner->second); });
    s = s->second.empty() || owner == pool_of_.end() ? shared_with_.erase(s) : std::next(s);
  }
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
// freed under a kernel. Each entry leaves the list (and reserved_bytes) only once its free returned: a
// free that throws did not free (runtime::cuda_free refuses before calling cudaFree, and a failed
// cudaFree keeps the memory), so the block stays cached and counted, and a later release frees it.
void CachingAllocator::release_cached_locked() {
  while (!free_blocks_.empty()) {
    const auto first = free_blocks_.begin();
    const auto [size, ptr] = *first;
    if (host_memory_) HL_UNPOISON(ptr, size);
    try {
      raw_free_(ptr);
    } catch (...) {
      if (host_memory_) HL_POISON(ptr, size);
      throw;
    }
    free_blocks_.erase(first);
    stats_.reserved_bytes -= size;
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

namespace {
// Registered with the runtime: a kernel's scratch buffer that cannot grow asks for the cache back.
void release_gpu_cache() { allocator(Device::cuda).release_cached(); }
}  // namespace

CachingAllocator& allocator(Device d) {
  // Leaked on purpose: tensors destroyed during static destruction must still find their allocator.
  static CachingAllocator* cpu = new CachingAllocator(host_alloc, host_free, /*host_memory=*/true);
  // The kernels' scratch buffers (kernels/cuda/scratch.cuh) and this cache each give their unused
  // memory back when the other runs out (kernels/runtime.h).
  static CachingAllocator* gpu = [] {
    auto* a = new CachingAllocator(runtime::cuda_malloc, runtime::cuda_free, /*host_memory=*/false,
                                   runtime::cuda_release_scratch);
    runtime::cuda_set_cached_blocks_release(release_gpu_cache);
    return a;
  }();
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
