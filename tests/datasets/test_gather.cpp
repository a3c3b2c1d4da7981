// gather_rows (kernels/gather.h), the DataLoader's batch kernel: the CPU reference against a plain
// loop, every dtype pair, out-of-range indices; the CUDA kernel against the CPU one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "framework/tensor.h"
#include "kernels/gather.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

using kernels::GatherArgs;

std::vector<int32_t> random_indices(int64_t rows, int64_t src_rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(rows));
  for (auto& i : idx) i = static_cast<int32_t>(rng() % static_cast<uint64_t>(src_rows));
  return idx;
}

TEST(GatherRows, CpuEveryDtypePair) {
  const uint64_t seed = fresh_seed();
  const int64_t src_rows = 37, cols = 19, rows = 23;
  const std::vector<int32_t> idx = random_indices(rows, src_rows, seed);
  for (DType from : {DType::f32, DType::f16, DType::f64})
    for (DType to : {DType::f32, DType::f16, DType::f64}) {
      std::vector<double> v = random_values(static_cast<size_t>(src_rows * cols), seed + 1, -3, 3, from);
      // A value that rounds to f16 differently once than through f32 first (1 + 2^-11 + 2^-40: f32 drops
      // the 2^-40, leaving a tie that rounds to even, 1; once, it rounds up to 1 + 2^-10), in a row the
      // gather takes: random values in [-3, 3] show a double rounding in about 4% of runs.
      if (from == DType::f64) v[static_cast<size_t>(idx[0]) * static_cast<size_t>(cols)] = 1 + 0x1p-11 + 0x1p-40;
      const Tensor src = Tensor::from_vector(v, {src_rows, cols}, from);
      Tensor dst = Tensor::full({rows + 1, cols}, NAN, to);  // poisoned, with a guard row past the end
      kernels::gather_rows(DeviceType::cpu, {src.data_ptr(), from, src_rows, cols, idx.data(), rows, dst.data_ptr(), to});
      const std::vector<double> out = dst.to_double();
      for (int64_t k = 0; k < cols; ++k) {
        ASSERT_TRUE(std::isnan(out[static_cast<size_t>(rows * cols + k)])) << "gather_rows wrote past its rows, "
                                                                          << dtype_name(from) << "->" << dtype_name(to);
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) {
          const double want = Tensor::from_vector(std::vector<double>{v[static_cast<size_t>(idx[static_cast<size_t>(r)] * cols + k)]}, {1}, DType::f64)
                                  .to(to)
                                  .to_double()[0];
          ASSERT_EQ(out[static_cast<size_t>(r * cols + k)], want) << dtype_name(from) << "->" << dtype_name(to);
        }
    }
}

TEST(GatherRows, CpuI32AndErrors) {
  const std::vector<int32_t> src = {10, 11, 12, 13, 14, 15};  // 3 rows of 2
  const std::vector<int32_t> idx = {2, 0, 2};
  std::vector<int32_t> dst(6, -1);
  kernels::gather_rows(DeviceType::cpu, {src.data(), DType::i32, 3, 2, idx.data(), 3, dst.data(), DType::i32});
  EXPECT_EQ(dst, (std::vector<int32_t>{14, 15, 10, 11, 14, 15}));
  const std::vector<int32_t> bad = {0, 3};
  EXPECT_HL_ERROR(kernels::gather_rows(DeviceType::cpu, {src.data(), DType::i32, 3, 2, bad.data(), 2, dst.data(), DType::i32}),
                  "gather_rows", "index 3 at position 1");
  const std::vector<int32_t> first_bad = {-1, 0};  // the first position is checked too, and so is below 0
  EXPECT_HL_ERROR(kernels::gather_rows(DeviceType::cpu,
                                       {src.data(), DType::i32, 3, 2, first_bad.data(), 2, dst.data(), DType::i32}),
                  "gather_rows", "index -1 at position 0 is out of range for 3 rows");
  float f[6];
  EXPECT_HL_ERROR(kernels::gather_rows(DeviceType::cpu, {src.data(), DType::i32, 3, 2, idx.data(), 3, f, DType::f32}),
                  "gather_rows", "i32");
}

