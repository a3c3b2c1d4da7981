// read_idx: values survive a round trip through raw and gzipped files, and every kind of damaged
// file is rejected with an hl::Error that starts "read_idx(<path>):" and says what is wrong.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "datasets/idx.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

using data::read_idx;

Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::string prefix(const std::string& path) { return "read_idx(" + path + "):"; }

// ---- round trips --------------------------------------------------------------------------------

class ReadIdxFormats : public ::testing::TestWithParam<bool> {  // param: gzipped
 protected:
  bool gz() const { return GetParam(); }
  std::string file(const std::string& name) const { return tmp_ / (name + (gz() ? ".gz" : "")); }
  TempDir tmp_;
};

INSTANTIATE_TEST_SUITE_P(RawAndGzip, ReadIdxFormats, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "gzip" : "raw"; });

TEST_P(ReadIdxFormats, RoundTrip3D) {
  const Bytes data = random_bytes(7 * 28 * 28, fresh_seed());
  const std::string path = file("images");
  write_idx(path, idx_bytes({7, 28, 28}, data), gz());
  const data::IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{7, 28, 28}));
  EXPECT_EQ(a.type_code, data::kIdxUnsignedByte);
  EXPECT_EQ(a.numel(), 7 * 28 * 28);
  EXPECT_EQ(a.data, data);
}

TEST_P(ReadIdxFormats, RoundTrip1D) {
  const Bytes data = {0, 1, 2, 9, 255, 128};
  const std::string path = file("labels");
  write_idx(path, idx_bytes({6}, data), gz());
  const data::IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{6}));
  EXPECT_EQ(a.data, data);
}

TEST_P(ReadIdxFormats, LargeDimensionsAreBigEndian) {
  // 300 = 0x0000012C: a little-endian reader would see 0x2C010000.
  const Bytes data = random_bytes(300 * 2, 7);
  const std::string path = file("wide");
  write_idx(path, idx_bytes({300, 2}, data), gz());
  EXPECT_EQ(read_idx(path).dims, (std::vector<int64_t>{300, 2}));
}

TEST_P(ReadIdxFormats, EmptyDimensionHoldsNoData) {
  const std::string path = file("empty");
  write_idx(path, idx_bytes({0, 28, 28}, {}), gz());
  const data::IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{0, 28, 28}));
  EXPECT_TRUE(a.data.empty());
}

// Data longer than 12 MiB: the buffer grows 4, 8, then 16 MiB, and its third read asks for more than the
// 4 MiB a single read takes, so each read lands after the last (MNIST's training images are 47 MB).
// Bytes that differ with their position, so a chunk put in the wrong place cannot match.
TEST_P(ReadIdxFormats, DataOverSeveralReadsLandsInOrder) {
  Bytes data((size_t{13} << 20) + 12345);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + (i >> 20));
  const std::string path = file("long");
  write_idx(path, idx_bytes({static_cast<uint32_t>(data.size())}, data), gz());
  const data::IdxArray a = read_idx(path);
  EXPECT_EQ(a.numel(), static_cast<int64_t>(data.size()));
  EXPECT_TRUE(a.data == data) << "the data differs from what was written";  // not printed: 13 MiB
}

TEST(ReadIdx, GzipIsRecognisedByItsMagicNotItsName) {
  TempDir tmp;
  const Bytes data = {3, 1, 4, 1, 5};
  write_gz(tmp / "gzipped-without-suffix", idx_bytes({5}, data));
  write_file(tmp / "raw-with-suffix.gz", idx_bytes({5}, data));
  EXPECT_EQ(read_idx(tmp / "gzipped-without-suffix").data, data);
  EXPECT_EQ(read_idx(tmp / "raw-with-suffix.gz").data, data);
}

// ---- rejections, for raw and gzipped files alike ---------------------------------------------

TEST_P(ReadIdxFormats, RejectsWrongMagic) {
  Bytes b = idx_bytes({4}, {1, 2, 3, 4});
  b[0] = 0x50;  // 'P', as in a PNG or a ZIP
  b[1] = 0x4B;
  const std::string path = file("bad-magic");
  write_idx(path, b, gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "wrong magic", "0x50 0x4B");
  // Either byte alone is enough to refuse it.
  struct Magic {
    uint8_t first, second;
    const char* shown;
  };
  for (const Magic& m : {Magic{0x00, 0x4B, "0x00 0x4B"}, Magic{0x50, 0x00, "0x50 0x00"}}) {
    b[0] = m.first;
    b[1] = m.second;
    write_idx(path, b, gz());
    EXPECT_HL_ERROR(read_idx(path), prefix(path), std::string("wrong magic: the first two bytes are ") + m.shown);
  }
}

