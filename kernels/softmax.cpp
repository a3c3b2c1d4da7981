// The public softmax entry point: check the arguments once, here, so that every variant can assume a
// well-formed problem, then hand over to the variant registry (kernels/registry.h).
#include "kernels/softmax.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "kernels/cuda/softmax/register_row_plan.h"
#include "kernels/error.h"

namespace hl::kernels {

namespace {

bool is_xent(SoftmaxOp op) {
  return op == SoftmaxOp::xent_forward || op == SoftmaxOp::xent_backward || op == SoftmaxOp::xent_fused;
}
bool writes_y(SoftmaxOp op) { return op != SoftmaxOp::xent_forward; }

void validate(const SoftmaxArgs& a) {
  const auto fail = [&](const auto&... what) {
    throw Error(detail::concat("softmax: ", what..., " (", a.describe(), ")"));
  };
  if (a.rows < 0 || a.cols < 0) fail("rows and cols must be >= 0, got rows=", a.rows, " cols=", a.cols);
  if (is_xent(a.op) && a.rows > 0 && a.cols < 1) fail("cross-entropy needs at least one class");
  if (a.rows == 0 || a.cols == 0) return;  // nothing is read or written
  if (!is_floating(a.x_type)) fail("the input must be f16, f32 or f64, got ", dtype_name(a.x_type));
  if (a.x == nullptr) fail("the input is a null pointer");
  if (writes_y(a.op)) {
    if (!is_floating(a.y_type)) fail("the output must be f16, f32 or f64, got ", dtype_name(a.y_type));
    if (a.y == nullptr) fail("the output is a null pointer");
  }
  if (a.op == SoftmaxOp::log_softmax_backward && a.dy == nullptr) fail("dy is a null pointer");
  if (is_xent(a.op)) {
    if (a.labels == nullptr) fail("labels is a null pointer");
    const DType want = a.x_type == DType::f64 ? DType::f64 : DType::f32;
    if (a.stat_type != want)
      fail("loss, statistics and grad_scale must be ", dtype_name(want), " for ", dtype_name(a.x_type),
           " logits (f32 math, §3.3), got ", dtype_name(a.stat_type));
    if (a.op != SoftmaxOp::xent_backward && a.loss == nullptr) fail("loss is a null pointer");
    if (a.op != SoftmaxOp::xent_fused && a.stats == nullptr) fail("stats is a null pointer");
    // fused_xent reads the label's logit for the loss after other threads may have written their
    // gradients over the row, so its gradient may not overlap the logits (xent_backward's may: it
    // reads its statistics from a.stats, written by xent_forward before).
    const auto n = static_cast<size_t>(a.rows * a.cols);
    if (a.op == SoftmaxOp::xent_fused && bytes_overlap(a.x, n * dtype_size(a.x_type), a.y, n * dtype_size(a.y_type)))
      fail("xent_fused cannot write the gradient over the logits it reads (y overlaps x): give y its own "
           "buffer, or run xent_forward then xent_backward");
  }
}

// On the GPU without a pinned or requested rung: the rungs that suit the shape, best first (the first
// that supports the arguments runs). Short rows: a warp per row keeps every SM busy without
// block-wide barriers; from 33 columns up to 1024, register_warp's warp reads the row once instead of
// warp_row's three times (4096x1024 f16 on an H200, 2026-11-26: 6.05 us, 92% of the copy bandwidth,
// against 8.25 us; bench/results/gpu_short_nvidia_h200_2026-11-26.txt). Up to 32 columns (the
// 10-class heads) the two were within noise of each other (4.4 to 4.7 us, launch-bound), and
// warp_row, the simpler, stays. Lengths between 33 and 1023 were not timed: there the same single
// read is the reason for the choice. Rows up to the register capacity: register_row reads the row once into
// registers (32768 columns for FP16 packs; 16384 for FP32 rows or the scalar path, where block_row
// takes over). Longer rows up to 65536: block_row. Longer still: the single-pass statistics of
// `online`. Measured on an H200 (bench/results/softmax_register_row_nvidia_h200_2026-11-23.txt, f16):
// 4096x1024 warp_row 8.2 us, register_row 8.7; 4096x4096 register_row 27.4, warp_row 32.1,
// block_row 33.1; 1024x32768 register_row 54.3, block_row 62.1; 128x65536 block_row 14.7, online 18.5.
// Past 65536 columns nothing is measured yet: online, whose single pass over the row is meant for
// rows too long to stay in cache. Since the H100 run of 2026-11-27
// (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt, f16, forward): packed_row first for FP16
// rows of whole packs longer than kPackedRowFrom columns, where it was faster than the rung it replaces
// on both shapes timed: 1024x32768 in 53.79 us (89% of the copy bandwidth) against register_row's 58.50,
// 128x65536 in 15.11 us against block_row's 18.28 (and PyTorch's 18.24). At 4096x4096 register_row's
// plan of 4 packs per thread (26.37 us) beat it (29.01). Between 4096 and 32768 columns nothing was
// timed; the boundary is where register_row needs more than 512 threads for a row, so that an SM holds
// one such row, which is what packed_row's 8 packs per thread avoid. Since the second H100 run of that
// day (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27_seventh_b.txt) packed_online, packed_row's
// plan with each thread's statistics folded as its packs arrive and base-2 exponentials, comes first
// in the same range: 128x65536 in 13.09 us (70% of the copy) against packed_row's 15.04 (61%),
// 1024x32768 in 50.41 us (95%) against 53.88 (89%); at 4096x4096 it was within 1% of register_row
// (26.65 against 26.41 us), which keeps the shorter rows. Rows both decline (the backward pass, FP32
// rows, ragged rows) go on to the next rung listed. A rung named here that declines the arguments is passed over, and
// the registry's priority order picks among the rest: that is how f64, which only `naive` reads,
// reaches it, and how f64 cross-entropy (no GPU rung) gets the registry's error.
constexpr int64_t kPackedRowFrom = register_row::kMaxCols / 2;  // 16384 columns: register_row's 512 threads

std::vector<std::string> auto_cuda_variants(const SoftmaxArgs& a) {
  if (is_xent(a.op)) return {"fused_xent"};
  if (a.cols <= 32) return {"warp_row"};
  if (a.cols <= 1024) return {"register_warp", "warp_row"};
  if (a.cols <= kPackedRowFrom) return {"register_row", "block_row"};
  if (a.cols <= register_row::kMaxCols) return {"packed_online", "packed_row", "register_row", "block_row"};
  if (a.cols <= 65536) return {"packed_online", "packed_row", "block_row"};
  return {"online"};
}

std::string requested_name(const SoftmaxArgs& a, const std::string& variant) {
  if (!variant.empty()) return variant;
  const SoftmaxRegistry& reg = SoftmaxRegistry::instance();
  // A pinned name (--softmax or the environment) applies on the devices that have it, as in
  // Registry::select; a name no device knows is passed on so that the registry reports it.
  std::string pinned = reg.default_name();
  if (const char* env = std::getenv(SoftmaxArgs::env_var); pinned.empty() && env != nullptr) pinned = env;
  if (!pinned.empty() && (reg.find(pinned, a.device) != nullptr || !reg.known_anywhere(pinned))) return pinned;
  if (a.device == DeviceType::cuda) {
    for (const std::string& name : auto_cuda_variants(a)) {
      const auto* v = reg.find(name, a.device);
      if (v != nullptr && (v->unsupported == nullptr || v->unsupported(a) == nullptr)) return name;
    }
  }
  return "";  // the registry's priority order
}

// The arguments of the row-wise wrappers at the end of this file (x in, y out; no cross-entropy).
SoftmaxArgs row_args(DeviceType dev, SoftmaxOp op, int64_t rows, int64_t cols, const void* x, DType tx, void* y,
                     DType ty) {
  SoftmaxArgs a;
  a.device = dev;
  a.op = op;
  a.rows = rows;
  a.cols = cols;
  a.x = x;
  a.x_type = tx;
  a.y = y;
  a.y_type = ty;
  return a;
}

}  // namespace

const char* softmax_op_name(SoftmaxOp op) {
  switch (op) {
    case SoftmaxOp::softmax: return "softmax";
    case SoftmaxOp::log_softmax: return "log_softmax";
    case SoftmaxOp::log_softmax_backward: return "log_softmax_backward";
    case SoftmaxOp::xent_forward: return "xent_forward";
    case SoftmaxOp::xent_backward: return "xent_backward";
    case SoftmaxOp::xent_fused: return "xent_fused";
  }
  return "?";
}

std::string SoftmaxArgs::describe() const {
  std::ostringstream os;
  os << softmax_op_name(op) << ' ' << rows << 'x' << cols << ' ' << dtype_name(x_type);
  if (writes_y(op)) os << "->" << dtype_name(y_type);
  if (is_xent(op)) {
    os << " stats " << dtype_name(stat_type);
    if (multiplier != 1.0) os << " multiplier=" << multiplier;
    if (grad_scale != nullptr) os << " *grad_scale";
  }
  os << " on " << device_name(device);
  return os.str();
}

void softmax(const SoftmaxArgs& args, const std::string& variant) {
  validate(args);
  const auto& v = SoftmaxRegistry::instance().select(args, requested_name(args, variant));
  if (args.rows == 0 || args.cols == 0) return;
  v.run(args);
}

std::string softmax_variant_for(const SoftmaxArgs& args) {
  return SoftmaxRegistry::instance().select(args, requested_name(args, "")).name;
}

bool softmax_can_run(const SoftmaxArgs& args) {
  const SoftmaxRegistry& reg = SoftmaxRegistry::instance();
  const std::string name = requested_name(args, "");
  const auto ok = [&](const Variant<SoftmaxArgs>& v) { return v.unsupported == nullptr || v.unsupported(args) == nullptr; };
  if (!name.empty()) {
    const auto* v = reg.find(name, args.device);
    return v != nullptr && ok(*v);
  }
  for (const auto& v : reg.all())
    if (v.device == args.device && !v.opt_in && ok(v)) return true;  // as Registry::select chooses
  return false;
}

void softmax_forward(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty) {
  softmax(row_args(dev, SoftmaxOp::softmax, rows, cols, x, tx, y, ty));
}

void log_softmax_forward(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty) {
  softmax(row_args(dev, SoftmaxOp::log_softmax, rows, cols, x, tx, y, ty));
}

void log_softmax_backward(DeviceType dev, int64_t rows, int64_t cols, const void* y, const void* gy, DType ty,
                          void* gx, DType tgx) {
  SoftmaxArgs a = row_args(dev, SoftmaxOp::log_softmax_backward, rows, cols, y, ty, gx, tgx);
  a.dy = gy;
  softmax(a);
}

}  // namespace hl::kernels