// Empty gathers (no rows, empty rows, an empty source with nothing to gather) do nothing, whatever
// the pointers; a negative size is refused, named.
TEST(GatherRows, EmptyGathersAreNoOpsAndNegativeSizesAreRefused) {
  const std::vector<int32_t> src = {10, 11, 12, 13, 14, 15};  // 3 rows of 2
  const std::vector<int32_t> idx = {2, 0, 2};
  std::vector<int32_t> dst(6, -1);
  const auto gather = [](const int32_t* from, int64_t src_rows, int64_t elems, const int32_t* at, int64_t rows,
                         int32_t* to) {
    kernels::gather_rows(DeviceType::cpu, {from, DType::i32, src_rows, elems, at, rows, to, DType::i32});
  };
  EXPECT_NO_THROW(gather(nullptr, 0, 4, nullptr, 0, nullptr));
  EXPECT_NO_THROW(gather(src.data(), 3, 2, idx.data(), 0, nullptr));
  EXPECT_NO_THROW(gather(src.data(), 3, 0, idx.data(), 3, dst.data()));
  EXPECT_EQ(dst, std::vector<int32_t>(6, -1)) << "an empty row writes nothing";
  EXPECT_HL_ERROR(gather(src.data(), -1, 2, idx.data(), 3, dst.data()),
                  "gather_rows: negative size (src_rows -1, row_elems 2, rows 3)");
  EXPECT_HL_ERROR(gather(src.data(), 3, -2, idx.data(), 3, dst.data()), "negative size (src_rows 3, row_elems -2, rows 3)");
  EXPECT_HL_ERROR(gather(src.data(), 3, 2, idx.data(), -3, dst.data()), "negative size (src_rows 3, row_elems 2, rows -3)");
}

TEST(GatherRows, CudaMatchesCpu) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  const int64_t src_rows = 1000, cols = 3 * 32 * 32 + 7, rows = 257;
  const std::vector<int32_t> idx = random_indices(rows, src_rows, seed);
  const Tensor idx_dev = Tensor::from_vector(idx, {rows}, Device::cuda);
  for (DType from : {DType::f32, DType::f16})
    for (DType to : {DType::f32, DType::f16}) {
      const std::vector<double> v = random_values(static_cast<size_t>(src_rows * cols), seed + 2, -5, 5, from);
      const Tensor src = Tensor::from_vector(v, {src_rows, cols}, from);
      Tensor want = Tensor::empty({rows, cols}, to);
      kernels::gather_rows(DeviceType::cpu, {src.data_ptr(), from, src_rows, cols, idx.data(), rows, want.data_ptr(), to});
      const Tensor src_dev = src.to(Device::cuda);
      Tensor got = Tensor::full({rows, cols}, NAN, to, Device::cuda);
      kernels::gather_rows(DeviceType::cuda, {src_dev.data_ptr(), from, src_rows, cols, idx_dev.data<int32_t>(), rows,
                                              got.data_ptr(), to});
      EXPECT_EQ(got.to_double(), want.to_double()) << dtype_name(from) << "->" << dtype_name(to);
    }
  // Labels: i32 exactly.
  std::vector<int32_t> labels(static_cast<size_t>(src_rows));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i * 7919 % 100003);
  const Tensor lab = Tensor::from_vector(labels, {src_rows}, Device::cuda);
  Tensor out = Tensor::zeros({rows}, DType::i32, Device::cuda);
  kernels::gather_rows(DeviceType::cuda, {lab.data_ptr(), DType::i32, src_rows, 1, idx_dev.data<int32_t>(), rows,
                                          out.data_ptr(), DType::i32});
  const auto y = out.to_int();
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(y[static_cast<size_t>(r)], labels[static_cast<size_t>(idx[static_cast<size_t>(r)])]);
}

}  // namespace
}  // namespace hl::test
