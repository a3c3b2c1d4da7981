// Files carrying an EXIF orientation tag, for the tests of datasets/exif.cpp and tutorial 10 and for
// the fuzz seeds (tests/fuzz/make_corpus.cpp): a TIFF structure holding the tag, put in a JPEG's APP1
// segment or a PNG's eXIf chunk. No GoogleTest here, so that make_corpus can include it.
#pragma once
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hl::test {

using Bytes = std::vector<uint8_t>;  // as in data_files.h

// A TIFF structure whose first directory holds a camera-make entry and then the orientation entry
// (type 3, count 1, value), in either byte order.
inline Bytes tiff_orientation(bool big_endian, uint32_t value, uint32_t type = 3, uint32_t count = 1) {
  Bytes b;
  const auto put = [&](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * (big_endian ? bytes - 1 - i : i))));
  };
  b.push_back(big_endian ? 'M' : 'I');
  b.push_back(big_endian ? 'M' : 'I');
  put(42, 2);
  put(8, 4);                                           // IFD0 right after the header
  put(2, 2);                                           // two entries
  put(0x010F, 2), put(2, 2), put(4, 4);                // Make, ASCII, 4 bytes, inline:
  b.insert(b.end(), {'a', 'b', 'c', 0});
  put(0x0112, 2), put(type, 2), put(count, 4);         // Orientation
  put(value, 2), put(0, 2);                            // a SHORT in the first two value bytes
  put(0, 4);                                           // no next directory
  return b;
}

// A JPEG with `payload` as an APP1 segment right after its start-of-image marker.
inline Bytes with_app1(const Bytes& jpeg, const Bytes& payload) {
  Bytes out(jpeg.begin(), jpeg.begin() + 2);
  const size_t len = payload.size() + 2;
  out.insert(out.end(), {0xFF, 0xE1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len)});
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

inline Bytes exif_payload(const Bytes& tiff) {
  Bytes p(6 + tiff.size(), 0);  // "Exif", two zero bytes, then the TIFF structure
  std::copy_n("Exif", 4, p.begin());
  std::copy(tiff.begin(), tiff.end(), p.begin() + 6);
  return p;
}

// A PNG with a chunk of the given type (with its CRC) before its IEND chunk, the last 12 bytes of
// stb's PNG.
inline Bytes with_png_chunk(const Bytes& png, const char (&type)[5], const Bytes& data) {
  // length (4 bytes, big-endian), type, data, CRC of type and data (4 bytes)
  Bytes chunk(12 + data.size());
  const auto be32 = [](uint8_t* at, uint32_t v) {
    for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
  };
  be32(chunk.data(), static_cast<uint32_t>(data.size()));
  std::copy_n(type, 4, chunk.begin() + 4);
  std::copy(data.begin(), data.end(), chunk.begin() + 8);
  const uLong crc = crc32(0, chunk.data() + 4, static_cast<uInt>(4 + data.size()));
  be32(chunk.data() + 8 + data.size(), static_cast<uint32_t>(crc));
  Bytes out(png.begin(), png.end() - 12);
  out.insert(out.end(), chunk.begin(), chunk.end());
  out.insert(out.end(), png.end() - 12, png.end());
  return out;
}

// A PNG with an eXIf chunk holding `data` before its IEND chunk.
inline Bytes with_exif_chunk(const Bytes& png, const Bytes& data) { return with_png_chunk(png, "eXIf", data); }

}  // namespace hl::test
