// Image files through stb (see image.h). libstb.so (Debian's libstb-dev) holds the stb_image,
// stb_image_write and stb_image_resize implementations, so these headers are included for their
// declarations only: defining STB_IMAGE_IMPLEMENTATION here would compile a second copy.
#include "datasets/image.h"

#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>
#include <stb/stb_image_write.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "datasets/io.h"
#include "framework/atomic_file.h"
#include "kernels/error.h"

namespace hl::data {
namespace {

// Largest image accepted: 2^26 pixels (an 8192 x 8192 photo) is 256 MiB as RGBA. A damaged or
// malicious header can claim up to 2^24 x 2^24; refusing it before decoding keeps a bad file from
// costing gigabytes (and lets the fuzzer run under its memory limit).
constexpr int64_t kMaxPixels = kMaxImagePixels;
// Longest side accepted: kMaxImageSide (image.h). A 1 x 16776963 BMP, inside the pixel limit, made
// resize_image allocate 1.4 GB of stb_image_resize scratch before there was one (found by fuzz_image).
constexpr int64_t kMaxSide = kMaxImageSide;

std::string dims(const Image& img) {
  return detail::concat(img.width, "x", img.height, "x", img.channels);
}

// The tensor as float values with its channel count, height and width; [C,H,W], [H,W] or [1,C,H,W].
struct Planes {
  std::vector<float> v;
  int64_t c, h, w;
};

Planes planes(const Tensor& t, const char* op) {
  HL_CHECK(t.defined(), op, ": the tensor is undefined");
  Shape s = t.shape();
  if (s.size() == 4 && s[0] == 1) s.erase(s.begin());
  if (s.size() == 2) s.insert(s.begin(), 1);
  HL_CHECK(s.size() == 3 && (s[0] == 1 || s[0] == 3) && s[1] > 0 && s[2] > 0, op, ": expected an image tensor ",
           "[C, H, W] or [H, W] with C = 1 or 3, got ", t.describe());
  HL_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", t.describe());
  return {t.to_vector(), s[0], s[1], s[2]};
}

Image from_planes(const Planes& p, const std::vector<float>& scale, const std::vector<float>& shift) {
  Image img{p.w, p.h, p.c, std::vector<uint8_t>(static_cast<size_t>(p.c * p.h * p.w))};
  for (int64_t c = 0; c < p.c; ++c)
    for (int64_t i = 0; i < p.h * p.w; ++i) {
      const float v = p.v[static_cast<size_t>(c * p.h * p.w + i)] * scale[static_cast<size_t>(c)] + shift[static_cast<size_t>(c)];
      // NaN maps to 0, so a broken tensor shows as black rather than as undefined behaviour.
      const float clamped = std::isnan(v) ? 0.0f : std::clamp(v, 0.0f, 255.0f);
      img.pixels[static_cast<size_t>(i * p.c + c)] = static_cast<uint8_t>(std::lround(clamped));
    }
  return img;
}

enum class Format { png, jpeg, bmp, unknown };

Format sniff(const uint8_t* d, size_t n) {
  if (n >= 8 && d[0] == 0x89 && d[1] == 'P' && d[2] == 'N' && d[3] == 'G') return Format::png;
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return Format::jpeg;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return Format::bmp;
  return Format::unknown;
}

uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t{p[3]} << 24); }

