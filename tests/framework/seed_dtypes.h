// A check shared by the op tests: backward(seed) takes a seed of any floating dtype, so each op's
// backward must convert g to the dtype its kernels read before handing it to them.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace hl::test {

// For each named op: x's gradient under y = op(x) seeded in f64 and in f16 equals the gradient under
// an f32 seed of the same values. The seed holds 1, 2, 3 in turn (small integers, exact in every
// dtype; not all equal, or a batch-norm gradient would be 0 everywhere). x keeps its own dtype's
// gradient whatever the seed's.
inline void expect_seed_dtype_does_not_matter(
    const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>& ops, const Tensor& x0) {
  for (const auto& [name, op] : ops) {
    const auto grad_with = [&, &op = op, &name = name](DType seed_t) {
      Tensor x = x0.clone().requires_grad_();
      const Tensor y = op(x);
      std::vector<float> v(static_cast<size_t>(y.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(1 + i % 3);
      y.backward(Tensor::from_vector(v, y.shape(), seed_t));
      EXPECT_EQ(x.grad().dtype(), x0.dtype()) << name;
      return x.grad().to_double();
    };
    const std::vector<double> want = grad_with(DType::f32);
    EXPECT_EQ(grad_with(DType::f64), want) << name;
    EXPECT_EQ(grad_with(DType::f16), want) << name;
  }
}

}  // namespace hl::test
