// The address arithmetic of the NHWC implicit-GEMM convolution (kernels/cuda/conv/implicit_gemm_nhwc.h),
// checked on the CPU, so it is exercised on every build, with or without a GPU.
//
// The kernels in implicit_gemm_nhwc.cu copy the gathered tensor to NHWC (nhwc_source) and the weights
// to [M][R][S][C] (weight_source), then fill each stage of their ring with tile_vec's thread-to-vector
// map, weight_index and gather_index, and write the output through make_column / output_index. Here
// the same functions fill the same tiles, block by block, K step by K step and thread by thread, and
// float64 products stand in for the Tensor Cores. The result must equal the float64 CPU reference of
// the pass (forward, and backward_data as a convolution of dy with the flipped, transposed weights),
// every output element must be written exactly once, every 16-byte copy must start on a 16-byte
// boundary and stay inside its tensor (std::vector::at throws otherwise), and every slot of a tile
// must be filled (they start as NaN). What this cannot check is the cp.async ring, the WMMA
// fragments and the barriers: tests/kernels/test_conv_cuda.cpp does that on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cuda/conv/implicit_gemm_nhwc.h"
#include "tests/kernels/conv_reference.h"
#include "tests/kernels/tile_emulation.h"

namespace hl {
namespace {

using kernels::ConvArgs;
using kernels::ConvPass;
namespace nh = kernels::cuda::nhwc;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using test::ConvShape;

// The rung's own shapes: the gathered channel count (C forward, K backward_data) a multiple of 32.
// Several row tiles (K or C > 128), several column tiles with a partial last one, odd H/W, padding
// 0/1/2, strides 1 and 2 (forward), kernels 1/3/5 and 3x5, and the VGG-small and LeNet layers.
const std::vector<ConvShape> kShapes = {
    {2, 32, 7, 9, 32, 3, 3, 1, 1, 1, 1},     {1, 64, 9, 7, 160, 3, 3, 1, 1, 0, 0},
    {2, 32, 11, 6, 64, 5, 5, 1, 1, 2, 2},    {3, 96, 5, 5, 32, 1, 1, 1, 1, 0, 0},
    {2, 32, 9, 8, 96, 3, 5, 1, 1, 1, 2},     {2, 160, 6, 6, 64, 3, 3, 1, 1, 1, 1},
    {2, 32, 13, 13, 64, 3, 3, 2, 2, 1, 1},   {1, 64, 10, 9, 32, 5, 5, 2, 1, 2, 0},
    {3, 128, 8, 8, 128, 3, 3, 1, 1, 1, 1},   // VGG-small's 128-channel layer (at 8 x 8)
    {2, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2},   // LeNet's second layer
};

ConvArgs args_for(const ConvShape& s, ConvPass pass) {
  ConvArgs a = s.args();
  a.pass = pass;
  return a;
}

// The float64 CPU reference of one pass: forward on (x, w), backward_data on (dy, w).
std::vector<double> reference(const ConvArgs& a, const std::vector<double>& in, const std::vector<double>& w) {
  const bool bwd = a.pass == ConvPass::backward_data;
  return test::conv_reference(a, a.pass, bwd ? std::vector<double>{} : in, w, bwd ? in : std::vector<double>{}).value;
}

// The rung on one pass: the layout changes, then conv_nhwc_kernel block by block. Returns the output
// (NaN where nothing was written) and counts the writes per element.
template <bool kBackwardData>
std::vector<double> emulate(const ConvArgs& a, const std::vector<double>& src, const std::vector<double>& w,
                            std::vector<int>& writes) {
  const nh::Problem g = nh::problem_for(a);
  const int64_t in_elems = static_cast<int64_t>(g.N) * g.H * g.W * g.C;
  const int64_t w_elems = static_cast<int64_t>(g.M) * g.kred();
  // nchw_to_nhwc_kernel and weights_to_krsc_kernel.
  std::vector<double> in(static_cast<size_t>(in_elems)), wt(static_cast<size_t>(w_elems));
  for (int64_t i = 0; i < in_elems; ++i) in[static_cast<size_t>(i)] = src.at(static_cast<size_t>(nh::nhwc_source(i, g.C, g.H, g.W)));
  for (int64_t i = 0; i < w_elems; ++i)
    wt[static_cast<size_t>(i)] = w.at(static_cast<size_t>(nh::weight_source<kBackwardData>(i, g)));

  std::vector<double> out(static_cast<size_t>(a.out_numel()), kNaN);
  writes.assign(out.size(), 0);
  std::vector<double> As(nh::kBM * nh::kLdA), Bs(nh::kBN * nh::kLdB), acc(nh::kBM * nh::kBN);
  const int64_t col_tiles = (g.cols() + nh::kBN - 1) / nh::kBN, row_tiles = (g.M + nh::kBM - 1) / nh::kBM;
  for (int64_t by = 0; by < row_tiles; ++by) {
    for (int64_t bx = 0; bx < col_tiles; ++bx) {
      const int m0 = static_cast<int>(by * nh::kBM);
      const int64_t n0 = bx * nh::kBN;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int k0 = 0; k0 < g.kred(); k0 += nh::kBK) {
        std::fill(As.begin(), As.end(), kNaN);  // a slot no thread fills poisons its products
        std::fill(Bs.begin(), Bs.end(), kNaN);
        const nh::Step st = nh::make_step(g, k0);
        for (int tid = 0; tid < nh::kThreads; ++tid) {
          for (int j = 0; j < nh::kAVecs; ++j) {
            const nh::TileVec t = nh::tile_vec(tid, j);
            test::copy8(&As[static_cast<size_t>(t.row * nh::kLdA + 8 * t.vec)], wt,
                  nh::weight_index(g, m0 + t.row, k0, t.vec), "A");
          }
          for (int j = 0; j < nh::kBVecs; ++j) {
            const nh::TileVec t = nh::tile_vec(tid, j);
            const nh::Column col = nh::make_column(g, n0 + t.row);
            test::copy8(&Bs[static_cast<size_t>(t.row * nh::kLdB + 8 * t.vec)], in,
                        nh::gather_index(g, col, st, t.vec), "B");
          }
        }
        // The warps' WMMA products: A [m][k] times B stored [n][k].
        for (int mi = 0; mi < nh::kBM; ++mi)
          for (int ni = 0; ni < nh::kBN; ++ni) {
            double sum = 0.0;
            for (int k = 0; k < nh::kBK; ++k) sum += As[mi * nh::kLdA + k] * Bs[ni * nh::kLdB + k];
            acc[static_cast<size_t>(mi * nh::kBN + ni)] += sum;
          }
      }
      // The epilogue: thread t keeps column t % kBN and walks the rows t / kBN, + kThreads / kBN, ...
      for (int tid = 0; tid < nh::kThreads; ++tid) {
        const int ni = tid % nh::kBN;
        const nh::Column col = nh::make_column(g, n0 + ni);
        if (!col.ok) continue;
        for (int mi = tid / nh::kBN; mi < nh::kBM; mi += nh::kThreads / nh::kBN) {
          const int m = m0 + mi;
          if (m >= g.M) break;
          const int64_t idx = nh::output_index(g, col, m);
          out.at(static_cast<size_t>(idx)) = acc[static_cast<size_t>(mi * nh::kBN + ni)];
          ++writes.at(static_cast<size_t>(idx));
        }
      }
    }
  }
  return out;
}

void check_pass(const ConvShape& s, ConvPass pass, uint32_t seed) {
  const ConvArgs a = args_for(s, pass);
  const bool bwd = pass == ConvPass::backward_data;
  const int64_t src_n = bwd ? a.N * a.K * a.P() * a.Q() : a.N * a.C * a.H * a.W;
  const std::vector<double> src = test::small_integers(static_cast<size_t>(src_n), seed);
  const std::vector<double> w = test::small_integers(static_cast<size_t>(a.K * a.C * a.R * a.S), seed + 1);
  std::vector<int> writes;
  const std::vector<double> got = bwd ? emulate<true>(a, src, w, writes) : emulate<false>(a, src, w, writes);
  const std::vector<double> want = reference(a, src, w);
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0, twice = 0;
  std::ostringstream first;  // not chained operator+: g++ 12 raises a false -Wrestrict on it
  for (size_t i = 0; i < got.size(); ++i) {
    if (writes[i] != 1) ++twice;
    if (!(got[i] == want[i]) && bad++ == 0) first << "[" << i << "] = " << got[i] << ", want " << want[i];
  }
  const std::string what = s.str() + " " + kernels::conv_pass_name(pass);
  EXPECT_EQ(twice, 0u) << what << ": elements not written exactly once";
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " wrong, the first " << first.str();
}

TEST(ConvNhwcIndex, ForwardEqualsTheReference) {
  uint32_t seed = 1;
  for (const ConvShape& s : kShapes) check_pass(s, ConvPass::forward, seed += 2);
}

TEST(ConvNhwcIndex, StrideOneBackwardDataIsTheFlippedConvolution) {
  uint32_t seed = 100;
  for (const ConvShape& s : kShapes) {
    if (s.sh != 1 || s.sw != 1) continue;  // the rung hands strided backward_data to implicit_gemm_wmma
    check_pass(s, ConvPass::backward_data, seed += 2);
  }
}

// The problem of backward_data is a convolution with the same output size as x: P x Q of the problem
// is H x W, and the padding R-1-ph keeps every tap of dy that reaches x.
TEST(ConvNhwcIndex, BackwardDataProblemHasTheInputsSize) {
  for (const ConvShape& s : kShapes) {
    if (s.sh != 1 || s.sw != 1) continue;
    const nh::Problem g = nh::problem_for(args_for(s, ConvPass::backward_data));
    EXPECT_EQ((g.H + 2 * g.ph - g.R) / g.sh + 1, g.P) << s.str();
    EXPECT_EQ((g.W + 2 * g.pw - g.S) / g.sw + 1, g.Q) << s.str();
    EXPECT_EQ(g.P, s.H) << s.str();
    EXPECT_EQ(g.Q, s.W) << s.str();
    EXPECT_EQ(g.C, s.K) << s.str();
    EXPECT_EQ(g.M, s.C) << s.str();
  }
}

// Which calls rung 4 computes itself and which it hands to rung 3 (hand_off_reason): every forward
// pass of VGG-small and LeNet after the first layer and every backward_data pass of theirs (stride 1)
// here on an sm_80+ GPU; never backward_weight, a first layer, a strided backward_data, an older GPU
// or a build without sm_80 code.
TEST(ConvNhwcIndex, HandsOnExactlyWhatItDoesNotCompute) {
  const ConvShape vgg{128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1}, vgg256{128, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1};
  const ConvShape lenet2{128, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2}, first{128, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1};
  for (const ConvShape& s : {vgg, vgg256, lenet2}) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data}) {
      const ConvArgs a = args_for(s, pass);
      EXPECT_EQ(nh::hand_off_reason(a, 90, 90), nullptr) << s.str() << " " << kernels::conv_pass_name(pass);
      EXPECT_EQ(nh::hand_off_reason(a, 80, 80), nullptr) << s.str();
      EXPECT_EQ(nh::hand_off_reason(a, 0, 0), nullptr) << s.str() << ": no GPU, nothing known against it";
      EXPECT_NE(nh::hand_off_reason(a, 75, 75), nullptr) << s.str();
      EXPECT_NE(nh::hand_off_reason(a, 90, 75), nullptr) << s.str() << ": an sm_75-only build on an H100";
    }
    EXPECT_NE(nh::hand_off_reason(args_for(s, ConvPass::backward_weight), 90, 90), nullptr) << s.str();
  }
  // The first layer: C = 3 forward is handed on; its backward_data gathers dy's K = 64 channels, but
  // the framework never asks for it (the images need no gradient), and the rung could compute it.
  EXPECT_NE(nh::hand_off_reason(args_for(first, ConvPass::forward), 90, 90), nullptr);
  EXPECT_EQ(nh::hand_off_reason(args_for(first, ConvPass::backward_data), 90, 90), nullptr);
  // Strided backward_data, and padding past the filter (no flipped convolution of the same size).
  EXPECT_NE(nh::hand_off_reason(args_for({2, 32, 13, 13, 64, 3, 3, 2, 2, 1, 1}, ConvPass::backward_data), 90, 90),
            nullptr);
  EXPECT_EQ(nh::hand_off_reason(args_for({2, 32, 13, 13, 64, 3, 3, 2, 2, 1, 1}, ConvPass::forward), 90, 90), nullptr);
  EXPECT_NE(nh::hand_off_reason(args_for({2, 32, 5, 5, 64, 3, 3, 1, 1, 3, 3}, ConvPass::backward_data), 90, 90),
            nullptr);
  // The workspace cap: 2 * (N*C*H*W + K*C*R*S) bytes above 256 MiB.
  const ConvShape big{1024, 256, 32, 32, 256, 3, 3, 1, 1, 1, 1};  // 2 * 268M + ... bytes
  const char* why = nh::hand_off_reason(args_for(big, ConvPass::forward), 90, 90);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("256 MiB"), std::string::npos) << why;
}

