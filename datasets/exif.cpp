// EXIF orientation (image.h): the one tag of a photo's metadata that changes what the picture shows.
//
// A phone held on its side stores the pixels as the sensor read them and writes an orientation tag
// (0x0112) that tells viewers how to turn them. stb_image ignores it, so a digit photographed that way
// reached tutorial 10's model on its side. Where the tag lives:
// - JPEG: an APP1 segment (FF E1) whose payload starts "Exif\0\0", followed by a TIFF structure;
// - PNG: an eXIf chunk holding the TIFF structure itself (PNG 1.5 extension, 2017).
// The TIFF structure: a byte-order mark ("II" little-endian, "MM" big-endian), the number 42, the
// offset of the first directory (IFD0), then in IFD0 a count of 12-byte entries: tag, type, count,
// value. Orientation is a SHORT (type 3) of count 1, stored in the entry's first two value bytes.
// Every offset and count comes from the file, so each is checked against the bytes there are.
#include <algorithm>
#include <cstring>

#include "datasets/image.h"
#include "kernels/error.h"

namespace hl::data {
namespace {

struct Tiff {
  const uint8_t* d;
  size_t n;
  bool big_endian;
  uint32_t u16(size_t at) const { return big_endian ? (d[at] << 8) | d[at + 1] : d[at] | (d[at + 1] << 8); }
  uint32_t u32(size_t at) const {
    return big_endian ? (uint32_t{d[at]} << 24) | (d[at + 1] << 16) | (d[at + 2] << 8) | d[at + 3]
                      : d[at] | (d[at + 1] << 8) | (d[at + 2] << 16) | (uint32_t{d[at + 3]} << 24);
  }
};

// The orientation in a TIFF structure of n bytes; `where` names the block for the message.
ExifOrientation from_tiff(const uint8_t* d, size_t n, const std::string& where) {
  ExifOrientation r;
  const auto bad = [&](const auto&... why) {
    r.value = 1;
    r.problem = detail::concat(where, ": ", why...);
    return r;
  };
  if (n < 8) return bad("only ", n, " bytes (a TIFF header is 8)");
  if (!((d[0] == 'I' && d[1] == 'I') || (d[0] == 'M' && d[1] == 'M')))
    return bad("no byte-order mark (II or MM) at its start");
  const Tiff t{d, n, d[0] == 'M'};
  if (t.u16(2) != 42) return bad("the TIFF header's number is ", t.u16(2), ", not 42");
  const size_t ifd = t.u32(4);
  if (ifd < 8 || ifd > n - 2) return bad("the first directory's offset ", ifd, " is outside its ", n, " bytes");
  const size_t count = t.u16(ifd);
  if (count > (n - ifd - 2) / 12)
    return bad("the first directory claims ", count, " entries; ", (n - ifd - 2) / 12, " fit in its bytes");
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (t.u16(e) != 0x0112) continue;
    const uint32_t type = t.u16(e + 2), values = t.u32(e + 4);
    if (type != 3 || values != 1)
      return bad("the orientation entry has type ", type, " and count ", values, " (a SHORT, type 3, count 1)");
    const int v = static_cast<int>(t.u16(e + 8));
    if (v < 1 || v > 8) return bad("orientation ", v, " (EXIF defines 1 to 8)");
    r.value = v;
    return r;
  }
  return r;  // no orientation entry: stored upright
}

uint32_t be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3]; }

