// Helpers for the data-set tests: a temporary folder that cleans up after itself, and small IDX
// files (raw or gzipped with zlib) that the tests write themselves, so no test needs real data to
// check a loader (DESIGN.md §5).
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "tests/datasets/exif_files.h"

namespace hl::test {

using Bytes = std::vector<uint8_t>;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "halfling-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("TempDir: mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& str() const { return path_; }
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

// An IDX file's bytes: magic (0, 0, type, ndims), big-endian dims, then data.
inline Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("write_file: cannot write " + path);
}

inline Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Write bytes gzip-compressed (zlib's gz* API, which writes a standard gzip member).
inline void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb9");
  if (!gz) throw std::runtime_error("write_gz: cannot open " + path);
  const int n = bytes.empty() ? 0 : gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  if (gzclose(gz) != Z_OK || n != static_cast<int>(bytes.size()))
    throw std::runtime_error("write_gz: cannot write " + path);
}

// Records in CIFAR-10's binary format, one for each label: the label's byte, then 3x32x32 pixel bytes of
// noise drawn from `rng` (the tutorials' smoke tests train on them; only the labels matter).
inline Bytes cifar10_records(const Bytes& labels, std::mt19937& rng) {
  Bytes bytes;
  for (const uint8_t label : labels) {
    bytes.push_back(label);
    for (int p = 0; p < 3 * 32 * 32; ++p) bytes.push_back(static_cast<uint8_t>(rng() % 256));
  }
  return bytes;
}

// Write raw or gzipped.
inline void write_idx(const std::string& path, const Bytes& bytes, bool gz) {
  if (gz) write_gz(path, bytes);
  else write_file(path, bytes);
}

}  // namespace hl::test

// Expect `stmt` to throw hl::Error whose message contains every one of the given substrings.
#define EXPECT_HL_ERROR(stmt, ...)                                                              \
  do {                                                                                          \
    try {                                                                                       \
      stmt;                                                                                     \
      ADD_FAILURE() << "expected hl::Error from: " #stmt;                                       \
    } catch (const ::hl::Error& e) {                                                            \
      const std::string msg_ = e.what();                                                        \
      for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})                    \
        EXPECT_NE(msg_.find(part_), std::string::npos) << "message lacks \"" << part_ << "\": " << msg_; \
    }                                                                                           \
  } while (0)
