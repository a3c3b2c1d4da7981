// halfling errors: one exception type, messages that name the operation and what was wrong.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hl {

// Every user-facing failure in halfling throws hl::Error. The message always starts with the
// operation ("matmul: ...", "read_idx(/path): ...") so a student can tell what went wrong where.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
// Every bit of a double as text: 17 significant digits round-trip exactly (saved settings, states).
std::string exact(double v);
// The whole of `text` as a number, or hl::Error("<what>: '<text>' is not a number / an integer"):
// for numbers read back from files and states, where std::stod's partial parses ("1.5x" -> 1.5) and
// its std::invalid_argument (no operation named) would not do.
double parse_double(const std::string& text, const std::string& what);
int64_t parse_int64(const std::string& text, const std::string& what);

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace hl

// HL_CHECK(cond, "op", parts...): throw hl::Error("op: parts...") when cond is false.
#define HL_CHECK(cond, ...)                                         \
  do {                                                              \
    if (!(cond)) throw ::hl::Error(::hl::detail::concat(__VA_ARGS__)); \
  } while (0)
