// Reading IDX files, raw or gzip-compressed (see idx.h). The file is read as a stream (zlib
// decompresses .gz on the fly), so one code path checks both kinds: header, then exactly the
// number of data bytes the header promises, then nothing more.
#include "datasets/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "kernels/error.h"

namespace hl::data {
namespace {

constexpr int kMaxDims = 8;           // MNIST-style files have 1 to 4; more means a corrupt header
constexpr size_t kChunk = size_t{1} << 22;  // read 4 MiB at a time

const char* idx_type_name(uint8_t code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

std::string hex_byte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned>(b));
  return buf;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// A raw or gzip-compressed file read as one byte stream. Every failure throws with the path.
class ByteStream {
 public:
  explicit ByteStream(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) fail("cannot open: no such file");
    if (fs::is_directory(path, ec)) fail("cannot open: it is a directory, not a file");

    file_.reset(std::fopen(path.c_str(), "rb"));
    if (!file_) fail("cannot open: ", std::strerror(errno));
    unsigned char magic[2] = {0, 0};
    const size_t n = std::fread(magic, 1, 2, file_.get());
    gzip_ = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      file_.reset();
      gz_.reset(gzopen(path.c_str(), "rb"));
      if (!gz_) fail("cannot open the gzip stream: ", errno ? std::strerror(errno) : "out of memory");
      gzbuffer(gz_.get(), 1 << 17);
    } else if (std::fseek(file_.get(), 0, SEEK_SET) != 0) {
      fail("cannot read: ", std::strerror(errno));
    }
  }

  // Read up to n bytes; fewer only at the end of the stream.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const size_t want = std::min(n - got, kChunk);
      size_t r = 0;
      if (gzip_) {
        const int k = gzread(gz_.get(), dst + got, static_cast<unsigned>(want));
        check_gzip();
        if (k < 0) fail("corrupt gzip stream");
        r = static_cast<size_t>(k);
      } else {
        r = std::fread(dst + got, 1, want, file_.get());
        if (std::ferror(file_.get())) fail("read error: ", std::strerror(errno));
      }
      if (r == 0) break;
      got += r;
    }
    return got;
  }

  // How a message should refer to the bytes it counts.
  const char* content() const { return gzip_ ? "the decompressed file" : "the file"; }

  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::concat("read_idx(", path_, "): ", args...));
  }

 private:
  // zlib reports a damaged stream (bad deflate data, CRC mismatch, cut-off file) through gzerror;
  // a cut-off stream even comes back as a short read with no error code, so check after each call.
  void check_gzip() const {
    int err = Z_OK;
    std::string msg = gzerror(gz_.get(), &err);
    if (err == Z_OK) return;
    if (msg.starts_with(path_ + ": ")) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
    if (err == Z_BUF_ERROR) fail("corrupt gzip stream: ", msg, " (the .gz file is truncated)");
    if (err == Z_ERRNO) fail("read error: ", std::strerror(errno));
    fail("corrupt gzip stream: ", msg);
  }

  std::string path_;
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  struct CloseGz {
    void operator()(gzFile g) const { gzclose(g); }
  };
  std::unique_ptr<std::FILE, CloseFile> file_;
  std::unique_ptr<gzFile_s, CloseGz> gz_;
  bool gzip_ = false;
};

}  // namespace

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

IdxArray read_idx(const std::string& path) {
  ByteStream in(path);

  // Magic: 0, 0, type code, number of dimensions.
  uint8_t magic[4];
  const size_t got_magic = in.read(magic, 4);
  if (got_magic < 4)
    in.fail("truncated header: ", in.content(), " has ", got_magic, " byte(s); an IDX header starts with 4");
  if (magic[0] != 0 || magic[1] != 0)
    in.fail("wrong magic: the first two bytes are ", hex_byte(magic[0]), " ", hex_byte(magic[1]),
            ", an IDX file starts with 0x00 0x00 (is this an IDX file?)");
  IdxArray out;
  out.type_code = magic[2];
  if (out.type_code != kIdxUnsignedByte)
    in.fail("unsupported element type ", hex_byte(out.type_code), " (", idx_type_name(out.type_code),
            "); halfling reads only 0x08 (unsigned byte)");
  const int ndims = magic[3];
  if (ndims == 0 || ndims > kMaxDims)
    in.fail("bad header: ", ndims, " dimensions (expected 1 to ", kMaxDims, ")");

  // Dimensions: one big-endian uint32 each.
  std::vector<uint8_t> dim_bytes(4 * static_cast<size_t>(ndims));
  const size_t got_dims = in.read(dim_bytes.data(), dim_bytes.size());
  if (got_dims < dim_bytes.size())
    in.fail("truncated header: ", ndims, " dimensions need a ", 4 + dim_bytes.size(), "-byte header, ",
            in.content(), " has only ", 4 + got_dims, " byte(s)");
  int64_t expected = 1;  // bytes of data (one byte per element)
  for (int i = 0; i < ndims; ++i) {
    const uint8_t* b = &dim_bytes[4 * static_cast<size_t>(i)];
    const int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    out.dims.push_back(d);
    if (d != 0 && expected > std::numeric_limits<int64_t>::max() / d)
      in.fail("bad header: the dimensions ", dims_str(out.dims), "... describe more bytes than fit in 64 bits");
    expected *= d;
  }

  // Data: exactly `expected` bytes. The buffer grows as bytes arrive, so a header that lies about a
  // huge size costs memory in proportion to what the file really holds, not what it claims.
  size_t have = 0;
  while (have < static_cast<size_t>(expected)) {
    out.data.resize(std::min(static_cast<size_t>(expected), std::max(have * 2, have + kChunk)));
    const size_t r = in.read(out.data.data() + have, out.data.size() - have);
    have += r;
    if (have < out.data.size()) break;  // end of the stream
  }
  // The sizes in all are unsigned: a header of up to 36 bytes plus up to 2^63 - 1 bytes of data fits
  // in 64 bits only without a sign.
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  if (have < static_cast<size_t>(expected))
    in.fail("data truncated: the header ", dims_str(out.dims), " describes ", expected, " bytes of data, ",
            in.content(), " holds only ", have, " (expected ", header + static_cast<uint64_t>(expected),
            " bytes in all, got ", header + have, ")");

  // Nothing may follow the data.
  std::vector<uint8_t> rest(1 << 16);
  size_t extra = 0;
  for (size_t r; (r = in.read(rest.data(), rest.size())) > 0;) extra += r;
  if (extra > 0)
    in.fail("trailing garbage: ", extra, " byte(s) after the ", expected, " bytes of data that the header ",
            dims_str(out.dims), " describes");
  return out;
}

}  // namespace hl::data