// hand_off_reason's bounds, each on both sides and each by the reason it gives (so that a later check
// cannot stand in for the one meant): why() is "" where the rung computes the call itself.
std::string why(const ConvShape& s, ConvPass pass = ConvPass::forward, int cc = 90, int loaded_arch = 90) {
  const char* reason = nh::hand_off_reason(args_for(s, pass), cc, loaded_arch);
  return reason == nullptr ? std::string() : std::string(reason);
}
using test::kIntMax;
using test::says;

// backward_data's stride, padding and channels, and the GPU: a stride above 1 in either direction alone,
// a padding of R - 1 (S - 1) and one past it, in a filter of 3 x 5 so that R and S cannot stand in for
// each other; the gathered channel count is C forward and K backward_data, the other may be anything;
// compute capability and loaded code at 79 and 80.
TEST(ConvNhwcIndex, HandOffAtTheStridePaddingChannelAndGpuBounds) {
  const auto bwd = ConvPass::backward_data;
  EXPECT_TRUE(says(why({2, 32, 13, 13, 64, 3, 3, 2, 1, 1, 1}, bwd), "stride"));
  EXPECT_TRUE(says(why({2, 32, 13, 13, 64, 3, 3, 1, 2, 1, 1}, bwd), "stride"));
  EXPECT_EQ(why({2, 32, 9, 9, 64, 3, 5, 1, 1, 2, 4}, bwd), "");
  EXPECT_TRUE(says(why({2, 32, 9, 9, 64, 3, 5, 1, 1, 3, 4}, bwd), "padding"));
  EXPECT_TRUE(says(why({2, 32, 9, 9, 64, 3, 5, 1, 1, 2, 5}, bwd), "padding"));
  EXPECT_EQ(why({2, 32, 9, 9, 64, 3, 5, 1, 1, 3, 5}), "") << "forward takes any padding";

  EXPECT_TRUE(says(why({2, 48, 8, 8, 64, 3, 3, 1, 1, 1, 1}), "multiple of 32"));
  EXPECT_EQ(why({2, 64, 8, 8, 48, 3, 3, 1, 1, 1, 1}), "");
  EXPECT_TRUE(says(why({2, 64, 8, 8, 48, 3, 3, 1, 1, 1, 1}, bwd), "multiple of 32"));
  EXPECT_EQ(why({2, 48, 8, 8, 64, 3, 3, 1, 1, 1, 1}, bwd), "");

  const ConvShape vgg{2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1};
  EXPECT_TRUE(says(why(vgg, ConvPass::forward, 79, 0), "compute capability 8.0"));
  EXPECT_TRUE(says(why(vgg, ConvPass::forward, 0, 79), "a build without code"));
  EXPECT_TRUE(says(why(vgg, ConvPass::forward, 90, 79), "a build without code"));
  EXPECT_EQ(why(vgg, ConvPass::forward, 80, 0), "");
  EXPECT_EQ(why(vgg, ConvPass::forward, 0, 80), "");
}

