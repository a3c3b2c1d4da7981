// Shared by the CPU and CUDA convolution / pooling tests: typed host buffers (typed_buffer.h), the float64 reference
// of each convolution pass (with the sum of |terms| per output for the per-element error bound), and
// the shapes the issue asks for (N = 1, C = 1 and 3, odd H/W, stride 2, padding 0/1/2, K not a
// multiple of 16, kernels 1/3/5, per-dimension stride and padding).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/half.h"
#include "tests/kernels/typed_buffer.h"

namespace hl::test {

struct ConvShape {
  int64_t N, C, H, W, K, R, S, sh, sw, ph, pw;
  // ostringstream rather than chained operator+: g++ 12 raises a false -Wrestrict on the latter.
  std::string str() const {
    std::ostringstream os;
    os << "N" << N << "_C" << C << "_H" << H << "_W" << W << "_K" << K << "_R" << R << "_S" << S << "_st" << sh << "x"
       << sw << "_pad" << ph << "x" << pw;
    return os.str();
  }
  kernels::ConvArgs args() const {
    kernels::ConvArgs a;
    a.N = N, a.C = C, a.H = H, a.W = W, a.K = K, a.R = R, a.S = S;
    a.stride_h = sh, a.stride_w = sw, a.pad_h = ph, a.pad_w = pw;
    return a;
  }
};

inline const std::vector<ConvShape>& conv_test_shapes() {
  static const std::vector<ConvShape> shapes = {
      {1, 1, 5, 5, 3, 3, 3, 1, 1, 0, 0},     // N = 1, C = 1, no padding
      {2, 3, 7, 9, 5, 3, 3, 2, 2, 1, 1},     // C = 3, odd H/W, stride 2
      {3, 4, 6, 5, 17, 5, 5, 1, 1, 2, 2},    // K = 17, 5x5 with padding 2
      {2, 3, 8, 8, 20, 1, 1, 1, 1, 0, 0},    // 1x1
      {1, 2, 9, 7, 6, 3, 5, 2, 1, 2, 1},     // per-dimension kernel, stride and padding
      {2, 5, 11, 11, 18, 5, 5, 2, 2, 2, 2},  // 5x5, stride 2, padding 2
      {1, 1, 28, 28, 4, 5, 5, 1, 1, 2, 2},   // LeNet's first layer, small K
  };
  return shapes;
}

// The float64 result of a pass (before the epilogue) and the sum of |terms| of each output.
struct ConvRef {
  std::vector<double> value, magnitude;
  int64_t terms = 0;  // the most products one output sums
};

inline ConvRef conv_reference(const kernels::ConvArgs& a, kernels::ConvPass pass, const std::vector<double>& x,
                              const std::vector<double>& w, const std::vector<double>& dy) {
  const int64_t P = a.P(), Q = a.Q();
  ConvRef r;
  size_t n_out = 0;
  switch (pass) {
    case kernels::ConvPass::forward: n_out = a.N * a.K * P * Q, r.terms = a.C * a.R * a.S; break;
    case kernels::ConvPass::backward_data: n_out = a.N * a.C * a.H * a.W, r.terms = a.K * a.R * a.S; break;
    case kernels::ConvPass::backward_weight: n_out = a.K * a.C * a.R * a.S, r.terms = a.N * P * Q; break;
  }
  r.value.assign(n_out, 0.0);
  r.magnitude.assign(n_out, 0.0);
  // One loop nest over every (n, k, p, q, c, r, s) product: each pass adds it to a different output.
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t c = 0; c < a.C; ++c)
            for (int64_t rr = 0; rr < a.R; ++rr)
              for (int64_t s = 0; s < a.S; ++s) {
                const int64_t h = p * a.stride_h - a.pad_h + rr, ww = q * a.stride_w - a.pad_w + s;
                if (h < 0 || h >= a.H || ww < 0 || ww >= a.W) continue;
                const size_t xi = ((n * a.C + c) * a.H + h) * a.W + ww;
                const size_t wi = ((k * a.C + c) * a.R + rr) * a.S + s;
                const size_t yi = ((n * a.K + k) * P + p) * Q + q;
                double t = 0;
                size_t o = 0;
                switch (pass) {
                  case kernels::ConvPass::forward: t = x[xi] * w[wi], o = yi; break;
                  case kernels::ConvPass::backward_data: t = dy[yi] * w[wi], o = xi; break;
                  case kernels::ConvPass::backward_weight: t = dy[yi] * x[xi], o = wi; break;
                }
                r.value[o] += t;
                r.magnitude[o] += std::fabs(t);
              }
  return r;
}

}  // namespace hl::test
