// The runtime of a CPU-only build (-DHALFLING_CUDA=OFF): there is never a GPU, and every CUDA entry
// point explains how to get one instead of failing obscurely. It throws where a CUDA build without a
// GPU throws too (kernels/runtime.h lists the calls that answer instead), so that a CPU path that
// calls one by mistake fails in CPU-only CI as it would on a CUDA build, not only there.
#include "kernels/error.h"
#include "kernels/runtime.h"

namespace hl::runtime {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(detail::concat(what, ": halfling was built without CUDA (configure with -DHALFLING_CUDA=ON "
                                   "on a machine with the CUDA toolkit)"));
}
}  // namespace

bool cuda_compiled() { return false; }
bool cuda_available() { return false; }
std::string cuda_unavailable_reason() { return "halfling was built without CUDA (-DHALFLING_CUDA=OFF)"; }
std::string cuda_device_description() { no_cuda("cuda_device_description"); }
int cuda_compute_capability() { return 0; }
int cuda_sm_count() { return 0; }
int cuda_max_shared_memory_per_block() { return 0; }
void* cuda_malloc(size_t) { no_cuda("cuda_malloc"); }
void cuda_free(void* ptr) {
  if (ptr != nullptr) no_cuda("cuda_free");  // nothing here ever allocated it
}
void* cuda_host_alloc(size_t) { no_cuda("cuda_host_alloc"); }
void cuda_host_free(void* ptr) {
  if (ptr != nullptr) no_cuda("cuda_host_free");
}
void cuda_memcpy_async(void*, const void*, size_t, CopyKind) { no_cuda("cuda_memcpy_async"); }
void cuda_memset_async(void*, int, size_t) { no_cuda("cuda_memset_async"); }
void cuda_synchronize() { no_cuda("cuda_synchronize"); }
int64_t cuda_sync_count() { return 0; }
void* cuda_stream() { no_cuda("cuda_stream"); }
void* cuda_event_create() { no_cuda("cuda_event_create"); }
void cuda_event_destroy(void* event) {
  if (event != nullptr) no_cuda("cuda_event_destroy");
}
void cuda_event_record(void*) { no_cuda("cuda_event_record"); }
void cuda_event_synchronize(void*) { no_cuda("cuda_event_synchronize"); }
bool cuda_event_query(void*) { no_cuda("cuda_event_query"); }
void* cuda_timing_event_create() { no_cuda("cuda_timing_event_create"); }
float cuda_event_elapsed_ms(void*, void*) { no_cuda("cuda_event_elapsed_ms"); }
void cuda_capture_begin() { no_cuda("cuda_capture_begin"); }
void* cuda_capture_end() { no_cuda("cuda_capture_end"); }
void cuda_capture_abort() noexcept {}  // noexcept, and no recording can be open
bool cuda_capturing() { return false; }
void cuda_graph_launch(void*) { no_cuda("cuda_graph_launch"); }
void cuda_graph_destroy(void*) noexcept {}  // noexcept, and cuda_capture_end never made one
int64_t cuda_free_count() { return 0; }
// The framework's allocator registers its cache on every build (framework/device.cpp); without a
// device nothing is cached to give back.
CachedBlocksRelease cuda_set_cached_blocks_release(CachedBlocksRelease) { return nullptr; }
void cuda_release_cached_blocks() {}
void cuda_release_scratch() {}

}  // namespace hl::runtime