// The 32-bit bounds (Problem's fields are ints), one past and at each: the batch, a stride (which no
// product holds), K*C*R*S, C*H*W (with a stride of 2, so that K*P*Q stays small) and K*P*Q. At the bound
// the call goes on to the later checks, which hand these large calls on for their workspace instead.
TEST(ConvNhwcIndex, HandOffAtTheThirtyTwoBitBounds) {
  const int64_t over = kIntMax + 1;
  const char* bits = "32-bit";
  EXPECT_TRUE(says(why({over, 32, 1, 1, 32, 1, 1, 1, 1, 0, 0}), bits));
  EXPECT_TRUE(says(why({kIntMax, 32, 1, 1, 32, 1, 1, 1, 1, 0, 0}), "256 MiB"));
  EXPECT_TRUE(says(why({1, 32, 1, 1, 32, 1, 1, over, 1, 0, 0}), bits));
  EXPECT_TRUE(says(why({1, 32, 1, 1, 32, 1, 1, 1, over, 0, 0}), bits));
  EXPECT_EQ(why({1, 32, 1, 1, 32, 1, 1, kIntMax, kIntMax, 0, 0}), "");
  // K*C*R*S: 32 * 32 * 1449^2 = 2,149,785,600 and 32 * 32 * 1448^2 = 2,147,024,896 (P = Q = 1).
  EXPECT_TRUE(says(why({1, 32, 1449, 1449, 32, 1449, 1449, 1, 1, 0, 0}), bits));
  EXPECT_TRUE(says(why({1, 32, 1448, 1448, 32, 1448, 1448, 1, 1, 0, 0}), "256 MiB"));
  // C*H*W: 32 * 8192 * 8193 = 2,147,745,792 and 32 * 8192 * 8191 = 2,147,221,504.
  EXPECT_TRUE(says(why({1, 32, 8192, 8193, 32, 1, 1, 2, 2, 0, 0}), bits));
  EXPECT_TRUE(says(why({1, 32, 8192, 8191, 32, 1, 1, 2, 2, 0, 0}), "256 MiB"));
  // K*P*Q: 128 * 4097^2 = 2,148,532,352 and 128 * 4096 * 4095 = 2,146,959,360 (C*H*W a quarter of it).
  EXPECT_TRUE(says(why({1, 32, 4097, 4097, 128, 1, 1, 1, 1, 0, 0}), bits));
  EXPECT_TRUE(says(why({1, 32, 4096, 4095, 128, 1, 1, 1, 1, 0, 0}), "256 MiB"));
  // K*P*Q at exactly 2^31 - 1 (a prime, so K = 1 and a padding that makes P = 2^31 - 1 from H = 1): the
  // rung computes it, all else being small; the next padding (two rows more) is past the bound.
  EXPECT_EQ(why({1, 32, 1, 1, 1, 1, 1, 1, 1, (kIntMax - 1) / 2, 0}), "");
  EXPECT_TRUE(says(why({1, 32, 1, 1, 1, 1, 1, 1, 1, (kIntMax + 1) / 2, 0}), bits));
}