TEST_P(ReadIdxFormats, RejectsUnsupportedType) {
  const std::string path = file("floats");
  write_idx(path, idx_bytes({1}, {0, 0, 0, 0}, 0x0D), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "unsupported element type 0x0D", "float32");
}

TEST_P(ReadIdxFormats, RejectsZeroDimensions) {
  const std::string path = file("zero-dims");
  write_idx(path, idx_bytes({}, {}), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "0 dimensions");
}

TEST_P(ReadIdxFormats, RejectsAbsurdDimensionCount) {
  const std::string path = file("many-dims");
  write_idx(path, Bytes{0, 0, 0x08, 200}, gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "200 dimensions");
}

TEST_P(ReadIdxFormats, EightDimensionsAreTheLimit) {
  const Bytes data = random_bytes(12, fresh_seed());
  const std::string eight = file("eight-dims"), nine = file("nine-dims");
  write_idx(eight, idx_bytes({2, 1, 3, 1, 1, 2, 1, 1}, data), gz());
  EXPECT_EQ(read_idx(eight).dims, (std::vector<int64_t>{2, 1, 3, 1, 1, 2, 1, 1}));
  EXPECT_EQ(read_idx(eight).data, data);
  write_idx(nine, idx_bytes({2, 1, 3, 1, 1, 2, 1, 1, 1}, data), gz());
  EXPECT_HL_ERROR(read_idx(nine), prefix(nine), "9 dimensions (expected 1 to 8)");
}

// Dimensions are big-endian uint32s, every byte of them counted. Their product must fit in 64 bits,
// up to exactly 2^63 - 1 = 454279 * 31252369 * 649657 (then it is data the file does not hold).
TEST_P(ReadIdxFormats, DimensionsUseEveryByteAndTheirProductFitsIn64Bits) {
  const std::string path = file("big-dims");
  write_idx(path, idx_bytes({16777216, 65536, 0}, {}), gz());  // a 0 beside them: empty, and valid
  EXPECT_EQ(read_idx(path).dims, (std::vector<int64_t>{16777216, 65536, 0}));
  write_idx(path, idx_bytes({454279, 31252369, 649657}, {}), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "data truncated", "describes 9223372036854775807 bytes",
                  "(expected 9223372036854775823 bytes in all, got 16)");  // the 16-byte header on top
  write_idx(path, idx_bytes({454279, 31252369, 649658}, {}), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path),
                  "bad header: the dimensions [454279, 31252369, 649658]... describe more bytes than fit in 64 bits");
}

TEST_P(ReadIdxFormats, RejectsEmptyFile) {
  const std::string path = file("empty-file");
  write_idx(path, {}, gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "truncated header", "0 byte(s)");
}

TEST_P(ReadIdxFormats, RejectsTruncatedMagic) {
  const std::string path = file("two-bytes");
  write_idx(path, Bytes{0, 0}, gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "truncated header");
  // A raw file is gzip only when both magic bytes say so: a second byte of 0x8b alone is not enough.
  const std::string odd = file("half-gzip-magic");
  write_idx(odd, Bytes{0x00, 0x8b, 0x08}, gz());
  EXPECT_HL_ERROR(read_idx(odd), gz() ? "truncated header: the decompressed file has 3 byte(s)"
                                      : "truncated header: the file has 3 byte(s)");
}

TEST_P(ReadIdxFormats, RejectsTruncatedDimensions) {
  Bytes b = idx_bytes({10, 28, 28}, {});
  b.resize(4 + 4 * 2 + 1);  // the third dimension cut short
  const std::string path = file("short-header");
  write_idx(path, b, gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "truncated header", "3 dimensions need a 16-byte header",
                  "only 13 byte(s)");
}

TEST_P(ReadIdxFormats, RejectsTruncatedDataWithExpectedAndActualSizes) {
  const std::string path = file("short-data");
  write_idx(path, idx_bytes({5, 4}, random_bytes(17, 3)), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "data truncated", "[5, 4]", "describes 20 bytes", "only 17",
                  "(expected 32 bytes in all, got 29)");  // with the 12-byte header
  // The count is of the bytes the reader saw: after decompression for a .gz file.
  EXPECT_HL_ERROR(read_idx(path), gz() ? "the decompressed file holds only 17" : ", the file holds only 17");
}

TEST_P(ReadIdxFormats, RejectsHeaderWithoutData) {
  const std::string path = file("header-only");
  write_idx(path, idx_bytes({60000, 28, 28}, {}), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "data truncated", "describes 47040000 bytes", "only 0");
}