// stb_image reads past the end of a cut-off JPEG or BMP as if the missing bytes were zeros, and
// returns an image whose lower part is garbage. These checks find the cut before decoding, so a
// truncated file is an error rather than a silently wrong sample, and so is a BMP compression that
// stb_image would read as if it were none. (A cut-off PNG already fails in stb's zlib decoder; a
// JPEG is checked by jpeg_walk, below.) Returns what is wrong, or "".
std::string refused_before_decoding(Format f, const uint8_t* d, size_t n) {
  if (f == Format::png) {
    // Walk the chunks (length, type, data, CRC) up to IEND. stb_image would accept a file cut after
    // its pixel data, and it grows its buffer to whatever size a chunk header claims before reading
    // the chunk: an 86-byte file claiming a 2 GB chunk made it allocate 2 GB (found by fuzz_image).
    for (size_t at = 8;;) {
      if (n - at < 12) return detail::concat("truncated PNG: the chunk at byte ", at, " is cut off (no IEND chunk)");
      const uint64_t len = (uint64_t{d[at]} << 24) | (uint64_t{d[at + 1]} << 16) | (uint64_t{d[at + 2]} << 8) | d[at + 3];
      if (len > n - at - 12)
        return detail::concat("truncated PNG: the chunk at byte ", at, " claims ", len, " bytes of data, the file has ",
                              n - at - 12, " more");
      if (std::equal(d + at + 4, d + at + 8, "IEND")) return "";
      at += 12 + static_cast<size_t>(len);
    }
  }
  if (f == Format::bmp && n >= 34) {
    // Uncompressed BMP (BI_RGB, or BI_BITFIELDS: the same rows, with channel masks): the pixel rows,
    // each padded to 4 bytes, start at the data offset.
    const uint64_t offset = le32(d + 10), header = le32(d + 14);
    if (header < 40) return "";  // an old OS/2 header: left to stb_image
    const auto width = static_cast<int32_t>(le32(d + 18)), height = static_cast<int32_t>(le32(d + 22));
    const uint32_t bpp = d[28] | (d[29] << 8), compression = le32(d + 30);
    // stb_image decodes any other compression code as if it were BI_RGB (it refuses RLE only), so a
    // few damaged header bytes turned a 51-byte file into a 1 x 16776963 image of zeros (fuzz_image).
    if (compression != 0 && compression != 3)
      return detail::concat("unsupported BMP: compression ", compression,
                            " (halfling reads uncompressed BMP: BI_RGB or BI_BITFIELDS)");
    const int64_t rows = height < 0 ? -static_cast<int64_t>(height) : height;
    // Sizes stb_image refuses anyway (over 2^24) are left to it; below that the product cannot overflow.
    if (width <= 0 || rows == 0 || rows > (1 << 24) || width > (1 << 24) || bpp == 0 || bpp > 32) return "";
    const uint64_t row = (static_cast<uint64_t>(width) * bpp + 31) / 32 * 4;
    const uint64_t need = offset + row * static_cast<uint64_t>(rows);
    if (n < need) return detail::concat("truncated BMP: ", width, "x", height, " at ", bpp, " bits per pixel needs ",
                                        need, " bytes, the file has ", n);
  }
  return "";
}