// The grid's bounds: 65535 row tiles of 128 (K or C, whichever is larger: 65535 * 128 = 8,388,480), and
// 2^31 - 1 column tiles of 128 over N times the larger of P*Q and H*W (each larger in one case: a stride
// of 13 shrinks P*Q, a padding grows it). At each bound the workspace check takes over.
TEST(ConvNhwcIndex, HandOffAtTheGridBounds) {
  EXPECT_TRUE(says(why({1, 32, 1, 1, 8388481, 1, 1, 1, 1, 0, 0}), "row tiles"));
  EXPECT_TRUE(says(why({1, 32, 1, 1, 8388480, 1, 1, 1, 1, 0, 0}), "256 MiB"));
  EXPECT_TRUE(says(why({1, 8388512, 1, 1, 32, 1, 1, 1, 1, 0, 0}), "row tiles"));
  EXPECT_TRUE(says(why({1, 8388480, 1, 1, 32, 1, 1, 1, 1, 0, 0}), "256 MiB"));

  const char* cols = "column tiles";
  EXPECT_TRUE(says(why({kIntMax, 32, 3, 43, 32, 1, 1, 1, 1, 0, 0}), cols));   // H*W = 129
  EXPECT_TRUE(says(why({kIntMax, 32, 8, 16, 32, 1, 1, 1, 1, 0, 0}), "256 MiB"));  // 128: kIntMax tiles
  // One column past 2^31 - 1 whole tiles: 128 * (2^31 - 1) + 1 = 516223 * (3 * 177493).
  EXPECT_TRUE(says(why({516223, 32, 3, 177493, 32, 1, 1, 1, 1, 0, 0}), cols));
  EXPECT_TRUE(says(why({kIntMax, 32, 13, 13, 32, 1, 1, 13, 13, 0, 0}), cols));  // H*W 169, P*Q 1
  EXPECT_TRUE(says(why({kIntMax, 32, 1, 1, 32, 1, 1, 1, 1, 1, 21}), cols));     // P*Q 3 * 43, H*W 1
  EXPECT_TRUE(says(why({kIntMax, 32, 1, 1, 32, 2, 2, 1, 1, 4, 8}), "256 MiB"));  // P*Q 8 * 16
}

