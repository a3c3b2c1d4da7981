// The text <-> number helpers of kernels/error.h that saved settings and states go through (loss-scaler
// specs, checkpoint metadata, model cards): exact() writes every bit of a double, parse_double and
// parse_int64 take a whole string or refuse it, naming what was being read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/error.h"

namespace {

// The message `parse` throws for `text`, or "(accepted)".
template <class Parse>
std::string error_of(Parse parse, const std::string& text, const char* what) {
  try {
    parse(text, what);
  } catch (const hl::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string error_of_double(const std::string& text) { return error_of(hl::detail::parse_double, text, "scale"); }
std::string error_of_int(const std::string& text) { return error_of(hl::detail::parse_int64, text, "step"); }

TEST(TextNumbers, ExactRoundTripsEveryBit) {
  EXPECT_EQ(hl::detail::exact(0.1), "0.10000000000000001");
  EXPECT_EQ(hl::detail::exact(65536), "65536");
  EXPECT_EQ(hl::detail::exact(-0.0), "-0");
  for (const double v : {0.1, 1.0 / 3.0, 2.0 / 3.0, 6.103515625e-05, 5.9604644775390625e-08, 65504.0,
                         std::numeric_limits<double>::max(), std::numeric_limits<double>::denorm_min(),
                         -std::numeric_limits<double>::min(), 0.85123456789012341}) {
    const double back = hl::detail::parse_double(hl::detail::exact(v), "v");
    EXPECT_EQ(back, v) << hl::detail::exact(v);
  }
}

TEST(TextNumbers, ParseDoubleTakesTheWholeStringOrNothing) {
  EXPECT_EQ(hl::detail::parse_double("1024", "scale"), 1024.0);
  EXPECT_EQ(hl::detail::parse_double("-2.5e-3", "scale"), -2.5e-3);
  EXPECT_EQ(hl::detail::parse_double("1e308", "scale"), 1e308);
  // Subnormals read back (std::stod would throw out_of_range on them), and below the smallest one a
  // value rounds to zero; only overflow is refused.
  EXPECT_EQ(hl::detail::parse_double("4.9406564584124654e-324", "scale"), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(hl::detail::parse_double("-1e-310", "scale"), -1e-310);
  EXPECT_EQ(hl::detail::parse_double("1e-400", "scale"), 0.0);
  for (const char* bad : {"", "x", "1.5x", "2 ", "1e999", "-1e999", "--1"}) {
    EXPECT_EQ(error_of_double(bad), std::string("scale: '").append(bad).append("' is not a number")) << bad;
  }
}

TEST(TextNumbers, ParseInt64TakesTheWholeRange) {
  EXPECT_EQ(hl::detail::parse_int64("0", "step"), 0);
  EXPECT_EQ(hl::detail::parse_int64("-3", "step"), -3);
  EXPECT_EQ(hl::detail::parse_int64("9223372036854775807", "step"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(hl::detail::parse_int64("-9223372036854775808", "step"), std::numeric_limits<int64_t>::min());
  for (const char* bad : {"", "seven", "12.5", "7 ", "9223372036854775808", "1e3"}) {
    EXPECT_EQ(error_of_int(bad), std::string("step: '").append(bad).append("' is not an integer")) << bad;
  }
}

}  // namespace