// A JPEG is walked marker by marker, from the start-of-image marker (SOI, FF D8) to the end-of-image
// marker (EOI, FF D9) that follows the last scan: segments carry their length, and each start-of-scan
// segment (SOS, FF DA) is followed by entropy-coded data, in which an FF byte is followed only by 00
// (a stuffed FF) or a restart marker (D0 to D7). The walk serves two checks:
// - Truncation. stb_image reads past the end of a cut-off JPEG as if the missing bytes were zeros,
//   so a file whose walk runs out of bytes before its EOI is refused. Bytes after the EOI are not the
//   image's, and stb_image never reads them: phones append a video to "motion photos", and some
//   cameras pad their files. (A search for the last FF DA anywhere in the file, followed by an FF D9,
//   refused a whole photo whose appended video held FF DA and no later FF D9.)
// - Huffman tables. Debian's stb_image (a 2022 snapshot) decodes a scan with whatever its Huffman
//   tables hold, and it does not clear them first: a scan that uses a table no DHT segment defined
//   reads stale memory and can crash (stb's PR #1297 describes it), and a DHT whose code counts add
//   up to more than 256 overruns the table (stb issue #1289). Both were fixed upstream after that
//   snapshot, so such files are refused. Found by tests/fuzz/fuzz_image.
// A file with no scan before its EOI is refused too: stb_image decodes it as a flat gray image.
// Returns what is wrong, or "".
std::string jpeg_walk(const uint8_t* d, size_t n) {
  bool dc[4] = {}, ac[4] = {}, progressive = false, scanned = false;
  size_t at = 2;  // after SOI (FF D8)
  while (at + 2 <= n) {
    if (d[at] != 0xFF) {  // padding between segments: stb skips to the next FF, and so do we
      ++at;
      continue;
    }
    const uint8_t m = d[at + 1];
    if (m == 0xFF) {  // fill byte before a marker
      ++at;
      continue;
    }
    if (m == 0xD9)  // the end of the image: what follows it is not part of the image
      return scanned ? std::string() : std::string("corrupt JPEG: no start-of-scan (FF DA), so no image data");
    if ((m >= 0xD0 && m <= 0xD7) || m == 0x01) {  // markers without a length
      at += 2;
      continue;
    }
    if (at + 4 > n) break;  // the segment's length is cut off
    const size_t len = (static_cast<size_t>(d[at + 2]) << 8) | d[at + 3];
    if (len < 2)
      return detail::concat("corrupt JPEG: the segment at byte ", at, " claims a length of ", len,
                            " (at least 2: the length counts its own two bytes)");
    if (len > n - at - 2)
      return detail::concat("truncated JPEG: the segment at byte ", at, " claims ", len,
                            " bytes, past the end of the file");
    const uint8_t* p = d + at + 4;
    const size_t plen = len - 2;
    if (m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE) progressive = true;
    if (m == 0xC4) {  // DHT: one or more tables of 1 + 16 + (sum of counts) bytes
      for (size_t k = 0; k < plen;) {
        if (k + 17 > plen) return detail::concat("corrupt JPEG: a Huffman table at byte ", at, " is cut off");
        const int tc = p[k] >> 4, th = p[k] & 15;
        if (tc > 1 || th > 3) return detail::concat("corrupt JPEG: Huffman table class ", tc, " id ", th, " (at most 1 and 3)");
        size_t total = 0;
        for (int i = 1; i <= 16; ++i) total += p[k + i];
        if (total > 256) return detail::concat("corrupt JPEG: a Huffman table with ", total, " codes (at most 256)");
        if (k + 17 + total > plen) return detail::concat("corrupt JPEG: a Huffman table at byte ", at, " is cut off");
        (tc == 0 ? dc : ac)[th] = true;
        k += 17 + total;
      }
    }
    if (m == 0xDA) {  // SOS: the tables each component of this scan decodes with must exist
      scanned = true;
      const size_t ns = plen >= 1 ? p[0] : 0;
      if (ns == 0 || plen < 1 + 2 * ns + 3) return detail::concat("corrupt JPEG: a bad start-of-scan header at byte ", at);
      const int ss = p[1 + 2 * ns], ah = p[3 + 2 * ns] >> 4;
      // Progressive scans use only one kind: DC tables for a first DC scan, AC tables for AC scans.
      const bool need_dc = !progressive || (ss == 0 && ah == 0), need_ac = !progressive || ss > 0;
      for (size_t c = 0; c < ns; ++c) {
        const int td = p[2 + 2 * c] >> 4, ta = p[2 + 2 * c] & 15;
        if (need_dc && (td > 3 || !dc[td]))
          return detail::concat("corrupt JPEG: a scan uses DC Huffman table ", td, ", which no DHT segment defined");
        if (need_ac && (ta > 3 || !ac[ta]))
          return detail::concat("corrupt JPEG: a scan uses AC Huffman table ", ta, ", which no DHT segment defined");
      }
      // Skip the entropy-coded data: it ends at the first FF not followed by 00 or a restart marker.
      size_t i = at + 2 + len;
      while (i + 1 < n && !(d[i] == 0xFF && d[i + 1] != 0x00 && !(d[i + 1] >= 0xD0 && d[i + 1] <= 0xD7))) ++i;
      at = i;
      continue;
    }
    at += 2 + len;
  }
  return "truncated JPEG: no end-of-image marker (FF D9) after the image data";
}

}  // namespace

