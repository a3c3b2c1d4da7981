#include "kernels/dtype.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  // strtod rather than std::stod: stod throws out_of_range on underflow too, which would refuse the
  // subnormals that exact() writes (4.9406564584124654e-324 must read back). Overflow is refused.
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  const bool whole = end != begin && end == begin + text.size();
  const bool overflow = errno == ERANGE && std::isinf(v);
  if (whole && !overflow) return v;
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