// The workspace: 2 bytes per element of the NHWC copies, the gathered tensor (x forward, dy backward_data)
// and the weights, up to 256 MiB = 134,217,728 elements and not one more (32 elements more here: the
// copies come in multiples of 32). Forward: 3 * 32 * 1 * 1398101 + K * 32 for K = 1 and 2. backward_data
// gathers dy, N * K * P * Q with P < H (a 3 x 3 filter, no padding): 5 * 32 * 1 * 838859 + 32 * 1 * 9,
// and 2 * 32 * 4 * 524287 + 288 past it; x's own size (C = 1) is far below.
TEST(ConvNhwcIndex, HandOffAtTheWorkspaceBound) {
  EXPECT_EQ(why({3, 32, 1, 1398101, 1, 1, 1, 1, 1, 0, 0}), "");
  EXPECT_TRUE(says(why({3, 32, 1, 1398101, 2, 1, 1, 1, 1, 0, 0}), "256 MiB"));
  EXPECT_EQ(why({5, 1, 3, 838861, 32, 3, 3, 1, 1, 0, 0}, ConvPass::backward_data), "");
  EXPECT_TRUE(says(why({2, 1, 6, 524289, 32, 3, 3, 1, 1, 0, 0}, ConvPass::backward_data), "256 MiB"));
}

