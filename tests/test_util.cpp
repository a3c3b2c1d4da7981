#include "tests/test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "kernels/half.h"

namespace hl::test {

uint64_t fresh_seed() {
  // The test of the last call, its first seed and how many seeds it has taken. A later call in the
  // same test derives its seed from the first (a large odd stride apart, so that a test's seed++ does
  // not meet it), so that the one printed seed replays every call; each call used to draw (and print)
  // its own, and HALFLING_TEST_SEED could give back only one of them.
  static std::string test;
  static uint64_t first = 0, calls = 0;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string current = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "";
  if (info != nullptr && current == test) return first + 0x9E3779B97F4A7C15ull * ++calls;
  test = current;
  calls = 0;
  if (const char* env = std::getenv("HALFLING_TEST_SEED")) {
    first = std::strtoull(env, nullptr, 10);
    return first;
  }
  static uint64_t counter = 0;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  first = (t ^ (0x9E3779B97F4A7C15ull * ++counter)) % 1000000007ull;
  std::cout << "[ seed     ] HALFLING_TEST_SEED=" << first << "\n";
  return first;
}

double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) return INFINITY;
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

std::vector<double> random_values(size_t n, uint64_t seed, double lo, double hi, DType t) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (t == DType::f16) x = static_cast<double>(round_to_half(static_cast<float>(x)));
    if (t == DType::f32) x = static_cast<double>(static_cast<float>(x));
    if (t == DType::i32) x = std::floor(x);
  }
  return v;
}

std::pair<int, std::string> run_command(const std::string& cmd, bool* signaled) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  // The shell reports a child killed by signal N as exit status 128 + N.
  if (signaled) *signaled = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 128);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string tutorial_program(const std::string& name) {
  return (std::filesystem::path(HALFLING_BINARY_DIR) / "tutorials" / name).string();
}

std::string help_default(const std::string& help, const std::string& flag) {
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    // The flag's column: from the line's first character that is not a space to two spaces, where a
    // description on the same line starts ("--loss-scale TEXT=dynamic   none, static:S or ..."). A
    // description that names the flag ("unless --epochs says otherwise") is not its column.
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    const std::string column = line.substr(start, line.find("  ", start) - start);
    const bool first = column.rfind(flag + " ", 0) == 0;                     // "--epochs INT..."
    const bool after_short = column.find("," + flag + " ") != std::string::npos;  // "-e,--epochs INT..."
    if (!first && !after_short) continue;
    const size_t eq = column.rfind('=');
    return eq == std::string::npos ? "" : column.substr(eq + 1);
  }
  return "";
}

double shown_seconds_per_epoch(const std::string& out, int epochs, const std::string& device) {
  const size_t at = out.find("final test accuracy ");
  if (at == std::string::npos) return -1;
  const std::string format =
      "final test accuracy %*f%% after " + std::to_string(epochs) + " epoch(s), %lf s per epoch on %63s";
  double seconds = -1;
  char shown_device[64] = {};
  if (std::sscanf(out.c_str() + at, format.c_str(), &seconds, shown_device) != 2 || device != shown_device) return -1;
  return seconds;
}

namespace {

// $HALFLING_DATA/<name> or <repo>/data/<name>, whether it is there or not.
std::filesystem::path data_path(const std::string& name) {
  // Same convention as datasets/fetch.sh: $HALFLING_DATA, else <repo>/data.
  const char* env = std::getenv("HALFLING_DATA");
  const std::filesystem::path root = env ? std::filesystem::path(env) : std::filesystem::path(HALFLING_SOURCE_DIR) / "data";
  return root / name;
}

}  // namespace

std::string data_dir_absent_reason(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p = data_path(name);
  std::error_code ec;
  if (!fs::exists(p, ec)) return p.string() + " does not exist";
  if (!fs::is_directory(p, ec)) return p.string() + " is not a folder";
  fs::directory_iterator it(p, ec);
  if (ec) return p.string() + " cannot be read (" + ec.message() + ")";
  for (const fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    if (it->path().filename().string().rfind('.', 0) != 0) return "";  // something not hidden: there
  }
  return p.string() + " is empty (a failed datasets/fetch.sh?)";
}

std::string data_dir(const std::string& name) {
  return data_dir_absent_reason(name).empty() ? data_path(name).string() : std::string();
}

int lowest_free_fd() {
  const int fd = ::open("/dev/null", O_RDONLY);
  if (fd >= 0) ::close(fd);
  return fd;
}

StdinClosed::StdinClosed() : saved_(::dup(0)) { ::close(0); }

StdinClosed::~StdinClosed() {
  if (saved_ < 0) return;
  ::dup2(saved_, 0);
  ::close(saved_);
}

}  // namespace hl::test