ExifOrientation from_jpeg(const uint8_t* d, size_t n) {
  // The metadata segments come before the first scan; walk them (each FF, marker, 2-byte length
  // counting itself) and stop at a scan, the end, or anything that is not a segment.
  for (size_t at = 2; at + 4 <= n && d[at] == 0xFF;) {
    const uint8_t m = d[at + 1];
    if (m == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (m == 0xDA || m == 0xD9) break;
    if ((m >= 0xD0 && m <= 0xD7) || m == 0x01) {  // markers without a length (as jpeg_walk in image.cpp)
      at += 2;
      continue;
    }
    const size_t len = (static_cast<size_t>(d[at + 2]) << 8) | d[at + 3];
    if (len < 2 || len > n - at - 2) break;  // decode_image reports a damaged segment table
    static constexpr uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
    if (m == 0xE1 && len - 2 >= 6 && std::memcmp(d + at + 4, kExif, 6) == 0)
      return from_tiff(d + at + 10, len - 8, detail::concat("the Exif segment at byte ", at));
    at += 2 + len;  // another APP1 (XMP), APPn, a table, a frame header
  }
  return {};
}

ExifOrientation from_png(const uint8_t* d, size_t n) {
  for (size_t at = 8; n - at >= 12;) {
    const uint64_t len = be32(d + at);
    if (len > n - at - 12) break;
    const uint8_t* data = d + at + 8;
    if (std::equal(d + at + 4, d + at + 8, "eXIf")) {
      // Some writers keep JPEG's "Exif\0\0" prefix in the chunk; the TIFF structure follows it.
      const size_t skip = len >= 6 && std::memcmp(data, "Exif\0\0", 6) == 0 ? 6 : 0;
      return from_tiff(data + skip, static_cast<size_t>(len) - skip, detail::concat("the eXIf chunk at byte ", at));
    }
    if (std::equal(d + at + 4, d + at + 8, "IEND")) break;
    at += 12 + static_cast<size_t>(len);
  }
  return {};
}

}  // namespace

ExifOrientation exif_orientation(const uint8_t* data, size_t size) {
  if (data == nullptr) return {};
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return from_jpeg(data, size);
  if (size >= 8 && data[0] == 0x89 && data[1] == 'P' && data[2] == 'N' && data[3] == 'G') return from_png(data, size);
  return {};  // BMP and anything else: no EXIF
}

const char* exif_orientation_name(int orientation) {
  switch (orientation) {
    case 1: return "upright as stored";
    case 2: return "mirrored left to right";
    case 3: return "turned 180 degrees";
    case 4: return "mirrored top to bottom";
    case 5: return "mirrored along the main diagonal (transposed)";
    case 6: return "turned 90 degrees clockwise";
    case 7: return "mirrored along the other diagonal";
    case 8: return "turned 90 degrees counter-clockwise";
    default: return "not an EXIF orientation";
  }
}

// Each shown pixel (x, y) of a W x H stored image comes from a stored pixel: the EXIF specification's
// table ("the 0th row is the visual right-hand side, the 0th column the visual top", for 6) read as
// where each shown pixel is stored. 5 to 8 show a H x W image.
Image apply_exif_orientation(const Image& img, int orientation) {
  HL_CHECK(orientation >= 1 && orientation <= 8, "apply_exif_orientation: orientation ", orientation,
           " (EXIF defines 1 to 8)");
  HL_CHECK(img.holds_its_pixels(),
           "apply_exif_orientation: the image ", img.width, "x", img.height, "x", img.channels, " holds ",
           img.pixels.size(), " bytes");
  if (orientation == 1) return img;
  const int64_t W = img.width, H = img.height, C = img.channels;
  const bool swap = orientation >= 5;
  Image out{swap ? H : W, swap ? W : H, C, std::vector<uint8_t>(img.pixels.size())};
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = x, sy = y;
      switch (orientation) {
        case 2: sx = W - 1 - x; break;
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;
        case 4: sy = H - 1 - y; break;
        case 5: sx = y, sy = x; break;
        case 6: sx = y, sy = H - 1 - x; break;
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;
        case 8: sx = W - 1 - y, sy = x; break;
        default: break;
      }
      std::copy_n(img.pixels.begin() + (sy * W + sx) * C, C, out.pixels.begin() + (y * out.width + x) * C);
    }
  return out;
}

}  // namespace hl::data
