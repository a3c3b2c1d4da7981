// Reading IDX files, raw or gzip-compressed (see idx.h). The file is read as a stream (zlib
// decompresses .gz on the fly), so one code path checks both kinds: header, then exactly the
// number of data bytes the header promises, then nothing more (for .gz: nor after the last member).
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
//
// gzip goes through zlib's inflate rather than gzread: gzread silently ignores whatever follows the
// last gzip member when it does not start like another member, so "gzip(file) + junk" would load
// where a raw file with the same junk is refused. Here a member may be followed only by another
// member (gzip -c a b > ab, or a concatenated download, is valid gzip), and anything else is counted
// as trailing garbage (trailing_bytes()).
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
    if (std::fseek(file_.get(), 0, SEEK_SET) != 0) fail("cannot read: ", std::strerror(errno));
    if (gzip_) {
      in_.resize(kGzInput);
      zs_ = std::make_unique<z_stream>();
      // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length, both checked), not zlib or raw.
      if (inflateInit2(zs_.get(), 16 + MAX_WBITS) != Z_OK) {
        zs_.reset();
        fail("cannot start decompressing: out of memory");
      }
    }
  }
  ~ByteStream() {
    if (zs_) inflateEnd(zs_.get());
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Read up to n bytes; fewer only at the end of the stream.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      const size_t want = std::min(n - got, kChunk);
      size_t r = 0;
      if (gzip_) {
        r = inflate_into(dst + got, want);
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
  // Bytes of the .gz file after its last gzip member (known once read() has returned 0), and the
  // offset where they start.
  uint64_t trailing_bytes() const { return trailing_; }
  uint64_t gzip_end() const { return consumed_; }

  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::concat("read_idx(", path_, "): ", args...));
  }

 private:
  static constexpr size_t kGzInput = size_t{1} << 17;

  // Decompress up to n bytes into dst; 0 only at the end of the last member.
  size_t inflate_into(uint8_t* dst, size_t n) {
    z_stream& z = *zs_;
    z.next_out = dst;
    z.avail_out = static_cast<uInt>(n);  // n <= kChunk
    while (z.avail_out > 0 && !done_) {
      if (member_ended_) {
        // Another member must start with the gzip magic; anything else ends the stream, as garbage.
        if (!fill(2) || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
          trailing_ = z.avail_in;
          for (size_t r; (r = std::fread(in_.data(), 1, in_.size(), file_.get())) > 0;) trailing_ += r;
          if (std::ferror(file_.get())) fail("read error: ", std::strerror(errno));
          z.avail_in = 0;
          done_ = true;
          break;
        }
        inflateReset(&z);
        member_ended_ = false;
      }
      if (!fill(1)) fail("corrupt gzip stream: unexpected end of file (the .gz file is truncated)");
      const uInt before = z.avail_in;
      const int rc = inflate(&z, Z_NO_FLUSH);
      consumed_ += before - z.avail_in;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc == Z_DATA_ERROR) {
        fail("corrupt gzip stream: ", z.msg ? z.msg : "invalid compressed data");
      } else if (rc == Z_MEM_ERROR) {
        fail("corrupt gzip stream: out of memory");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {  // Z_BUF_ERROR: no progress, more input is needed
        fail("corrupt gzip stream: zlib error ", rc);
      }
    }
    return n - z.avail_out;
  }

  // Make at least k compressed bytes available at next_in (fewer only at the end of the file).
  bool fill(size_t k) {
    z_stream& z = *zs_;
    if (z.avail_in >= k) return true;
    if (z.avail_in > 0) std::memmove(in_.data(), z.next_in, z.avail_in);
    z.next_in = in_.data();
    while (z.avail_in < k) {
      const size_t r = std::fread(in_.data() + z.avail_in, 1, in_.size() - z.avail_in, file_.get());
      if (std::ferror(file_.get())) fail("read error: ", std::strerror(errno));
      if (r == 0) break;
      z.avail_in += static_cast<uInt>(r);
    }
    return z.avail_in >= k;
  }

  std::string path_;
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, CloseFile> file_;
  bool gzip_ = false;
  std::unique_ptr<z_stream> zs_;  // gzip only
  std::vector<uint8_t> in_;       // compressed bytes read from the file, not yet inflated
  bool member_ended_ = false, done_ = false;
  uint64_t consumed_ = 0;   // compressed bytes inflated so far
  uint64_t trailing_ = 0;
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
  if (in.trailing_bytes() > 0)
    in.fail("trailing garbage: ", in.trailing_bytes(), " byte(s) after the end of the gzip stream (at byte ",
            in.gzip_end(), " of the .gz file), where only another gzip member may follow");
  return out;
}

}  // namespace hl::data