// The shared memory the kernel asks for holds what it puts there: the weights' [kBM][kLdA] and the
// gathered inputs' [kBN][kLdB] per stage, K contiguous, and the staging tile [kBM][kLdC]
// (test::expect_smem_holds); 8 warps of 64 x 32 over the 128 x 128 tile; every vector of a stage copied.
TEST(ConvNhwcIndex, SharedMemoryHoldsTheRingAndTheStagingTile) {
  EXPECT_EQ(nh::kWarpsM * nh::kWarpsN * 32, nh::kThreads);
  EXPECT_EQ(nh::kBM, nh::kWarpsM * 64);
  EXPECT_EQ(nh::kBN, nh::kWarpsN * 32);
  test::expect_smem_holds({.stages = nh::kStages, .a_rows = nh::kBM, .a_cols = nh::kBK, .a_ld = nh::kLdA,
                           .b_rows = nh::kBN, .b_cols = nh::kBK, .b_ld = nh::kLdB, .c_rows = nh::kBM,
                           .c_cols = nh::kBN, .c_ld = nh::kLdC, .stage_elems = nh::kStageElems,
                           .ring_bytes = nh::kRingBytes, .c_bytes = nh::kCBytes, .smem_bytes = nh::kSmemBytes});
  EXPECT_LE(nh::kSmemBytes, 80 * 1024) << "the hand-off names 80 KiB for sm_80";
  EXPECT_EQ(nh::kAVecs * nh::kThreads, nh::kBM * nh::kVecsPerRow);
  EXPECT_EQ(nh::kBVecs * nh::kThreads, nh::kBN * nh::kVecsPerRow);
}

