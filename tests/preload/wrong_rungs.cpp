// Wrong rungs, for tests only: the ladders of tutorials 04 and 08 must catch them. Loaded into a program
// with LD_PRELOAD (tests/tutorials/test_tutorial_04.cpp and test_tutorial_08.cpp), this library registers
// a GEMM and a softmax CPU variant, both named "wrong_row", that compute their output right (through the
// blocked GEMM and the reference softmax) but for one row, which they never write: the last by default,
// the bug of a kernel whose grid has no block for a partial last block of rows; HALFLING_WRONG_ROW=first,
// second or middle picks row 0, row 1 or the middle row instead, and first_element only the first element
// of row 0 (a check that starts at element 1 misses it). A program catches them only if it poisons the
// output before each rung (left alone, the row still holds the rung before's right answer) and if it
// compares what they leave out. Opt-in and at the lowest priorities: they run after every other rung of
// their ladder and are never anybody's default. Linked into no test and no program; a library of its own.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/registry.h"
#include "kernels/softmax.h"

namespace {

using hl::kernels::GemmArgs;
using hl::kernels::SoftmaxArgs;

// What a wrong rung leaves out, from HALFLING_WRONG_ROW (checked, so that a misspelt value is not taken
// for the default): first, second, middle, last (a row) or first_element.
std::string which_part() {
  const char* env = std::getenv("HALFLING_WRONG_ROW");
  const std::string which = env != nullptr ? env : "last";
  HL_CHECK(which == "first" || which == "second" || which == "middle" || which == "last" || which == "first_element",
           "wrong_row: HALFLING_WRONG_ROW=", which, " (first, second, middle, last or first_element)");
  return which;
}

// Runs `all` (which writes the whole output) but leaves the `bytes` at `out` as they were: that element is
// never written.
template <class F>
void all_but(void* out, size_t bytes, F all) {
  std::vector<char> kept(bytes);
  std::memcpy(kept.data(), out, bytes);
  all();
  std::memcpy(out, kept.data(), bytes);
}

// The row a wrong rung leaves out, of `rows`.
int64_t skipped_row(int64_t rows) {
  const std::string which = which_part();
  if (which == "first") return 0;
  if (which == "second") return std::min<int64_t>(1, rows - 1);
  return which == "middle" ? rows / 2 : rows - 1;
}

void wrong_gemm(const GemmArgs& g) {
  if (which_part() == "first_element")
    return all_but(g.C, hl::dtype_size(g.c_type), [&] { hl::kernels::gemm(g, "blocked"); });
  const int64_t r = skipped_row(g.M);
  if (r > 0) hl::kernels::gemm(hl::kernels::gemm_rows(g, 0, r), "blocked");
  if (r + 1 < g.M) hl::kernels::gemm(hl::kernels::gemm_rows(g, r + 1, g.M - r - 1), "blocked");
}

// Rows [first, first + count) of a softmax as a softmax of their own.
SoftmaxArgs softmax_rows(const SoftmaxArgs& a, int64_t first, int64_t count) {
  SoftmaxArgs part = a;
  part.rows = count;
  part.x = static_cast<const char*>(a.x) + first * a.cols * static_cast<int64_t>(hl::dtype_size(a.x_type));
  part.y = static_cast<char*>(a.y) + first * a.cols * static_cast<int64_t>(hl::dtype_size(a.y_type));
  return part;
}

void wrong_softmax(const SoftmaxArgs& a) {
  if (which_part() == "first_element")
    return all_but(a.y, hl::dtype_size(a.y_type), [&] { hl::kernels::softmax(a, "reference"); });
  const int64_t r = skipped_row(a.rows);
  if (r > 0) hl::kernels::softmax(softmax_rows(a, 0, r), "reference");
  if (r + 1 < a.rows) hl::kernels::softmax(softmax_rows(a, r + 1, a.rows - r - 1), "reference");
}

const char* softmax_only(const SoftmaxArgs& a) {
  return a.op == hl::kernels::SoftmaxOp::softmax ? nullptr : "the wrong rung computes the softmax forward only";
}

HL_REGISTER_VARIANT(GemmArgs, {"wrong_row", hl::DeviceType::cpu, -1000,
                               "for tests: leaves one row of C unwritten (HALFLING_WRONG_ROW)", wrong_gemm, nullptr,
                               /*opt_in=*/true});
HL_REGISTER_VARIANT(SoftmaxArgs, {"wrong_row", hl::DeviceType::cpu, -1000,
                                  "for tests: leaves one row of y unwritten (HALFLING_WRONG_ROW)", wrong_softmax,
                                  softmax_only, /*opt_in=*/true});

}  // namespace
