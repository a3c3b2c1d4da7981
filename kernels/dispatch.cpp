// Route each public kernel call to the backend of its device (see kernels/backends.h).
#include <atomic>
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/error.h"
#include "kernels/softmax.h"

namespace hl::kernels {

#if defined(HALFLING_WITH_CUDA)
#define HL_DISPATCH(fn, ...)                                  \
  do {                                                        \
    if (dev == DeviceType::cpu) return cpu::fn(__VA_ARGS__);  \
    return cuda::fn(__VA_ARGS__);                             \
  } while (0)
#else
#define HL_DISPATCH(fn, ...)                                                                            \
  do {                                                                                                  \
    if (dev == DeviceType::cpu) return cpu::fn(__VA_ARGS__);                                            \
    throw Error(#fn ": a cuda tensor reached a build without CUDA (rebuild with -DHALFLING_CUDA=ON)"); \
  } while (0)
#endif

void binary(DeviceType dev, BinaryOp op, const BroadcastIndex& ix, const void* a, DType ta, const void* b,
            DType tb, void* out, DType tout) {
  HL_DISPATCH(binary, op, ix, a, ta, b, tb, out, tout);
}
void unary(DeviceType dev, UnaryOp op, int64_t n, const void* x, DType tx, void* out, DType tout) {
  HL_DISPATCH(unary, op, n, x, tx, out, tout);
}
void relu_backward(DeviceType dev, int64_t n, const void* x, const void* grad_out, void* grad_in, DType t) {
  HL_DISPATCH(relu_backward, n, x, grad_out, grad_in, t);
}
void scalar(DeviceType dev, ScalarOp op, int64_t n, const void* x, double s, void* out, DType t) {
  HL_DISPATCH(scalar, op, n, x, s, out, t);
}
void cast(DeviceType dev, int64_t n, const void* x, DType tx, void* out, DType tout) {
  HL_DISPATCH(cast, n, x, tx, out, tout);
}
void fill(DeviceType dev, int64_t n, void* out, DType t, double value) { HL_DISPATCH(fill, n, out, t, value); }
void reduce_sum(DeviceType dev, const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout,
                double scale) {
  HL_DISPATCH(reduce_sum, ix, x, tx, out, tout, scale);
}
// The answers are i32 (the labels' dtype): an index or a count past 2^31 - 1 is refused, not wrapped.
void argmax_rows(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out) {
  HL_CHECK(rows >= 0 && cols >= 0, "argmax_rows: rows and cols must be >= 0, got rows=", rows, " cols=", cols);
  // Checked here for every device: the CPU loop would otherwise read the first element of an empty row.
  HL_CHECK(rows == 0 || cols >= 1, "argmax_rows: a row of 0 columns has no maximum (", rows, " rows)");
  HL_CHECK(cols <= INT32_MAX, "argmax_rows: ", cols, " columns, but the indices are i32 (at most ", INT32_MAX, ")");
  HL_DISPATCH(argmax_rows, rows, cols, x, tx, out);
}
void count_equal(DeviceType dev, int64_t n, const int32_t* a, const int32_t* b, int32_t* count) {
  HL_CHECK(n >= 0, "count_equal: n must be >= 0, got ", n);
  HL_CHECK(n <= INT32_MAX, "count_equal: ", n, " elements, but the count is i32 (at most ", INT32_MAX, ")");
  HL_DISPATCH(count_equal, n, a, b, count);
}
void any_nonfinite(DeviceType dev, int64_t n, const void* x, DType tx, int32_t* flag) {
  HL_DISPATCH(any_nonfinite, n, x, tx, flag);
}
namespace {
// What the nll kernels read and write: rows and cols >= 0, and the pointers of every side that is not
// empty (a kernel given rows = -2, cols = -3 would see 6 elements).
void check_nll(const char* op, int64_t rows, int64_t cols, const void* labels, const void* per_row,
               const char* per_row_name, const void* matrix, const char* matrix_name) {
  HL_CHECK(rows >= 0 && cols >= 0, op, ": rows and cols must be >= 0, got rows=", rows, " cols=", cols);
  HL_CHECK(rows == 0 || (labels != nullptr && per_row != nullptr), op, ": the labels or the ", per_row_name,
           " is a null pointer (", rows, " rows)");
  HL_CHECK(rows == 0 || cols == 0 || matrix != nullptr, op, ": the ", matrix_name, " is a null pointer (", rows,
           "x", cols, ")");
}
}  // namespace

void nll_forward(DeviceType dev, int64_t rows, int64_t cols, const void* logp, DType t, const int32_t* labels,
                 void* loss) {
  check_nll("nll_forward", rows, cols, labels, loss, "loss", logp, "log-probabilities");
  HL_DISPATCH(nll_forward, rows, cols, logp, t, labels, loss);
}
void nll_backward(DeviceType dev, int64_t rows, int64_t cols, const int32_t* labels, const void* gloss,
                  void* glogp, DType t) {
  check_nll("nll_backward", rows, cols, labels, gloss, "loss gradient", glogp, "log-probabilities' gradient");
  HL_DISPATCH(nll_backward, rows, cols, labels, gloss, glogp, t);
}
void sgd_update(DeviceType dev, const std::vector<ParamSlot>& slots, const SgdParams& p) {
  HL_DISPATCH(sgd_update, slots, p);
}
void adam_update(DeviceType dev, const std::vector<ParamSlot>& slots, const AdamParams& p) {
  HL_DISPATCH(adam_update, slots, p);
}
namespace {
std::atomic<bool>& multi_tensor_flag() {
  static std::atomic<bool> on{true};
  return on;
}
}  // namespace
void set_multi_tensor(bool on) { multi_tensor_flag().store(on, std::memory_order_relaxed); }
bool multi_tensor() { return multi_tensor_flag().load(std::memory_order_relaxed); }

void unscale_grads(DeviceType dev, const std::vector<GradSlot>& slots, float inv_scale, int32_t* found_inf,
                   const double* scale) {
  HL_DISPATCH(unscale_grads, slots, inv_scale, found_inf, scale);
}
void sum_of_squares(DeviceType dev, const std::vector<ConstSpan>& tensors, float* out) {
  HL_DISPATCH(sum_of_squares, tensors, out);
}
void clip_by_norm(DeviceType dev, const std::vector<Span>& grads, const float* sum_sq, double max_norm,
                  double* norm_out) {
  HL_DISPATCH(clip_by_norm, grads, sum_sq, max_norm, norm_out);
}
void optim_finish(DeviceType dev, const int32_t* skip, int64_t* applied_steps, const std::vector<int32_t*>& mark) {
  HL_DISPATCH(optim_finish, skip, applied_steps, mark);
}
void scaler_update(DeviceType dev, const ScalerRule& rule, ScalerState* state, const int32_t* found_inf,
                   float* scale_f32, double* history_slot) {
  HL_DISPATCH(scaler_update, rule, state, found_inf, scale_f32, history_slot);
}

}  // namespace hl::kernels
