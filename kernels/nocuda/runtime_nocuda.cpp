// The runtime of a CPU-only build (-DHALFLING_CUDA=OFF): there is never a GPU, and every CUDA entry
// point explains how to get one instead of failing obscurely.
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
void cuda_free(void*) {}
void* cuda_host_alloc(size_t) { no_cuda("cuda_host_alloc"); }
void cuda_host_free(void*) {}
void cuda_memcpy_async(void*, const void*, size_t, CopyKind) { no_cuda("cuda_memcpy_async"); }
void cuda_memset_async(void*, int, size_t) { no_cuda("cuda_memset_async"); }
void cuda_synchronize() {}
int64_t cuda_sync_count() { return 0; }
void* cuda_stream() { return nullptr; }
void* cuda_event_create() { no_cuda("cuda_event_create"); }
void cuda_event_destroy(void*) {}
void cuda_event_record(void*) { no_cuda("cuda_event_record"); }
void cuda_event_synchronize(void*) {}
bool cuda_event_query(void*) { return true; }
void* cuda_timing_event_create() { no_cuda("cuda_timing_event_create"); }
float cuda_event_elapsed_ms(void*, void*) { no_cuda("cuda_event_elapsed_ms"); }
void cuda_capture_begin() { no_cuda("cuda_capture_begin"); }
void* cuda_capture_end() { no_cuda("cuda_capture_end"); }
void cuda_capture_abort() noexcept {}
bool cuda_capturing() { return false; }
void cuda_graph_launch(void*) { no_cuda("cuda_graph_launch"); }
void cuda_graph_destroy(void*) noexcept {}
int64_t cuda_free_count() { return 0; }

}  // namespace hl::runtime