Image decode_image(const uint8_t* data, size_t size, const std::string& source, int channels) {
  const auto fail = [&](const auto&... what) { throw Error(detail::concat("decode_image(", source, "): ", what...)); };
  if (channels < 0 || channels > 4) fail("channels must be 0 (as stored), 1, 2, 3 or 4 (got ", channels, ")");
  if (size == 0) fail("the file is empty");
  if (size > static_cast<size_t>(INT_MAX)) fail("the file is ", size, " bytes; stb_image reads at most 2 GiB");
  const Format format = sniff(data, size);
  if (format == Format::unknown) fail("not a PNG, JPEG or BMP file (unrecognized first bytes)");
  if (const std::string why = refused_before_decoding(format, data, size); !why.empty()) fail(why);
  if (format == Format::jpeg) {
    if (const std::string bad = jpeg_walk(data, size); !bad.empty()) fail(bad);
  }
  const int len = static_cast<int>(size);
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(data, len, &w, &h, &comp))
    fail("not a decodable image (", stbi_failure_reason(), "); halfling reads PNG, JPEG and BMP");
  // A BMP whose rows are stored top to bottom has a negative height in its header, and stbi_info
  // reports it as it is; the decoder returns the image the right way up, with the height positive.
  const int64_t rows = std::abs(static_cast<int64_t>(h));
  if (w <= 0 || rows == 0 || w > kMaxSide || rows > kMaxSide || w * rows > kMaxPixels)
    fail("the header claims ", w, "x", rows, " pixels; halfling accepts at most ", kMaxSide, " per side and ",
         kMaxPixels, " in all");
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load_from_memory(data, len, &w, &h, &comp, channels),
                                                     &stbi_image_free);
  if (!pixels) fail("cannot decode (", stbi_failure_reason(), ")");
  Image img{w, h, channels ? channels : comp, {}};
  img.pixels.assign(pixels.get(), pixels.get() + static_cast<size_t>(img.width * img.height * img.channels));
  return img;
}

Image read_image(const std::string& path, int channels) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "read_image");
  return decode_image(bytes.data(), bytes.size(), path, channels);
}

Image read_image_upright(const std::string& path, int channels, ExifOrientation* orientation) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "read_image_upright");
  const Image stored = decode_image(bytes.data(), bytes.size(), path, channels);
  const ExifOrientation o = exif_orientation(bytes.data(), bytes.size());
  if (orientation != nullptr) *orientation = o;
  return apply_exif_orientation(stored, o.value);
}

Image resize_image(const Image& img, int64_t width, int64_t height) {
  HL_CHECK(width > 0 && height > 0 && width <= kMaxSide && height <= kMaxSide && width * height <= kMaxPixels,
           "resize_image: cannot resize ", dims(img), " to ", width, "x", height, " (at most ", kMaxSide,
           " pixels per side and ", kMaxPixels, " in all)");
  HL_CHECK(img.width <= kMaxSide && img.height <= kMaxSide, "resize_image: the image ", dims(img),
           " has a side over ", kMaxSide, " pixels (stb_image_resize's scratch memory grows with it)");
  // The sides are at most 65535 here, so the product cannot overflow. A caller that builds its source
  // (tutorial 10 padded a 65535x4 crop to 65535x65535, 4.2 GB) is held to what decode_image accepts.
  HL_CHECK(img.width * img.height <= kMaxPixels, "resize_image: the image ", dims(img), " has ",
           img.width * img.height, " pixels, over the ", kMaxPixels, " (2^26) that decode_image accepts");
  HL_CHECK(img.width > 0 && img.height > 0 && img.channels > 0 &&
               img.holds_its_pixels(),
           "resize_image: the image ", dims(img), " holds ", img.pixels.size(), " bytes");
  if (width == img.width && height == img.height) return img;
  Image out{width, height, img.channels, std::vector<uint8_t>(static_cast<size_t>(width * height * img.channels))};
  const int ok = stbir_resize_uint8(img.pixels.data(), static_cast<int>(img.width), static_cast<int>(img.height), 0,
                                    out.pixels.data(), static_cast<int>(width), static_cast<int>(height), 0,
                                    static_cast<int>(img.channels));
  HL_CHECK(ok, "resize_image: stb_image_resize failed on ", dims(img), " -> ", width, "x", height);
  return out;
}

Image flatten_alpha(const Image& img, uint8_t background) {
  HL_CHECK(img.width > 0 && img.height > 0 && img.channels >= 1 && img.channels <= 4 &&
               img.holds_its_pixels(),
           "flatten_alpha: the image ", dims(img), " holds ", img.pixels.size(), " bytes");
  if (img.channels == 1 || img.channels == 3) return img;
  const int64_t color = img.channels - 1, n = img.width * img.height;
  Image out{img.width, img.height, color, std::vector<uint8_t>(static_cast<size_t>(n * color))};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = img.pixels[static_cast<size_t>(i * img.channels + color)];
    for (int64_t c = 0; c < color; ++c) {
      const uint32_t v = img.pixels[static_cast<size_t>(i * img.channels + c)];
      // "Over" with straight (not premultiplied) alpha, as PNG stores it; + 127 rounds to nearest.
      const uint32_t over = (v * a + background * (255 - a) + 127) / 255;
      out.pixels[static_cast<size_t>(i * color + c)] = static_cast<uint8_t>(over);
    }
  }
  return out;
}

