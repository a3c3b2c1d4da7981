// AtomicFile (see atomic_file.h).
#include "framework/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/error.h"

namespace hl {

namespace {

constexpr size_t kWriteChunk = size_t(1) << 20;

std::mutex g_hook_mu;
std::function<void(size_t)> g_write_hook;

std::function<void(size_t)> current_hook() {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  return g_write_hook;
}

detail::AtomicWriteFn g_write_fn;  // empty: write(2)

detail::AtomicWriteFn current_write_fn() {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  return g_write_fn;
}

std::string errno_text() { return std::strerror(errno); }

// The process's umask. POSIX can only read it by setting it, so the set-and-restore pair runs under a
// lock: two AtomicFiles committing at once must not read each other's temporary 0 (and leave it set).
mode_t current_umask() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  const std::filesystem::path p(path_);
  HL_CHECK(p.has_filename(), op_, "(", path_, "): not a file name");
  dir_ = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  std::string name = ".";
  name.append(p.filename().string()).append(".tmp.XXXXXX");  // not a + b + c: GCC 12's -Wrestrict misfires
  const std::string tmpl = (dir_ / name).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  fd_ = ::mkstemp(buf.data());
  HL_CHECK(fd_ >= 0, op_, "(", path_, "): cannot create a temporary file in ", dir_.string(), ": ", errno_text());
  tmp_ = buf.data();
  hook_ = current_hook();
  write_fn_ = current_write_fn();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min(n, kWriteChunk);
    // write(2) may write less than asked (then the rest follows) or be interrupted by a signal
    // before writing anything (EINTR: try again). 0 bytes would loop forever: an error.
    const ssize_t w = write_fn_ ? write_fn_(fd_, p, chunk) : ::write(fd_, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    HL_CHECK(w > 0, op_, "(", path_, "): write failed after ", written_, " bytes: ",
             w == 0 ? std::string("no bytes written") : errno_text());
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<size_t>(w);
    if (hook_) hook_(written_);
  }
}

void AtomicFile::commit() {
  HL_CHECK(::fsync(fd_) == 0, op_, "(", path_, "): fsync failed: ", errno_text());
  // mkstemp creates 0600. A file being replaced keeps its permission bits (a checkpoint the user made
  // private with chmod 600 stays private); a new one gets those of any file the user creates. lstat,
  // not stat: a symbolic link is replaced by the new file (atomic_file.h), so its target's mode is
  // not the one being kept. Best effort, like the ownership, which rename cannot keep either.
  struct stat old {};
  const bool replacing = ::lstat(path_.c_str(), &old) == 0 && S_ISREG(old.st_mode);
  ::fchmod(fd_, replacing ? (old.st_mode & 0777) : (0666 & ~current_umask()));
  const int rc = ::close(fd_);
  fd_ = -1;
  HL_CHECK(rc == 0, op_, "(", path_, "): close failed: ", errno_text());
  HL_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, op_, "(", path_, "): cannot rename ", tmp_, " over it: ",
           errno_text());
  committed_ = true;
  // Make the rename itself durable. Best effort: some file systems cannot fsync a directory.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, const void* bytes, size_t size, const std::string& op) {
  AtomicFile file(path, op);
  file.write(bytes, size);
  file.commit();
}

namespace detail {
void set_atomic_write_hook(std::function<void(size_t)> hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_write_hook = std::move(hook);
}

void set_atomic_write_function(AtomicWriteFn fn) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_write_fn = std::move(fn);
}
}  // namespace detail

}  // namespace hl
