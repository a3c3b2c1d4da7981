// libFuzzer target: read_idx (datasets/idx.h) on arbitrary bytes, raw or gzip (the reader decides by
// the gzip magic, so the fuzzer reaches both paths). read_idx takes a path, so the bytes go into an
// in-memory file (memfd) reached through /proc/self/fd: no disk traffic per input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "datasets/idx.h"
#include "kernels/error.h"

namespace {

int memory_file() {
  static const int fd = [] {
    const int f = memfd_create("fuzz_idx", 0);
    if (f < 0) std::abort();
    return f;
  }();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memory_file();
  if (ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t w = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (w <= 0) std::abort();
    done += static_cast<size_t>(w);
  }
  try {
    const hl::data::IdxArray a = hl::data::read_idx("/proc/self/fd/" + std::to_string(fd));
    // What read_idx promises: exactly as many elements as the header's dimensions describe.
    if (static_cast<int64_t>(a.data.size()) != a.numel()) std::abort();
  } catch (const hl::Error&) {
    // The expected answer to a malformed file.
  }
  return 0;
}
