// Every CUDA rung of the softmax ladder (kernels/cuda/softmax/) against the long double reference of
// tests/kernels/softmax_reference.h, on fresh random inputs (ordinary and large-magnitude logits, with
// an all -inf row, a masked row and a row holding the logit 12 that overflows FP16), outputs poisoned
// with NaN and, for the rows where NaN is due, filled once more with a finite value no correct kernel
// writes (a NaN poison cannot show an element left alone there), every element checked. Rungs are
// taken from the registry, so a new rung is tested here without a line of change. Also: fused_xent
// loss and gradient, the FP16 overflow lesson on the GPU, the scalar (misaligned) path, and the
// framework's cross_entropy on CUDA against the CPU.
// Skips without a GPU (HL_REQUIRE_CUDA).
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <functional>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <set>
#include <utility>

#include "framework/ops.h"
#include "kernels/cuda/softmax/kept_frames.h"
#include "kernels/cuda/softmax/register_row_plan.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"
#include "tests/kernels/softmax_reference.h"
#include "tests/kernels/xent_runs.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
namespace k = hl::kernels;
namespace ref = hl::test::softmax_ref;

const double kInf = ref::kInf;
const double kNaN = ref::kNaN;

// Rungs that run `op` for these dtypes (the registry says which), without the teaching variant.
std::vector<std::string> rungs_for(const k::SoftmaxArgs& probe) {
  std::vector<std::string> out;
  for (const auto& v : k::SoftmaxRegistry::instance().all()) {
    if (v.device != DeviceType::cuda || v.name == "naive_fp16_nomax") continue;
    if (v.unsupported == nullptr || v.unsupported(probe) == nullptr) out.push_back(v.name);
  }
  return out;
}

bool registered_on_cuda(const std::string& name) {
  return k::SoftmaxRegistry::instance().find(name, DeviceType::cuda) != nullptr;
}

// Values per access on register_row's path for these arguments: a 16-byte pack (8 FP16 / 4 FP32) when
// rows are whole packs and the buffers are aligned, else 1 (its scalar path).
int register_row_width(DType tx, int64_t cols, bool aligned_buffers) {
  const int pack = tx == DType::f16 ? 8 : 4;
  return aligned_buffers && cols % pack == 0 ? pack : 1;
}

// register_row and register_warp decline rows past their register capacity. The every-rung loops
// take the rungs that accept the arguments, so check here that each accepted exactly the rows it
// should: a decline is an expectation, never a silent skip.
void expect_register_row_listed(const k::SoftmaxArgs& a, const std::vector<std::string>& rungs, bool aligned_buffers) {
  const auto listed = [&](const char* rung) { return std::find(rungs.begin(), rungs.end(), rung) != rungs.end(); };
  if (registered_on_cuda("register_row")) {
    const bool fits = a.cols <= k::register_row::max_cols(register_row_width(a.x_type, a.cols, aligned_buffers));
    EXPECT_EQ(listed("register_row"), fits) << a.describe();
  }
  if (registered_on_cuda("register_warp")) {
    EXPECT_EQ(listed("register_warp"), a.cols <= k::register_row::warp::kMaxCols) << a.describe();
  }
  // packed_row and packed_online (its plan): FP16 rows of whole packs in aligned buffers, up to 65536
  // columns, forward only.
  for (const char* rung : {"packed_row", "packed_online"}) {
    if (!registered_on_cuda(rung)) continue;
    const bool forward = a.op == k::SoftmaxOp::softmax || a.op == k::SoftmaxOp::log_softmax;
    const bool fits = a.x_type == DType::f16 && forward &&
                      k::register_row::packed::plan(a.cols, register_row_width(a.x_type, a.cols, aligned_buffers)).threads > 0;
    EXPECT_EQ(listed(rung), fits) << rung << " " << a.describe();
  }
  // packed_kept (opt-in): packed_online's rows, FP16 probabilities only (softmax, f16 out), and only
  // where this GPU gives a block the shared memory its kept exponentials need (kept_frames.h).
  if (registered_on_cuda("packed_kept")) {
    const int width = register_row_width(a.x_type, a.cols, aligned_buffers);
    const k::register_row::Plan p = k::register_row::packed::plan(a.cols, width);
    const bool fits = a.x_type == DType::f16 && a.y_type == DType::f16 && a.op == k::SoftmaxOp::softmax &&
                      p.threads > 0 &&
                      kernels::cuda::kept_frames::shared_bytes(p.threads, p.per_thread) <=
                          runtime::cuda_max_shared_memory_per_block();
    EXPECT_EQ(listed("packed_kept"), fits) << "packed_kept " << a.describe();
  }
  // packed_warp: FP16 rows of whole packs in aligned buffers, up to 4096 columns, forward only.
  if (registered_on_cuda("packed_warp")) {
    const bool forward = a.op == k::SoftmaxOp::softmax || a.op == k::SoftmaxOp::log_softmax;
    const bool fits = a.x_type == DType::f16 && forward &&
                      k::register_row::packed_warp::per_lane(a.cols, register_row_width(a.x_type, a.cols, aligned_buffers)) > 0;
    EXPECT_EQ(listed("packed_warp"), fits) << a.describe();
  }
  // cluster_row needs thread-block clusters: on a GPU below compute capability 9.0, or with a build
  // that has no sm_90 code, it refuses every row, and says so.
  if (registered_on_cuda("cluster_row")) {
    const int width = register_row_width(a.x_type, a.cols, aligned_buffers);
    const bool fits = k::register_row::cluster::plan(a.cols, width).blocks > 0;
    if (listed("cluster_row") || !fits) {
      EXPECT_EQ(listed("cluster_row"), fits) << a.describe();
    } else {
      const char* why = k::SoftmaxRegistry::instance().find("cluster_row", DeviceType::cuda)->unsupported(a);
      EXPECT_NE(std::string(why != nullptr ? why : "").find("compute capability 9.0"), std::string::npos)
          << "cluster_row refused a row it fits: " << (why != nullptr ? why : "(no reason)") << " " << a.describe();
    }
  }
}

// The longest chain of sequential FP32 additions one thread makes in a row sum: naive adds the whole
// row; every other rung spreads the row over at least a warp, then merges (a tree of <= 10 levels).
int64_t chain_for(const std::string& rung, int64_t cols) { return rung == "naive" ? cols : (cols + 31) / 32 + 64; }

Tensor device_tensor(const std::vector<double>& v, int64_t rows, int64_t cols, DType t) {
  return Tensor::from_vector(v, {rows, cols}, t, Device::cuda);
}

// Random logits for a [rows, cols] case; rows 0..2 (when present) are special: all -inf, every fifth
// entry masked, and one logit of 12 (FP16's exp(12) overflows) among small ones. With `nonfinite`,
// rows 3 and 4 (when present) hold one +inf and one NaN entry: docs/softmax.md's NaN convention makes
// every output of both rows NaN (no finite maximum; a NaN poisons the sum).
std::vector<double> make_logits(int64_t rows, int64_t cols, double range, DType t, uint64_t seed,
                                bool nonfinite = false) {
  auto x = hl::test::random_values(static_cast<size_t>(rows * cols), seed, -range, range, t);
  if (rows >= 3) {
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(c)] = -kInf;
    for (int64_t c = 0; c < cols; c += 5) x[static_cast<size_t>(cols + c)] = -kInf;
    if (cols > 1) x[static_cast<size_t>(cols + 1)] = round_to_half(3.0f);  // row 1 keeps a finite maximum
    for (int64_t c = 0; c < cols; ++c)
      x[static_cast<size_t>(2 * cols + c)] = static_cast<double>(round_to_half(static_cast<float>(std::fmod(c * 0.37, 4.0))));
    x[static_cast<size_t>(2 * cols + cols / 2)] = 12.0;
  }
  if (nonfinite && rows >= 5) {
    x[static_cast<size_t>(3 * cols + cols / 3)] = kInf;
    x[static_cast<size_t>(4 * cols + (cols - 1))] = kNaN;
  }
  return x;
}

struct Expect {
  std::vector<double> x, lp;  // inputs and reference log-probabilities
  std::vector<ref::Row> stats;
  int64_t rows, cols;
};

Expect reference(std::vector<double> x, int64_t rows, int64_t cols) {
  Expect e{std::move(x), {}, {}, rows, cols};
  e.stats = ref::row_stats(rows, cols, e.x);
  e.lp.resize(e.x.size());
  const int64_t n = static_cast<int64_t>(e.x.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) e.lp[static_cast<size_t>(i)] = ref::log_prob(e.x[static_cast<size_t>(i)], e.stats[static_cast<size_t>(i / cols)]);
  return e;
}

// Checks every element; returns the number of failures (the first few are reported). The elements are
// checked in parallel (EveryRungForwardAgainstReference checks over a billion: minutes on one core),
// then, only if some failed, once more in order to report the first ones.
int64_t check_forward(const Expect& e, const std::vector<double>& out, bool log, bool f16_out, int64_t chain,
                      const std::string& what) {
  const auto want_at = [&](size_t i) { return log ? e.lp[i] : std::exp(e.lp[i]); };
  const auto element_ok = [&](size_t i) {
    const double xi = e.x[i], o = out[i];
    const auto& s = e.stats[i / static_cast<size_t>(e.cols)];
    const double want = want_at(i);
    if (std::isnan(want)) return std::isnan(o);
    if (xi == -kInf) return o == want;  // exactly 0 / -inf
    if (f16_out && std::fabs(want) > 65504)
      return std::signbit(o) == std::signbit(want) && (std::isinf(o) || std::fabs(o) == 65504);
    const double lt = ref::logprob_tol(xi, s, chain);
    const double tol = log ? lt + ref::out_rel(f16_out) * std::fabs(want) + ref::out_abs(f16_out)
                           : want * (lt + 4 * ref::kU32) + ref::out_rel(f16_out) * want + ref::out_abs(f16_out);
    return std::fabs(o - want) <= tol;
  };
  const int64_t n = static_cast<int64_t>(out.size());
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad += element_ok(static_cast<size_t>(i)) ? 0 : 1;
  for (int64_t i = 0, reported = 0; bad > 0 && i < n && reported < 5; ++i) {
    if (element_ok(static_cast<size_t>(i))) continue;
    ++reported;
    ADD_FAILURE() << what << ": element " << i << " (row " << i / e.cols << ") = " << out[static_cast<size_t>(i)]
                  << ", want " << want_at(static_cast<size_t>(i)) << " (x = " << e.x[static_cast<size_t>(i)] << ")";
  }
  return bad;
}

// The checker itself (no GPU needed): the exact answers pass, and a slightly wrong value, a NaN where a
// probability is due and a number where NaN is due are each counted and reported (with the element),
// whichever thread of the parallel count found them.
TEST(SoftmaxCheck, CountsAndReportsEachWrongElement) {
  uint64_t seed = hl::test::fresh_seed();
  const int64_t rows = 6, cols = 1000;  // rows 0-2: all -inf, masked, a 12; row 3: +inf; row 4: NaN
  const Expect e = reference(make_logits(rows, cols, 8.0, DType::f32, seed, /*nonfinite=*/true), rows, cols);
  const size_t finite = static_cast<size_t>(5 * cols + 7), nan_due = static_cast<size_t>(4 * cols + 3);
  for (bool log : {false, true}) {
    std::vector<double> exact(e.lp.size());
    for (size_t i = 0; i < exact.size(); ++i) exact[i] = log ? e.lp[i] : std::exp(e.lp[i]);
    ASSERT_TRUE(std::isfinite(exact[finite]) && std::isnan(exact[nan_due]));
    EXPECT_EQ(check_forward(e, exact, log, false, cols, "exact"), 0);
    const auto expect_one_bad = [&](size_t i, double value, const std::string& element) {
      std::vector<double> out = exact;
      out[i] = value;
      int64_t bad = -1;
      EXPECT_NONFATAL_FAILURE(bad = check_forward(e, out, log, false, cols, "corrupted"), "corrupted: element " + element);
      EXPECT_EQ(bad, 1) << element;
    };
    expect_one_bad(finite, exact[finite] * (1 + 1e-3), std::to_string(finite));
    expect_one_bad(finite, kNaN, std::to_string(finite));
    expect_one_bad(nan_due, 0.5, std::to_string(nan_due));
  }
}

k::SoftmaxArgs forward_args(bool log, const Tensor& x, const Tensor& y) {
  k::SoftmaxArgs a;
  a.device = DeviceType::cuda;
  a.op = log ? k::SoftmaxOp::log_softmax : k::SoftmaxOp::softmax;
  a.rows = x.size(0);
  a.cols = x.size(1);
  a.x = x.data_ptr();
  a.x_type = x.dtype();
  a.y = y.data_ptr();
  a.y_type = y.dtype();
  return a;
}

