// GEMM reference point: "cublas" — NVIDIA's cuBLAS (cublasGemmEx), the bar every rung is measured
// against in bench/gemm_bench and tutorial 04. It is not a rung of the ladder: it is registered with
// the lowest priority, so it runs only when asked for by name (--gemm cublas, HALFLING_GEMM=cublas).
//
// Precision as in the ladder (paper §3.3): FP16 inputs with CUBLAS_COMPUTE_32F (FP32 accumulation,
// Tensor Cores allowed), and f32 inputs with CUBLAS_COMPUTE_32F too (plain FP32, no TF32 rounding,
// so that it is compared like for like with smem_tiled).
//
// Layout: cuBLAS is column-major. A row-major M x N matrix C with row stride ldc is, read
// column-major, the N x M matrix C^T with the same leading dimension. So we ask cuBLAS for
// C^T = op(B)^T * op(A)^T: the first operand is B (transposed exactly when op_b == T), the second A
// (transposed when op_a == T), with the sizes N, M, K and the leading dimensions unchanged.
//
// Epilogue: cublasGemmEx computes alpha * op(A) op(B) + beta * C only. With a bias or ReLU, or for
// f32 inputs into an f16 C (a combination cublasGemmEx does not offer), cuBLAS writes
// alpha * op(A) op(B) into an FP32 workspace and a small kernel here applies beta * C, the bias and
// ReLU and rounds once into C (the split-K rungs' second pass, split_k.cu, with one slice) — so the
// result is rounded exactly once, as in the ladder.
//
// Loading: cuBLAS is opened on first use (dlopen), not linked. libcublas brings libcublasLt, 540 MB in
// CUDA 13, whose loading took about 0.4 s in every process that linked it (measured on the development
// machine, 2026-11-27: an empty program linked against it runs 0.41-0.53 s, against 0.00 s), and every
// test, tutorial and benchmark links halfling, while only this variant calls cuBLAS: in CI that was
// most of a test's start-up, 785 times over.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/gemm.h"
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

namespace {

// The four cuBLAS functions this variant calls, found in the library at run time. The types come
// from cublas_api.h (decltype's operand is not evaluated, so naming a function there does not link it).
// cublasGemmEx is overloaded in C++ (an inline wrapper takes the old cudaDataType compute type): the
// cast picks the exported one, and fails to compile if its signature ever changes.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(std::is_same_v<decltype(static_cast<GemmExFn>(&cublasGemmEx)), GemmExFn>);

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  GemmExFn gemm_ex;
  decltype(&cublasGetStatusString) status_string;
};

// dlopen's reason for the last failure, or "" (and clears it).
std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "";
}

// libcublas.so.<major> of the headers this was compiled with: where the loader looks for libraries
// (LD_LIBRARY_PATH, halfling's own run path, the system's cache), then next to the CUDA runtime this
// process loaded, where every toolkit installs cuBLAS too.
CublasApi load_cublas() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string tried = name + " (" + dl_error() + ")";
  if (lib == nullptr) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) != 0 && info.dli_fname != nullptr) {
      std::string path = info.dli_fname;
      path = path.substr(0, path.find_last_of('/') + 1) + name;
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      tried += ", " + path + " (" + dl_error() + ")";
    }
  }
  HL_CHECK(lib != nullptr, "gemm cublas: cannot load cuBLAS: tried ", tried,
           ". Only the cublas variant (the benchmarks' reference) needs it; install the CUDA toolkit's cuBLAS or "
           "add its folder to LD_LIBRARY_PATH");
  const auto symbol = [&](const char* fn) {
    void* p = dlsym(lib, fn);
    HL_CHECK(p != nullptr, "gemm cublas: ", name, " has no ", fn, " (", dl_error(), ")");
    return p;
  };
  CublasApi api{};
  api.create = reinterpret_cast<decltype(api.create)>(symbol("cublasCreate_v2"));
  api.set_stream = reinterpret_cast<decltype(api.set_stream)>(symbol("cublasSetStream_v2"));
  api.gemm_ex = reinterpret_cast<GemmExFn>(symbol("cublasGemmEx"));
  api.status_string = reinterpret_cast<decltype(api.status_string)>(symbol("cublasGetStatusString"));
  return api;  // the library stays open for the life of the process
}

// Loaded once; a failed load throws and is tried again at the next call.
const CublasApi& cublas() {
  static const CublasApi api = load_cublas();
  return api;
}

#define HL_CUBLAS_CHECK(call)                                                                            \
  do {                                                                                                   \
    const cublasStatus_t hl_cublas_status_ = (call);                                                     \
    if (hl_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      throw ::hl::Error(::hl::detail::concat("gemm cublas: ", #call, " failed at ", __FILE__, ":", __LINE__, \
                                             ": ", cublas().status_string(hl_cublas_status_)));          \
    }                                                                                                    \
  } while (0)

// One handle for the process, created on first use. It is never destroyed: destroying it from a
// static destructor can run after the CUDA runtime has shut down.
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    HL_CUBLAS_CHECK(cublas().create(&created));
    return created;
  }();
  return h;
}

// The FP32 workspace for the epilogue path, grown on demand and kept (for the same reason).
Scratch& workspace() {
  static Scratch* ws = new Scratch();
  return *ws;
}

cudaDataType_t cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : CUDA_R_32F; }

void gemm_ex(const GemmArgs& g, void* C, DType c_type, int64_t ldc, float beta) {
  const float alpha = g.alpha;
  HL_CUBLAS_CHECK(cublas().gemm_ex(handle(), g.op_b == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T,
                               g.op_a == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T, static_cast<int>(g.N),
                               static_cast<int>(g.M), static_cast<int>(g.K), &alpha, g.B, cuda_type(g.ab_type),
                               static_cast<int>(g.ldb), g.A, cuda_type(g.ab_type), static_cast<int>(g.lda), &beta, C,
                               cuda_type(c_type), static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void run(const GemmArgs& g) {
  HL_CUBLAS_CHECK(cublas().set_stream(handle(), stream()));
  const bool direct = g.bias == nullptr && !g.relu && !(g.ab_type == DType::f32 && g.c_type == DType::f16);
  if (direct) {
    // beta == 0: cuBLAS does not read C (documented), so a NaN-filled C is fine.
    gemm_ex(g, g.C, g.c_type, g.ldc, g.beta);
    return;
  }
  Scratch& ws = workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);  // held until both launches are queued
  float* W = static_cast<float*>(ws.reserve(static_cast<size_t>(g.M * g.N) * sizeof(float)));
  gemm_ex(g, W, DType::f32, g.N, 0.0f);
  // W holds alpha * op(A) op(B): the split-K pass with one slice applies beta, bias and ReLU and
  // rounds once into C (gemm_common.cuh).
  GemmArgs unit = g;
  unit.alpha = 1.0f;
  gemm_detail::split_k_reduce(unit, W, 1);
}

const char* unsupported(const GemmArgs& g) {
  if (const char* why = gemm_detail::unsupported_dtypes(g)) return why;
  constexpr int64_t kIntMax = 2147483647;  // cuBLAS takes int sizes and leading dimensions
  if (g.M > kIntMax || g.N > kIntMax || g.K > kIntMax || g.lda > kIntMax || g.ldb > kIntMax || g.ldc > kIntMax)
    return "cuBLAS takes 32-bit sizes and leading dimensions";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"cublas", DeviceType::cuda, 0,
                               "NVIDIA cuBLAS (cublasGemmEx, FP32 compute): the reference point, not a rung", run,
                               unsupported});

}  // namespace hl::kernels::cuda