TEST_P(ReadIdxFormats, RejectsTrailingGarbage) {
  const std::string path = file("trailing");
  write_idx(path, idx_bytes({2, 2}, {1, 2, 3, 4, 5, 6, 7}), gz());
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "trailing garbage", "3 byte(s)", "the 4 bytes");
  const std::string one = file("trailing-one");
  write_idx(one, idx_bytes({2, 2}, {1, 2, 3, 4, 5}), gz());
  EXPECT_HL_ERROR(read_idx(one), prefix(one), "trailing garbage", "1 byte(s)", "the 4 bytes");
}

TEST(ReadIdx, RejectsMissingFile) {
  TempDir tmp;
  const std::string path = tmp / "no-such-file";
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "no such file");
}

TEST(ReadIdx, RejectsDirectory) {
  TempDir tmp;
  EXPECT_HL_ERROR(read_idx(tmp.str()), prefix(tmp.str()), "directory");
}

// ---- damaged gzip streams --------------------------------------------------------------------

// A compressible (so Huffman-coded) gzipped IDX file, and its bytes.
Bytes make_gz(const std::string& path) {
  Bytes data(4000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * i) % 13);
  write_gz(path, idx_bytes({40, 100}, data));
  return read_file(path);
}

TEST(ReadIdx, RejectsCorruptDeflateData) {
  TempDir tmp;
  const std::string path = tmp / "corrupt.gz";
  Bytes gz = make_gz(path);
  ASSERT_GT(gz.size(), 40u);
  for (size_t i = 15; i < 25; ++i) gz[i] ^= 0xA5;  // inside the deflate stream, after the 10-byte header
  write_file(path, gz);
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "corrupt gzip stream");
}

TEST(ReadIdx, RejectsGzipChecksumMismatch) {
  TempDir tmp;
  const std::string path = tmp / "bad-crc.gz";
  Bytes gz = make_gz(path);
  gz[gz.size() - 8] ^= 0xFF;  // the trailer: CRC-32, then the length
  write_file(path, gz);
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "corrupt gzip stream");
}

TEST(ReadIdx, RejectsTruncatedGzipFile) {
  TempDir tmp;
  const std::string path = tmp / "cut.gz";
  Bytes gz = make_gz(path);
  gz.resize(gz.size() / 2);
  write_file(path, gz);
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "corrupt gzip stream", "truncated");
  // zlib's own message follows, without the path it puts in front (the prefix names it once already).
  const std::string msg = error_of([&] { read_idx(path); });
  EXPECT_NE(msg.find(prefix(path) + " corrupt gzip stream: unexpected end of file (the .gz file is truncated)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find(path), msg.rfind(path)) << "the path is named once: " << msg;
}

// zlib's gzread ignores whatever follows a gzip member unless it starts like another member, so a .gz
// file with junk after its member used to load while the raw file with the same junk was refused.
TEST(ReadIdx, RejectsTrailingGarbageAfterTheGzipStream) {
  TempDir tmp;
  const Bytes data = {3, 1, 4, 1, 5};
  const std::string path = tmp / "junk.gz";
  write_gz(path, idx_bytes({5}, data));
  const Bytes member = read_file(path);
  const std::string end = "after the end of the gzip stream (at byte " + std::to_string(member.size()) + " of the .gz";
  struct Case {
    const char* what;
    Bytes tail;
  };
  // Junk past the reader's 128 KiB input buffer is counted too, read by read (the last read here is of
  // one byte).
  const Case long_junk{"junk past the input buffer", Bytes(2 * (size_t{1} << 17) + 1 - member.size(), 'j')};
  for (const Case& c : {Case{"text", {'j', 'u', 'n', 'k'}}, Case{"zero padding", {0, 0, 0}},
                        Case{"the first magic byte alone", {0x1f}}, Case{"not the second magic byte", {0x1f, 0x8c}},
                        long_junk}) {
    Bytes b = member;
    b.insert(b.end(), c.tail.begin(), c.tail.end());
    write_file(path, b);
    SCOPED_TRACE(c.what);
    const std::string count = std::to_string(c.tail.size());
    EXPECT_HL_ERROR(read_idx(path), prefix(path), "trailing garbage: " + count + " byte(s) " + end);
  }
  // Bytes that start like another member must be one, even when they are its magic and no more.
  Bytes b = member;
  b.insert(b.end(), {0x1f, 0x8b, 0x08, 0, 'x'});
  write_file(path, b);
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "corrupt gzip stream");
  b.resize(member.size() + 2);
  write_file(path, b);
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "corrupt gzip stream: unexpected end of file");
}