// make_logits' rows where NaN is due (0: all -inf; 3, 4: +inf, NaN) lie in its first 5.
constexpr int64_t kSpecialRows = 5;

// Runs `rung` once more on the first min(a.rows, rows) rows of a's logits, into an output filled with
// 2.0, and checks it as check_forward does. A NaN-poisoned output cannot show an element left alone
// where NaN is due: a rung that returns early on a row without a finite maximum passes it. 2.0 is no
// probability (<= 1) and no log-probability (<= 0), and exact in FP16, so such an element fails here.
// Only the first rows (those that hold make_logits' NaN rows), to keep the sanitizer runs short: the
// NaN-poisoned run of the whole matrix shows any element left alone where a number is due.
int64_t check_forward_2_filled(const Expect& e, const k::SoftmaxArgs& a, const std::string& rung,
                               const std::string& what, int64_t rows = kSpecialRows) {
  const int64_t n = std::min(a.rows, rows);
  Tensor y = Tensor::full({n, a.cols}, 2.0, a.y_type, Device::cuda);
  k::SoftmaxArgs b = a;
  b.rows = n;
  b.y = y.data_ptr();
  k::softmax(b, rung);
  const std::string filled = what + " (output filled with 2.0, first " + std::to_string(n) + " rows)";
  return check_forward(e, y.to_double(), a.op == k::SoftmaxOp::log_softmax, a.y_type == DType::f16,
                       chain_for(rung, a.cols), filled);
}

TEST(SoftmaxCuda, EveryRungForwardAgainstReference) {
  HL_REQUIRE_CUDA();
  uint64_t seed = hl::test::fresh_seed();
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t cols : {1, 7, 10, 31, 32, 33, 1000, 1024, 4097, 65536, 70000})
    for (int64_t rows : {1, 3, 128}) shapes.push_back({rows, cols});
  for (int64_t cols : {1, 7, 10, 33}) shapes.push_back({70000, cols});  // more rows than a grid dimension
  for (auto [rows, cols] : shapes) {
    for (DType tx : {DType::f16, DType::f32}) {
      // Ordinary logits, and large ones (FP16 up to 60000, FP32 up to 1e4) whose exp() overflows
      // unless the maximum is subtracted first.
      for (double range : {8.0, tx == DType::f16 ? 60000.0 : 1e4}) {
        const Expect e = reference(make_logits(rows, cols, range, tx, seed++, /*nonfinite=*/true), rows, cols);
        const Tensor x = device_tensor(e.x, rows, cols, tx);
        for (DType ty : {DType::f32, DType::f16}) {
          for (bool log : {false, true}) {
            Tensor y = Tensor::full({rows, cols}, kNaN, ty, Device::cuda);  // poisoned
            const k::SoftmaxArgs a = forward_args(log, x, y);
            const std::vector<std::string> rungs = rungs_for(a);
            ASSERT_FALSE(rungs.empty()) << a.describe() << ": no CUDA rung takes it, nothing would be tested";
            expect_register_row_listed(a, rungs, true);
            for (const std::string& rung : rungs) {
              // naive gives 128 threads a 70000-wide row each: one output/dtype combination of the
              // largest shapes is enough for it (it keeps the compute-sanitizer runs to minutes).
              if (rung == "naive" && rows * cols > (1 << 21) && (ty != DType::f32 || log)) continue;
              y.fill_(kNaN);
              k::softmax(a, rung);
              const std::string what = rung + (log ? " log_softmax " : " softmax ") + dtype_name(tx) + "->" +
                                       dtype_name(ty) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                                       " range " + std::to_string(range);
              EXPECT_EQ(check_forward(e, y.to_double(), log, ty == DType::f16, chain_for(rung, cols), what), 0) << what;
              // NaN-due rows (0, 3, 4) again with a finite fill: a rung that skips them passes the NaN one.
              EXPECT_EQ(check_forward_2_filled(e, a, rung, what), 0) << what;
            }
          }
        }
      }
    }
  }
}

TEST(SoftmaxCuda, ScalarPathForMisalignedBuffers) {
  // Buffers that start one element past an aligned address (and rows that are whole packs): the
  // 128-bit path must not be taken, and the scalar path must give the same answers.
  HL_REQUIRE_CUDA();
  uint64_t seed = hl::test::fresh_seed();
  const int64_t rows = 5, cols = 1024;
  for (DType t : {DType::f16, DType::f32}) {
    auto x = make_logits(rows, cols, 8.0, t, seed++);
    const Expect e = reference(x, rows, cols);
    x.insert(x.begin(), 0.0);
    const Tensor xs = Tensor::from_vector(x, {rows * cols + 1}, t, Device::cuda);
    Tensor ys = Tensor::full({rows * cols + 1}, kNaN, t, Device::cuda);
    const size_t es = dtype_size(t);
    for (bool log : {false, true}) {
      k::SoftmaxArgs a;
      a.device = DeviceType::cuda;
      a.op = log ? k::SoftmaxOp::log_softmax : k::SoftmaxOp::softmax;
      a.rows = rows;
      a.cols = cols;
      a.x = static_cast<const char*>(xs.data_ptr()) + es;
      a.x_type = t;
      a.y = static_cast<char*>(ys.data_ptr()) + es;
      a.y_type = t;
      const std::vector<std::string> rungs = rungs_for(a);
      ASSERT_FALSE(rungs.empty()) << a.describe() << ": no CUDA rung takes it, nothing would be tested";
      expect_register_row_listed(a, rungs, false);
      for (const std::string& rung : rungs) {
        // NaN, then 2.0 (no probability or log-probability, exact in FP16): with NaN alone a rung that
        // skips row 0 (all -inf, NaN due) would pass.
        for (double fill : {kNaN, 2.0}) {
          ys.fill_(fill);
          k::softmax(a, rung);
          auto out = ys.to_double();
          EXPECT_TRUE(std::isnan(fill) ? std::isnan(out[0]) : out[0] == fill) << rung << ": wrote before the output";
          out.erase(out.begin());
          const std::string what = rung + " misaligned, output filled with " + std::to_string(fill);
          EXPECT_EQ(check_forward(e, out, log, t == DType::f16, chain_for(rung, cols), what), 0) << what;
        }
      }
    }
  }
}

// Every rung's log-softmax backward against float64, for every dtype pair (f16 y with f32 gx writes
// 32-byte output packs), with dy aligned and then one element off the 16-byte grid (x and the output
// aligned: the rungs must check dy's alignment too and take their scalar paths). {530000, 10}: more
// rows than one grid of warps covers (register_warp, warp_row step to further rows), f16 only.
TEST(SoftmaxCuda, EveryRungLogSoftmaxBackward) {
  HL_REQUIRE_CUDA();
  uint64_t seed = hl::test::fresh_seed();
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 7}, {128, 10}, {128, 33}, {3, 1024}, {5, 4097}, {3, 70000}, {70000, 10},
           // register_row's per-thread counts and capacities (register_row_plan.h)
           {3, 2056}, {2, 8200}, {2, 16383}, {2, 16384}, {2, 16388}, {2, 32768},
           // register_warp's per-lane counts (register_row_plan.h, namespace warp), rows not a multiple
           // of its 8 rows per block
           {9, 64}, {9, 100}, {9, 255}, {9, 256}, {9, 512}, {9, 1000}, {9, 1025},
           // cluster_row's blocks: 2 x 256 threads x 2 packs, 8 x 256 x 4 (f32 packs, f16 packs, and the
           // scalar path with dy misaligned), 8 x 512 x 4
           {2, 8192}, {2, 65536}, {2, 131072}, {530000, 10}}) {
    for (auto [ty, tgx] : std::vector<std::pair<DType, DType>>{
             {DType::f32, DType::f32}, {DType::f32, DType::f16}, {DType::f16, DType::f16}, {DType::f16, DType::f32}}) {
      if (rows > 100000 && (ty != DType::f16 || tgx != DType::f16)) continue;
      const size_t n = static_cast<size_t>(rows * cols);
      const Expect e = reference(hl::test::random_values(n, seed++, -6, 6, DType::f32), rows, cols);
      std::vector<double> y = e.lp;
      for (auto& v : y) v = ty == DType::f16 ? static_cast<double>(round_to_half(static_cast<float>(v))) : static_cast<float>(v);
      const auto gy = hl::test::random_values(n, seed++, -1, 1, ty);
      std::vector<double> want(n), scale(n);
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0, s_abs = 0;
        for (int64_t c = 0; c < cols; ++c) {
          s += gy[static_cast<size_t>(r * cols + c)];
          s_abs += std::fabs(gy[static_cast<size_t>(r * cols + c)]);
        }
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          want[i] = gy[i] - std::exp(y[i]) * s;
          scale[i] = std::fabs(gy[i]) + std::exp(y[i]) * s_abs;  // the size of the terms involved
        }
      }
      std::vector<double> gy_shifted(gy);
      gy_shifted.insert(gy_shifted.begin(), 0.0);
      const Tensor dy = device_tensor(y, rows, cols, ty), dgy = device_tensor(gy, rows, cols, ty);
      const Tensor dgy_shifted = Tensor::from_vector(gy_shifted, {rows * cols + 1}, ty, Device::cuda);
      Tensor gx = Tensor::full({rows, cols}, kNaN, tgx, Device::cuda);
      for (bool shift_dy : {false, true}) {
        if (shift_dy && rows > 100000) continue;
        k::SoftmaxArgs a;
        a.device = DeviceType::cuda;
        a.op = k::SoftmaxOp::log_softmax_backward;
        a.rows = rows;
        a.cols = cols;
        a.x = dy.data_ptr();
        a.x_type = ty;
        a.dy = shift_dy ? static_cast<const char*>(dgy_shifted.data_ptr()) + dtype_size(ty) : dgy.data_ptr();
        a.y = gx.data_ptr();
        a.y_type = tgx;
        const std::vector<std::string> rungs = rungs_for(a);
        ASSERT_FALSE(rungs.empty()) << a.describe() << ": no CUDA rung takes it, nothing would be tested";
        expect_register_row_listed(a, rungs, !shift_dy);
        for (const std::string& rung : rungs) {
          gx.fill_(kNaN);
          k::softmax(a, rung);
          const auto out = gx.to_double();
          // The row sum is a chain of FP32 additions (bounded by chain * u * sum|gy|), expf is within 2
          // ulps, and an FP16 output rounds once more.
          const double acc = (3.0 * static_cast<double>(chain_for(rung, cols)) + 20) * ref::kU32;
          int64_t bad = 0;
          for (size_t i = 0; i < n; ++i) {
            const double tol = acc * scale[i] + ref::out_rel(tgx == DType::f16) * std::fabs(want[i]) +
                               ref::out_abs(tgx == DType::f16);
            if (!(std::fabs(out[i] - want[i]) <= tol) && ++bad <= 5)
              ADD_FAILURE() << rung << " backward " << rows << "x" << cols << (shift_dy ? " (dy misaligned)" : "")
                            << " element " << i << " = " << out[i] << ", want " << want[i];
          }
          EXPECT_EQ(bad, 0) << rung << " " << dtype_name(ty) << "->" << dtype_name(tgx)
                            << (shift_dy ? " dy misaligned" : "");
        }
      }
    }
  }
}

