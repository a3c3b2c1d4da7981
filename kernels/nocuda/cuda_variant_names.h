// The names of the CUDA variants that a CUDA build registers, per registry family, for the builds that
// register none (-DHALFLING_CUDA=OFF). A tutorial's command or an exported variable may name a GPU
// variant (`--device cuda --gemm wmma_pipelined`, HALFLING_GEMM=wmma_pipelined) on a machine that runs
// on the CPU: such a name is ignored there (kernels/registry.h), while a name no build has is a typo
// and an error. Without this list a CPU-only build could not tell the two apart.
//
// tests/kernels/test_registry.cpp (Registry.CudaVariantNamesMatchTheRegistrations) checks in every CUDA
// build that these lists hold exactly the registered CUDA variants: a new rung adds its name here.
#pragma once
#include <algorithm>
#include <string_view>
#include <vector>

namespace hl::kernels {

// The CUDA variant names of `family` (a registry's Args::family: "gemm", "softmax", "conv", "bn");
// empty for any other family. (A vector, not a std::span: the .cu files that include this through
// kernels/registry.h are C++17.)
inline const std::vector<std::string_view>& cuda_variant_names(std::string_view family) {
  static const std::vector<std::string_view> gemm = {
      "wgmma_tma_split_k", "wgmma_tma", "wgmma", "wmma_pipelined_split_k", "wmma_pipelined", "mma_sync",
      "wmma_smem", "wmma", "smem_tiled_split_k", "smem_tiled", "naive", "cublas"};
  static const std::vector<std::string_view> softmax = {
      "fused_xent", "warp_row", "register_warp", "packed_warp", "register_row", "packed_row", "cluster_row",
      "packed_online", "packed_kept", "block_row", "online", "naive", "naive_fp16_nomax"};
  static const std::vector<std::string_view> conv = {"implicit_gemm_nhwc_wgrad", "implicit_gemm_nhwc",
                                                      "implicit_gemm_table", "implicit_gemm_wmma", "im2col_gemm",
                                                      "direct"};
  static const std::vector<std::string_view> bn = {"split", "per_channel"};
  static const std::vector<std::string_view> none;
  if (family == "gemm") return gemm;
  if (family == "softmax") return softmax;
  if (family == "conv") return conv;
  if (family == "bn") return bn;
  return none;
}

inline bool is_cuda_variant_name(std::string_view family, std::string_view name) {
  const auto& names = cuda_variant_names(family);
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace hl::kernels