// The tile map: every (row, vector) of a stage is copied by exactly one (thread, copy).
TEST(ConvNhwcIndex, EveryTileVectorIsCopiedOnce) {
  std::vector<int> seen(nh::kBM * nh::kVecsPerRow, 0);
  for (int tid = 0; tid < nh::kThreads; ++tid)
    for (int j = 0; j < nh::kAVecs; ++j) {
      const nh::TileVec t = nh::tile_vec(tid, j);
      ASSERT_TRUE(t.row >= 0 && t.row < nh::kBM && t.vec >= 0 && t.vec < nh::kVecsPerRow) << tid << " " << j;
      ++seen[static_cast<size_t>(t.row * nh::kVecsPerRow + t.vec)];
    }
  for (int c : seen) EXPECT_EQ(c, 1);
  EXPECT_EQ(nh::kAVecs, nh::kBVecs) << "the B tile has as many rows as the A tile";
  EXPECT_GE(nh::kRingBytes, nh::kCBytes) << "the epilogue's staging tile fits in the ring";
}

// The emulation can fail: backward_data run with the forward pass's weight layout (no flip, no
// transposition; the kind of slip weight_source<true> exists to avoid) is caught.
TEST(ConvNhwcIndex, EmulationCatchesTheForwardWeightLayoutInBackwardData) {
  const ConvShape s = kShapes[0];  // C = K = 32, so both layouts have the same size
  const ConvArgs a = args_for(s, ConvPass::backward_data);
  const std::vector<double> dy = test::small_integers(static_cast<size_t>(a.N * a.K * a.P() * a.Q()), 7);
  const std::vector<double> w = test::small_integers(static_cast<size_t>(a.K * a.C * a.R * a.S), 8);
  std::vector<int> writes;
  const std::vector<double> want = reference(a, dy, w);
  const std::vector<double> got = emulate<false>(a, dy, w, writes);  // wrong on purpose
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  EXPECT_GT(differ, got.size() / 2);
}

// The tiled layout change (nchw_to_nhwc_tiled_kernel), walked as the GPU runs it: every block of
// layout_grid's grid, its images in steps of the grid's z, its 32 x 8 threads reading their 4 elements
// each into the block's shared tile (NaN before every image, so a slot read before it is written shows)
// and, after the barrier, writing from it. The NHWC copy must be the per-element copy's (nhwc_source)
// element for element, each written once; every slot read must have been written for this image. z_cap
// 2 walks the loop over images on shapes the CPU covers in milliseconds (the GPU's cap is 65535).
// Partial tiles on both sides: C and H*W of 1, below, at and past multiples of 32.
TEST(ConvNhwcIndex, TiledLayoutChangeMovesEveryElementOnce) {
  struct Case {
    int64_t N, C, H, W, z_cap;
  };
  for (const Case& t : {Case{1, 1, 1, 1, 2}, Case{2, 3, 1, 5, 2}, Case{3, 32, 8, 8, 2}, Case{2, 40, 7, 7, 1},
                        Case{5, 8, 14, 14, 2}, Case{4, 256, 8, 8, 3}, Case{3, 33, 11, 3, 2}, Case{7, 64, 4, 8, 65535}}) {
    const int64_t HW = t.H * t.W, plane = t.C * HW, n = t.N * plane;
    std::vector<double> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n), kNaN);
    for (int64_t i = 0; i < n; ++i) src[static_cast<size_t>(i)] = static_cast<double>(i);
    std::vector<int> writes(static_cast<size_t>(n), 0);
    const nh::LayoutGrid grid = nh::layout_grid(t.N, t.C, HW, t.z_cap);
    ASSERT_GT(grid.x, 0);
    ASSERT_LE(grid.z, t.z_cap);
    std::ostringstream name;
    name << "N=" << t.N << " C=" << t.C << " HW=" << HW << " z_cap=" << t.z_cap;
    for (int64_t bz = 0; bz < grid.z; ++bz) {
      for (int64_t by = 0; by < grid.y; ++by) {
        for (int64_t bx = 0; bx < grid.x; ++bx) {
          for (int64_t img = bz; img < t.N; img += grid.z) {
            std::vector<double> tile(nh::kLayoutTile * nh::kLayoutPitch, kNaN);
            const auto slot = [&](const nh::LayoutStep& e) -> double& {
              EXPECT_TRUE(e.row >= 0 && e.row < nh::kLayoutTile && e.col >= 0 && e.col < nh::kLayoutTile) << name.str();
              return tile.at(static_cast<size_t>(e.row * nh::kLayoutPitch + e.col));
            };
            for (int ty = 0; ty < nh::kLayoutRows; ++ty)
              for (int tx = 0; tx < nh::kLayoutTile; ++tx)
                for (int k = 0; k < nh::kLayoutSteps; ++k) {
                  const nh::LayoutStep e = nh::layout_read(bx, by, tx, ty, k);
                  if (e.c < t.C && e.p < HW) slot(e) = src.at(static_cast<size_t>(img * plane + e.c * HW + e.p));
                }
            for (int ty = 0; ty < nh::kLayoutRows; ++ty)
              for (int tx = 0; tx < nh::kLayoutTile; ++tx)
                for (int k = 0; k < nh::kLayoutSteps; ++k) {
                  const nh::LayoutStep e = nh::layout_write(bx, by, tx, ty, k);
                  if (e.c < t.C && e.p < HW) {
                    const size_t i = static_cast<size_t>(img * plane + e.p * t.C + e.c);
                    ASSERT_FALSE(std::isnan(slot(e))) << name.str() << ": a slot read before it was written";
                    dst.at(i) = slot(e);
                    ++writes[i];
                  }
                }
          }
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const size_t u = static_cast<size_t>(i);
      ASSERT_EQ(writes[u], 1) << name.str() << ": element " << i;
      ASSERT_EQ(dst[u], src[static_cast<size_t>(nh::nhwc_source(i, static_cast<int>(t.C), static_cast<int>(t.H),
                                                                  static_cast<int>(t.W)))])
          << name.str() << ": element " << i;
    }
  }
}