// A register rung (register_row, register_warp, cluster_row) at and around the edges of its capacity: for
// each [rows, cols], FP16 and FP32 inputs (rows of whole 16-byte packs take the packed path, others the
// scalar path), small and large logits (the many-rows cases, which test the row stepping, small ones
// only), FP16 and FP32 outputs, softmax and log-softmax. Where per_thread(cols, width) > 0 the rung
// runs and matches the reference; where it is 0 the rung is declined, with a reason that contains
// `declined_says` (or, for FP32 rows of a rung that takes FP16 rows only, `fp32_declined_says` when
// given), and never runs. Afterwards every per-thread count compiled_for() lists has run.
// Rows 0..4 are the all -inf, masked, logit-12, +inf and NaN rows of make_logits.
// declines_by_design(a): for arguments the rung declines within its capacity by design (packed_kept:
// log-softmax and FP32 outputs), a piece of the reason it must give; "" for the rest.
void sweep_register_rung(const std::string& rung, const std::vector<std::pair<int64_t, int64_t>>& cases,
                         const std::function<int(int64_t, int)>& per_thread, bool (*compiled_for)(int, int),
                         const std::string& declined_says, const std::string& fp32_declined_says = "",
                         const std::function<std::string(const k::SoftmaxArgs&)>& declines_by_design = {}) {
  const auto& v = *k::SoftmaxRegistry::instance().find(rung, DeviceType::cuda);
  uint64_t seed = hl::test::fresh_seed();
  std::set<std::pair<int, int>> used;  // (width, per-thread count) plans run
  for (const auto& [rows, cols] : cases) {
    for (DType tx : {DType::f16, DType::f32}) {
      const int width = register_row_width(tx, cols, true);
      const int count = per_thread(cols, width);
      for (double range : {8.0, tx == DType::f16 ? 60000.0 : 1e4}) {
        if (rows > 64 && range > 8.0) continue;
        const Expect e = reference(make_logits(rows, cols, range, tx, seed++, /*nonfinite=*/true), rows, cols);
        const Tensor x = device_tensor(e.x, rows, cols, tx);
        bool filled_run = false;  // the run with a finite fill, below, done for this case, dtype and range
        for (DType ty : {DType::f16, DType::f32}) {
          for (bool log : {false, true}) {
            Tensor y = Tensor::full({rows, cols}, kNaN, ty, Device::cuda);  // poisoned
            const k::SoftmaxArgs a = forward_args(log, x, y);
            const char* why = v.unsupported(a);
            const std::string what = rung + " " + a.describe();
            if (count == 0) {  // past the capacity: declined with the reason, never run
              EXPECT_NE(why, nullptr) << what;
              if (why != nullptr) {
                const bool fp32_reason = tx == DType::f32 && !fp32_declined_says.empty();
                EXPECT_NE(std::string(why).find(fp32_reason ? fp32_declined_says : declined_says), std::string::npos)
                    << what << ": " << why;
              }
              EXPECT_THROW(k::softmax(a, rung), Error) << what;
              continue;
            }
            if (const std::string by_design = declines_by_design ? declines_by_design(a) : ""; !by_design.empty()) {
              EXPECT_NE(std::string(why != nullptr ? why : "").find(by_design), std::string::npos)
                  << what << ": " << (why != nullptr ? why : "(accepted)");
              continue;
            }
            ASSERT_EQ(why, nullptr) << what << ": " << why;
            used.insert({width, count});
            k::softmax(a, rung);
            EXPECT_EQ(check_forward(e, y.to_double(), log, ty == DType::f16, chain_for(rung, cols), what), 0) << what;
            // NaN-due rows (0, 3, 4) again with a finite fill: a rung that skips them passes the NaN one.
            // Once per case, input dtype and range (the first output dtype and op the rung takes), so every
            // plan: these sweeps run under compute-sanitizer with time limits, and
            // EveryRungForwardAgainstReference does it for every rung, output dtype and op.
            if (!filled_run) {
              filled_run = true;
              EXPECT_EQ(check_forward_2_filled(e, a, rung, what), 0) << what;
            }
          }
        }
      }
    }
  }
  // Every kernel instantiation has run (the cases must reach each per-thread count).
  for (int width : {8, 4, 1})
    for (int p = 1; p <= 32; p *= 2)
      if (compiled_for(p, width)) {
        EXPECT_EQ(used.count({width, p}), 1u) << rung << ": " << width << "-wide packs x " << p << " never ran";
      }
}

// register_row (kernels/cuda/softmax/register_row.cu): every per-thread count on both paths, the
// largest rows it takes and the first it declines. Since the plan gives a row the most packs per
// thread (2026-11-27), the counts 1 and 2 come only from rows of one warp: 248 columns (31 FP16 packs,
// or 62 FP32 packs at 2 per lane) and 512 (64 FP16 packs at 2 per lane). Without them the H100 run of
// that day ran no 1- or 2-pack kernel here, and the check at the end said so.
TEST(SoftmaxCuda, RegisterRowAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("register_row")) GTEST_SKIP() << "register_row is not registered in this build";
  std::vector<std::pair<int64_t, int64_t>> cases;
  for (int64_t cols : {1,    7,    100,   248,   512,   1000,  1023,  1024,  1025,  2047,  2048,  2056,  4095,
                       4096, 4104, 8192, 8200, 16383, 16384, 16385, 16388, 20000, 32760, 32767, 32768, 32769})
    cases.push_back({5, cols});
  sweep_register_rung("register_row", cases,
                      [](int64_t cols, int width) { return k::register_row::plan(cols, width).per_thread; },
                      k::register_row::compiled_for, "at most 32768 columns");
}

// register_row with every plan that bench/softmax_bench --sweep times: the tuning hook moves the
// block size (and so the per-thread count) for the same row, and every such plan must give the same
// answers. The hook is reset on the way out, also when an assertion fails.
TEST(SoftmaxCuda, RegisterRowEveryPlanTheSweepTimes) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("register_row")) GTEST_SKIP() << "register_row is not registered in this build";
  namespace rr = k::register_row;
  struct Reset {
    ~Reset() { rr::preferred_threads_for_tuning().store(0); }
  } reset;
  uint64_t seed = hl::test::fresh_seed();
  std::set<std::pair<int, int>> plans;  // (threads, per_thread) run, over all lengths
  for (const int64_t cols : {1000, 1024, 4096, 4104, 8192}) {
    const int64_t rows = 5;
    const Expect e = reference(make_logits(rows, cols, 8.0, DType::f16, seed++), rows, cols);
    const Tensor x = device_tensor(e.x, rows, cols, DType::f16);
    for (int preferred : {32, 64, 128, 256, 512, 1024}) {
      rr::preferred_threads_for_tuning().store(preferred);
      const rr::Plan p = rr::plan(cols, register_row_width(DType::f16, cols, true), preferred);
      ASSERT_GT(p.threads, 0) << cols;
      plans.insert({p.threads, p.per_thread});
      for (bool log : {false, true}) {
        Tensor y = Tensor::full({rows, cols}, kNaN, DType::f16, Device::cuda);  // poisoned
        const k::SoftmaxArgs a = forward_args(log, x, y);
        k::softmax(a, "register_row");
        const std::string what = "register_row, preferred " + std::to_string(preferred) + " threads: " + a.describe();
        EXPECT_EQ(check_forward(e, y.to_double(), log, true, chain_for("register_row", cols), what), 0) << what;
        // Row 0 (all -inf, NaN due) again with a finite fill: a plan that skips it passes the NaN one.
        // Softmax only (log-softmax runs the same plan): this test runs under compute-sanitizer.
        if (!log) {
          EXPECT_EQ(check_forward_2_filled(e, a, "register_row", what), 0) << what;
        }
      }
    }
  }
  EXPECT_GE(plans.size(), 8u) << "the sweep should reach several distinct plans";
}

// register_warp (kernels/cuda/softmax/register_warp.cu): every per-lane count on both paths, its
// capacity (1024 columns), row counts that are not a multiple of its 8 rows per block, and more rows
// than one grid covers (530000 rows: 66250 blocks of 8 warps > 65535, so warps step to further rows).
TEST(SoftmaxCuda, RegisterWarpAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("register_warp")) GTEST_SKIP() << "register_warp is not registered in this build";
  std::vector<std::pair<int64_t, int64_t>> cases;
  for (int64_t cols : {1, 7, 10, 31, 32, 33, 63, 64, 65, 100, 128, 255, 256, 257, 511, 512, 513, 1000, 1023, 1024,
                       1025, 1032, 2048})
    cases.push_back({9, cols});
  cases.push_back({530000, 10});
  sweep_register_rung("register_warp", cases, k::register_row::warp::per_lane, k::register_row::warp::compiled_for,
                      "at most 1024 columns");
}

// The rungs that keep a row as its FP16 packs in one block, on packed_row's plan (packed_row.cu,
// packed_online.cu): every per-thread count (1, 2, 4 and 8 FP16 packs), one warp and up to 1024
// threads, the capacity (65536 columns), more rows than one grid covers, and what they decline: FP32
// rows, rows that are not whole packs (the scalar path) and longer rows, each with its reason.
void sweep_packed_block_rung(const std::string& rung,
                             const std::function<std::string(const k::SoftmaxArgs&)>& declines_by_design = {}) {
  std::vector<std::pair<int64_t, int64_t>> cases;
  for (int64_t cols : {7,    8,    100,  248,  256,  264,   512,   520,   1000,  1024,  1032,  2048,
                       2056, 8192, 8200, 32760, 32768, 32776, 65528, 65535, 65536, 65544, 70000})
    cases.push_back({5, cols});
  cases.push_back({70000, 8});  // more rows than one grid covers: blocks step to further rows
  sweep_register_rung(
      rung, cases, [](int64_t cols, int width) { return k::register_row::packed::plan(cols, width).per_thread; },
      k::register_row::packed::compiled_for, "keeps a row in the registers of one block",
      "keeps FP16 rows as their packs (FP32 rows: register_row)", declines_by_design);
}

// Why packed_kept's own tests cannot run here, or nullptr: they need the rung, and a GPU that gives a
// block the 224 KiB of a 65536-column row.
const char* packed_kept_not_here() {
  if (!registered_on_cuda("packed_kept")) return "packed_kept is not registered in this build";
  if (runtime::cuda_max_shared_memory_per_block() < kernels::cuda::kept_frames::shared_bytes(1024, 8))
    return "this GPU gives a block less shared memory than a 65536-column row of packed_kept needs";
  return nullptr;
}

// What packed_kept declines within its capacity, by design: log-softmax (it keeps exponentials, not x)
// and FP32 outputs (subnormal probabilities it flushes).
std::string packed_kept_declines(const k::SoftmaxArgs& a) {
  if (a.op != k::SoftmaxOp::softmax) return "softmax only";
  if (a.y_type != DType::f16) return "writes FP16 probabilities";
  return "";
}

TEST(SoftmaxCuda, PackedRowAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("packed_row")) GTEST_SKIP() << "packed_row is not registered in this build";
  sweep_packed_block_rung("packed_row");
}

TEST(SoftmaxCuda, PackedOnlineAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("packed_online")) GTEST_SKIP() << "packed_online is not registered in this build";
  sweep_packed_block_rung("packed_online");
}

// packed_kept (packed_kept.cu, opt-in): packed_online's plan and cases, every per-thread count, and with
// 8 packs per thread each stride of its kept exponentials (kept_frames.h's stride_for: 8192, 32768 and
// 65536 columns take blocks of 128, 512 and 1024 threads), where a block may have the 224 KiB of a
// 65536-column row (an H100's 227 KiB; an A100's 163 KiB would decline that row).
TEST(SoftmaxCuda, PackedKeptAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (const char* why = packed_kept_not_here()) GTEST_SKIP() << why;
  sweep_packed_block_rung("packed_kept", packed_kept_declines);
}

