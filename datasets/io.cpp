// File helpers (see io.h).
#include "datasets/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

void write_file_atomic(const std::string& path, const void* bytes, size_t size, const std::string& op) {
  const auto fail = [&](const auto&... what) { throw Error(detail::concat(op, "(", path, "): ", what...)); };
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) fail("cannot create a temporary file next to it: ", std::strerror(errno));
  const auto* p = static_cast<const uint8_t*>(bytes);
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write: ", std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  // mkstemp creates 0600; a cache or image is as readable as any file the user writes.
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot write: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename the temporary file into place: ", std::strerror(err));
  }
}

}  // namespace hl::data