// Grids the tiles cannot fit go to the per-element copy: layout_grid says so with x = 0.
TEST(ConvNhwcIndex, TiledLayoutChangeDeclinesGridsThatDoNotFit) {
  EXPECT_EQ(nh::layout_grid(1, 65535 * 32 + 1, 1).x, 0);  // 65536 channel tiles: gridDim.y allows 65535
  EXPECT_GT(nh::layout_grid(1, 65535 * 32, 1).x, 0);
  EXPECT_EQ(nh::layout_grid(1, 1, int64_t{2147483648} * 32).x, 0);  // 2^31 pixel tiles
  EXPECT_EQ(nh::layout_grid(70000, 8, 1).z, 65535);              // the images beyond loop
  const nh::LayoutGrid widest = nh::layout_grid(1, 1, kIntMax * 32);  // 2^31 - 1 pixel tiles still fit
  EXPECT_EQ(widest.x, kIntMax);
  EXPECT_EQ(widest.y, 1);
  const nh::LayoutGrid some = nh::layout_grid(7, 33, 65);  // partial tiles round up; fewer images than the cap
  EXPECT_EQ(some.x, 3);
  EXPECT_EQ(some.y, 2);
  EXPECT_EQ(some.z, 7);
}

// The tiled layout change is opt-in until a GPU has run it (kTiledLayoutChangeIsDefault, and
// kernels/cuda/conv/README.md): the rungs' own choice is the per-element copy, and the hook forces either
// for one scope and gives the choice back after it, also nested. Both copies give the same tensor, so no
// GPU test of the results would notice a default flipped by mistake.
TEST(ConvNhwcIndex, TiledLayoutChangeIsOptInAndTheHookForcesEitherForOneScope) {
  ASSERT_LT(nh::tiled_layout_change_for_tuning().load(), 0);  // no test left it set
  EXPECT_FALSE(nh::tiled_layout_change_chosen());
  {
    const nh::ScopedTiledLayoutChange tiled(true);
    EXPECT_EQ(nh::tiled_layout_change_for_tuning().load(), 1);
    EXPECT_TRUE(nh::tiled_layout_change_chosen());
    {
      const nh::ScopedTiledLayoutChange per_element(false);
      EXPECT_EQ(nh::tiled_layout_change_for_tuning().load(), 0);
      EXPECT_FALSE(nh::tiled_layout_change_chosen());
    }
    EXPECT_TRUE(nh::tiled_layout_change_chosen());
  }
  EXPECT_LT(nh::tiled_layout_change_for_tuning().load(), 0);
  EXPECT_FALSE(nh::tiled_layout_change_chosen());
}

}  // namespace
}  // namespace hl