// packed_online and packed_kept give each thread its own (max, sum) pair, folded pack by pack, before
// the block merges them, so a thread whose whole share of the row is -inf, or -inf and NaN, or holds the
// +inf, or whose maximum rises from pack to pack, is a case of its own that random rows rarely make: a
// thread owns packs t, t + threads, ... (packs_owned), so these rows mask by owner and pack. Row 0: the
// first half of the threads see only -inf; row 1: one finite value in the row; row 2: one thread sees
// only -inf and a NaN (the row is NaN); row 3: one thread holds a +inf among finite values (no finite
// maximum: NaN); row 4: every thread but the last sees only -inf; row 5: each thread's first half of its
// packs is -inf (its pair starts from -inf after a pack); row 6: logits near FP16's largest, rising by
// 1024 from each of a thread's packs to the next (every pack a new maximum, the base-2 shift's rounding
// at its largest, and all but the last pack's terms rescaled to nothing); row 7 (2026-11-28): one
// thread's first pack holds only -inf and a NaN, its other packs finite values (the row is NaN: until
// then packed_online dropped that NaN when the finite pack came); row 8 (2026-11-28): logits rising by
// 1 from each of a thread's packs to the next, so that its frame rises by one or two whole frames per
// pack and packed_kept's earlier packs lag by a few frames, factors that show in FP16. Small enough for
// racecheck (scripts/gpu_check.sh), which checks the merge's shared memory and packed_kept's kept values.
void check_threads_without_a_finite_value(const std::string& rung,
                                          const std::function<std::string(const k::SoftmaxArgs&)>& declines = {}) {
  const auto& v = *k::SoftmaxRegistry::instance().find(rung, DeviceType::cuda);
  uint64_t seed = hl::test::fresh_seed();
  for (const int64_t cols : {4096, 65536}) {
    const k::register_row::Plan plan = k::register_row::packed::plan(cols, 8);
    const int threads = plan.threads;
    ASSERT_GT(threads, 32) << cols << ": the case needs more than one warp";
    ASSERT_GT(plan.per_thread, 1) << cols << ": the case needs more than one pack per thread";
    const int64_t rows = 9;
    std::vector<double> x = make_logits(1, rows * cols, 8.0, DType::f16, seed++);  // random, no special rows
    const auto owner = [&](int64_t c) { return static_cast<int>((c / 8) % threads); };
    const auto pack_of = [&](int64_t c) { return static_cast<int>((c / 8) / threads); };  // the owner's i-th
    for (int64_t c = 0; c < cols; ++c) {
      const int t = owner(c);
      if (pack_of(c) < plan.per_thread / 2) x[static_cast<size_t>(5 * cols + c)] = -kInf;
      double& high = x[static_cast<size_t>(6 * cols + c)];  // random in [-8, 8] until here
      high = static_cast<double>(round_to_half(static_cast<float>(57000.0 - 1024.0 * (plan.per_thread - 1) +
                                                                  1024.0 * pack_of(c) + 16.0 * high)));
      if (t < threads / 2) x[static_cast<size_t>(c)] = -kInf;
      x[static_cast<size_t>(cols + c)] = c == cols / 3 ? 1.5 : -kInf;
      if (t == 5) x[static_cast<size_t>(2 * cols + c)] = c == 5 * 8 + 3 ? kNaN : -kInf;
      if (t == threads - 1) x[static_cast<size_t>(4 * cols + c)] = 0.25 * static_cast<double>(c % 7);
      else x[static_cast<size_t>(4 * cols + c)] = -kInf;
      if (t == 9 && pack_of(c) == 0) x[static_cast<size_t>(7 * cols + c)] = c % 8 == 3 ? kNaN : -kInf;
      double& rising = x[static_cast<size_t>(8 * cols + c)];  // random in [-8, 8] until here
      rising = static_cast<double>(round_to_half(static_cast<float>(1.0 * pack_of(c) + rising / 16.0)));
    }
    x[static_cast<size_t>(3 * cols + 7 * 8 + 2)] = kInf;
    const Expect e = reference(x, rows, cols);
    const Tensor xt = device_tensor(e.x, rows, cols, DType::f16);
    bool filled_run = false;  // the run with a finite fill, below, done for this length
    for (DType ty : {DType::f16, DType::f32}) {
      for (bool log : {false, true}) {
        Tensor y = Tensor::full({rows, cols}, kNaN, ty, Device::cuda);  // poisoned
        const k::SoftmaxArgs a = forward_args(log, xt, y);
        const std::string what =
            rung + " " + (log ? "log_softmax" : "softmax") + " f16->" + dtype_name(ty) + " " + std::to_string(cols) + " columns";
        if (const std::string by_design = declines ? declines(a) : ""; !by_design.empty()) {
          const char* why = v.unsupported(a);
          EXPECT_NE(std::string(why != nullptr ? why : "").find(by_design), std::string::npos) << what;
          continue;
        }
        k::softmax(a, rung);
        EXPECT_EQ(check_forward(e, y.to_double(), log, ty == DType::f16, chain_for(rung, cols), what), 0) << what;
        // Every row again with a finite fill (NaN is due in rows 2, 3 and 7): a rung whose thread or
        // block skips a row without a finite maximum passes the NaN-poisoned run. Once per length (the
        // first output dtype and op the rung takes): this test runs under racecheck with a time limit.
        if (!filled_run) {
          filled_run = true;
          EXPECT_EQ(check_forward_2_filled(e, a, rung, what, rows), 0) << what;
        }
      }
    }
  }
}

TEST(SoftmaxCuda, PackedOnlineThreadsWithoutAFiniteValue) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("packed_online")) GTEST_SKIP() << "packed_online is not registered in this build";
  check_threads_without_a_finite_value("packed_online");
}

TEST(SoftmaxCuda, PackedKeptThreadsWithoutAFiniteValue) {
  HL_REQUIRE_CUDA();
  if (const char* why = packed_kept_not_here()) GTEST_SKIP() << why;
  check_threads_without_a_finite_value("packed_kept", packed_kept_declines);
}

// Runs `rung` and `ref` on the same FP16 logits (make_logits' special rows, all -inf, masked, 12, +inf
// and NaN, and random ones), both output dtypes, softmax and log-softmax, and fails on every element
// whose bits differ (a NaN matches a NaN): for two rungs that compute in the same order. The outputs
// start different (NaN and 0), so an element that neither writes differs too.
void expect_same_bits(const std::string& rung, const std::string& ref, int64_t rows, int64_t cols, uint64_t seed) {
  const Expect e = reference(make_logits(rows, cols, 8.0, DType::f16, seed, /*nonfinite=*/true), rows, cols);
  const Tensor x = device_tensor(e.x, rows, cols, DType::f16);
  for (DType ty : {DType::f16, DType::f32}) {
    for (bool log : {false, true}) {
      Tensor y1 = Tensor::full({rows, cols}, kNaN, ty, Device::cuda), y2 = Tensor::full({rows, cols}, 0.0, ty, Device::cuda);
      k::softmax(forward_args(log, x, y1), ref);
      k::softmax(forward_args(log, x, y2), rung);
      const std::vector<double> a = y1.to_double(), b = y2.to_double();
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
        if (!same && differ++ < 3)
          ADD_FAILURE() << rung << " " << (log ? "log_softmax " : "softmax ") << dtype_name(ty) << " " << rows << "x"
                        << cols << " element " << i << ": " << b[i] << ", " << ref << " " << a[i];
      }
      EXPECT_EQ(differ, 0) << rung << " against " << ref << ", " << cols << " columns";
    }
  }
}

// packed_row computes what register_row computes, in the same order (its header), wherever both give a
// row the same number of threads: each thread then owns the same packs and the block's sums add the
// same partial sums. Their plans agree on FP16 rows of whole packs up to 1024 columns (one warp, 1, 2
// or 4 packs per thread); there the two give the same bits, for both output dtypes, softmax and
// log-softmax, on make_logits' special rows (all -inf, masked, 12, +inf, NaN) and random ones. Longer
// rows get 8 packs per thread from packed_row and at most 4 from register_row, so twice the threads
// and another order of the sum: PackedRowAtItsCapacityBoundaries checks those against the reference.
// (The H100 run of 2026-11-27 found 1-ulp differences at 512 columns and beyond when the test asked
// for the same bits there: register_row's plan then gave 512 columns 64 threads.) Small enough for
// racecheck (scripts/gpu_check.sh).
TEST(SoftmaxCuda, PackedRowGivesRegisterRowsBits) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("packed_row") || !registered_on_cuda("register_row")) GTEST_SKIP() << "not registered";
  uint64_t seed = hl::test::fresh_seed();
  std::set<int> counts;
  for (const int64_t cols : {8, 256, 512, 1000, 1024}) {
    const int64_t rows = 5;
    const k::register_row::Plan packed = k::register_row::packed::plan(cols, 8), own = k::register_row::plan(cols, 8);
    ASSERT_EQ(packed.threads, own.threads) << cols << " columns: the plans give the row different threads";
    counts.insert(packed.per_thread);
    expect_same_bits("packed_row", "register_row", rows, cols, seed++);
  }
  EXPECT_EQ(counts, (std::set<int>{1, 2, 4})) << "every per-thread count the two plans share";
  for (const int64_t cols : {2048, 8192, 32768})  // where they part
    EXPECT_NE(k::register_row::packed::plan(cols, 8).threads, k::register_row::plan(cols, 8).threads) << cols;
}

// packed_warp (kernels/cuda/softmax/packed_warp.cu): every per-lane count (1 to 16 FP16 packs), its
// capacity (4096 columns), row counts that are not a multiple of its 8 rows per block, more rows than
// one grid covers, and what it declines: FP32 rows, rows that are not whole packs and longer rows, each
// with its reason.
TEST(SoftmaxCuda, PackedWarpAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("packed_warp")) GTEST_SKIP() << "packed_warp is not registered in this build";
  std::vector<std::pair<int64_t, int64_t>> cases;
  for (int64_t cols : {7, 8, 100, 248, 256, 264, 512, 520, 1000, 1024, 1032, 2048, 2056, 3000, 4088, 4096, 4104, 8192})
    cases.push_back({9, cols});
  cases.push_back({530000, 8});  // 66250 blocks of 8 warps > 65535: warps step to further rows
  sweep_register_rung("packed_warp", cases, k::register_row::packed_warp::per_lane,
                      k::register_row::packed_warp::compiled_for, "packed_warp keeps");
}

// packed_warp computes what register_warp computes, with the same packs per lane and the same warp
// reductions in the same order (its header): wherever both take a row with the same count (whole
// FP16 packs up to 1024 columns: 1, 2 and 4 packs per lane), the two give the same bits, for both
// output dtypes, softmax and log-softmax, on make_logits' special rows and random ones.
TEST(SoftmaxCuda, PackedWarpGivesRegisterWarpsBits) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("packed_warp") || !registered_on_cuda("register_warp")) GTEST_SKIP() << "not registered";
  namespace rr = k::register_row;
  uint64_t seed = hl::test::fresh_seed();
  std::set<int> counts;
  for (const int64_t cols : {64, 256, 512, 1000, 1024}) {
    const int64_t rows = 11;  // not a multiple of the 8 rows per block
    ASSERT_EQ(rr::packed_warp::per_lane(cols, 8), rr::warp::per_lane(cols, 8)) << cols;
    counts.insert(rr::packed_warp::per_lane(cols, 8));
    expect_same_bits("packed_warp", "register_warp", rows, cols, seed++);
  }
  EXPECT_EQ(counts, (std::set<int>{1, 2, 4})) << "every per-lane count the two share";
}

// cluster_row (kernels/cuda/softmax/cluster_row.cu): every per-thread count of its blocks on both
// paths, clusters of 2, 4 and 8 blocks, chunks that leave the second block of a cluster with no
// columns (a row of one pack: 1 column on the scalar path, 4 FP32 or 8 FP16 columns on the packed
// path), its capacity (131072 FP16 columns in whole packs, 65536 otherwise), and more rows than one
// grid of clusters covers (40000 rows of 16: 32767 clusters of 2, so clusters step).
TEST(SoftmaxCuda, ClusterRowAtItsCapacityBoundaries) {
  HL_REQUIRE_CUDA();
  if (!registered_on_cuda("cluster_row")) GTEST_SKIP() << "cluster_row is not registered in this build";
  if (runtime::cuda_compute_capability() < 90) GTEST_SKIP() << "cluster_row needs compute capability 9.0";
  std::vector<std::pair<int64_t, int64_t>> cases;
  // 300: each block of a 2-block cluster takes 150 columns, single values 8 per lane (FP16: not whole
  // packs) or 38 FP32 packs at 2 per lane, the counts no other length here reaches since register_row's
  // plan gives the most packs per thread (2026-11-27).
  for (int64_t cols : {1,    4,     7,     8,     100,   300,   1000,  1023,  1024,   2047,   4096,   4097,
                       8192, 8193, 16384, 16385, 32768, 32769, 65536, 65537, 65540, 131072, 131073, 131080})
    cases.push_back({5, cols});
  cases.push_back({40000, 16});
  const auto per_thread = [](int64_t cols, int width) {
    return k::register_row::cluster::plan(cols, width).block.per_thread;
  };
  sweep_register_rung("cluster_row", cases, per_thread, k::register_row::compiled_for, "at most 131072 columns");
}

// cluster_row's plan (plain C++, no GPU): for every row length up to the capacity, a cluster of 2, 4
// or 8 blocks of at most 512 threads whose chunks are whole packs and cover the row, each block's
// plan covering its chunk with no member owning more packs than its kernel keeps; no plan past it.
TEST(SoftmaxClusterRowPlan, CoversEveryRowUpToItsCapacity) {
  namespace rr = k::register_row;
  namespace cl = k::register_row::cluster;
  EXPECT_EQ(cl::max_cols(8), 131072);
  EXPECT_EQ(cl::max_cols(4), 65536);
  EXPECT_EQ(cl::max_cols(1), 65536);
  for (int width : {8, 4, 1}) {
    std::set<int> sizes;
    for (int64_t cols = width; cols <= cl::max_cols(width); cols += width) {
      const cl::Plan p = cl::plan(cols, width);
      ASSERT_TRUE(p.blocks == 2 || p.blocks == 4 || p.blocks == 8) << cols << " x " << width;
      ASSERT_EQ(p.chunk % width, 0) << cols;
      ASSERT_GE(int64_t{p.blocks} * p.chunk, cols) << cols;
      ASSERT_LE(p.block.threads, cl::kMaxThreads) << cols;
      ASSERT_TRUE(rr::compiled_for(p.block.per_thread, width)) << cols;
      // Every block's chunk (the last ones may be short, or empty) within its members' packs.
      for (int b = 0; b < p.blocks; ++b) {
        const int64_t begin = int64_t{b} * p.chunk;
        const int64_t len = std::max<int64_t>(0, std::min<int64_t>(p.chunk, cols - begin));
        const int packs = static_cast<int>(len / width);
        // Member 0 owns the most packs (packs_owned does not grow with the rank).
        ASSERT_LE(rr::packs_owned(packs, 0, p.block.threads), p.block.per_thread) << cols << " block " << b;
        ASSERT_GE(int64_t{p.block.threads} * p.block.per_thread, packs) << cols << " block " << b;
      }
      sizes.insert(p.blocks);
    }
    EXPECT_EQ(sizes, (std::set<int>{2, 4, 8})) << width;
    EXPECT_EQ(cl::plan(cl::max_cols(width) + width, width).blocks, 0) << width;
    EXPECT_EQ(cl::plan(0, width).blocks, 0) << width;
  }
  // The shapes it is for: 4 blocks of 256 threads x 4 packs for 1024x32768; 8 for 128x65536.
  EXPECT_EQ(cl::plan(32768, 8).blocks, 4);
  EXPECT_EQ(cl::plan(32768, 8).block.threads, 256);
  EXPECT_EQ(cl::plan(65536, 8).blocks, 8);
  EXPECT_EQ(cl::plan(65536, 8).block.per_thread, 4);
}

