#include "kernels/dtype.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/error.h"

namespace hl {

std::string detail::exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

double detail::parse_double(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {  // invalid_argument, or out_of_range (beyond a double)
  }
  throw Error(what + ": '" + text + "' is not a number");
}

int64_t detail::parse_int64(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return static_cast<int64_t>(v);
  } catch (const std::exception&) {  // invalid_argument, or out_of_range (beyond 64 bits)
  }
  throw Error(what + ": '" + text + "' is not an integer");
}

}  // namespace hl
