// Files that appear whole or not at all: checkpoints, PNGs and the image-folder cache go through
// AtomicFile (the tutorials' CSV logs and bench/train's .npy files do not), so a crash, a full disk or a second process writing the same file
// can never leave a torn one behind, and a failed save keeps the old file (docs/checkpoints.md).
#pragma once
#include <sys/types.h>  // ssize_t

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

namespace hl {

// A file that appears at `path` only when commit() succeeds: the bytes go to a temporary file in the
// same directory (rename is atomic only within one file system), which is flushed to disk (fsync)
// before it is renamed over `path`. Until then, and whenever anything fails, `path` keeps its old
// contents. The temporary file is removed on failure; a killed process leaves it behind, named
// ".<file>.tmp.XXXXXX" next to the target. Errors are hl::Error("<op>(<path>): ...").
// Replacing is a rename, so `path` becomes a new file: it keeps the old file's permission bits, but
// not its owner, hard links or extended attributes, and a symbolic link at `path` is replaced by the
// new file (its target is left as it was) rather than written through.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Append n bytes, in chunks of at most 1 MiB. A short write is continued and EINTR retried; a write
  // of 0 bytes or an error (ENOSPC, EIO, ...) throws, naming how many bytes were written before.
  void write(const void* data, size_t n);
  // fsync, the permission bits of the regular file being replaced, else those of any file the user
  // creates (0666 & ~umask; mkstemp makes 0600), rename over `path`, then fsync the directory (best
  // effort) so that the rename itself is durable.
  void commit();

 private:
  std::string path_, op_, tmp_;
  std::filesystem::path dir_;
  int fd_ = -1;
  size_t written_ = 0;
  bool committed_ = false;
  std::function<void(size_t)> hook_;
  std::function<ssize_t(int, const void*, size_t)> write_fn_;
};

// `size` bytes at `path`, atomically (one AtomicFile). `op` names the caller in errors.
void write_file_atomic(const std::string& path, const void* bytes, size_t size, const std::string& op);

namespace detail {
// Test hook: called with the running byte count after each chunk an AtomicFile writes (the chunks are
// at most 1 MiB). A hook that throws makes the save fail at that point; tests use it to inject a
// failure mid-write, or to stop a writer process and kill it. Pass {} to remove.
void set_atomic_write_hook(std::function<void(size_t bytes_written)> hook);
// Test seam: AtomicFile calls this in place of POSIX write(2), with write's contract (bytes written,
// or -1 with errno set). Tests use it to play what a local disk rarely does: short writes, EINTR, a
// write of 0 bytes, ENOSPC. Pass {} to go back to write(2).
using AtomicWriteFn = std::function<ssize_t(int fd, const void* data, size_t n)>;
void set_atomic_write_function(AtomicWriteFn fn);
}  // namespace detail

}  // namespace hl