Image scale_nearest(const Image& img, int64_t factor) {
  HL_CHECK(factor >= 1 && factor <= 64, "scale_nearest: factor must be 1 to 64 (got ", factor, ")");
  // Checked, not assumed: a hand-built image holding fewer bytes than its sides claim was read past
  // its end (found in review, 2026-11-29).
  HL_CHECK(img.holds_its_pixels(), "scale_nearest: the image ", dims(img), " holds ", img.pixels.size(), " bytes");
  // The sides first, so that the products below cannot overflow (a 0-pixel image may claim any width).
  HL_CHECK(img.width <= kMaxSide && img.height <= kMaxSide && img.width * factor <= kMaxSide &&
               img.height * factor <= kMaxSide,
           "scale_nearest: ", dims(img),
           " enlarged ", factor, " times would have a side over ", kMaxSide, " pixels, the most an image may have");
  HL_CHECK(img.width * factor * img.height * factor <= kMaxPixels, "scale_nearest: ", dims(img), " enlarged ", factor,
           " times would have over ", kMaxPixels, " (2^26) pixels, the most an image may have");
  if (factor == 1) return img;
  Image out{img.width * factor, img.height * factor, img.channels, {}};
  out.pixels.resize(static_cast<size_t>(out.width * out.height * out.channels));
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x)
      for (int64_t c = 0; c < img.channels; ++c)
        out.pixels[static_cast<size_t>((y * out.width + x) * img.channels + c)] = img.at(y / factor, x / factor, c);
  return out;
}

Image make_grid(const std::vector<Image>& images, int64_t cols, int64_t padding, uint8_t background) {
  HL_CHECK(!images.empty(), "make_grid: no images");
  HL_CHECK(cols >= 1 && padding >= 0, "make_grid: cols must be >= 1 and padding >= 0 (got ", cols, ", ", padding, ")");
  const Image& first = images.front();
  for (const Image& img : images) {
    HL_CHECK(img.holds_its_pixels() && img.width > 0 && img.height > 0 && img.width <= kMaxSide &&
                 img.height <= kMaxSide,
             "make_grid: the image ", dims(img), " holds ", img.pixels.size(), " bytes (or has a side of 0 or over ",
             kMaxSide, ")");
    HL_CHECK(img.width == first.width && img.height == first.height && img.channels == first.channels,
             "make_grid: every image must be ", dims(first), ", got ", dims(img));
  }
  HL_CHECK(padding <= kMaxSide, "make_grid: padding ", padding, " is over ", kMaxSide, " pixels");
  cols = std::min<int64_t>(cols, static_cast<int64_t>(images.size()));
  const int64_t rows = (static_cast<int64_t>(images.size()) + cols - 1) / cols;
  Image grid{cols * first.width + (cols + 1) * padding, rows * first.height + (rows + 1) * padding, first.channels, {}};
  const std::string what = detail::concat("make_grid: ", images.size(), " images of ", dims(first), ", ", cols,
                                          " per row with padding ", padding, " make a ", grid.width, "x",
                                          grid.height, " grid");
  HL_CHECK(grid.width <= kMaxSide && grid.height <= kMaxSide, what, ", a side over the ", kMaxSide,
           " pixels an image may have");
  HL_CHECK(grid.width * grid.height <= kMaxPixels, what, ", over the ", kMaxPixels, " (2^26) pixels an image may have");
  grid.pixels.assign(static_cast<size_t>(grid.width * grid.height * grid.channels), background);
  for (size_t k = 0; k < images.size(); ++k) {
    const int64_t x0 = padding + static_cast<int64_t>(k) % cols * (first.width + padding);
    const int64_t y0 = padding + static_cast<int64_t>(k) / cols * (first.height + padding);
    for (int64_t y = 0; y < first.height; ++y)
      std::copy_n(images[k].pixels.begin() + y * first.width * first.channels, first.width * first.channels,
                  grid.pixels.begin() + ((y0 + y) * grid.width + x0) * grid.channels);
  }
  return grid;
}