// register_row's launch plan (plain C++, no GPU): every row length up to the capacity gets a block
// of whole warps, 32..1024 threads, a per-thread count that has a kernel, enough values for the row
// and no idle warp; the next length past the capacity gets no plan.
TEST(SoftmaxRegisterRowPlan, CoversEveryRowUpToItsCapacity) {
  namespace rr = k::register_row;
  EXPECT_EQ(rr::max_cols(8), 32768);  // 1024 threads x 4 FP16 packs x 8
  EXPECT_EQ(rr::max_cols(4), 16384);  // 1024 threads x 4 FP32 packs x 4
  EXPECT_EQ(rr::max_cols(1), 16384);  // 1024 threads x 16 single values
  EXPECT_EQ(rr::kMaxCols, rr::max_cols(8));
  for (int width : {8, 4, 1}) {
    std::set<int> counts;
    for (int64_t cols = width; cols <= rr::max_cols(width); cols += width) {
      const rr::Plan p = rr::plan(cols, width);
      ASSERT_GT(p.threads, 0) << cols;
      ASSERT_EQ(p.threads % 32, 0) << cols;
      ASSERT_LE(p.threads, rr::kMaxThreads) << cols;
      ASSERT_TRUE(rr::compiled_for(p.per_thread, width)) << cols;
      const int64_t values = static_cast<int64_t>(p.threads) * p.per_thread * width;
      ASSERT_GE(values, cols) << cols;
      ASSERT_LT(values - static_cast<int64_t>(32) * p.per_thread * width, cols) << cols << ": a whole warp idle";
      counts.insert(p.per_thread);
    }
    for (int p = 1; p <= 32; p *= 2)
      if (rr::compiled_for(p, width)) {
        EXPECT_EQ(counts.count(p), 1u) << "per-thread count " << p << " never chosen";
      }
    EXPECT_EQ(rr::plan(rr::max_cols(width) + width, width).threads, 0) << width;
    EXPECT_EQ(rr::plan(0, width).threads, 0) << width;
  }
  // Spot checks of the rule (the fewest values per thread within one warp, else the most: the H100
  // sweep's choice, register_row_plan.h), and of the rule with the first guess's 256 threads.
  EXPECT_EQ(rr::plan(1, 1).threads, 32);
  EXPECT_EQ(rr::plan(256, 8).threads, 32);
  EXPECT_EQ(rr::plan(256, 8).per_thread, 1);
  EXPECT_EQ(rr::plan(1024, 8).threads, 32);
  EXPECT_EQ(rr::plan(1024, 8).per_thread, 4);
  EXPECT_EQ(rr::plan(4096, 8).threads, 128);
  EXPECT_EQ(rr::plan(4096, 8).per_thread, 4);
  EXPECT_EQ(rr::plan(1024, 8, 256).threads, 128);
  EXPECT_EQ(rr::plan(1024, 8, 256).per_thread, 1);
  EXPECT_EQ(rr::plan(4096, 8, 256).threads, 256);
  EXPECT_EQ(rr::plan(4096, 8, 256).per_thread, 2);
  EXPECT_EQ(rr::plan(32768, 8).threads, 1024);
  EXPECT_EQ(rr::plan(32768, 8).per_thread, 4);
  EXPECT_EQ(rr::plan(16384, 1).per_thread, 16);
}

// packed_row's plan (plain C++, no GPU): every FP16 row of whole packs up to 65536 columns gets a
// block of whole warps with a compiled per-thread count and enough packs, no idle warp, and the most
// packs per thread once a warp is not enough; FP32 packs, the scalar path, ragged and longer rows get
// none.
TEST(SoftmaxPackedRowPlan, CoversEveryFp16RowUpToItsCapacity) {
  namespace pk = k::register_row::packed;
  EXPECT_EQ(pk::kMaxCols, 65536);  // 1024 threads x 8 packs x 8
  std::set<int> counts;
  for (int64_t cols = 8; cols <= pk::kMaxCols; cols += 8) {
    const k::register_row::Plan p = pk::plan(cols, 8);
    ASSERT_GT(p.threads, 0) << cols;
    ASSERT_EQ(p.threads % 32, 0) << cols;
    ASSERT_LE(p.threads, pk::kMaxThreads) << cols;
    ASSERT_TRUE(pk::compiled_for(p.per_thread, 8)) << cols;
    const int64_t packs = cols / 8;
    ASSERT_GE(int64_t{p.threads} * p.per_thread, packs) << cols;
    ASSERT_LT(int64_t{p.threads - 32} * p.per_thread, packs) << cols << ": a whole warp idle";
    if (p.threads > 32) {
      ASSERT_EQ(p.per_thread, pk::kMaxPacks) << cols;
    }
    counts.insert(p.per_thread);
  }
  EXPECT_EQ(counts, (std::set<int>{1, 2, 4, 8}));
  for (int64_t cols : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, int64_t{65535}, int64_t{65544}})
    EXPECT_EQ(pk::plan(cols, 8).threads, 0) << cols;
  for (int width : {4, 1}) {
    EXPECT_EQ(pk::plan(1024, width).threads, 0) << width;
  }
  // The shapes it is for: 1024x32768 in blocks of 512 threads (two to an SM), 128x65536 in 1024.
  EXPECT_EQ(pk::plan(32768, 8).threads, 512);
  EXPECT_EQ(pk::plan(65536, 8).threads, 1024);
  EXPECT_EQ(pk::plan(65536, 8).per_thread, 8);
  EXPECT_EQ(pk::plan(2048, 8).threads, 32);
  EXPECT_EQ(pk::plan(1000, 8).per_thread, 4);
}

// register_warp's plan (plain C++, no GPU): every row up to 1024 columns gets the smallest compiled
// per-lane count whose 32 lanes cover it, every compiled count is chosen for some row, and longer rows
// get none.
TEST(SoftmaxRegisterWarpPlan, CoversEveryRowUpToItsCapacity) {
  namespace rw = k::register_row::warp;
  EXPECT_EQ(rw::kMaxCols, 1024);
  for (int width : {8, 4, 1}) {
    std::set<int> counts;
    for (int64_t cols = width; cols <= rw::kMaxCols; cols += width) {
      const int p = rw::per_lane(cols, width);
      ASSERT_TRUE(rw::compiled_for(p, width)) << cols << " x " << width;
      ASSERT_GE(int64_t{32} * p * width, cols) << cols;
      for (int q = 1; q < p; ++q)  // no smaller compiled count covers the row
        if (rw::compiled_for(q, width)) {
          ASSERT_LT(int64_t{32} * q * width, cols) << cols << ": " << q << " would do";
        }
      counts.insert(p);
    }
    for (int p = 1; p <= 32; ++p)
      if (rw::compiled_for(p, width)) {
        EXPECT_EQ(counts.count(p), 1u) << "per-lane count " << p << " never chosen";
      }
    EXPECT_EQ(rw::per_lane(rw::kMaxCols + width, width), 0) << width;
    EXPECT_EQ(rw::per_lane(0, width), 0) << width;
  }
  EXPECT_EQ(rw::per_lane(10, 1), 1);   // a 10-class head: one value per lane
  EXPECT_EQ(rw::per_lane(1024, 8), 4);  // 4 FP16 packs per lane
  EXPECT_EQ(rw::per_lane(1024, 4), 8);  // 8 FP32 packs
  EXPECT_EQ(rw::per_lane(1023, 1), 32);
}

// The per-thread counts each rung compiles a kernel for (register_row.cuh's with_per_thread, through which
// every rung of the family launches, instantiates exactly those for which compiled_for holds): the lists that
// register_row_plan.h names, whose register budgets its comments give (-Xptxas -v, no spills). The plans
// above are checked only against compiled_for itself, so a count dropped from it, or one added, would still
// pass them: rows would quietly get a wasteful count (a 33- to 64-column row on the scalar path 32 values
// per lane instead of 2), or run a kernel never measured.
TEST(SoftmaxRegisterRowPlan, CompiledCountsAreTheListsTheHeaderNames) {
  namespace rr = k::register_row;
  const auto in = [](int p, std::initializer_list<int> list) {
    return std::find(list.begin(), list.end(), p) != list.end();
  };
  for (int p = -1; p <= 64; ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(rr::compiled_for(p, 8), in(p, {1, 2, 4}));  // FP16 packs
    EXPECT_EQ(rr::compiled_for(p, 4), in(p, {1, 2, 4}));  // FP32 packs
    EXPECT_EQ(rr::compiled_for(p, 1), in(p, {2, 8, 16}));  // single values
    EXPECT_EQ(rr::warp::compiled_for(p, 8), in(p, {1, 2, 4}));
    EXPECT_EQ(rr::warp::compiled_for(p, 4), in(p, {1, 2, 4, 8}));
    EXPECT_EQ(rr::warp::compiled_for(p, 1), in(p, {1, 2, 8, 32}));
    EXPECT_EQ(rr::packed::compiled_for(p, 8), in(p, {1, 2, 4, 8}));  // FP16 packs only
    EXPECT_FALSE(rr::packed::compiled_for(p, 4));
    EXPECT_FALSE(rr::packed::compiled_for(p, 1));
    EXPECT_EQ(rr::packed_warp::compiled_for(p, 8), in(p, {1, 2, 4, 8, 16}));  // FP16 packs only
    EXPECT_FALSE(rr::packed_warp::compiled_for(p, 4));
    EXPECT_FALSE(rr::packed_warp::compiled_for(p, 1));
    for (int width : {0, 2, 16}) {
      EXPECT_FALSE(rr::compiled_for(p, width)) << width;
      EXPECT_FALSE(rr::warp::compiled_for(p, width)) << width;
      EXPECT_FALSE(rr::packed::compiled_for(p, width)) << width;
      EXPECT_FALSE(rr::packed_warp::compiled_for(p, width)) << width;
    }
  }
}

// A width that is no path gets no plan: below 1 (every plan refuses it before it divides by it, as the
// cluster plan's packs per row, (cols + width - 1) / width, would), and 2 or 16 values a pack, for which no
// rung compiles a kernel (the paths are 8, 4 and 1), rather than a count that with_per_thread would refuse
// only at launch. register_warp's per_lane reaches its end without a count then, and its last line answers.
TEST(SoftmaxRegisterRowPlan, EveryPlanRefusesAWidthWithNoKernel) {
  namespace rr = k::register_row;
  for (int width : {0, -1, -8, 2, 16}) {
    for (int64_t cols : {int64_t{1}, int64_t{16}, int64_t{64}, int64_t{1024}, int64_t{4096}}) {
      SCOPED_TRACE(std::to_string(cols) + " columns, width " + std::to_string(width));
      EXPECT_EQ(rr::plan(cols, width).threads, 0);
      EXPECT_EQ(rr::warp::per_lane(cols, width), 0);
      EXPECT_EQ(rr::cluster::plan(cols, width).blocks, 0);
      EXPECT_EQ(rr::packed::plan(cols, width).threads, 0);
      EXPECT_EQ(rr::packed_warp::per_lane(cols, width), 0);
    }
  }
}

