// The IDX file format (MNIST, Fashion-MNIST): a 4-byte magic (0, 0, type code, number of
// dimensions), one big-endian uint32 per dimension, then the elements in row-major order.
//
// read_idx reads a raw or gzip-compressed IDX file (gzip is recognised by its magic bytes 1f 8b,
// not by the file name) and checks it completely: a file it returns is exactly what its header
// says, and anything else throws hl::Error("read_idx(<path>): <what is wrong>") — never a partial
// load (DESIGN.md §5).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hl::data {

// IDX element type codes (the third magic byte). halfling reads unsigned bytes, which is what
// every image and label file of MNIST and Fashion-MNIST holds.
inline constexpr uint8_t kIdxUnsignedByte = 0x08;

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. [60000, 28, 28]
  uint8_t type_code = kIdxUnsignedByte;
  std::vector<uint8_t> data;  // the elements, row-major; product(dims) of them

  int64_t numel() const;
};

IdxArray read_idx(const std::string& path);

}  // namespace hl::data