Tensor image_to_tensor(const Image& img, const Normalization& norm) {
  HL_CHECK(img.width > 0 && img.height > 0 && img.channels > 0 &&
               img.holds_its_pixels(),
           "image_to_tensor: the image ", dims(img), " holds ", img.pixels.size(), " bytes");
  norm.check("image_to_tensor", img.channels);
  Tensor out = Tensor::empty({img.channels, img.height, img.width}, DType::f32, Device::cpu);
  float* dst = out.data<float>();
  const int64_t plane = img.width * img.height;
  for (int64_t c = 0; c < img.channels; ++c) {
    const std::vector<float> table = norm.table(c);
    for (int64_t i = 0; i < plane; ++i) dst[c * plane + i] = table[img.pixels[static_cast<size_t>(i * img.channels + c)]];
  }
  return out;
}

Tensor load_image_tensor(const std::string& path, const ImageInput& in, const Normalization& norm) {
  HL_CHECK(in.channels == 1 || in.channels == 3, "load_image_tensor(", path, "): channels must be 1 or 3 (got ",
           in.channels, ")");
  HL_CHECK(in.height >= 0 && in.width >= 0, "load_image_tensor(", path,
           "): the size to resize to cannot be negative; got ", in.height, "x", in.width);
  HL_CHECK((in.height == 0) == (in.width == 0), "load_image_tensor(", path,
           "): give both height and width (or neither), got ", in.height, "x", in.width);
  Image img = read_image_upright(path, in.channels);  // a photo as its viewer shows it (image.h)
  if (in.height > 0) img = resize_image(img, in.width, in.height);
  const Tensor t = image_to_tensor(img, norm);
  return t.reshape({1, img.channels, img.height, img.width});
}

Image tensor_to_image(const Tensor& t, const Normalization& norm) {
  const Planes p = planes(t, "tensor_to_image");
  norm.check("tensor_to_image", p.c);
  std::vector<float> scale, shift;
  for (int64_t c = 0; c < p.c; ++c) {
    scale.push_back(norm.std_of(c) * 255.0f);
    shift.push_back(norm.mean_of(c) * 255.0f);
  }
  return from_planes(p, scale, shift);
}

Image tensor_to_image_minmax(const Tensor& t) {
  const Planes p = planes(t, "tensor_to_image_minmax");
  const auto [lo, hi] = std::minmax_element(p.v.begin(), p.v.end());
  const float range = *hi - *lo;
  const float scale = range > 0.0f ? 255.0f / range : 0.0f;
  const float shift = range > 0.0f ? -*lo * scale : 127.5f;
  return from_planes(p, std::vector<float>(static_cast<size_t>(p.c), scale), std::vector<float>(static_cast<size_t>(p.c), shift));
}

void write_png(const std::string& path, const Image& img) {
  HL_CHECK(img.width > 0 && img.height > 0 && img.channels >= 1 && img.channels <= 4 &&
               img.holds_its_pixels(),
           "write_png(", path, "): not a valid image (", dims(img), ", ", img.pixels.size(), " bytes)");
  std::vector<uint8_t> png;
  const auto append = [](void* ctx, void* data, int size) {
    auto* out = static_cast<std::vector<uint8_t>*>(ctx);
    out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  const int ok = stbi_write_png_to_func(append, &png, static_cast<int>(img.width), static_cast<int>(img.height),
                                        static_cast<int>(img.channels), img.pixels.data(),
                                        static_cast<int>(img.width * img.channels));
  HL_CHECK(ok, "write_png(", path, "): stb_image_write could not encode the image");
  write_file_atomic(path, png.data(), png.size(), "write_png");
}

void save_png(const std::string& path, const Tensor& image, const Normalization& norm) {
  write_png(path, tensor_to_image(image, norm));
}

void save_png_grid(const std::string& path, const Tensor& batch, const Normalization& norm, int64_t cols,
                   int64_t scale, int64_t max_images) {
  HL_CHECK(batch.defined() && batch.dim() == 4 && batch.size(0) > 0, "save_png_grid(", path,
           "): expected a batch [N, C, H, W], got ", batch.defined() ? batch.describe() : "an undefined tensor");
  const Tensor host = batch.to(Device::cpu);
  std::vector<Image> images;
  for (int64_t i = 0; i < std::min(host.size(0), max_images); ++i)
    images.push_back(scale_nearest(tensor_to_image(host.slice_rows(i, i + 1), norm), scale));
  write_png(path, make_grid(images, cols));
}

}  // namespace hl::data