// The kernels keep a member's packs i < owned of its P (register_row.cuh), so a plan that left some
// member owning more than P packs would drop values without a word. For every row length either rung
// takes and both plans' group sizes: each member owns at most P packs, its packs lie inside the row,
// and the members' packs add up to the row (each pack rank + i * size belongs to one member).
TEST(SoftmaxRegisterRowPlan, EveryMemberOwnsAtMostItsPacksAndTheRowIsCovered) {
  namespace rr = k::register_row;
  const auto check = [](int64_t cols, int width, int size, int per_thread, const char* rung) {
    const int packs = static_cast<int>((cols + width - 1) / width);
    int64_t total = 0;
    for (int rank = 0; rank < size; ++rank) {
      const int owned = rr::packs_owned(packs, rank, size);
      if (owned > per_thread || (owned > 0 && rank + (owned - 1) * size >= packs) || rank + owned * size < packs) {
        ADD_FAILURE() << rung << " cols " << cols << " width " << width << ": member " << rank << " of " << size
                      << " owns " << owned << " of its " << per_thread << " packs";
        return false;
      }
      total += owned;
    }
    EXPECT_EQ(total, packs) << rung << " cols " << cols << " width " << width;
    return total == packs;
  };
  for (int width : {8, 4, 1}) {
    for (int64_t cols = width; cols <= rr::max_cols(width); cols += width) {
      const rr::Plan p = rr::plan(cols, width);
      ASSERT_TRUE(check(cols, width, p.threads, p.per_thread, "register_row"));
    }
    for (int64_t cols = width; cols <= rr::warp::kMaxCols; cols += width)
      ASSERT_TRUE(check(cols, width, 32, rr::warp::per_lane(cols, width), "register_warp"));
  }
  for (int64_t cols = 8; cols <= rr::packed::kMaxCols; cols += 8) {
    const rr::Plan p = rr::packed::plan(cols, 8);
    ASSERT_TRUE(check(cols, 8, p.threads, p.per_thread, "packed_row"));
  }
  for (int64_t cols = 8; cols <= rr::packed_warp::kMaxCols; cols += 8)
    ASSERT_TRUE(check(cols, 8, 32, rr::packed_warp::per_lane(cols, 8), "packed_warp"));
  // The scalar path takes any length, not only multiples of the pack width.
  for (int64_t cols = 1; cols <= rr::warp::kMaxCols; ++cols)
    ASSERT_TRUE(check(cols, 1, 32, rr::warp::per_lane(cols, 1), "register_warp"));
}

// The sweep's tuning hook (register_row_plan.h) is off unless the benchmark sets it, and the plan it
// feeds moves the block size the way the rule says.
TEST(SoftmaxRegisterRowPlan, TuningHookIsOffByDefaultAndMovesThePlan) {
  namespace rr = k::register_row;
  EXPECT_EQ(rr::preferred_threads_for_tuning().load(), 0);
  // launch_plan (what register_row.cu launches) follows the hook, and the rule again once it is reset.
  struct Reset {
    ~Reset() { rr::preferred_threads_for_tuning().store(0); }
  } reset;
  // The rule's own block size (32 since the H100 sweep of 2026-11-27): the most packs per thread.
  EXPECT_EQ(rr::launch_plan(1024, 8).threads, 32);  // 4 packs per thread
  EXPECT_EQ(rr::launch_plan(1024, 8).per_thread, 4);
  EXPECT_EQ(rr::launch_plan(4096, 8).threads, 128);  // 4 packs per thread: the sweep's fastest plan
  rr::preferred_threads_for_tuning().store(128);
  EXPECT_EQ(rr::launch_plan(1024, 8).threads, 128);  // 1 pack per thread
  EXPECT_EQ(rr::launch_plan(1024, 8).per_thread, 1);
  rr::preferred_threads_for_tuning().store(0);
  EXPECT_EQ(rr::launch_plan(1024, 8).threads, 32);
  // Every row, hook off (0) and at its smallest setting (1): 0 is the rule's own 32, not a block size of
  // 0, whose plans differ wherever a smaller count fits one warp (256 FP16 columns: 32x1, not 32x4); and
  // 1 is a block size like any other (none fits 1 thread: the fewest threads there are, 256 columns at 32x4).
  for (int hook : {0, 1}) {
    rr::preferred_threads_for_tuning().store(hook);
    for (int width : {8, 4, 1})
      for (int64_t cols = width; cols <= rr::max_cols(width); cols += width) {
        const rr::Plan want = rr::plan(cols, width, hook > 0 ? hook : rr::kPreferredThreads);
        const rr::Plan got = rr::launch_plan(cols, width);
        ASSERT_TRUE(got.threads == want.threads && got.per_thread == want.per_thread)
            << "hook " << hook << ", " << cols << " x " << width << ": " << got.threads << "x" << got.per_thread;
      }
  }
  EXPECT_EQ(rr::plan(256, 8, rr::kPreferredThreads).per_thread, 1);
  EXPECT_EQ(rr::plan(256, 8, 1).per_thread, 4);
  rr::preferred_threads_for_tuning().store(0);
  EXPECT_EQ(rr::plan(4096, 8).threads, rr::plan(4096, 8, rr::kPreferredThreads).threads);
  EXPECT_EQ(rr::plan(4096, 8, 128).threads, 128);  // 4 packs per thread
  EXPECT_EQ(rr::plan(4096, 8, 128).per_thread, 4);
  EXPECT_EQ(rr::plan(4096, 8, 512).threads, 512);  // 1 pack per thread
  EXPECT_EQ(rr::plan(4096, 8, 32).threads, 128);   // nothing fits 32 threads: the fewest threads there are
  EXPECT_EQ(rr::plan(32768, 8, 32).threads, 1024);
}

// A rung asked for by name declines f16 softmax rows of `declined_cols` columns with a reason that
// contains `declined_says`, and computes no cross-entropy. Needs a CUDA build, no GPU.
void expect_pinned_rung_declines(const std::string& rung, int64_t rows, int64_t declined_cols,
                                 const std::string& declined_says) {
  k::SoftmaxArgs a;
  a.device = DeviceType::cuda;
  a.op = k::SoftmaxOp::softmax;
  a.rows = rows;
  a.x_type = a.y_type = DType::f16;
  a.cols = declined_cols;
  try {
    k::SoftmaxRegistry::instance().select(a, rung);
    ADD_FAILURE() << rung << " must decline " << declined_cols << " columns";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(declined_says), std::string::npos) << e.what();
  }
  a.op = k::SoftmaxOp::xent_fused;
  a.cols = 10;
  EXPECT_THROW(k::SoftmaxRegistry::instance().select(a, rung), Error);
}

// packed_warp's plan (plain C++, no GPU): every FP16 row of whole packs up to 4096 columns gets the
// smallest compiled per-lane count whose 32 lanes cover it; FP32 packs, the scalar path, ragged and
// longer rows get none. Up to 1024 columns it is register_warp's count, so the two compute the same
// packs (SoftmaxCuda.PackedWarpGivesRegisterWarpsBits).
TEST(SoftmaxPackedWarpPlan, CoversEveryFp16RowUpToItsCapacity) {
  namespace rr = k::register_row;
  namespace pw = rr::packed_warp;
  EXPECT_EQ(pw::kMaxCols, 4096);  // 32 lanes x 16 packs x 8
  std::set<int> counts;
  for (int64_t cols = 8; cols <= pw::kMaxCols; cols += 8) {
    const int p = pw::per_lane(cols, 8);
    ASSERT_TRUE(pw::compiled_for(p, 8)) << cols;
    const int64_t packs = cols / 8;
    ASSERT_GE(int64_t{32} * p, packs) << cols;
    ASSERT_TRUE(p == 1 || int64_t{32} * (p / 2) < packs) << cols << ": " << p << " packs per lane, half would do";
    if (cols <= rr::warp::kMaxCols) {
      ASSERT_EQ(p, rr::warp::per_lane(cols, 8)) << cols;
    }
    counts.insert(p);
  }
  EXPECT_EQ(counts, (std::set<int>{1, 2, 4, 8, 16}));
  for (int64_t cols : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, int64_t{4095}, int64_t{4104}})
    EXPECT_EQ(pw::per_lane(cols, 8), 0) << cols;
  for (int width : {4, 1}) {
    EXPECT_EQ(pw::per_lane(1024, width), 0) << width;
  }
  EXPECT_EQ(pw::per_lane(4096, 8), 16);  // the shape it is for: 4096x4096, 16 packs per lane
}

// An opt-in rung (cluster_row: verified, and slower where it was timed): the chooser never picks it, a
// pinned one runs where it fits and declines where it does not (expect_pinned_rung_declines). Needs a
// CUDA build, no GPU.
void expect_opt_in_rung(const std::string& rung, int64_t rows, const std::vector<int64_t>& fitting_cols,
                        int64_t declined_cols, const std::string& declined_says) {
  const auto& v = *k::SoftmaxRegistry::instance().find(rung, DeviceType::cuda);
  EXPECT_TRUE(v.opt_in) << rung << " was promoted: update this test, docs/softmax.md and the softmax README";
  k::SoftmaxArgs a;
  a.device = DeviceType::cuda;
  a.op = k::SoftmaxOp::softmax;
  a.rows = rows;
  a.x_type = a.y_type = DType::f16;
  for (int64_t cols : fitting_cols) {
    a.cols = cols;
    EXPECT_NE(k::softmax_variant_for(a), rung) << cols;
    EXPECT_EQ(k::SoftmaxRegistry::instance().select(a, rung).name, rung) << cols;
  }
  expect_pinned_rung_declines(rung, rows, declined_cols, declined_says);
}