// A gzip file may hold several members, which decompress to their concatenation (gzip -c a b, or
// `cat a.gz b.gz`): still one IDX file, however its bytes are split, even with an empty member. A member
// that ends one byte short of a read (the magic's 4 bytes, the data) is followed into the next.
TEST(ReadIdx, ReadsMultiMemberGzip) {
  TempDir tmp;
  const Bytes data = random_bytes(3 * 28 * 28, fresh_seed());
  const Bytes whole = idx_bytes({3, 28, 28}, data);
  const std::string part = tmp / "part.gz", path = tmp / "multi.gz";
  for (const size_t cut : {size_t{2}, size_t{3}, size_t{16}, size_t{1000}, whole.size() - 1}) {
    Bytes gz;
    for (const Bytes& piece : {Bytes(whole.begin(), whole.begin() + static_cast<long>(cut)), Bytes{},
                               Bytes(whole.begin() + static_cast<long>(cut), whole.end())}) {
      write_gz(part, piece);
      const Bytes member = read_file(part);
      gz.insert(gz.end(), member.begin(), member.end());
    }
    write_file(path, gz);
    const data::IdxArray a = read_idx(path);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 28, 28})) << "cut at " << cut;
    EXPECT_EQ(a.data, data) << "cut at " << cut;
    // Garbage after the last member is counted from where that member ends.
    gz.push_back('!');
    write_file(path, gz);
    EXPECT_HL_ERROR(read_idx(path), prefix(path),
                    "trailing garbage: 1 byte(s) after the end of the gzip stream (at byte " +
                        std::to_string(gz.size() - 1));
  }
}

// A gzip member of `bytes` whose header carries a file name of `name_bytes` bytes (FLG.FNAME, a name
// ending in a zero byte after the 10-byte header): the name sets where the member ends.
Bytes gz_member_with_name(const std::string& path, const Bytes& bytes, size_t name_bytes) {
  write_gz(path, bytes);
  Bytes m = read_file(path);
  EXPECT_EQ(m[3], 0) << "zlib wrote header flags";
  m[3] = 0x08;
  Bytes name(name_bytes, 'n');
  name.push_back(0);
  m.insert(m.begin() + 10, name.begin(), name.end());
  return m;
}

// The reader takes the .gz file 128 KiB at a time. A member that ends one byte before the second of
// those reads does leaves the next member's first magic byte alone in the buffer: it is kept while
// the buffer is refilled (the refill starts in the middle of a name, so no stale byte looks like it).
// And a read may find a single byte at the end of the file.
TEST(ReadIdx, AMemberThatEndsAtTheInputBuffersEndIsFollowed) {
  TempDir tmp;
  const Bytes data = random_bytes(28 * 28, fresh_seed());
  const Bytes whole = idx_bytes({28, 28}, data);
  const Bytes first(whole.begin(), whole.begin() + 100), second(whole.begin() + 100, whole.end());
  const size_t buffer = size_t{1} << 17;
  const size_t unnamed = gz_member_with_name(tmp / "part.gz", first, 0).size() - 1;
  Bytes gz = gz_member_with_name(tmp / "part.gz", first, 2 * buffer - 2 - unnamed);
  ASSERT_EQ(gz.size(), 2 * buffer - 1);
  const Bytes next = gz_member_with_name(tmp / "part.gz", second, buffer);  // the refill reads a whole buffer
  gz.insert(gz.end(), next.begin(), next.end());
  const std::string path = tmp / "straddle.gz";
  write_file(path, gz);
  const data::IdxArray a = read_idx(path);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{28, 28}));
  EXPECT_EQ(a.data, data);
  // A file one byte longer than two buffers: the last read finds one byte, the member's last, and that
  // one byte is all the stream asks for.
  const size_t unnamed_whole = gz_member_with_name(tmp / "part.gz", whole, 0).size() - 1;
  write_file(path, gz_member_with_name(tmp / "part.gz", whole, 2 * buffer - unnamed_whole));
  ASSERT_EQ(read_file(path).size(), 2 * buffer + 1);
  EXPECT_EQ(read_idx(path).data, data);
}

TEST(ReadIdx, RejectsGzipCutInsideItsTrailer) {
  // All the IDX data decompresses fine; only the CRC/length trailer is missing.
  TempDir tmp;
  const std::string path = tmp / "no-trailer.gz";
  Bytes gz = make_gz(path);
  gz.resize(gz.size() - 4);
  write_file(path, gz);
  EXPECT_HL_ERROR(read_idx(path), prefix(path), "corrupt gzip stream");
}

}  // namespace
}  // namespace hl::test
