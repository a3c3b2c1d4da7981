// File helpers (see io.h).
#include "datasets/io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "kernels/error.h"

namespace hl::data {

std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& op) {
  namespace fs = std::filesystem;
  const auto fail = [&](const auto&... what) { throw Error(detail::concat(op, "(", path, "): ", what...)); };
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("cannot open: no such file");
  if (fs::is_directory(path, ec)) fail("cannot open: it is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail("cannot open: ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  // Grow as bytes arrive rather than trusting a size taken before the read: the file may change.
  uint8_t chunk[1 << 16];
  for (size_t r; (r = std::fread(chunk, 1, sizeof chunk, f.get())) > 0;) bytes.insert(bytes.end(), chunk, chunk + r);
  if (std::ferror(f.get())) fail("read error: ", std::strerror(errno));
  return bytes;
}

}  // namespace hl::data