// register_warp, promoted after its H200 run: the chooser's rung for 33 to 1024 columns (warp_row up
// to 32), for every op it computes and every dtype pair it reads; it declines past 1024 columns with
// its reason, and computes no cross-entropy.
TEST(SoftmaxCudaChooser, RegisterWarpTakesRowsOf33To1024Columns) {
  if (!registered_on_cuda("register_warp")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  const auto& reg = k::SoftmaxRegistry::instance();
  EXPECT_FALSE(reg.find("register_warp", DeviceType::cuda)->opt_in);
  if (std::getenv(k::SoftmaxArgs::env_var) != nullptr || !reg.default_name().empty())
    GTEST_SKIP() << "a softmax rung is pinned (HALFLING_SOFTMAX or --softmax): the automatic choice is not in use";
  k::SoftmaxArgs a;
  a.device = DeviceType::cuda;
  a.rows = 4096;
  for (k::SoftmaxOp op : {k::SoftmaxOp::softmax, k::SoftmaxOp::log_softmax, k::SoftmaxOp::log_softmax_backward}) {
    a.op = op;
    for (DType tx : {DType::f16, DType::f32}) {
      for (DType ty : {DType::f16, DType::f32}) {
        a.x_type = tx;
        a.y_type = ty;
        for (int64_t cols : {1, 10, 32}) {
          a.cols = cols;
          EXPECT_EQ(k::softmax_variant_for(a), "warp_row") << a.describe();
        }
        for (int64_t cols : {33, 100, 1000, 1024}) {
          a.cols = cols;
          EXPECT_EQ(k::softmax_variant_for(a), "register_warp") << a.describe();
        }
        a.cols = 1025;
        EXPECT_NE(k::softmax_variant_for(a), "register_warp") << a.describe();
      }
    }
  }
  expect_pinned_rung_declines("register_warp", 4096, 1025, "at most 1024 columns");
}

// packed_warp ran on an H100 (2026-11-27) and was slower than the rung the chooser takes at 4096x4096
// (37.95 us against register_row's 29.63): it stays opt-in. The chooser never picks it; pinned, it
// runs where it fits and declines past its capacity with the reason.
TEST(SoftmaxCudaChooser, PackedWarpStaysOptInSlowerWhereTimed) {
  if (!registered_on_cuda("packed_warp")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  expect_opt_in_rung("packed_warp", 4096, {8, 1024, 2048, 4096}, 4104, "at most 4096 columns");
}

// packed_online, promoted after its second version's H100 run, ahead of packed_row, promoted after its
// own (kernels/softmax.cpp says why): the chooser's first rung for FP16 forward rows of whole packs from
// 16385 to 65536 columns, both output dtypes; what it declines (the backward pass, FP32 rows, ragged
// rows) goes to the rungs the chooser took before. Needs a CUDA build, no GPU.
TEST(SoftmaxCudaChooser, PackedOnlineTakesLongFp16Rows) {
  if (!registered_on_cuda("packed_online")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  const auto& reg = k::SoftmaxRegistry::instance();
  EXPECT_FALSE(reg.find("packed_online", DeviceType::cuda)->opt_in);
  EXPECT_FALSE(reg.find("packed_row", DeviceType::cuda)->opt_in);
  if (std::getenv(k::SoftmaxArgs::env_var) != nullptr || !reg.default_name().empty())
    GTEST_SKIP() << "a softmax rung is pinned (HALFLING_SOFTMAX or --softmax): the automatic choice is not in use";
  k::SoftmaxArgs a;
  a.device = DeviceType::cuda;
  a.rows = 128;
  a.x_type = DType::f16;
  for (DType ty : {DType::f16, DType::f32}) {
    a.y_type = ty;
    for (k::SoftmaxOp op : {k::SoftmaxOp::softmax, k::SoftmaxOp::log_softmax}) {
      a.op = op;
      for (int64_t cols : {16392, 32768, 32776, 65536}) {
        a.cols = cols;
        EXPECT_EQ(k::softmax_variant_for(a), "packed_online") << a.describe();
      }
      for (int64_t cols : {4096, 16384}) {
        a.cols = cols;
        EXPECT_EQ(k::softmax_variant_for(a), "register_row") << a.describe();
      }
      a.cols = 32770;  // not whole packs: past register_row's scalar capacity too
      EXPECT_EQ(k::softmax_variant_for(a), "block_row") << a.describe();
      a.cols = 65544;
      EXPECT_EQ(k::softmax_variant_for(a), "online") << a.describe();
    }
    a.op = k::SoftmaxOp::log_softmax_backward;  // forward only: the rungs before it
    a.cols = 32768;
    EXPECT_EQ(k::softmax_variant_for(a), "register_row") << a.describe();
    a.cols = 65536;
    EXPECT_EQ(k::softmax_variant_for(a), "block_row") << a.describe();
  }
  a.op = k::SoftmaxOp::softmax;
  a.x_type = a.y_type = DType::f32;  // FP32 rows: neither packed rung's
  a.cols = 16392;
  EXPECT_EQ(k::softmax_variant_for(a), "block_row") << a.describe();
}

TEST(SoftmaxCudaChooser, ClusterRowStaysOptInSlowerWhereTimed) {
  if (!registered_on_cuda("cluster_row")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  const int cc = runtime::cuda_compute_capability();
  if (cc != 0 && cc < 90) GTEST_SKIP() << "cluster_row refuses every shape below compute capability 9.0";
  expect_opt_in_rung("cluster_row", 128, {100, 32768, 65536, 131072}, 131080, "at most 131072 columns");
}

// softmax() returns before running anything when a row is empty (rows x 0), but it selects the variant
// first, so a pinned rung that takes a row of 8 must also take a row of 0 (cluster_row once refused it:
// no cluster plan for 0 columns). Needs a CUDA build, no GPU: nothing is launched.
TEST(SoftmaxCudaChooser, EveryRungThatTakesARowTakesAnEmptyOne) {
  if (!registered_on_cuda("cluster_row")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  const auto& reg = k::SoftmaxRegistry::instance();
  for (const std::string& name : reg.names(DeviceType::cuda)) {
    for (k::SoftmaxOp op : {k::SoftmaxOp::softmax, k::SoftmaxOp::log_softmax, k::SoftmaxOp::log_softmax_backward}) {
      for (DType t : {DType::f16, DType::f32}) {
        k::SoftmaxArgs a;
        a.device = DeviceType::cuda;
        a.op = op;
        a.rows = 4;
        a.cols = 8;
        a.x_type = a.y_type = t;
        const auto* v = reg.find(name, DeviceType::cuda);
        ASSERT_NE(v, nullptr) << name;
        if (v->unsupported != nullptr && v->unsupported(a) != nullptr) continue;
        a.cols = 0;
        const char* why = v->unsupported != nullptr ? v->unsupported(a) : nullptr;
        EXPECT_EQ(why, nullptr) << name << " refuses " << a.describe() << ": " << why;
        EXPECT_NO_THROW(reg.select(a, name)) << name << " " << a.describe();
      }
    }
  }
}

// What each CUDA rung computes, and from which dtypes, as its row of kernels/cuda/softmax/README.md and
// its unsupported() say: every op against every pair of f16, f32 and f64 on a short row. The chooser's
// tests see only the rungs it picks, so the opt-in rungs' refusals (naive_fp16_nomax's FP16 softmax alone,
// packed_kept's FP16 probabilities alone, packed_warp's forward passes) had no test a GPU-less build ran:
// a rung named by --softmax would have taken what its kernel does not compute, and only a GPU run would
// tell. Also: the rungs that keep FP16 packs decline a row that is not a whole number of packs. Needs a
// CUDA build, no GPU: nothing is launched.
TEST(SoftmaxCudaChooser, EveryRungTakesTheOpsAndDtypesItsRowNames) {
  if (!registered_on_cuda("register_row")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  using Op = k::SoftmaxOp;
  const auto f16_or_f32 = [](DType t) { return t == DType::f16 || t == DType::f32; };
  const auto forward_and_backward = [](Op op) {
    return op == Op::softmax || op == Op::log_softmax || op == Op::log_softmax_backward;
  };
  // The FP32-math rungs: f16 or f32 in and out.
  const auto softmax_rung = [&](Op op, DType tx, DType ty) {
    return forward_and_backward(op) && f16_or_f32(tx) && f16_or_f32(ty);
  };
  // Rows kept as FP16 packs: the forward passes, FP16 in, f16 or f32 out.
  const auto packed_forward = [&](Op op, DType tx, DType ty) {
    return (op == Op::softmax || op == Op::log_softmax) && tx == DType::f16 && f16_or_f32(ty);
  };
  const int cc = runtime::cuda_compute_capability();  // 0 without a GPU
  const bool clusters = cc == 0 || cc >= 90;
  const std::map<std::string, std::function<bool(Op, DType, DType)>> takes = {
      {"naive", [&](Op op, DType, DType) { return forward_and_backward(op); }},  // the only FP64 rung
      {"naive_fp16_nomax",
       [](Op op, DType tx, DType ty) { return op == Op::softmax && tx == DType::f16 && ty == DType::f16; }},
      {"block_row", softmax_rung},
      {"warp_row", softmax_rung},
      {"online", softmax_rung},
      {"register_row", softmax_rung},
      {"register_warp", softmax_rung},
      {"cluster_row", [&](Op op, DType tx, DType ty) { return clusters && softmax_rung(op, tx, ty); }},
      {"packed_row", packed_forward},
      {"packed_online", packed_forward},
      {"packed_warp", packed_forward},
      {"packed_kept", [](Op op, DType tx, DType ty) { return op == Op::softmax && tx == DType::f16 && ty == tx; }},
      {"fused_xent",
       [&](Op op, DType tx, DType ty) {
         // xent_forward writes no probabilities or gradient: its y_type is not read.
         return (op == Op::xent_fused || op == Op::xent_backward || op == Op::xent_forward) && f16_or_f32(tx) &&
                (op == Op::xent_forward || f16_or_f32(ty));
       }},
  };
  const auto& reg = k::SoftmaxRegistry::instance();
  std::set<std::string> named;
  for (const auto& [name, rule] : takes) named.insert(name);
  const std::vector<std::string> registered = reg.names(DeviceType::cuda);
  EXPECT_EQ(std::set<std::string>(registered.begin(), registered.end()), named)
      << "a CUDA softmax rung was added or removed: give it its row here";
  for (const auto& [name, rule] : takes) {
    const auto* v = reg.find(name, DeviceType::cuda);
    if (v == nullptr) continue;  // reported above
    for (Op op : {Op::softmax, Op::log_softmax, Op::log_softmax_backward, Op::xent_forward, Op::xent_backward,
                  Op::xent_fused}) {
      for (DType tx : {DType::f16, DType::f32, DType::f64}) {
        for (DType ty : {DType::f16, DType::f32, DType::f64}) {
          k::SoftmaxArgs a;
          a.device = DeviceType::cuda;
          a.op = op;
          a.rows = 4;
          a.cols = 8;
          a.x_type = tx;
          a.y_type = ty;
          const char* why = v->unsupported != nullptr ? v->unsupported(a) : nullptr;
          EXPECT_EQ(why == nullptr, rule(op, tx, ty))
              << name << " " << a.describe() << (why != nullptr ? std::string(": declined, ") + why : ": taken");
        }
      }
    }
    // A row of 1, 7 or 9 FP16 columns is no whole number of 16-byte packs: the scalar path, which the
    // rungs that keep packs do not have.
    if (name.rfind("packed_", 0) == 0) {
      for (int64_t cols : {1, 7, 9}) {
        k::SoftmaxArgs a;
        a.device = DeviceType::cuda;
        a.rows = 4;
        a.cols = cols;
        a.x_type = a.y_type = DType::f16;
        EXPECT_NE(v->unsupported(a), nullptr) << name << " takes " << a.describe();
      }
    }
  }
}

// The default chooser (kernels/softmax.cpp) around register_row, and its declines. Needs a CUDA build
// (the rungs are registered there) but no GPU: nothing is launched.
TEST(SoftmaxCudaChooser, RegisterRowBetweenWarpRowAndBlockRow) {
  if (!registered_on_cuda("register_row")) GTEST_SKIP() << "CPU-only build: no CUDA softmax rungs are registered";
  const auto probe = [](k::SoftmaxOp op, int64_t cols, DType tx, DType ty) {
    k::SoftmaxArgs a;
    a.device = DeviceType::cuda;
    a.op = op;
    a.rows = 8;
    a.cols = cols;
    a.x_type = tx;
    a.y_type = ty;
    return a;
  };
  for (k::SoftmaxOp op : {k::SoftmaxOp::softmax, k::SoftmaxOp::log_softmax, k::SoftmaxOp::log_softmax_backward}) {
    for (DType ty : {DType::f16, DType::f32}) {
      EXPECT_EQ(k::softmax_variant_for(probe(op, 1024, DType::f16, ty)), "register_warp");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 1032, DType::f16, ty)), "register_row");
      // FP16 forward rows of whole packs past 16384 columns: packed_online (PackedOnlineTakesLongFp16Rows).
      const bool forward = op != k::SoftmaxOp::log_softmax_backward;
      EXPECT_EQ(k::softmax_variant_for(probe(op, 32768, DType::f16, ty)), forward ? "packed_online" : "register_row");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 32769, DType::f16, ty)), "block_row");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 65536, DType::f16, ty)), forward ? "packed_online" : "block_row");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 65537, DType::f16, ty)), "online");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 16384, DType::f32, ty)), "register_row");
      // Past register_row's FP32 capacity, and on the FP16 scalar path: block_row.
      EXPECT_EQ(k::softmax_variant_for(probe(op, 16388, DType::f32, ty)), "block_row");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 16385, DType::f16, ty)), "block_row");
      EXPECT_EQ(k::softmax_variant_for(probe(op, 16383, DType::f16, ty)), "register_row");
    }
    // f64 on either side, at every length: naive, the only rung that reads or writes it.
    for (int64_t cols : {10, 4096, 100000}) {
      EXPECT_EQ(k::softmax_variant_for(probe(op, cols, DType::f64, DType::f64)), "naive") << cols;
      EXPECT_EQ(k::softmax_variant_for(probe(op, cols, DType::f64, DType::f32)), "naive") << cols;
      EXPECT_EQ(k::softmax_variant_for(probe(op, cols, DType::f32, DType::f64)), "naive") << cols;
    }
  }
  // Cross-entropy: fused_xent, for f16 and f32; no GPU rung takes f64.
  for (k::SoftmaxOp op : {k::SoftmaxOp::xent_forward, k::SoftmaxOp::xent_backward, k::SoftmaxOp::xent_fused}) {
    for (DType t : {DType::f16, DType::f32})
      EXPECT_EQ(k::softmax_variant_for(probe(op, 10, t, t)), "fused_xent") << k::softmax_op_name(op);
    EXPECT_THROW(k::softmax_variant_for(probe(op, 10, DType::f64, DType::f64)), Error) << k::softmax_op_name(op);
  }
  // A pinned register_row that cannot take the row says why.
  try {
    k::SoftmaxRegistry::instance().select(probe(k::SoftmaxOp::softmax, 32776, DType::f16, DType::f16), "register_row");
    ADD_FAILURE() << "register_row must decline 32776 columns";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 32768 columns"), std::string::npos) << e.what();
  }
  EXPECT_THROW(k::SoftmaxRegistry::instance().select(probe(k::SoftmaxOp::xent_fused, 100, DType::f16, DType::f16),
                                                     "register_row"),
               Error);
  EXPECT_THROW(k::SoftmaxRegistry::instance().select(probe(k::SoftmaxOp::softmax, 100, DType::f64, DType::f64),
                                                     "register_row"),
               Error);
}

