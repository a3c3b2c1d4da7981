// The file helpers the loaders and savers share: read_file_bytes (whole files, at the edges of its
// 64 KiB read chunk) and write_file_atomic (framework/atomic_file.h: PNGs and the image-folder cache
// are written like checkpoints, whole or not at all, with the user's umask).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "datasets/io.h"
#include "framework/atomic_file.h"
#include "kernels/error.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

namespace fs = std::filesystem;

Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

void write_plain(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Every size at the edges of the 64 KiB chunk: the last short read must not be dropped, whatever
// its length (1 byte included).
TEST(ReadFileBytes, WholeFilesOfEverySizeAroundTheChunk) {
  TempDir dir;
  for (const size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{65535}, size_t{65536}, size_t{65537},
                         size_t{65538}, size_t{3 * 65536 + 1}}) {
    const Bytes want = random_bytes(n, n + 1);
    write_plain(dir / "f.bin", want);
    EXPECT_EQ(data::read_file_bytes(dir / "f.bin", "op"), want) << n << " bytes";
  }
}

TEST(ReadFileBytes, MissingFilesAndFoldersAreNamed) {
  TempDir dir;
  EXPECT_HL_ERROR(data::read_file_bytes(dir / "none", "load_x"),
                  std::string("load_x(").append(dir / "none").append("): cannot open: no such file"));
  EXPECT_HL_ERROR(data::read_file_bytes(dir.str(), "load_x"),
                  std::string("load_x(").append(dir.str()).append("): cannot open: it is a directory"));
}

// A new file is written whole with 0666 & ~umask (mkstemp alone would give 0600); one written over an
// existing file keeps that file's permission bits (framework/atomic_file.h).
TEST(WriteFileAtomic, ReplacesTheFileWithTheUsersPermissions) {
  TempDir dir;
  const std::string path = dir / "out.png";
  const Bytes want = random_bytes(3 * 65536 + 7, 5);
  const mode_t old_mask = ::umask(027);
  write_file_atomic(path, want.data(), want.size(), "write_png");
  ::umask(old_mask);
  EXPECT_EQ(data::read_file_bytes(path, "op"), want);
  EXPECT_EQ(fs::status(path).permissions(), fs::perms(0640));
  fs::permissions(path, fs::perms(0604));
  write_file_atomic(path, want.data(), 5, "write_png");
  EXPECT_EQ(fs::status(path).permissions(), fs::perms(0604)) << "the replaced file's bits";
  EXPECT_EQ(fs::file_size(path), 5u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.str()), fs::directory_iterator{}), 1) << "no temporary left";
  write_file_atomic(dir / "empty", nullptr, 0, "op");
  EXPECT_EQ(fs::file_size(dir / "empty"), 0u);
}

// A disk that fills mid-write: the error names the caller, the file and the bytes written; the old
// file is untouched and the temporary file is gone.
TEST(WriteFileAtomic, AFailedWriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir / "cache.bin";
  const Bytes old = random_bytes(100, 6);
  write_plain(path, old);
  detail::set_atomic_write_function([](int fd, const void* data, size_t n) -> ssize_t {
    if (n > 64) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, data, n);
  });
  const Bytes big = random_bytes(1000, 7);
  EXPECT_HL_ERROR(write_file_atomic(path, big.data(), big.size(), "load_image_folder"),
                  std::string("load_image_folder(").append(path).append("): write failed after 0 bytes: ")
                      .append(std::strerror(ENOSPC)));
  detail::set_atomic_write_function({});
  EXPECT_EQ(data::read_file_bytes(path, "op"), old);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.str()), fs::directory_iterator{}), 1) << "temporary removed";
  EXPECT_HL_ERROR(write_file_atomic(dir / "no/such/dir/f", big.data(), big.size(), "write_png"),
                  std::string("write_png(").append(dir / "no/such/dir/f").append("): cannot create a temporary")
                      .append(" file in"));
}

// ---- AtomicFile's descriptors ------------------------------------------------------------------------

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

ssize_t failing_write(int, const void*, size_t) {
  errno = EIO;
  return -1;
}

// Every descriptor an AtomicFile opens (its temporary file, the folder it fsyncs) is closed again,
// after a commit and after a failure; and after a commit it touches nothing more. Descriptor numbers
// and temporary names are reused, so closing or unlinking "its own" one again later could close a
// file other code has opened since, or delete another writer's temporary file.
TEST(AtomicFile, ClosesWhatItOpensAndTouchesNothingAfterCommit) {
  TempDir dir;
  const int filler = is_open(0) ? -1 : ::open("/dev/null", O_RDONLY);  // descriptor 0 taken, as usual
  const int before = lowest_free_fd();
  const std::string path = dir / "a.bin";
  std::string tmp_name;
  detail::set_atomic_write_hook([&](size_t) {
    for (const auto& e : fs::directory_iterator(dir.str())) tmp_name = e.path().filename().string();
  });
  int other = -1;
  {
    AtomicFile file(path, "op");
    file.write("abc", 3);
    detail::set_atomic_write_hook({});
    file.commit();
    other = ::open("/dev/null", O_RDONLY);  // the number the temporary file had, most likely
    write_plain(dir / tmp_name, Bytes{9});  // another writer that drew the same temporary name
  }
  EXPECT_EQ(tmp_name.rfind(".a.bin.tmp.", 0), 0u) << tmp_name;
  EXPECT_TRUE(is_open(other)) << "a descriptor opened after commit() was closed by the destructor";
  EXPECT_TRUE(is_open(0)) << "descriptor 0 was closed";
  EXPECT_TRUE(fs::exists(dir / tmp_name)) << "the destructor unlinked a name after the rename";
  ::close(other);
  EXPECT_EQ(lowest_free_fd(), before) << "a descriptor was left open after a commit";
  detail::set_atomic_write_function(failing_write);
  EXPECT_THROW(write_file_atomic(path, "xyz", 3, "op"), Error);
  detail::set_atomic_write_function({});
  EXPECT_EQ(lowest_free_fd(), before) << "a failed write left its temporary file open";
  EXPECT_EQ(data::read_file_bytes(path, "op"), (Bytes{'a', 'b', 'c'}));
  if (filler >= 0) ::close(filler);
}

// With standard input closed (a daemon, a job runner), descriptor 0 is the first free one and
// mkstemp returns it: AtomicFile takes it like any other, and closes it again.
TEST(AtomicFile, TakesDescriptorZeroLikeAnyOther) {
  TempDir dir;
  const StdinClosed stdin_closed;
  ASSERT_EQ(lowest_free_fd(), 0);
  const Bytes want = random_bytes(100, 8);
  write_file_atomic(dir / "a.bin", want.data(), want.size(), "op");
  EXPECT_EQ(data::read_file_bytes(dir / "a.bin", "op"), want);
  EXPECT_EQ(lowest_free_fd(), 0) << "descriptor 0 was left open after a commit";
  detail::set_atomic_write_function(failing_write);
  EXPECT_THROW(write_file_atomic(dir / "b.bin", want.data(), want.size(), "op"), Error);
  detail::set_atomic_write_function({});
  EXPECT_EQ(lowest_free_fd(), 0) << "descriptor 0 was left open after a failed write";
  EXPECT_FALSE(fs::exists(dir / "b.bin"));
}

}  // namespace
}  // namespace hl::test