TEST(SoftmaxCuda, FusedXentLossAndGradient) {
  HL_REQUIRE_CUDA();
  uint64_t seed = hl::test::fresh_seed();
  for (const auto& [rows_, cols_] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 10}, {128, 10}, {1024, 10}, {128, 33}, {3, 1000}, {5, 4097}, {3, 65536}, {70000, 10}}) {
    const int64_t rows = rows_, cols = cols_;  // clang 14 (the sanitizer build) cannot capture a binding in a lambda
    for (DType tx : {DType::f16, DType::f32}) {
      for (double range : {8.0, tx == DType::f16 ? 60000.0 : 1e4}) {
        const Expect e = reference(make_logits(rows, cols, range, tx, seed++), rows, cols);
        std::vector<int32_t> labels(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          int32_t l = static_cast<int32_t>((static_cast<uint64_t>(r) * 2654435761u + seed) % static_cast<uint64_t>(cols));
          // Row 1 holds masked entries (make_logits): its label on one of them, column 0, where the batch
          // is a power of two (the multiplier 1/rows then exact in f32 and f16, so the gradient there is
          // exactly -S/rows, which the check below asks of a masked entry), else on column 1, unmasked.
          // A masked label: the loss +inf, the gradient row finite (kernels/softmax.h).
          if (r == 1) l = (rows == 128 || rows == 1024) ? 0 : static_cast<int32_t>(std::min<int64_t>(1, cols - 1));
          labels[static_cast<size_t>(r)] = l;
        }
        if (rows >= 128) labels[5] = -1;                               // a bad label: NaN loss and gradient row
        if (rows >= 128) labels[6] = static_cast<int32_t>(cols);
        const Tensor x = device_tensor(e.x, rows, cols, tx);
        const Tensor lab = Tensor::from_vector(labels, {rows}, Device::cuda);
        // The rows where NaN is due (0: all -inf; 5, 6: bad labels) lie in the first 7: the run with
        // finite fills (below) takes those rows only, a copy of x's and the labels' first rows.
        const int64_t few = std::min<int64_t>(rows, 7);
        const Tensor x_few = device_tensor(std::vector<double>(e.x.begin(), e.x.begin() + few * cols), few, cols, tx);
        const Tensor lab_few =
            Tensor::from_vector(std::vector<int32_t>(labels.begin(), labels.begin() + few), {few}, Device::cuda);
        const double S = 1024.0, mult = 1.0 / static_cast<double>(rows);  // |gradient| <= S * mult <= 1024
        const Tensor scale = Tensor::scalar(S, DType::f32, Device::cuda);
        for (DType tg : {DType::f16, DType::f32}) {
          // Outputs poisoned with NaN (the whole matrix), then filled with finite values no correct kernel
          // writes (xent_runs.h: losses -1, gradients 60000; the first rows): with NaN alone a kernel that
          // skips a bad label's row or a row without a finite maximum would pass.
          for (const bool finite_fill : {false, true}) {
            using hl::test::run_xent_split_and_fused;
            const hl::test::XentRuns run =
                finite_fill ? run_xent_split_and_fused(x_few, lab_few, scale, mult, tg, hl::test::xent_sentinel_fill())
                            : run_xent_split_and_fused(x, lab, scale, mult, tg);
            const int64_t run_rows = finite_fill ? few : rows;
            EXPECT_EQ(k::softmax_variant_for(run.forward), "fused_xent");  // the default must be fused_xent
            const auto lo = run.loss.to_double(), lo2 = run.loss_fused.to_double(), go = run.g.to_double(),
                       go2 = run.g_fused.to_double();
            const int64_t chain = chain_for("fused_xent", cols);
            int64_t bad = 0;
            for (int64_t r = 0; r < run_rows; ++r) {
              const size_t ri = static_cast<size_t>(r);
              const int32_t l = labels[ri];
              const bool bad_label = l < 0 || l >= cols;
              const auto& s = e.stats[ri];
              const double want = bad_label ? kNaN : -e.lp[static_cast<size_t>(r * cols + l)];
              const auto loss_ok = [&](double v) {
                if (std::isnan(want)) return std::isnan(v);
                if (std::isinf(want)) return v == want;
                return std::fabs(v - want) <= ref::logprob_tol(e.x[static_cast<size_t>(r * cols + l)], s, chain);
              };
              if ((!loss_ok(lo[ri]) || !loss_ok(lo2[ri])) && ++bad <= 5)
                ADD_FAILURE() << "loss row " << r << " = " << lo[ri] << " / " << lo2[ri] << ", want " << want;
              for (int64_t c = 0; c < cols; ++c) {
                const size_t i = static_cast<size_t>(r * cols + c);
                const double p = std::exp(e.lp[i]);
                const double gw = bad_label || std::isnan(p) ? kNaN : (p - (c == l ? 1.0 : 0.0)) * S * mult;
                const auto ok = [&](double v) {
                  if (std::isnan(gw)) return std::isnan(v);
                  if (e.x[i] == -kInf) return v == gw;
                  if (tg == DType::f16 && std::fabs(gw) > 65504)  // the scaled gradient overflows FP16
                    return std::signbit(v) == std::signbit(gw) && (std::isinf(v) || std::fabs(v) == 65504);
                  const double tol =
                      S * mult * (p * (ref::logprob_tol(e.x[i], s, chain) + 4 * ref::kU32) + 2 * ref::kU32) +
                      ref::out_rel(tg == DType::f16) * std::fabs(gw) + ref::out_abs(tg == DType::f16);
                  return std::fabs(v - gw) <= tol;
                };
                if ((!ok(go[i]) || !ok(go2[i])) && ++bad <= 5)
                  ADD_FAILURE() << "grad " << r << "," << c << " = " << go[i] << " / " << go2[i] << ", want " << gw;
              }
            }
            EXPECT_EQ(bad, 0) << "fused_xent " << dtype_name(tx) << "->" << dtype_name(tg) << " " << rows << "x" << cols
                              << " range " << range
                              << (finite_fill ? ", first rows, outputs filled with -1 and 60000" : "");
          }
        }
      }
    }
  }
}

TEST(SoftmaxCuda, Fp16OverflowLessonOnTheGpu) {
  HL_REQUIRE_CUDA();
  // The teaching rung overflows for a logit of 12; the CPU emulation agrees (NaN/inf in the same
  // places, finite values within one FP16 ulp: expf may differ by an FP32 ulp between libraries).
  const int64_t rows = 3, cols = 9;
  auto x = hl::test::random_values(static_cast<size_t>(rows * cols), hl::test::fresh_seed(), -4, 11, DType::f16);
  x[4] = 12.0;
  const Tensor xc = Tensor::from_vector(x, {rows, cols}, DType::f16), xg = xc.to(Device::cuda);
  Tensor yc = Tensor::full({rows, cols}, kNaN, DType::f16), yg = Tensor::full({rows, cols}, kNaN, DType::f16, Device::cuda);
  k::SoftmaxArgs a;
  a.op = k::SoftmaxOp::softmax;
  a.rows = rows;
  a.cols = cols;
  a.x_type = a.y_type = DType::f16;
  a.x = xc.data_ptr();
  a.y = yc.data_ptr();
  k::softmax(a, "naive_fp16_nomax");
  a.device = DeviceType::cuda;
  a.x = xg.data_ptr();
  a.y = yg.data_ptr();
  k::softmax(a, "naive_fp16_nomax");
  const auto c = yc.to_double(), gpu = yg.to_double();
  EXPECT_TRUE(std::isnan(gpu[4])) << gpu[4];
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i]) || std::isinf(c[i])) {
      EXPECT_TRUE(std::isnan(gpu[i]) == std::isnan(c[i]) && std::isinf(gpu[i]) == std::isinf(c[i])) << i;
    } else {
      EXPECT_NEAR(gpu[i], c[i], std::max(std::fabs(c[i]) * 0x1p-10, 0x1p-24)) << i;
    }
  }
  // Every FP32-math rung: the right answer for the same row.
  const Expect e = reference(x, rows, cols);
  const k::SoftmaxArgs probe = a;
  const std::vector<std::string> rungs = rungs_for(probe);
  ASSERT_FALSE(rungs.empty()) << probe.describe() << ": no CUDA rung takes it, nothing would be tested";
  for (const std::string& rung : rungs) {
    yg.fill_(kNaN);
    k::softmax(a, rung);
    EXPECT_EQ(check_forward(e, yg.to_double(), false, true, chain_for(rung, cols), rung + " logit 12"), 0) << rung;
  }
}

TEST(SoftmaxCuda, F64RunsInNaiveInDouble) {
  // f64 tensors on the GPU keep working: only `naive` takes them, and it computes in double.
  HL_REQUIRE_CUDA();
  uint64_t seed = hl::test::fresh_seed();
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {128, 10}, {5, 4097}}) {
    const Expect e = reference(make_logits(rows, cols, 50.0, DType::f64, seed++), rows, cols);
    const Tensor x = device_tensor(e.x, rows, cols, DType::f64);
    Tensor y = Tensor::full({rows, cols}, kNaN, DType::f64, Device::cuda);
    const k::SoftmaxArgs a = forward_args(true, x, y);
    EXPECT_EQ(k::softmax_variant_for(a), "naive");
    // Poisoned with NaN, then filled with 2.0 (no log-probability is above 0): with NaN alone a kernel
    // that skips row 0 (all -inf, NaN due) would pass.
    for (double fill : {kNaN, 2.0}) {
      y.fill_(fill);
      k::softmax(a);
      const auto out = y.to_double();
      int64_t bad = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double want = e.lp[i];
        // double math: the same error analysis with u = 2^-53, plus the long double reference's own rounding.
        const double tol = 1e-13 * (std::fabs(want) + 100.0 + static_cast<double>(cols));
        const bool ok = std::isnan(want)   ? std::isnan(out[i])
                        : std::isinf(want) ? out[i] == want
                                           : std::fabs(out[i] - want) <= tol;
        if (!ok && ++bad <= 5)
          ADD_FAILURE() << "f64 element " << i << " = " << out[i] << ", want " << want << " (fill " << fill << ")";
      }
      EXPECT_EQ(bad, 0) << rows << "x" << cols << ", output filled with " << fill;
    }
  }
}

TEST(SoftmaxCuda, FrameworkCrossEntropyOnCudaEqualsCpu) {
  HL_REQUIRE_CUDA();
  Generator gen(hl::test::fresh_seed());
  for (DType t : {DType::f32, DType::f16}) {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{128, 10}, {70000, 10}, {64, 1000}, {2, 65536}}) {
      const Tensor base = Tensor::uniform({rows, cols}, gen, -10, 10, t);
      std::vector<int32_t> lab(static_cast<size_t>(rows));
      for (auto& l : lab) l = static_cast<int32_t>(gen.below(static_cast<uint64_t>(cols)));
      const Tensor labels = Tensor::from_vector(lab, {rows});
      Tensor a = base.clone(), b = base.to(Device::cuda), u = base.to(Device::cuda);
      a.requires_grad_();
      b.requires_grad_();
      u.requires_grad_();
      const Tensor la = cross_entropy(a, labels), lb = cross_entropy(b, labels.to(Device::cuda)),
                   lu = cross_entropy_unfused(u, labels.to(Device::cuda));
      // f32 math on the GPU against double on the CPU: a mean of per-row losses each within ~1e-6
      // relative (the mean itself adds CUB's f32 summation).
      EXPECT_NEAR(lb.item(), la.item(), 1e-5 * (1 + std::fabs(la.item())));
      EXPECT_NEAR(lu.item(), la.item(), 1e-5 * (1 + std::fabs(la.item())));
      mul(la, 1024.0).backward();
      mul(lb, 1024.0).backward();
      mul(lu, 1024.0).backward();
      const auto ga = a.grad().to_double(), gb = b.grad().to_double(), gu = u.grad().to_double();
      ASSERT_EQ(b.grad().dtype(), t);
      const double rel = t == DType::f16 ? 2 * ref::kU16 : 1e-5;
      // The absolute error of an FP32 probability (~1e-6 for these logits) times the multiplier S/rows:
      // it dominates where softmax - onehot nearly cancels (a confident correct row).
      const double floor = 1024.0 / static_cast<double>(rows) * 1e-6 + 0x1p-24;
      int64_t bad = 0;
      for (size_t i = 0; i < ga.size(); ++i) {
        if (!(std::fabs(gb[i] - ga[i]) <= rel * std::fabs(ga[i]) + floor) && ++bad <= 5)
          ADD_FAILURE() << "fused grad " << i << " = " << gb[i] << ", cpu " << ga[i];
        if (!(std::fabs(gu[i] - ga[i]) <= rel * std::fabs(ga[i]) + floor) && ++bad <= 5)
          ADD_FAILURE() << "unfused grad " << i << " = " << gu[i] << ", cpu " << ga[i];
      }
      EXPECT_EQ(bad, 0) << dtype_name(t) << " " << rows << "x" << cols;
    }
  }
}

}  // namespace
