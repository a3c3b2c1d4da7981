// Image files: PNG written by halfling and read back through stb_image gives the same tensor; JPEG
// and BMP decode; resize, grids, tensor <-> image conversions; and every damaged file is an
// hl::Error naming the file, never a partly decoded image.
#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

#include <sys/mman.h>

#include <climits>
#include <cstdlib>
#include <random>

#include "datasets/image.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

using data::Image;

Image random_image(int64_t w, int64_t h, int64_t c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Image img{w, h, c, Bytes(static_cast<size_t>(w * h * c))};
  for (auto& p : img.pixels) p = static_cast<uint8_t>(rng());
  img.pixels[0] = 0;  // both ends of the range (a 1x1 gray image holds only the first)
  if (img.pixels.size() > 1) img.pixels[1] = 255;
  return img;
}

Bytes encode(const Image& img, const char* format) {
  Bytes out;
  const auto append = [](void* ctx, void* data, int size) {
    auto* o = static_cast<Bytes*>(ctx);
    o->insert(o->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  const int w = static_cast<int>(img.width), h = static_cast<int>(img.height), c = static_cast<int>(img.channels);
  int ok = 0;
  if (std::string(format) == "jpg") ok = stbi_write_jpg_to_func(append, &out, w, h, c, img.pixels.data(), 95);
  if (std::string(format) == "bmp") ok = stbi_write_bmp_to_func(append, &out, w, h, c, img.pixels.data());
  if (std::string(format) == "png") ok = stbi_write_png_to_func(append, &out, w, h, c, img.pixels.data(), w * c);
  EXPECT_TRUE(ok) << format;
  return out;
}

// A PNG that is only a signature, an IHDR chunk claiming width x height 8-bit gray pixels, and an
// IEND chunk: enough for stb_image to read the size, with no pixel data to decode.
Bytes png_header_only(uint32_t width, uint32_t height) {
  Bytes b = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  const auto be32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(v >> shift));
  };
  be32(13);
  b.insert(b.end(), {'I', 'H', 'D', 'R'});
  be32(width);
  be32(height);
  b.insert(b.end(), {8, 0, 0, 0, 0});  // bit depth 8, gray, deflate, no filter method, not interlaced
  be32(0);                             // CRC (stb_image does not check it)
  be32(0);
  b.insert(b.end(), {'I', 'E', 'N', 'D'});
  be32(0);
  return b;
}

TEST(Png, WrittenTensorReadsBackTheSame) {
  TempDir dir;
  const uint64_t seed = fresh_seed();
  for (int64_t c : {1, 3}) {
    const Image img = random_image(13, 9, c, seed + static_cast<uint64_t>(c));
    const data::Normalization norm =
        c == 3 ? data::cifar10_normalization() : data::mnist_normalization();
    const Tensor t = data::image_to_tensor(img, norm);
    EXPECT_EQ(t.shape(), (Shape{c, 9, 13}));
    const std::string path = dir / (c == 1 ? "gray.png" : "rgb.png");
    data::save_png(path, t, norm);
    const Image back = data::read_image(path);
    EXPECT_EQ(back.width, 13);
    EXPECT_EQ(back.height, 9);
    EXPECT_EQ(back.channels, c);
    EXPECT_EQ(back.pixels, img.pixels);
    // Bit-identical tensors: the PNG holds the 8-bit pixels, and normalization maps a pixel to one float.
    EXPECT_EQ(data::image_to_tensor(back, norm).to_vector(), t.to_vector()) << "channels " << c;
  }
}

TEST(Png, WritesAtomicallyAndNamesTheFileOnError) {
  TempDir dir;
  const Image img = random_image(4, 4, 3, 1);
  data::write_png(dir / "a.png", img);
  for (const auto& e : std::filesystem::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename(), "a.png") << "a temporary file was left behind";
  EXPECT_HL_ERROR(data::write_png(dir / "no/such/folder/a.png", img), "write_png(" + dir / "no/such/folder/a.png" + ")");
  EXPECT_HL_ERROR(data::write_png(dir / "b.png", Image{4, 4, 3, Bytes(5)}), "write_png(", "not a valid image");
  for (const Image& bad : {Image{0, 4, 1, {}}, Image{4, 0, 1, {}}, Image{1, 1, 0, {}}, Image{1, 1, 5, Bytes(5)}})
    EXPECT_HL_ERROR(data::write_png(dir / "b.png", bad),
                    detail::concat("write_png(", dir / "b.png", "): not a valid image (", bad.width, "x", bad.height,
                                   "x", bad.channels, ", ", bad.pixels.size(), " bytes)"));
  for (const Image& good : {random_image(1, 1, 1, 3), random_image(3, 2, 4, 3)}) {  // one pixel; RGBA
    data::write_png(dir / "c.png", good);
    EXPECT_EQ(data::read_image(dir / "c.png").pixels, good.pixels);
  }
}

TEST(Image, DecodesJpegAndBmpAndConvertsChannels) {
  const Image img = random_image(16, 8, 3, fresh_seed());
  const Bytes bmp = encode(img, "bmp");
  EXPECT_EQ(data::decode_image(bmp.data(), bmp.size(), "x.bmp").pixels, img.pixels);  // BMP is lossless
  const Bytes jpg = encode(img, "jpg");
  const Image j = data::decode_image(jpg.data(), jpg.size(), "x.jpg");
  EXPECT_EQ(j.width, 16);
  EXPECT_EQ(j.channels, 3);
  const Image gray = data::decode_image(jpg.data(), jpg.size(), "x.jpg", 1);
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels.size(), 16u * 8u);
  const Bytes png_gray = encode(random_image(5, 5, 1, 2), "png");
  EXPECT_EQ(data::decode_image(png_gray.data(), png_gray.size(), "g.png", 3).channels, 3);
}

TEST(Image, RejectsDamagedFiles) {
  const Image img = random_image(24, 20, 3, fresh_seed());
  for (const char* fmt : {"png", "jpg", "bmp"}) {
    const Bytes good = encode(img, fmt);
    const std::string name = std::string("f.") + fmt;
    // Cut at several places: in the header, in the middle, a few bytes before the end.
    for (size_t cut : {size_t{10}, good.size() / 2, good.size() - 3}) {
      SCOPED_TRACE(name + " cut to " + std::to_string(cut) + " of " + std::to_string(good.size()) + " bytes");
      EXPECT_HL_ERROR(data::decode_image(good.data(), cut, name), "decode_image(" + name + ")");
    }
  }
  EXPECT_HL_ERROR(data::decode_image(nullptr, 0, "e.png"), "decode_image(e.png)", "empty");
  // A chunk length far beyond the file (stb_image would first allocate that much; found by fuzz_image).
  Bytes huge = encode(img, "png");
  huge[33] = 0x7F;  // the first chunk after IHDR (bytes 8-32) starts at 33: its length becomes ~2 GB
  EXPECT_HL_ERROR(data::decode_image(huge.data(), huge.size(), "h.png"), "truncated PNG", "claims");
  const Bytes text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  EXPECT_HL_ERROR(data::decode_image(text.data(), text.size(), "t.jpg"), "not a PNG, JPEG or BMP");
  TempDir dir;
  EXPECT_HL_ERROR(data::read_image(dir / "missing.png"), "read_image(" + dir / "missing.png" + ")", "no such file");
  EXPECT_HL_ERROR(data::read_image(dir.str()), "directory");
}

// Debian's stb_image decodes a scan with Huffman tables that no DHT segment defined (stale memory:
// a crash found by tests/fuzz/fuzz_image, seed regress_jpeg_undefined_huffman_table.jpg) and lets a
// table's code counts exceed 256 (stb issue #1289). decode_image refuses both before stb sees them.
TEST(Image, RejectsJpegHuffmanTablesStbWouldMisread) {
  const Bytes good = encode(random_image(16, 16, 3, fresh_seed()), "jpg");
  auto find = [&](uint8_t marker) {
    for (size_t i = 0; i + 1 < good.size(); ++i)
      if (good[i] == 0xFF && good[i + 1] == marker) return i;
    ADD_FAILURE() << "marker " << int(marker) << " not in stb's JPEG";
    return size_t(0);
  };
  ASSERT_EQ(data::decode_image(good.data(), good.size(), "good.jpg").width, 16);
  Bytes undefined = good;
  undefined[find(0xDA) + 6] = 0x22;  // the scan's first component now asks for DC/AC tables 2
  EXPECT_HL_ERROR(data::decode_image(undefined.data(), undefined.size(), "u.jpg"), "decode_image(u.jpg)",
                  "Huffman table 2, which no DHT segment defined");
  Bytes overfull = good;
  overfull[find(0xC4) + 5 + 15] = 255;  // the 16-bit code count of the first table: > 256 codes in all
  EXPECT_HL_ERROR(data::decode_image(overfull.data(), overfull.size(), "o.jpg"), "decode_image(o.jpg)",
                  "codes (at most 256)");
}

TEST(Image, ResizeGridAndScale) {
  const Image img = random_image(32, 32, 3, fresh_seed());
  const Image half = data::resize_image(img, 16, 8);
  EXPECT_EQ(half.width, 16);
  EXPECT_EQ(half.height, 8);
  EXPECT_EQ(half.pixels.size(), 16u * 8u * 3u);
  // A constant image stays constant through the resampling filter.
  Image flat{10, 10, 1, Bytes(100, 77)};
  for (uint8_t p : data::resize_image(flat, 28, 28).pixels) ASSERT_EQ(p, 77);
  const Image big = data::scale_nearest(img, 3);
  EXPECT_EQ(big.at(3 * 5 + 2, 3 * 7 + 1, 2), img.at(5, 7, 2));
  const Image grid = data::make_grid({img, img, img}, 2, 1, 9);
  EXPECT_EQ(grid.width, 2 * 32 + 3);
  EXPECT_EQ(grid.height, 2 * 32 + 3);
  EXPECT_EQ(grid.at(1 + 4, 1 + 32 + 1 + 6, 1), img.at(4, 6, 1));  // the second image, top row
  EXPECT_EQ(grid.at(0, 0, 0), 9);
  // Every pixel: the padding (between the images, and around them) is the background, and each
  // image is copied whole and nowhere else. The third image is alone on the second row.
  for (int64_t y = 0; y < grid.height; ++y)
    for (int64_t x = 0; x < grid.width; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        const int64_t col = (x - 1) / 33, row = (y - 1) / 33, ix = (x - 1) % 33, iy = (y - 1) % 33;
        const bool inside = x >= 1 && y >= 1 && ix < 32 && iy < 32 && row * 2 + col < 3;
        ASSERT_EQ(grid.at(y, x, c), inside ? img.at(iy, ix, c) : 9) << "grid pixel x " << x << ", y " << y;
      }
  EXPECT_HL_ERROR(data::make_grid({img, half}, 2), "make_grid", "32x32x3");
}

// resize_image: each side at least 1 (and at most 65535: RefusesSidesOver65535), at most 2^26 pixels
// in all, and a whole image to start from;
// one side kept is still a resize.
TEST(Image, ResizeImageChecksAndOneSideKept) {
  const Image img = random_image(6, 4, 1, fresh_seed());
  const Image taller = data::resize_image(img, 6, 9);
  EXPECT_EQ(taller.width, 6);
  EXPECT_EQ(taller.height, 9);
  EXPECT_EQ(taller.pixels.size(), 54u);
  EXPECT_EQ(data::resize_image(img, 3, 4).width, 3);
  EXPECT_EQ(data::resize_image(img, 1, 1).pixels.size(), 1u);
  // From one pixel (a side of 1 is an image), and to exactly 2^26 pixels (the limit is inclusive).
  const Image dot{1, 1, 1, Bytes{7}};
  for (uint8_t p : data::resize_image(dot, 3, 2).pixels) EXPECT_EQ(p, 7);
  const Image most = data::resize_image(dot, 8192, 8192);
  EXPECT_EQ(most.pixels.size(), size_t{1} << 26);
  EXPECT_EQ(most.pixels.back(), 7);
  for (const auto& [w, h] : {std::pair<int64_t, int64_t>{0, 5}, {5, 0}, {-1, -1}})
    EXPECT_HL_ERROR(data::resize_image(img, w, h), detail::concat("resize_image: cannot resize 6x4x1 to ", w, "x", h));
  for (const Image& bad : {Image{0, 4, 1, {}}, Image{4, 0, 1, {}}, Image{4, 4, 0, {}}, Image{4, 4, 1, Bytes(15)}})
    EXPECT_HL_ERROR(data::resize_image(bad, 2, 2), detail::concat("resize_image: the image ", bad.width, "x",
                                                                  bad.height, "x", bad.channels, " holds ",
                                                                  bad.pixels.size(), " bytes"));
}

// stb_image_resize is handed each image's layout (stride 0: rows packed): an image whose rows are
// all the same keeps them all the same, and one whose rows are each one color keeps that too. To
// within 1: stb filters in float, with weights that sum to 1 only to float precision, so a constant
// run can round to two neighbouring values. (A wrong stride reads other pixels: random ones here.)
TEST(Image, ResizeKeepsConstantRowsAndColumns) {
  const Image row = random_image(6, 1, 3, fresh_seed());
  Image same_rows{6, 5, 3, {}}, flat_rows{6, 5, 3, {}};
  for (int64_t y = 0; y < 5; ++y) {
    same_rows.pixels.insert(same_rows.pixels.end(), row.pixels.begin(), row.pixels.end());
    const auto color = row.pixels.begin() + 3 * y;  // row y is the color of the random row's pixel y
    for (int64_t x = 0; x < 6; ++x) flat_rows.pixels.insert(flat_rows.pixels.end(), color, color + 3);
  }
  const Image a = data::resize_image(same_rows, 9, 7), b = data::resize_image(flat_rows, 9, 7);
  for (int64_t y = 0; y < 7; ++y)
    for (int64_t x = 0; x < 9; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        ASSERT_LE(std::abs(a.at(y, x, c) - a.at(0, x, c)), 1) << "rows differ at x " << x << ", y " << y;
        ASSERT_LE(std::abs(b.at(y, x, c) - b.at(y, 0, c)), 1) << "a row is not one color at x " << x << ", y " << y;
      }
}

// scale_nearest: every output pixel is its block's source pixel; factors 1 to 64.
TEST(Image, ScaleNearestEveryPixelAndFactorLimits) {
  const Image img = random_image(3, 2, 3, fresh_seed());
  const Image big = data::scale_nearest(img, 4);
  ASSERT_EQ(big.width, 12);
  ASSERT_EQ(big.height, 8);
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 12; ++x)
      for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(big.at(y, x, c), img.at(y / 4, x / 4, c)) << x << "," << y << "," << c;
  EXPECT_EQ(data::scale_nearest(img, 1).pixels, img.pixels);
  EXPECT_EQ(data::scale_nearest(img, 64).width, 3 * 64);
  for (int64_t bad : {0, 65, -1})
    EXPECT_HL_ERROR(data::scale_nearest(img, bad),
                    detail::concat("scale_nearest: factor must be 1 to 64 (got ", bad, ")"));
}

// make_grid: one column and no padding are allowed; every image must match the first in each of
// width, height and channels.
TEST(Image, MakeGridLimitsAndSizes) {
  const Image a = random_image(4, 3, 1, fresh_seed());
  const Image column = data::make_grid({a, a}, 1, 0);
  EXPECT_EQ(column.width, 4);
  EXPECT_EQ(column.height, 6);
  EXPECT_EQ(column.at(3, 2, 0), a.at(0, 2, 0));
  for (const auto& [cols, padding] : {std::pair<int64_t, int64_t>{0, 0}, {1, -1}})
    EXPECT_HL_ERROR(data::make_grid({a}, cols, padding),
                    detail::concat("make_grid: cols must be >= 1 and padding >= 0 (got ", cols, ", ", padding, ")"));
  for (const Image& other : {random_image(5, 3, 1, 1), random_image(4, 2, 1, 1), random_image(4, 3, 3, 1)})
    EXPECT_HL_ERROR(data::make_grid({a, other}, 2), "make_grid: every image must be 4x3x1, got ",
                    detail::concat(other.width, "x", other.height, "x", other.channels));
}

// Hand-built images whose bytes do not match their sides: scale_nearest and make_grid read such an
// image past its end (found in review, 2026-11-29); every function now refuses it, including sides
// whose product overflows (2^62 x 4 x 1 wrapped to 0 bytes, which matched an empty pixel vector).
// Outputs over 2^26 pixels are refused before anything is allocated.
TEST(Image, ImagesWhoseBytesDoNotMatchTheirSidesAreRefusedEverywhere) {
  const Image short_one{4, 4, 1, Bytes(3)};
  const Image wrapped{int64_t{1} << 62, 4, 1, {}};
  EXPECT_FALSE(short_one.holds_its_pixels());
  EXPECT_FALSE(wrapped.holds_its_pixels());
  EXPECT_TRUE((Image{0, 3, 1, {}}).holds_its_pixels());
  for (const Image& bad : {short_one, wrapped}) {
    EXPECT_HL_ERROR(data::scale_nearest(bad, 2), "scale_nearest: the image ");
    EXPECT_HL_ERROR(data::make_grid({bad}, 1), "make_grid: the image ");
    EXPECT_HL_ERROR(data::flatten_alpha(bad), "flatten_alpha: the image ");
    EXPECT_HL_ERROR(data::image_to_tensor(bad, {}), "image_to_tensor: the image ");
    EXPECT_HL_ERROR(data::apply_exif_orientation(bad, 6), "apply_exif_orientation: the image ");
    EXPECT_HL_ERROR(data::resize_image(bad, 2, 2), "resize_image: the image ");
  }
  EXPECT_HL_ERROR(data::scale_nearest(Image{4096, 4096, 1, Bytes(4096 * 4096)}, 3),
                  "scale_nearest: 4096x4096x1 enlarged 3 times would have over 67108864 (2^26) pixels");
  EXPECT_HL_ERROR(data::make_grid({Image{1, 1, 1, {7}}}, 1, 10000),
                  "make_grid: 1 images of 1x1x1, 1 per row with padding 10000 make a 20001x20001 grid, over the "
                  "67108864 (2^26) pixels");
  EXPECT_HL_ERROR(data::make_grid({Image{1, 1, 1, {7}}}, 1, 70000), "make_grid: padding 70000 is over 65535");
  // The side limit has its own message (found by review: it said "over 2^26 pixels" for 70,000).
  EXPECT_HL_ERROR(data::scale_nearest(Image{40000, 1, 1, Bytes(40000)}, 2),
                  "scale_nearest: 40000x1x1 enlarged 2 times would have a side over 65535 pixels");
  EXPECT_HL_ERROR(data::make_grid({Image{40000, 1, 1, Bytes(40000)}, Image{40000, 1, 1, Bytes(40000)}}, 2, 0),
                  "make_grid: 2 images of 40000x1x1, 2 per row with padding 0 make a 80000x1 grid, a side over the "
                  "65535 pixels");
}

// The limits hold their own values: a side of exactly 65535 pixels and exactly 2^26 pixels in all are
// accepted by scale_nearest and make_grid (one past each is refused, above); a side of 0 is refused.
TEST(Image, ScaleAndGridAcceptASideOf65535AndExactly2To26Pixels) {
  const Image row{65535, 1, 1, Bytes(65535, 3)}, column{1, 65535, 1, Bytes(65535, 4)};
  for (const Image& img : {row, column}) {
    EXPECT_EQ(data::scale_nearest(img, 1).pixels, img.pixels);
    const Image grid = data::make_grid({img}, 1, 0);
    EXPECT_EQ(grid.width, img.width);
    EXPECT_EQ(grid.height, img.height);
    EXPECT_EQ(grid.pixels, img.pixels);
  }
  for (const Image& img : {Image{21845, 1, 1, Bytes(21845, 5)}, Image{1, 21845, 1, Bytes(21845, 5)}}) {
    const Image big = data::scale_nearest(img, 3);  // 21845 * 3 = 65535
    EXPECT_EQ(big.width * big.height, 3 * 65535);
    EXPECT_EQ(big.pixels, Bytes(3 * 65535, 5));
  }
  EXPECT_HL_ERROR(data::scale_nearest(Image{1, 40000, 1, Bytes(40000)}, 2),
                  "scale_nearest: 1x40000x1 enlarged 2 times would have a side over 65535 pixels");
  Image quarter{4096, 4096, 1, Bytes(4096 * 4096, 0)};
  quarter.pixels[4096 * 4096 - 1] = 9;
  const Image scaled = data::scale_nearest(quarter, 2);  // 8192 x 8192 = 2^26
  ASSERT_EQ(scaled.pixels.size(), size_t{1} << 26);
  EXPECT_EQ(scaled.at(8191, 8191, 0), 9);
  EXPECT_EQ(scaled.at(8189, 8189, 0), 0);
  const Image half{8192, 4096, 1, Bytes(8192 * 4096, 6)};
  const Image grid = data::make_grid({half, half}, 1, 0);  // 8192 x 8192 = 2^26
  EXPECT_EQ(grid.width, 8192);
  EXPECT_EQ(grid.height, 8192);
  EXPECT_EQ(grid.pixels.size(), size_t{1} << 26);
  // A padding of 65535 passes the padding's own limit, and the grid it makes is then too wide.
  EXPECT_HL_ERROR(data::make_grid({Image{1, 1, 1, {7}}}, 1, 65535),
                  "make_grid: 1 images of 1x1x1, 1 per row with padding 65535 make a 131071x131071 grid, a side "
                  "over the 65535 pixels");
  for (const Image& empty : {Image{0, 2, 1, {}}, Image{2, 0, 1, {}}})
    EXPECT_HL_ERROR(data::make_grid({empty}, 1),
                    detail::concat("make_grid: the image ", empty.width, "x", empty.height,
                                   "x1 holds 0 bytes (or has a side of 0 or over 65535)"));
}

TEST(Image, SavePngGridTakesTheFirstImagesOfTheBatch) {
  TempDir dir;
  Generator gen(fresh_seed());
  const Tensor batch = Tensor::randn({5, 1, 4, 4}, gen);  // N > C
  data::save_png_grid(dir / "all.png", batch, data::Normalization::unit(), 3, 2, 64);
  const Image all = data::read_image(dir / "all.png");
  EXPECT_EQ(all.width, 3 * 8 + 4 * 2);  // 3 columns of 4x4 images scaled by 2, padding 2 around each
  EXPECT_EQ(all.height, 2 * 8 + 3 * 2);
  data::save_png_grid(dir / "two.png", batch, data::Normalization::unit(), 3, 1, 2);
  const Image two = data::read_image(dir / "two.png");
  EXPECT_EQ(two.width, 2 * 4 + 3 * 2);  // max_images = 2: one row of two
  EXPECT_EQ(two.height, 4 + 2 * 2);
  // Row 3, column 1 of the second image (at x = 2 + 4 + 2).
  EXPECT_EQ(two.at(2 + 3, 2 + 4 + 2 + 1, 0), data::tensor_to_image(batch.slice_rows(1, 2), {}).at(3, 1, 0));
  EXPECT_HL_ERROR(data::save_png_grid(dir / "e.png", Tensor::zeros({0, 1, 4, 4}), {}, 3),
                  detail::concat("save_png_grid(", dir / "e.png", "): expected a batch [N, C, H, W], got ",
                                 Tensor::zeros({0, 1, 4, 4}).describe()));
  EXPECT_HL_ERROR(data::save_png_grid(dir / "e.png", Tensor::zeros({1, 4, 4}), {}, 3), "expected a batch [N, C, H, W]",
                  Tensor::zeros({1, 4, 4}).describe());
  EXPECT_HL_ERROR(data::save_png_grid(dir / "e.png", Tensor(), {}, 3), "got an undefined tensor");
  EXPECT_FALSE(std::filesystem::exists(dir / "e.png"));
  data::save_png_grid(dir / "one.png", batch.slice_rows(0, 1), data::Normalization::unit(), 3);  // a batch of one
  EXPECT_EQ(data::read_image(dir / "one.png").width, 4 + 2 * 2);
}

// A BMP header (file header and BITMAPINFOHEADER, 54 bytes) for width x height at 24 bits per
// pixel, with no pixel data: for the truncation check's edges.
Bytes bmp_header(int32_t width, int32_t height) {
  Bytes b(54, 0);
  const auto le32 = [&](size_t at, uint32_t v) {
    for (size_t k = 0; k < 4; ++k) b[at + k] = static_cast<uint8_t>(v >> (8 * k));
  };
  b[0] = 'B';
  b[1] = 'M';
  le32(10, 54);  // pixel data offset
  le32(14, 40);  // header size
  le32(18, static_cast<uint32_t>(width));
  le32(22, static_cast<uint32_t>(height));
  b[26] = 1;   // planes
  b[28] = 24;  // bits per pixel (compression at 30: 0, none)
  return b;
}

// A BMP's height is negative when its rows are stored top to bottom. stbi_info reports the sign as
// it is; decode_image must not take that for an empty image (it did: "claims 7x-5 pixels"). A
// height of 0 is refused.
TEST(Image, TopDownBmpDecodesTheRightWayUp) {
  const Image img = random_image(7, 5, 3, fresh_seed());
  const Bytes bottom_up = encode(img, "bmp");  // stb writes the last row first
  const size_t offset = bottom_up[10] | bottom_up[11] << 8, row = (7 * 3 + 3) / 4 * 4;
  ASSERT_EQ(bottom_up.size(), offset + 5 * row);
  Bytes top_down = bottom_up;
  const uint32_t minus_five = static_cast<uint32_t>(-5);
  for (size_t k = 0; k < 4; ++k) top_down[22 + k] = static_cast<uint8_t>(minus_five >> (8 * k));
  for (size_t y = 0; y < 5; ++y)
    std::copy_n(bottom_up.begin() + static_cast<std::ptrdiff_t>(offset + (4 - y) * row), row,
                top_down.begin() + static_cast<std::ptrdiff_t>(offset + y * row));
  const Image back = data::decode_image(top_down.data(), top_down.size(), "td.bmp");
  EXPECT_EQ(back.width, 7);
  EXPECT_EQ(back.height, 5);
  EXPECT_EQ(back.pixels, img.pixels);
  EXPECT_HL_ERROR(data::decode_image(top_down.data(), top_down.size() - 1, "td.bmp"), "truncated BMP: 7x-5");
  // Top-down or not, 2^26 pixels is the limit: 8192 x 8193 at 1 bit per pixel (a 2-colour palette,
  // then rows of 1024 bytes) is a whole 8 MiB file that would decode to 200 MB of RGB.
  Bytes over = bmp_header(8192, -8193);
  over[10] = 54 + 8;  // the pixel data follows the palette
  over[28] = 1;
  over.resize(54 + 8 + size_t{1024} * 8193, 0);
  EXPECT_HL_ERROR(data::decode_image(over.data(), over.size(), "o.bmp"),
                  "decode_image(o.bmp): the header claims 8192x8193 pixels; halfling accepts at most 65535 per side and 67108864 in all");
  Bytes empty = bottom_up;
  for (size_t k = 0; k < 4; ++k) empty[22 + k] = 0;
  EXPECT_HL_ERROR(data::decode_image(empty.data(), empty.size(), "e.bmp"),
                  "decode_image(e.bmp): the header claims 7x0 pixels; halfling accepts at most 65535 per side and 67108864 in all");
}

// The truncation check reads the header up to the compression field (byte 34), so a file of 34
// bytes is checked; sizes up to 2^24 per side are checked (stb_image refuses larger ones itself).
TEST(Image, BmpTruncationCheckEdges) {
  const Bytes header = bmp_header(2, 3);
  EXPECT_HL_ERROR(data::decode_image(header.data(), 34, "s.bmp"),
                  "decode_image(s.bmp): truncated BMP: 2x3 at 24 bits per pixel needs 78 bytes, the file has 34");
  const Bytes tall = bmp_header(1, 1 << 24), wide = bmp_header(1 << 24, 1);
  EXPECT_HL_ERROR(data::decode_image(tall.data(), tall.size(), "t.bmp"), "truncated BMP: 1x16777216 at 24 bits");
  EXPECT_HL_ERROR(data::decode_image(wide.data(), wide.size(), "w.bmp"), "truncated BMP: 16777216x1 at 24 bits");
  // Past 2^24 rows the truncation check leaves the file to stb_image, and the side limit (65535)
  // refuses it before decoding.
  const Bytes taller = bmp_header(1, (1 << 24) + 1);
  EXPECT_HL_ERROR(data::decode_image(taller.data(), taller.size(), "t.bmp"),
                  "decode_image(t.bmp): the header claims 1x16777217 pixels; halfling accepts at most 65535 per side");
  const Bytes wider = bmp_header((1 << 24) + 1, 1);
  EXPECT_HL_ERROR(data::decode_image(wider.data(), wider.size(), "w.bmp"),
                  "decode_image(w.bmp): the header claims 16777217x1 pixels; halfling accepts at most 65535 per side");
  // Bits per pixel: 1 to 32 are measured; 0 and 64 are left to stb_image, which refuses them.
  for (const auto& [bpp, what] : {std::pair{0, "cannot decode (invalid)"}, std::pair{64, "cannot decode (bad masks)"},
                                   std::pair{1, "truncated BMP: 2x3 at 1 bits per pixel needs 66 bytes"}}) {
    Bytes b = bmp_header(2, 3);
    b[28] = static_cast<uint8_t>(bpp);
    EXPECT_HL_ERROR(data::decode_image(b.data(), b.size(), "b.bmp"), "decode_image(b.bmp): ", what);
  }
  // 32 bits per pixel is the most the check measures.
  Bytes rgba = bmp_header(2, 3);
  rgba[28] = 32;
  EXPECT_HL_ERROR(data::decode_image(rgba.data(), rgba.size(), "r.bmp"),
                  "truncated BMP: 2x3 at 32 bits per pixel needs 78 bytes, the file has 54");
  // A width of 0 is not for the truncation check to measure: the size check refuses it.
  const Bytes zero = bmp_header(0, 3);
  EXPECT_HL_ERROR(data::decode_image(zero.data(), 40, "z.bmp"),
                  "decode_image(z.bmp): the header claims 0x3 pixels; halfling accepts at most 65535 per side and 67108864 in all");
}

TEST(Image, WideBmpCutShortIsCaughtBeforeDecoding) {
  // 65537 = 0x00010001 pixels wide: the width's third byte is not 0 (a 32-bit little-endian read
  // must use all four bytes). Cut in half, the file must be refused as truncated, with its size (the
  // truncation check runs first); whole, it is refused for its width, past the 65535 a side may have.
  const Image wide{65537, 1, 3, Bytes(65537 * 3, 100)};
  const Bytes bmp = encode(wide, "bmp");
  EXPECT_HL_ERROR(data::decode_image(bmp.data(), bmp.size(), "w.bmp"),
                  "decode_image(w.bmp): the header claims 65537x1 pixels; halfling accepts at most 65535 per side");
  EXPECT_HL_ERROR(data::decode_image(bmp.data(), bmp.size() / 2, "w.bmp"), "decode_image(w.bmp)",
                  "truncated BMP: 65537x1 at 24 bits per pixel needs " + std::to_string(bmp.size()) + " bytes");
}

TEST(Image, LoadImageTensorForAModel) {
  TempDir dir;
  data::write_png(dir / "digit.png", random_image(40, 40, 3, fresh_seed()));
  const Tensor x = data::load_image_tensor(dir / "digit.png", {1, 28, 28}, data::mnist_normalization());
  EXPECT_EQ(x.shape(), (Shape{1, 1, 28, 28}));
  EXPECT_EQ(x.dtype(), DType::f32);
  EXPECT_EQ(data::load_image_tensor(dir / "digit.png", {3, 0, 0}, {}).shape(), (Shape{1, 3, 40, 40}));
  // A photo stored on its side (EXIF orientation 6) comes as its viewer shows it: 30 wide, 20 high.
  data::write_png(dir / "side.png", random_image(20, 30, 3, fresh_seed()));
  write_file(dir / "side.png", with_exif_chunk(read_file(dir / "side.png"), tiff_orientation(false, 6)));
  EXPECT_EQ(data::load_image_tensor(dir / "side.png", {3, 0, 0}, {}).shape(), (Shape{1, 3, 20, 30}));
  EXPECT_HL_ERROR(data::load_image_tensor(dir / "digit.png", {2, 28, 28}, {}), "channels must be 1 or 3");
  EXPECT_EQ(data::load_image_tensor(dir / "digit.png", {1, 1, 1}, {}).shape(), (Shape{1, 1, 1, 1}));
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{0, 28}, {28, 0}})
    EXPECT_HL_ERROR(data::load_image_tensor(dir / "digit.png", {1, h, w}, {}),
                    detail::concat("load_image_tensor(", dir / "digit.png",
                                   "): give both height and width (or neither), got ", h, "x", w));
  // A negative side, also beside a positive one (28 x -3 used to pass this check and fail in resize_image).
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{-1, -1}, {28, -3}, {-3, 28}})
    EXPECT_HL_ERROR(data::load_image_tensor(dir / "digit.png", {1, h, w}, {}),
                    detail::concat("load_image_tensor(", dir / "digit.png",
                                   "): the size to resize to cannot be negative; got ", h, "x", w));
}

TEST(Image, TensorToImageMinMaxAndClamping) {
  const Tensor t = Tensor::from_vector(std::vector<float>{-2.0f, 0.0f, 2.0f, 6.0f}, {2, 2});
  const Image mm = data::tensor_to_image_minmax(t);
  EXPECT_EQ(mm.pixels, (Bytes{0, 64, 128, 255}));  // (v + 2) / 8 * 255, rounded
  EXPECT_EQ(data::tensor_to_image_minmax(Tensor::full({3, 2, 2}, -7.0f)).pixels, Bytes(12, 128));  // mid-gray
  const Image unit = data::tensor_to_image(t, data::Normalization::unit());
  EXPECT_EQ(unit.pixels, (Bytes{0, 0, 255, 255}));  // clamped to [0, 1]
  EXPECT_HL_ERROR(data::tensor_to_image(Tensor::zeros({2, 4, 4}), {}), "[C, H, W]", "C = 1 or 3");
  const Tensor one = data::image_to_tensor(Image{1, 1, 1, Bytes{51}}, data::Normalization::unit());
  EXPECT_EQ(one.shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(one.to_vector(), std::vector<float>{0.2f});
  for (const Image& empty : {Image{4, 0, 3, {}}, Image{0, 4, 3, {}}, Image{4, 4, 0, {}}}) {
    EXPECT_HL_ERROR(data::image_to_tensor(empty, {}), "image_to_tensor: the image");
  }
}


// --- What decode_image refuses before stb_image sees the bytes ---------------------------------

// channels: 0 keeps the file's, 1 to 4 convert (4 adds an opaque alpha); anything else is refused.
TEST(Image, DecodeChannels) {
  const Image img = random_image(5, 4, 3, fresh_seed());
  const Bytes png = encode(img, "png");
  const Image rgba = data::decode_image(png.data(), png.size(), "c.png", 4);
  ASSERT_EQ(rgba.channels, 4);
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(rgba.pixels[static_cast<size_t>(4 * i + 1)], img.pixels[static_cast<size_t>(3 * i + 1)]);
    EXPECT_EQ(rgba.pixels[static_cast<size_t>(4 * i + 3)], 255);
  }
  EXPECT_EQ(data::decode_image(png.data(), png.size(), "c.png", 2).channels, 2);
  for (int bad : {-1, 5})
    EXPECT_HL_ERROR(data::decode_image(png.data(), png.size(), "c.png", bad),
                    detail::concat("decode_image(c.png): channels must be 0 (as stored), 1, 2, 3 or 4 (got ", bad, ")"));
}

// stb_image takes the size as an int: 2^31 - 1 bytes is the most it can be given. The buffers are
// mapped, not filled: only the pages holding the header are ever touched.
TEST(Image, DecodeSizeLimitIsIntMax) {
  const size_t most = static_cast<size_t>(INT_MAX);
  void* map = mmap(nullptr, most + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(map);
  const Bytes header = png_header_only(4, 4);
  std::copy(header.begin(), header.end(), bytes);
  const std::string at_most = error_of([&] { data::decode_image(bytes, most, "m.png"); });
  EXPECT_EQ(at_most.find("2 GiB"), std::string::npos) << at_most;
  EXPECT_NE(at_most.find("decode_image(m.png): "), std::string::npos) << at_most;
  EXPECT_HL_ERROR(data::decode_image(bytes, most + 1, "m.png"),
                  "decode_image(m.png): the file is 2147483648 bytes; stb_image reads at most 2 GiB");
  munmap(map, most + 1);
}

// The first bytes decide the format; a file whose signature is wrong in any one byte is none of
// them, and a file that is only a signature is that format cut short.
TEST(Image, SniffsEverySignatureByte) {
  const std::vector<std::pair<Bytes, std::string>> signatures = {
      {{0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A}, "truncated PNG: the chunk at byte 8 is cut off"},
      {{0xFF, 0xD8, 0xFF}, "truncated JPEG: no end-of-image marker"},
      {{'B', 'M'}, "not a decodable image"}};
  for (const auto& [magic, alone] : signatures) {
    // Exactly the signature: recognized (the smallest size each check accepts), and refused as damaged.
    EXPECT_HL_ERROR(data::decode_image(magic.data(), magic.size(), "s.img"), "decode_image(s.img): ", alone);
    // Any one byte of the signature wrong, the rest of the file zeros: not an image at all.
    const size_t sig = magic[0] == 0x89 ? 4 : magic.size();  // PNG: halfling reads the first four
    for (size_t k = 0; k < sig; ++k) {
      Bytes wrong = magic;
      wrong.resize(40, 0);
      wrong[k] ^= 0x20;
      SCOPED_TRACE(testing::Message() << "signature " << alone << ", byte " << k << " wrong");
      EXPECT_HL_ERROR(data::decode_image(wrong.data(), wrong.size(), "s.img"), "not a PNG, JPEG or BMP file");
    }
  }
}

// A PNG chunk's length is four big-endian bytes, each of which counts: one more in any of the first
// three is more than the rest of the file holds, and the message says how much.
TEST(Image, PngChunkLengthReadsAllFourBytes) {
  const Bytes good = encode(random_image(6, 5, 3, fresh_seed()), "png");
  const size_t at = 33;  // the chunk after the signature (8 bytes) and IHDR (25)
  uint64_t len = 0;
  for (size_t k = 0; k < 4; ++k) len = len << 8 | good[at + k];
  ASSERT_LT(len + at + 12, good.size()) << "stb writes IDAT, then IEND";
  for (size_t k = 0; k < 3; ++k) {
    Bytes bad = good;
    ++bad[at + k];
    const uint64_t claimed = len + (uint64_t{1} << (24 - 8 * k));
    SCOPED_TRACE(testing::Message() << "byte " << k << " of the length");
    EXPECT_HL_ERROR(data::decode_image(bad.data(), bad.size(), "l.png"),
                    detail::concat("truncated PNG: the chunk at byte 33 claims ", claimed,
                                   " bytes of data, the file has ", good.size() - at - 12, " more"));
  }
}

// The chunk walk's bound, exactly: a chunk may claim every byte up to the last 4 (its CRC), and no more.
TEST(Image, PngChunkLengthAtTheEndOfTheFile) {
  Bytes png = encode(random_image(6, 5, 3, fresh_seed()), "png");
  ASSERT_GT(png.size(), 45u);
  png.erase(png.end() - 12, png.end());  // without IEND: IDAT is the last chunk
  const size_t at = 33, room = png.size() - at - 12;
  const auto claim = [&](uint64_t len) {
    Bytes b = png;
    for (size_t k = 0; k < 4; ++k) b[at + k] = static_cast<uint8_t>(len >> (24 - 8 * k));
    return error_of([&] { data::decode_image(b.data(), b.size(), "e.png"); });
  };
  EXPECT_EQ(claim(room), detail::concat("decode_image(e.png): truncated PNG: the chunk at byte ", png.size(),
                                        " is cut off (no IEND chunk)"));
  EXPECT_EQ(claim(room + 1), detail::concat("decode_image(e.png): truncated PNG: the chunk at byte 33 claims ",
                                            room + 1, " bytes of data, the file has ", room, " more"));
}

// 65535 pixels per side is a limit too: stb_image_resize's scratch memory grows with the longest side
// of the source (a 1 x 16776963 BMP from fuzz_image, inside the pixel limit, made resize_image
// allocate 1.4 GB). A header claiming one more is refused before decoding; 65535 passes that check
// (and fails later, having no pixel data); resize_image refuses a longer side, source or target.
TEST(Image, RefusesSidesOver65535) {
  for (const auto& [w, h] : {std::pair<uint32_t, uint32_t>{1, 65536}, {65536, 1}, {65536, 1024}}) {
    const Bytes over = png_header_only(w, h);
    EXPECT_HL_ERROR(data::decode_image(over.data(), over.size(), "long.png"),
                    detail::concat("decode_image(long.png): the header claims ", w, "x", h,
                                   " pixels; halfling accepts at most 65535 per side and 67108864 in all"));
  }
  for (const auto& [w, h] : {std::pair<uint32_t, uint32_t>{1, 65535}, {65535, 1}}) {
    const Bytes side = png_header_only(w, h);
    const std::string msg = error_of([&] { data::decode_image(side.data(), side.size(), "side.png"); });
    EXPECT_NE(msg.find("decode_image(side.png): cannot decode"), std::string::npos) << w << "x" << h << ": " << msg;
  }
  const Image column{1, 65536, 1, Bytes(65536, 5)};
  EXPECT_HL_ERROR(data::resize_image(column, 8, 8),
                  "resize_image: the image 1x65536x1 has a side over 65535 pixels (stb_image_resize's scratch "
                  "memory grows with it)");
  const Image longest{1, 65535, 1, Bytes(65535, 5)};
  for (uint8_t p : data::resize_image(longest, 8, 8).pixels) EXPECT_EQ(p, 5);
  const Image one{1, 1, 1, Bytes{7}};
  EXPECT_HL_ERROR(data::resize_image(one, 65536, 1), "resize_image: cannot resize 1x1x1 to 65536x1 (at most 65535 "
                                                     "pixels per side and 67108864 in all)");
  EXPECT_EQ(data::resize_image(one, 65535, 1).pixels.size(), 65535u);
}

// stb_image decodes a BMP with any compression code but the two RLE ones as if it were uncompressed:
// the file fuzz_image found (51 bytes, compression 0xff030000, 1 x 16776963 pixels) came out as an
// image of zeros. Only BI_RGB (0) and BI_BITFIELDS (3) are read; BI_BITFIELDS gets the truncation
// check too, and a whole one decodes.
TEST(Image, BmpWithAnotherCompressionIsRefused) {
  for (const uint32_t code : {1u, 2u, 4u, 5u, 6u, 0xff030000u}) {
    Bytes b = bmp_header(2, 3);
    for (size_t k = 0; k < 4; ++k) b[30 + k] = static_cast<uint8_t>(code >> (8 * k));
    b.resize(b.size() + 24, 0);
    EXPECT_HL_ERROR(data::decode_image(b.data(), b.size(), "c.bmp"),
                    detail::concat("decode_image(c.bmp): unsupported BMP: compression ", code,
                                   " (halfling reads uncompressed BMP: BI_RGB or BI_BITFIELDS)"));
  }
  // The fuzzer's file itself (its seed corpus keeps it), in every channel count fuzz_image asks for.
  const std::string found =
      std::string(HALFLING_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_image/regress_bmp_tall_unknown_compression.bmp";
  for (int channels : {0, 1, 3})
    EXPECT_HL_ERROR(data::read_image(found, channels), "unsupported BMP: compression 4278386688");
  // BI_BITFIELDS at 32 bits per pixel: three masks (R, G, B) after the 40-byte header, then the rows.
  Bytes bf = bmp_header(2, 3);
  bf[28] = 32;
  bf[30] = 3;
  bf[10] = 54 + 12;
  const uint32_t masks[3] = {0x00ff0000u, 0x0000ff00u, 0x000000ffu};
  for (uint32_t m : masks)
    for (size_t k = 0; k < 4; ++k) bf.push_back(static_cast<uint8_t>(m >> (8 * k)));
  EXPECT_HL_ERROR(data::decode_image(bf.data(), bf.size(), "bf.bmp"),
                  "decode_image(bf.bmp): truncated BMP: 2x3 at 32 bits per pixel needs 90 bytes, the file has 66");
  for (int px = 0; px < 6; ++px)
    for (uint8_t v : {uint8_t{30}, uint8_t{20}, uint8_t{10}, uint8_t{0}}) bf.push_back(v);  // B, G, R, unused
  const Image img = data::decode_image(bf.data(), bf.size(), "bf.bmp", 3);
  EXPECT_EQ(img.width, 2);
  EXPECT_EQ(img.height, 3);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 2; ++x) {
      EXPECT_EQ(img.at(y, x, 0), 10);
      EXPECT_EQ(img.at(y, x, 1), 20);
      EXPECT_EQ(img.at(y, x, 2), 30);
    }
}

// 2^26 pixels is the limit: a header claiming one more row is refused before any decoding; a
// header claiming exactly 2^26 passes that check (and fails later, having no pixel data).
TEST(Image, RefusesHeadersClaimingMoreThan2To26Pixels) {
  const Bytes over = png_header_only(8192, 8193);
  EXPECT_HL_ERROR(data::decode_image(over.data(), over.size(), "big.png"),
                  "decode_image(big.png): the header claims 8192x8193 pixels; halfling accepts at most 65535 per side and 67108864 in all");
  const Bytes limit = png_header_only(8192, 8192);
  const std::string msg = error_of([&] { data::decode_image(limit.data(), limit.size(), "limit.png"); });
  EXPECT_NE(msg.find("decode_image(limit.png): cannot decode"), std::string::npos) << msg;
  const Image one{1, 1, 1, Bytes{7}};
  EXPECT_HL_ERROR(data::resize_image(one, 8192, 8193), "resize_image: cannot resize 1x1x1 to 8192x8193");
}

// tensor_to_image takes [C, H, W], [H, W] or [1, C, H, W]; an empty image or any other shape is
// refused with the tensor described.
TEST(Image, TensorToImageShapes) {
  Generator gen(fresh_seed());
  const Tensor row = Tensor::uniform({1, 5}, gen, 0.0, 1.0);  // [H, W] with H = 1
  const Image r = data::tensor_to_image(row, {});
  EXPECT_EQ(r.width, 5);
  EXPECT_EQ(r.height, 1);
  EXPECT_EQ(r.channels, 1);
  const Tensor pixel = Tensor::uniform({1, 1, 1}, gen, 0.0, 1.0);  // the smallest image
  EXPECT_EQ(data::tensor_to_image(pixel, {}).pixels.size(), 1u);
  const Tensor batch_of_one = Tensor::uniform({1, 3, 2, 4}, gen, 0.0, 1.0);
  EXPECT_EQ(data::tensor_to_image(batch_of_one, {}).pixels, data::tensor_to_image(batch_of_one.reshape({3, 2, 4}), {}).pixels);
  for (const Shape& bad : {Shape{2, 1, 4, 4}, Shape{3, 0, 4}, Shape{3, 4, 0}, Shape{0, 4}, Shape{4, 0}, Shape{5}})
    EXPECT_HL_ERROR(data::tensor_to_image(Tensor::zeros(bad), {}), "tensor_to_image: expected an image tensor",
                    Tensor::zeros(bad).describe());
  EXPECT_HL_ERROR(data::tensor_to_image_minmax(Tensor::zeros({1, 0, 3})), "tensor_to_image_minmax: expected an image");
}

// A hand-built 8x8 gray JPEG, segment by segment, so a test can choose its Huffman tables and scans.
// Every table holds one 1-bit code for symbol 0 (DC: a difference of 0; AC: end of block), so the
// entropy-coded byte 0x3F (bits 00, then padding) is a whole baseline block, and 0x7F a progressive one.
class TinyJpeg {
 public:
  // `quant`: the 64 values of quantization table 0. `extra` goes between that table and the frame
  // header: a segment, or padding.
  // `components`: 1 (gray) or 3, each sampled 1x1 and quantized with table 0.
  explicit TinyJpeg(bool progressive, const Bytes& quant = Bytes(64, 1), const Bytes& extra = {}, int components = 1) {
    bytes_ = {0xFF, 0xD8};
    Bytes dqt = {0};
    dqt.insert(dqt.end(), quant.begin(), quant.end());
    segment(0xDB, dqt);
    bytes_.insert(bytes_.end(), extra.begin(), extra.end());
    Bytes sof = {8, 0, 8, 0, 8, static_cast<uint8_t>(components)};  // 8 bits, 8x8
    for (int c = 1; c <= components; ++c) sof.insert(sof.end(), {static_cast<uint8_t>(c), 0x11, 0});
    segment(progressive ? 0xC2 : 0xC0, sof);
  }
  TinyJpeg& dht(int table_class, int id) {
    Bytes t = {static_cast<uint8_t>(table_class << 4 | id), 1};
    t.resize(17, 0);
    t.push_back(0);
    return segment(0xC4, t);
  }
  // A scan of the first n components, each with DC table td and AC table ta, spectral start ss and
  // end se, successive approximation ah/al, followed by its entropy-coded bytes.
  TinyJpeg& scan(int td, int ta, int ss, int se, int ah_al, const Bytes& data, int n = 1) {
    Bytes sos = {static_cast<uint8_t>(n)};
    for (int c = 1; c <= n; ++c) {
      sos.push_back(static_cast<uint8_t>(c));
      sos.push_back(static_cast<uint8_t>(td << 4 | ta));
    }
    for (int v : {ss, se, ah_al}) sos.push_back(static_cast<uint8_t>(v));
    segment(0xDA, sos);
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return *this;
  }
  Bytes end() const {
    Bytes b = bytes_;
    b.insert(b.end(), {0xFF, 0xD9});
    return b;
  }
  Bytes cut() const { return bytes_; }  // no end-of-image marker
  TinyJpeg& segment(uint8_t marker, const Bytes& body) {
    const size_t len = body.size() + 2;
    bytes_.insert(bytes_.end(), {0xFF, marker, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len & 255)});
    bytes_.insert(bytes_.end(), body.begin(), body.end());
    return *this;
  }

 private:
  Bytes bytes_;
};

Image decode_jpeg(const Bytes& b) { return data::decode_image(b.data(), b.size(), "t.jpg"); }

TEST(Image, JpegScansNeedTheirTablesDefined) {
  // Baseline: every scan decodes with a DC and an AC table, ids 0 to 3.
  EXPECT_EQ(decode_jpeg(TinyJpeg(false).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F}).end()).width, 8);
  EXPECT_EQ(decode_jpeg(TinyJpeg(false).dht(0, 3).dht(1, 3).scan(3, 3, 0, 63, 0, {0x3F}).end()).width, 8);
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(false).dht(0, 0).dht(1, 0).scan(2, 0, 0, 63, 0, {0x3F}).end()),
                  "decode_image(t.jpg): corrupt JPEG: a scan uses DC Huffman table 2, which no DHT segment defined");
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(false).dht(0, 0).dht(1, 0).scan(0, 2, 0, 63, 0, {0x3F}).end()),
                  "decode_image(t.jpg): corrupt JPEG: a scan uses AC Huffman table 2, which no DHT segment defined");
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(false).dht(0, 0).dht(1, 0).scan(4, 0, 0, 63, 0, {0x3F}).end()),
                  "DC Huffman table 4, which no DHT");
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(false).dht(0, 0).dht(1, 0).scan(0, 4, 0, 63, 0, {0x3F}).end()),
                  "AC Huffman table 4, which no DHT");
  // Progressive: a first DC scan (ss = 0, ah = 0) needs its DC table only, a DC refinement scan
  // (ah > 0) no table, and an AC scan (ss > 0) its AC table only.
  EXPECT_EQ(decode_jpeg(TinyJpeg(true).dht(0, 0).scan(0, 2, 0, 0, 0x00, {0x7F}).end()).width, 8);
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(true).dht(0, 0).scan(1, 0, 0, 0, 0x00, {0x7F}).end()), "DC Huffman table 1");
  EXPECT_EQ(decode_jpeg(TinyJpeg(true).dht(0, 0).scan(0, 0, 0, 0, 0x01, {0x7F}).scan(1, 1, 0, 0, 0x10, {0x7F}).end())
                .width,
            8);
  EXPECT_EQ(
      decode_jpeg(TinyJpeg(true).dht(0, 0).scan(0, 0, 0, 0, 0x00, {0x7F}).dht(1, 0).scan(2, 0, 1, 63, 0, {0x7F}).end())
          .height,
      8);
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(true).dht(0, 0).scan(0, 0, 0, 0, 0x00, {0x7F}).scan(0, 1, 1, 63, 0, {0x7F}).end()),
                  "AC Huffman table 1, which no DHT");
}

// A DHT segment holds tables of class 0 (DC) or 1 (AC), ids 0 to 3; a table with no codes at all
// (17 bytes) is complete.
TEST(Image, JpegHuffmanTableClassesAndIds) {
  const auto with_table = [](uint8_t class_id, int codes) {
    Bytes t = {class_id};
    t.resize(17, 0);
    t[1] = static_cast<uint8_t>(codes);
    t.resize(17 + static_cast<size_t>(codes), 0);
    return TinyJpeg(false).dht(0, 0).dht(1, 0).segment(0xC4, t).scan(0, 0, 0, 63, 0, {0x3F}).end();
  };
  EXPECT_EQ(decode_jpeg(with_table(0x13, 1)).width, 8);
  EXPECT_EQ(decode_jpeg(with_table(0x12, 0)).width, 8);
  for (const auto& [class_id, what] : {std::pair{0x20, "class 2 id 0"}, std::pair{0x04, "class 0 id 4"},
                                       std::pair{0x14, "class 1 id 4"}})
    EXPECT_HL_ERROR(decode_jpeg(with_table(static_cast<uint8_t>(class_id), 1)),
                    detail::concat("decode_image(t.jpg): corrupt JPEG: Huffman table ", what, " (at most 1 and 3)"));
}

// Four frame types are progressive (C2, and the differential and arithmetic-coded C6, CA and CE):
// a first DC scan of any of them needs no AC table. stb_image decodes only C2, and refuses the
// other three itself, so the walk must not refuse them first for a missing AC table.
TEST(Image, JpegProgressiveFrameTypes) {
  Bytes jpg = TinyJpeg(true).dht(0, 0).scan(0, 2, 0, 0, 0x00, {0x7F}).end();
  const size_t sof = 2 + 4 + 65;  // after SOI and the DQT segment
  ASSERT_EQ(jpg[sof + 1], 0xC2);
  EXPECT_EQ(decode_jpeg(jpg).width, 8);
  for (const uint8_t m : {0xC6, 0xCA, 0xCE}) {
    jpg[sof + 1] = m;
    SCOPED_TRACE(testing::Message() << "frame type " << std::hex << int(m));
    EXPECT_HL_ERROR(decode_jpeg(jpg), "decode_image(t.jpg): not a decodable image");
  }
}

// A progressive scan's kind is read from its own header, after its component list: here an
// interleaved DC scan of three components (one bit per block: 0x1F holds three), which needs
// their DC tables only, then a DC refinement of all three, which needs none.
TEST(Image, JpegProgressiveScanOfThreeComponents) {
  const Bytes rgb = TinyJpeg(true, Bytes(64, 1), {}, 3)
                        .dht(0, 0)
                        .scan(0, 2, 0, 0, 0x01, {0x1F}, 3)
                        .scan(3, 3, 0, 0, 0x10, {0x1F}, 3)
                        .end();
  const Image img = decode_jpeg(rgb);
  EXPECT_EQ(img.channels, 3);
  EXPECT_EQ(img.width, 8);
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(true, Bytes(64, 1), {}, 3).dht(0, 0).scan(1, 0, 0, 0, 0x00, {0x1F}, 3).end()),
                  "a scan uses DC Huffman table 1, which no DHT");
}

// A start-of-scan header holds 1 + 2 per component + 3 bytes, for at least one component; a
// shorter one is refused by the walk, which would otherwise read past it.
TEST(Image, JpegStartOfScanHeaderLength) {
  const TinyJpeg head = TinyJpeg(false, Bytes(64, 1), {}, 3).dht(0, 0).dht(1, 0);
  const size_t at = head.cut().size();
  for (const Bytes& sos : {Bytes{0, 0, 63, 0}, Bytes{1, 1, 0x00, 0, 63}, Bytes{2, 1, 0x00, 2, 0x00, 0, 63}, Bytes{}}) {
    Bytes jpg = TinyJpeg(head).segment(0xDA, sos).cut();
    jpg.insert(jpg.end(), {0x3F, 0xFF, 0xD9});
    SCOPED_TRACE(testing::Message() << "a header of " << sos.size() << " bytes");
    EXPECT_HL_ERROR(decode_jpeg(jpg),
                    detail::concat("decode_image(t.jpg): corrupt JPEG: a bad start-of-scan header at byte ", at));
  }
}

// A table may hold up to 256 codes (here 255 of 8 bits and one of 9); 257 is refused.
TEST(Image, JpegHuffmanTableOf256Codes) {
  const auto table_of = [](int eights, int nines) {
    Bytes t(17, 0);
    t[0] = 0x12;  // AC table 2, used by no scan
    t[8] = static_cast<uint8_t>(eights);
    t[9] = static_cast<uint8_t>(nines);
    for (int i = 0; i < eights + nines; ++i) t.push_back(static_cast<uint8_t>(i));
    return TinyJpeg(false).dht(0, 0).dht(1, 0).segment(0xC4, t).scan(0, 0, 0, 63, 0, {0x3F}).end();
  };
  EXPECT_EQ(decode_jpeg(table_of(255, 1)).width, 8);
  EXPECT_HL_ERROR(decode_jpeg(table_of(255, 2)), "corrupt JPEG: a Huffman table with 257 codes (at most 256)");
}

// A colour JPEG's second and third components are checked too, each table on its own.
TEST(Image, JpegEveryComponentOfAScanIsChecked) {
  const Bytes good = encode(random_image(16, 16, 3, fresh_seed()), "jpg");
  size_t sos = 0;
  for (size_t i = 0; i + 1 < good.size(); ++i)
    if (good[i] == 0xFF && good[i + 1] == 0xDA) sos = i;
  ASSERT_EQ(good[sos + 4], 3) << "stb writes one scan of three components";
  for (size_t comp = 1; comp < 3; ++comp) {
    for (const auto& [selector, what] : {std::pair{0x20, "DC Huffman table 2"}, std::pair{0x02, "AC Huffman table 2"}}) {
      Bytes bad = good;
      bad[sos + 6 + 2 * comp] = static_cast<uint8_t>(selector);
      SCOPED_TRACE(testing::Message() << "component " << comp);
      EXPECT_HL_ERROR(data::decode_image(bad.data(), bad.size(), "c.jpg"), what);
    }
  }
}

// The marker walk looks for the end-of-image marker after the last scan, and only there: an FF D9
// inside a segment (an APP segment's embedded thumbnail ends with one) does not make a cut-off image
// whole, and bytes after the end marker (some cameras pad their files) do not make a whole one cut off.
TEST(Image, JpegEndMarkerMustFollowTheLastScan) {
  const Bytes thumbnail_end = {0xFF, 0xE1, 0x00, 0x06, 0xFF, 0xD8, 0xFF, 0xD9};  // APP1 holding FF D8 FF D9
  const TinyJpeg jpg = TinyJpeg(false, Bytes(64, 1), thumbnail_end).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F});
  EXPECT_EQ(decode_jpeg(jpg.end()).width, 8);
  EXPECT_HL_ERROR(decode_jpeg(jpg.cut()), "decode_image(t.jpg): truncated JPEG: no end-of-image marker (FF D9) after");
  // Only FF D9 is the end marker: not D9 after another byte, nor FF before another byte.
  for (const Bytes& data : {Bytes{0x3F, 0x12, 0xD9}, Bytes{0x3F, 0xFF, 0x00, 0x12}}) {
    const Bytes cut = TinyJpeg(false).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, data).cut();
    SCOPED_TRACE(testing::Message() << "data ending " << int(data[1]) << " " << int(data[2]));
    EXPECT_HL_ERROR(decode_jpeg(cut), "truncated JPEG: no end-of-image marker");
  }
  // With no scan at all, an end marker ends the walk: the file is whole, and holds no image
  // (stb_image would have returned a flat gray one).
  EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(false).dht(0, 0).end()),
                  "decode_image(t.jpg): corrupt JPEG: no start-of-scan (FF DA), so no image data");
  Bytes no_scan = TinyJpeg(false).dht(0, 0).end();
  no_scan.insert(no_scan.end(), {0x00, 0x00});  // the end marker met inside the walk
  EXPECT_HL_ERROR(decode_jpeg(no_scan), "no start-of-scan (FF DA), so no image data");
  for (const Bytes& padding : {Bytes{0xFF, 0x00, 0x00}, Bytes{0x00, 0x00}, Bytes{0xFF, 0xFF}}) {
    Bytes padded = jpg.end();
    padded.insert(padded.end(), padding.begin(), padding.end());
    EXPECT_EQ(decode_jpeg(padded).height, 8) << "padding " << int(padding[0]) << " " << int(padding[1]);
  }
}

// Between segments, bytes other than FF are padding that stb_image skips, and so does the walk,
// also after a segment whose last byte is FF (a quantization value of 255).
TEST(Image, JpegPaddingBetweenSegments) {
  Bytes ends_in_255(64, 1);
  ends_in_255.back() = 255;
  const Bytes jpg = TinyJpeg(false, ends_in_255, {0x00, 0x00}).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F}).end();
  EXPECT_EQ(decode_jpeg(jpg).width, 8);
  const Bytes bad = TinyJpeg(false, ends_in_255, {0x00}).dht(0, 0).dht(1, 0).scan(0, 1, 0, 63, 0, {0x3F}).end();
  EXPECT_HL_ERROR(decode_jpeg(bad), "AC Huffman table 1, which no DHT");
}

// A segment's length counts its own two bytes: 2 is an empty segment, less is corrupt, and a
// segment may end exactly at the end of the file but not one byte past it.
TEST(Image, JpegSegmentLengthBounds) {
  const size_t after_dqt = 2 + 4 + 65;  // SOI, then the DQT segment
  EXPECT_EQ(decode_jpeg(TinyJpeg(false, Bytes(64, 1), {0xFF, 0xE0, 0x00, 0x02}).dht(0, 0).dht(1, 0)
                            .scan(0, 0, 0, 63, 0, {0x3F}).end()).width,
            8);
  for (uint8_t len : {0, 1})
    EXPECT_HL_ERROR(decode_jpeg(TinyJpeg(false, Bytes(64, 1), {0xFF, 0xE0, 0x00, len}).dht(0, 0).dht(1, 0)
                                    .scan(0, 0, 0, 63, 0, {0x3F}).end()),
                    detail::concat("decode_image(t.jpg): corrupt JPEG: the segment at byte ", after_dqt,
                                   " claims a length of ", int(len),
                                   " (at least 2: the length counts its own two bytes)"));
  // After the scan, an APP1 segment that holds the file's last bytes (FF D9 among them: the end
  // marker inside a segment is data). Read to the very end, the walk finds no end marker after it;
  // one byte longer, the segment itself runs past the end of the file.
  const Bytes scan = TinyJpeg(false).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F}).cut();
  Bytes exact = scan;
  exact.insert(exact.end(), {0xFF, 0xE1, 0x00, 0x04, 0xFF, 0xD9});
  EXPECT_HL_ERROR(decode_jpeg(exact),
                  "decode_image(t.jpg): truncated JPEG: no end-of-image marker (FF D9) after the image data");
  Bytes over = exact;
  over[scan.size() + 3] = 5;
  EXPECT_HL_ERROR(decode_jpeg(over), detail::concat("decode_image(t.jpg): truncated JPEG: the segment at byte ",
                                                    scan.size(), " claims 5 bytes, past the end of the file"));
  // A file that ends right after a segment's two length bytes: the length is read, and names the cut.
  const Bytes cut_after_length(over.begin(), over.begin() + static_cast<std::ptrdiff_t>(scan.size() + 4));
  EXPECT_HL_ERROR(decode_jpeg(cut_after_length),
                  detail::concat("decode_image(t.jpg): truncated JPEG: the segment at byte ", scan.size(),
                                 " claims 5 bytes, past the end of the file"));
}

// Fill bytes (FF before a marker) are skipped, and so is a first segment whose data holds an FF
// that is not a marker (a quantization value of 255 followed by 5).
TEST(Image, JpegFillBytesAndFFInsideASegment) {
  EXPECT_EQ(decode_jpeg(TinyJpeg(false, Bytes(64, 1), {0xFF, 0xFF}).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F})
                            .end()).width,
            8);
  Bytes quant(64, 1);
  quant[10] = 255;
  quant[11] = 5;
  EXPECT_EQ(decode_jpeg(TinyJpeg(false, quant).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F}).end()).width, 8);
  // Restart (FF D0 to FF D7) and TEM (FF 01) markers have no length. Between segments stb_image
  // refuses them; the walk steps over them (and must neither loop on them nor read a length).
  for (const uint8_t m : {0xD0, 0xD7, 0x01}) {
    const Bytes jpg = TinyJpeg(false, Bytes(64, 1), {0xFF, m}).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, {0x3F}).end();
    SCOPED_TRACE(testing::Message() << "marker " << std::hex << int(m));
    EXPECT_HL_ERROR(decode_jpeg(jpg), "decode_image(t.jpg): not a decodable image (unknown image type)");
  }
}

// The walk skips entropy-coded data: stuffed bytes (FF 00) and restart markers (FF D0 to FF D7)
// are data, and the first other marker ends it. So the scan that follows is still checked, and a
// DHT right after a scan with no data is still read.
TEST(Image, JpegWalkSkipsEntropyCodedData) {
  for (uint8_t rst = 0xD0; rst <= 0xD7; ++rst) {
    // Read as markers, FF 00 would be a segment of 0x7FFF bytes (past the end).
    const Bytes data = {0x12, 0xFF, 0x00, 0x34, 0xFF, rst, 0x56, 0xFF, 0x00, 0x7F, 0xFF, 0x00, 0x10};
    const Bytes jpg = TinyJpeg(false).dht(0, 0).dht(1, 0).scan(0, 0, 0, 63, 0, data).scan(2, 0, 0, 63, 0, {0x3F}).end();
    SCOPED_TRACE(testing::Message() << "restart marker " << std::hex << int(rst));
    EXPECT_HL_ERROR(decode_jpeg(jpg), "a scan uses DC Huffman table 2, which no DHT segment defined");
  }
  const Bytes empty_scan_then_dht =
      TinyJpeg(true).dht(0, 0).scan(0, 0, 0, 0, 0x00, {}).dht(1, 0).scan(0, 0, 1, 63, 0, {0x7F}).end();
  EXPECT_EQ(decode_jpeg(empty_scan_then_dht).width, 8);
}

// A JPEG ends at the end-of-image marker after its last scan; what follows is not the image's. Phones
// append a video to "motion photos" (Google, Samsung), and such a trailer can hold FF DA with no FF D9
// after it. A search for the last FF DA in the file took that for a scan and refused the whole photo
// as truncated (the reviewer's img/a.jpg.trailer.jpg). stb_image stops at the end marker: the pixels
// are those of the photo without its trailer.
TEST(Image, JpegTrailerAfterTheEndMarkerIsNotPartOfTheImage) {
  const uint64_t seed = fresh_seed();
  const Image img = random_image(16, 8, 3, seed);
  const Bytes jpg = encode(img, "jpg");
  const Image plain = data::decode_image(jpg.data(), jpg.size(), "p.jpg");
  std::mt19937_64 rng(seed);
  Bytes video(4096);
  for (auto& b : video) b = static_cast<uint8_t>(rng());
  const Bytes ftyp = {0, 0, 0, 0x18, 'f', 't', 'y', 'p', 'm', 'p', '4', '2', 0xFF, 0xDA, 0x00, 0x55, 0x66};
  video.insert(video.begin(), ftyp.begin(), ftyp.end());
  video.insert(video.end(), {0xFF, 0xDA, 0x12, 0x34});  // the file's last FF DA, no FF D9 after it
  for (const Bytes& trailer : {Bytes{'f', 't', 'y', 'p', 0x12, 0xFF, 0xDA, 0x00, 0x55, 0x66}, video,
                               encode(random_image(4, 4, 1, seed + 1), "jpg")}) {  // or a second JPEG
    Bytes motion = jpg;
    motion.insert(motion.end(), trailer.begin(), trailer.end());
    SCOPED_TRACE(testing::Message() << "a trailer of " << trailer.size() << " bytes");
    const Image got = data::decode_image(motion.data(), motion.size(), "motion.jpg");
    EXPECT_EQ(got.width, 16);
    EXPECT_EQ(got.height, 8);
    EXPECT_EQ(got.pixels, plain.pixels);
  }
  // Progressive: several scans, a DHT between them; the trailer after the end marker is not a scan.
  Bytes progressive =
      TinyJpeg(true).dht(0, 0).scan(0, 0, 0, 0, 0x00, {0x7F}).dht(1, 0).scan(2, 0, 1, 63, 0, {0x7F}).end();
  const Bytes whole = progressive;
  progressive.insert(progressive.end(), {0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x22, 0x01, 0x3F, 0x00, 0x7F});
  EXPECT_EQ(decode_jpeg(progressive).pixels, decode_jpeg(whole).pixels);
}

// A file that really is cut short is still refused, wherever the cut falls: in the entropy-coded
// data of the only scan, between two scans of a progressive JPEG, or inside a segment's header.
TEST(Image, JpegCutShortIsRefusedWhereverTheCutFalls) {
  const Bytes jpg = encode(random_image(16, 16, 3, fresh_seed()), "jpg");
  size_t sos = 0;
  for (size_t i = 0; i + 1 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) sos = i;
  ASSERT_GT(sos, 0u) << "stb writes one scan";
  const size_t data = sos + 2 + (size_t{jpg[sos + 2]} << 8 | jpg[sos + 3]);  // where the entropy-coded data starts
  for (size_t cut : {jpg.size() - 2, jpg.size() - 1, (data + jpg.size()) / 2, data}) {
    SCOPED_TRACE(testing::Message() << "cut to " << cut << " of " << jpg.size() << " bytes");
    EXPECT_HL_ERROR(data::decode_image(jpg.data(), cut, "cut.jpg"),
                    "decode_image(cut.jpg): truncated JPEG: no end-of-image marker (FF D9) after the image data");
  }
  const TinyJpeg first = TinyJpeg(true).dht(0, 0).scan(0, 0, 0, 0, 0x00, {0x7F});
  const Bytes two_scans = TinyJpeg(first).dht(1, 0).scan(2, 0, 1, 63, 0, {0x7F}).end();
  ASSERT_EQ(decode_jpeg(two_scans).width, 8);
  EXPECT_HL_ERROR(decode_jpeg(first.cut()), "truncated JPEG: no end-of-image marker (FF D9) after the image data");
  // Cut inside the second scan's header: its length claims bytes the file does not have.
  const size_t second = TinyJpeg(first).dht(1, 0).cut().size();
  const Bytes in_header(two_scans.begin(), two_scans.begin() + static_cast<std::ptrdiff_t>(second + 6));
  EXPECT_HL_ERROR(decode_jpeg(in_header), detail::concat("decode_image(t.jpg): truncated JPEG: the segment at byte ",
                                                         second, " claims 8 bytes, past the end of the file"));
  // Cut right after the second scan's data, before the end marker.
  const Bytes before_end(two_scans.begin(), two_scans.end() - 2);
  EXPECT_HL_ERROR(decode_jpeg(before_end), "truncated JPEG: no end-of-image marker (FF D9) after the image data");
}

// flatten_alpha composites onto a background: every value is (v*a + bg*(255 - a)) / 255, rounded;
// 2 channels become 1 and 4 become 3; an image without alpha comes back as it was.
TEST(Image, FlattenAlphaOntoABackground) {
  const uint64_t seed = fresh_seed();
  for (int64_t channels : {2, 4})
    for (int background : {255, 0, 77}) {
      Image img = random_image(7, 5, channels, seed + static_cast<uint64_t>(channels));
      img.pixels[static_cast<size_t>(channels - 1)] = 0;              // pixel 0: fully transparent
      img.pixels[static_cast<size_t>(2 * channels - 1)] = 255;        // pixel 1: opaque
      const Image flat = data::flatten_alpha(img, static_cast<uint8_t>(background));
      ASSERT_EQ(flat.channels, channels - 1);
      ASSERT_EQ(flat.width, 7);
      ASSERT_EQ(flat.height, 5);
      for (int64_t y = 0; y < 5; ++y)
        for (int64_t x = 0; x < 7; ++x) {
          const double a = img.at(y, x, channels - 1);
          for (int64_t c = 0; c + 1 < channels; ++c) {
            const double want = (img.at(y, x, c) * a + background * (255 - a)) / 255;
            ASSERT_EQ(flat.at(y, x, c), std::lround(want)) << "x " << x << ", y " << y << ", channel " << c;
          }
        }
      for (int64_t c = 0; c + 1 < channels; ++c) {
        EXPECT_EQ(flat.at(0, 0, c), background);
        EXPECT_EQ(flat.at(0, 1, c), img.at(0, 1, c));
      }
    }
  for (int64_t channels : {1, 3}) {
    const Image opaque = random_image(3, 2, channels, seed);
    EXPECT_EQ(data::flatten_alpha(opaque).pixels, opaque.pixels);
  }
  // Black strokes on a transparent canvas (what drawing programs export), read as a viewer shows it.
  TempDir dir;
  Image canvas{6, 4, 4, Bytes(6 * 4 * 4, 0)};
  for (int64_t x = 1; x < 5; ++x) canvas.pixels[static_cast<size_t>((2 * 6 + x) * 4 + 3)] = 255;  // row 2: ink
  data::write_png(dir / "canvas.png", canvas);
  EXPECT_EQ(data::read_image(dir / "canvas.png", 1).pixels, Bytes(24, 0)) << "1 channel: alpha dropped as it is";
  const Image seen = data::flatten_alpha(data::read_image(dir / "canvas.png", 2));
  for (int64_t y = 0; y < 4; ++y)
    for (int64_t x = 0; x < 6; ++x) EXPECT_EQ(seen.at(y, x, 0), y == 2 && x >= 1 && x < 5 ? 0 : 255) << x << "," << y;
  EXPECT_HL_ERROR(data::flatten_alpha(Image{2, 2, 4, Bytes(15)}), "flatten_alpha: the image 2x2x4 holds 15 bytes");
  EXPECT_HL_ERROR(data::flatten_alpha(Image{2, 2, 5, Bytes(20)}), "flatten_alpha: the image 2x2x5 holds 20 bytes");
  // An image with no pixels is refused, as resize_image and make_grid refuse it; one pixel wide or high is
  // an image.
  EXPECT_HL_ERROR(data::flatten_alpha(Image{0, 2, 4, {}}), "flatten_alpha: the image 0x2x4 holds 0 bytes");
  EXPECT_HL_ERROR(data::flatten_alpha(Image{2, 0, 4, {}}), "flatten_alpha: the image 2x0x4 holds 0 bytes");
  EXPECT_EQ(data::flatten_alpha(Image{1, 2, 2, {10, 255, 20, 0}}, 0).pixels, (Bytes{10, 0}));
  EXPECT_EQ(data::flatten_alpha(Image{2, 1, 2, {10, 0, 20, 255}}, 9).pixels, (Bytes{9, 20}));
}

// resize_image's source is held to what decode_image accepts, 2^26 pixels, as its target is: a
// caller that builds a source (tutorial 10 once padded a 65535x4 crop to 65535 x 65535, 4.2 GB) gets
// an error, not gigabytes of work. The images here hold no pixels: the limit is checked first.
TEST(Image, ResizeRefusesASourceOver2To26Pixels) {
  for (const auto& [w, h] : {std::pair<int64_t, int64_t>{8193, 8192}, {65535, 65535}, {65535, 1025}})
    EXPECT_HL_ERROR(data::resize_image(Image{w, h, 1, {}}, 28, 28),
                    detail::concat("resize_image: the image ", w, "x", h, "x1 has ", w * h, " pixels, over the ",
                                   data::kMaxImagePixels, " (2^26) that decode_image accepts"));
  // Exactly 2^26 passes the limit (and is then refused for holding no pixels).
  EXPECT_HL_ERROR(data::resize_image(Image{8192, 8192, 1, {}}, 28, 28),
                  "resize_image: the image 8192x8192x1 holds 0 bytes");
  EXPECT_HL_ERROR(data::resize_image(Image{65535, 1024, 1, {}}, 28, 28),
                  "resize_image: the image 65535x1024x1 holds 0 bytes");
}

// ---- EXIF orientation ----------------------------------------------------------------------------------------

// Each shown pixel where the EXIF specification puts it: the stored 3x2 image 1 2 3 / 4 5 6 as a
// viewer shows it for each orientation (6: the stored top row becomes the right-hand column).
TEST(Exif, EachOrientationShowsThePixelsWhereAViewerDoes) {
  const Image stored{3, 2, 1, {1, 2, 3, 4, 5, 6}};
  const std::vector<std::pair<Image, int>> shown = {
      {{3, 2, 1, {1, 2, 3, 4, 5, 6}}, 1}, {{3, 2, 1, {3, 2, 1, 6, 5, 4}}, 2}, {{3, 2, 1, {6, 5, 4, 3, 2, 1}}, 3},
      {{3, 2, 1, {4, 5, 6, 1, 2, 3}}, 4}, {{2, 3, 1, {1, 4, 2, 5, 3, 6}}, 5}, {{2, 3, 1, {4, 1, 5, 2, 6, 3}}, 6},
      {{2, 3, 1, {6, 3, 5, 2, 4, 1}}, 7}, {{2, 3, 1, {3, 6, 2, 5, 1, 4}}, 8}};
  for (const auto& [want, o] : shown) {
    const Image got = data::apply_exif_orientation(stored, o);
    EXPECT_EQ(got.width, want.width) << o;
    EXPECT_EQ(got.height, want.height) << o;
    EXPECT_EQ(got.pixels, want.pixels) << "orientation " << o << " (" << data::exif_orientation_name(o) << ")";
  }
  // A pixel's channels move together.
  const Image rgb{2, 1, 3, {10, 11, 12, 20, 21, 22}};
  EXPECT_EQ(data::apply_exif_orientation(rgb, 6).pixels, (Bytes{10, 11, 12, 20, 21, 22}));
  EXPECT_EQ(data::apply_exif_orientation(rgb, 2).pixels, (Bytes{20, 21, 22, 10, 11, 12}));
  EXPECT_HL_ERROR(data::apply_exif_orientation(stored, 0),
                  "apply_exif_orientation: orientation 0 (EXIF defines 1 to 8)");
  EXPECT_HL_ERROR(data::apply_exif_orientation(stored, 9), "apply_exif_orientation: orientation 9");
  EXPECT_HL_ERROR(data::apply_exif_orientation(Image{3, 2, 1, Bytes(5)}, 6), "the image 3x2x1 holds 5 bytes");
}

// On odd-sized random images: the mirrors and 180 degrees undo themselves, and 6 and 8 undo each other.
TEST(Exif, OrientationsUndoEachOtherAsTheGeometrySays) {
  const Image img = random_image(5, 3, 3, fresh_seed());
  for (int o : {2, 3, 4, 5, 7})
    EXPECT_EQ(data::apply_exif_orientation(data::apply_exif_orientation(img, o), o).pixels, img.pixels) << o;
  EXPECT_EQ(data::apply_exif_orientation(data::apply_exif_orientation(img, 6), 8).pixels, img.pixels);
  const Image twice = data::apply_exif_orientation(data::apply_exif_orientation(img, 6), 6);
  EXPECT_EQ(twice.pixels, data::apply_exif_orientation(img, 3).pixels) << "two quarter turns are a half turn";
}

TEST(Exif, TheTagIsReadFromJpegAndPngInBothByteOrders) {
  const Bytes jpg = encode(random_image(8, 4, 3, fresh_seed()), "jpg");
  const Bytes png = encode(random_image(8, 4, 3, fresh_seed()), "png");
  for (bool big : {false, true})
    for (uint32_t v = 1; v <= 8; ++v) {
      const Bytes tiff = tiff_orientation(big, v);
      for (const Bytes& file : {with_app1(jpg, exif_payload(tiff)), with_exif_chunk(png, tiff),
                                with_exif_chunk(png, exif_payload(tiff))}) {
        const data::ExifOrientation o = data::exif_orientation(file.data(), file.size());
        EXPECT_EQ(o.value, static_cast<int>(v)) << (big ? "MM " : "II ") << v;
        EXPECT_EQ(o.problem, "");
        // The image itself still decodes: the segment or chunk is one the decoders skip.
        EXPECT_EQ(data::decode_image(file.data(), file.size(), "f").width, 8);
      }
    }
  // An XMP APP1 segment before the Exif one is passed over.
  const Bytes xmp = {'h', 't', 't', 'p', ':', '/', '/', 'n', 's', 0};
  const Bytes both = with_app1(with_app1(jpg, exif_payload(tiff_orientation(false, 6))), xmp);
  EXPECT_EQ(data::exif_orientation(both.data(), both.size()).value, 6);
  // No Exif at all, and a BMP: upright, nothing to report.
  const Bytes bmp = encode(random_image(8, 4, 3, fresh_seed()), "bmp");
  for (const Bytes& file : {jpg, png, bmp, with_app1(jpg, xmp)}) {
    const data::ExifOrientation o = data::exif_orientation(file.data(), file.size());
    EXPECT_EQ(o.value, 1);
    EXPECT_EQ(o.problem, "");
  }
  // A directory without an orientation entry: upright.
  Bytes no_tag = tiff_orientation(false, 6);
  no_tag[22] = 0x13;  // the second entry's tag, 0x0112, becomes 0x0113
  const Bytes f = with_app1(jpg, exif_payload(no_tag));
  EXPECT_EQ(data::exif_orientation(f.data(), f.size()).value, 1);
  EXPECT_EQ(data::exif_orientation(f.data(), f.size()).problem, "");
}

// Before a marker JPEG allows fill bytes (any number of 0xFF), and some markers have no length (RST0-7,
// TEM): the walk to the Exif segment passes over both, as the decoder does.
TEST(Exif, FillBytesAndMarkersWithoutALengthArePassedOver) {
  const Bytes jpg = encode(random_image(8, 4, 3, fresh_seed()), "jpg");
  const Bytes exif = with_app1(jpg, exif_payload(tiff_orientation(false, 6)));
  for (const Bytes& extra : {Bytes{0xFF}, Bytes{0xFF, 0xFF, 0xFF}, Bytes{0xFF, 0x01}, Bytes{0xFF, 0xD0},
                             Bytes{0xFF, 0xD3}, Bytes{0xFF, 0xFF, 0x01, 0xFF, 0xD7, 0xFF}}) {
    Bytes file(exif.begin(), exif.begin() + 2);  // SOI, then the extra bytes, then the APP1 segment
    file.insert(file.end(), extra.begin(), extra.end());
    file.insert(file.end(), exif.begin() + 2, exif.end());
    const data::ExifOrientation o = data::exif_orientation(file.data(), file.size());
    EXPECT_EQ(o.value, 6) << extra.size() << " extra bytes";
    EXPECT_EQ(o.problem, "");
  }
}

// Metadata the pixels do not depend on: a damaged Exif block leaves the image as stored (1) and says
// what is wrong, naming the segment; nothing outside the block is read (the fuzz target and ASan).
TEST(Exif, ADamagedBlockGivesUprightAndSaysWhy) {
  const Bytes jpg = encode(random_image(8, 4, 1, fresh_seed()), "jpg");
  const Bytes good = tiff_orientation(true, 6);
  const auto damaged = [&](size_t at, uint8_t v) {
    Bytes t = good;
    t[at] = v;
    return t;
  };
  const std::vector<std::pair<Bytes, std::string>> cases = {
      {Bytes(good.begin(), good.begin() + 7), "only 7 bytes (a TIFF header is 8)"},
      {damaged(0, 'X'), "no byte-order mark (II or MM)"},
      {damaged(3, 43), "the TIFF header's number is 43, not 42"},
      {damaged(7, 200), "the first directory's offset 200 is outside its 38 bytes"},
      {damaged(9, 9), "the first directory claims 9 entries; 2 fit in its bytes"},
      {Bytes(good.begin(), good.begin() + 30), "the first directory claims 2 entries; 1 fit in its bytes"},
      {Bytes(good.begin(), good.begin() + 33), "the first directory claims 2 entries; 1 fit in its bytes"},
      {Bytes(good.begin(), good.begin() + 8), "the first directory's offset 8 is outside its 8 bytes"},
      {[&] {  // 34 bytes: room for exactly 2 entries
         Bytes t(good.begin(), good.begin() + 34);
         t[9] = 3;
         return t;
       }(),
       "the first directory claims 3 entries; 2 fit in its bytes"},
      {[&] {  // the count's 2 bytes would start at the block's last byte
         Bytes t(good.begin(), good.begin() + 10);
         t[7] = 9;
         return t;
       }(),
       "the first directory's offset 9 is outside its 10 bytes"},
      {damaged(1, 'I'), "no byte-order mark (II or MM)"},  // MI: each byte must match
      {[&] {
         Bytes t = tiff_orientation(false, 6);
         t[1] = 'M';  // IM
         return t;
       }(),
       "no byte-order mark (II or MM)"},
      // Counts whose every byte matters, in both byte orders.
      {tiff_orientation(true, 6, 3, 0x00020001), "the orientation entry has type 3 and count 131073"},
      {tiff_orientation(false, 6, 3, 0x00010001), "the orientation entry has type 3 and count 65537"},
      {tiff_orientation(true, 6, 4), "the orientation entry has type 4 and count 1 (a SHORT, type 3, count 1)"},
      {tiff_orientation(true, 6, 3, 2), "the orientation entry has type 3 and count 2"},
      {tiff_orientation(true, 0), "orientation 0 (EXIF defines 1 to 8)"},
      {tiff_orientation(true, 9), "orientation 9 (EXIF defines 1 to 8)"},
  };
  for (const auto& [tiff, why] : cases) {
    const Bytes file = with_app1(jpg, exif_payload(tiff));
    const data::ExifOrientation o = data::exif_orientation(file.data(), file.size());
    EXPECT_EQ(o.value, 1) << why;
    EXPECT_NE(o.problem.find("the Exif segment at byte 2: " + why), std::string::npos) << o.problem;
  }
  // Entries that end exactly at the end of the block (no next-directory offset after them) fit.
  const Bytes exact = with_app1(jpg, exif_payload(Bytes(good.begin(), good.begin() + 34)));
  EXPECT_EQ(data::exif_orientation(exact.data(), exact.size()).value, 6);
  EXPECT_EQ(data::exif_orientation(exact.data(), exact.size()).problem, "");
  // A directory far from the header: every byte of the 32-bit offset is read (264 is 0x108).
  for (const bool big : {false, true}) {
    Bytes far = tiff_orientation(big, 6);
    far.insert(far.begin() + 8, 256, 0);
    for (int i = 0; i < 4; ++i) far[4 + static_cast<size_t>(i)] = static_cast<uint8_t>(264u >> (8 * (big ? 3 - i : i)));
    const Bytes file = with_app1(jpg, exif_payload(far));
    const data::ExifOrientation o = data::exif_orientation(file.data(), file.size());
    EXPECT_EQ(o.value, 6) << (big ? "MM" : "II") << ": " << o.problem;
  }
  const Bytes png = with_exif_chunk(encode(random_image(4, 4, 1, fresh_seed()), "png"), damaged(0, 'X'));
  const data::ExifOrientation p = data::exif_orientation(png.data(), png.size());
  EXPECT_EQ(p.value, 1);
  EXPECT_NE(p.problem.find("the eXIf chunk at byte"), std::string::npos) << p.problem;
}

// The Exif block is looked for only after a JPEG's or a PNG's signature, each of its bytes checked: data
// that starts otherwise is upright, even when an Exif segment or chunk follows.
TEST(Exif, OnlyJpegAndPngSignaturesLeadToTheBlock) {
  const Bytes tiff = tiff_orientation(false, 6);
  const Bytes jpg = with_app1(encode(random_image(8, 4, 3, fresh_seed()), "jpg"), exif_payload(tiff));
  const Bytes png = with_exif_chunk(encode(random_image(8, 4, 3, fresh_seed()), "png"), tiff);
  for (const auto& [file, bytes] : {std::pair<const Bytes&, size_t>{jpg, 2}, {png, 4}}) {
    ASSERT_EQ(data::exif_orientation(file.data(), file.size()).value, 6);
    for (size_t i = 0; i < bytes; ++i) {
      Bytes other = file;
      other[i] = 'x';
      const data::ExifOrientation o = data::exif_orientation(other.data(), other.size());
      EXPECT_EQ(o.value, 1) << (&file == &jpg ? "JPEG" : "PNG") << " with byte " << i << " changed";
      EXPECT_EQ(o.problem, "");
    }
  }
  EXPECT_EQ(data::exif_orientation(nullptr, 10).value, 1);
}

// The words messages use for each orientation.
TEST(Exif, EachOrientationHasItsName) {
  const std::vector<std::string> names = {
      "not an EXIF orientation", "upright as stored", "mirrored left to right", "turned 180 degrees",
      "mirrored top to bottom", "mirrored along the main diagonal (transposed)", "turned 90 degrees clockwise",
      "mirrored along the other diagonal", "turned 90 degrees counter-clockwise", "not an EXIF orientation"};
  for (size_t o = 0; o < names.size(); ++o) EXPECT_EQ(data::exif_orientation_name(static_cast<int>(o)), names[o]);
  EXPECT_EQ(std::string(data::exif_orientation_name(-1)), "not an EXIF orientation");
}

// The first directory to its edges: its `count` entries are read, the first of them included, and no
// more; an empty directory may take the block's last two bytes.
TEST(Exif, TheFirstDirectoryIsReadToItsEdges) {
  const Bytes jpg = encode(random_image(8, 4, 3, fresh_seed()), "jpg");
  const auto read = [&](const Bytes& tiff) {
    const Bytes file = with_app1(jpg, exif_payload(tiff));
    return data::exif_orientation(file.data(), file.size());
  };
  for (const bool big : {false, true}) {
    const char* order = big ? "MM" : "II";
    const Bytes good = tiff_orientation(big, 6);
    Bytes first = good;
    std::rotate(first.begin() + 10, first.begin() + 22, first.begin() + 34);  // the orientation entry first
    EXPECT_EQ(read(first).value, 6) << order;
    Bytes one = good;
    one[big ? 9 : 8] = 1;  // a count of 1: the orientation entry after the first is outside the directory
    EXPECT_EQ(read(one).value, 1) << order;
    EXPECT_EQ(read(one).problem, "") << order;
    Bytes empty(good.begin(), good.begin() + 10);  // the header, then a count of 0 at 8
    empty[8] = empty[9] = 0;
    EXPECT_EQ(read(empty).value, 1) << order;
    EXPECT_EQ(read(empty).problem, "") << order;
  }
}

// The walk to the Exif segment at the segments' edges: a length counts its own two bytes (2 is an empty
// segment, under 2 is damage), a segment may end exactly at the end of the data but not past it, the
// six signature bytes must lie inside the segment, and the walk stops at the scan (SOS), at the end of
// the image (EOI) and at a byte that is not a marker. What it stops at is decode_image's to report:
// upright, no problem. The sizes passed leave bytes after the end, there to be misread.
TEST(Exif, TheJpegWalkHoldsToEachSegmentsBytes) {
  const auto read = [](const Bytes& f, size_t n) { return data::exif_orientation(f.data(), n); };
  const Bytes exif = with_app1(Bytes{0xFF, 0xD8}, exif_payload(tiff_orientation(false, 6)));  // SOI, APP1
  EXPECT_EQ(read(exif, exif.size()).value, 6) << "a segment that ends where the data does";
  EXPECT_EQ(read(exif, exif.size() - 1).value, 1) << "a segment one byte longer than the data";
  EXPECT_EQ(read(exif, exif.size() - 1).problem, "");
  const auto before_exif = [&](const Bytes& segment) {  // SOI, `segment`, then the Exif segment
    Bytes f = {0xFF, 0xD8};
    f.insert(f.end(), segment.begin(), segment.end());
    f.insert(f.end(), exif.begin() + 2, exif.end());
    return f;
  };
  const Bytes app0 = before_exif({0xFF, 0xE0, 0x00, 0x02});
  EXPECT_EQ(read(app0, app0.size()).value, 6) << "an empty APP0 segment before it";
  // (The byte that is not a marker comes after a segment: right after SOI it would end the signature.)
  for (const Bytes& stop : {Bytes{0xFF, 0xDA, 0x00, 0x02}, Bytes{0xFF, 0xD9, 0x00, 0x02},
                            Bytes{0xFF, 0xE0, 0x00, 0x02, 0x00}}) {
    const Bytes f = before_exif(stop);
    EXPECT_EQ(read(f, f.size()).value, 1) << "after " << int{stop[1]} << ", " << stop.size() << " bytes";
    EXPECT_EQ(read(f, f.size()).problem, "");
  }
  Bytes one = {0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x01};  // a length of 1, the signature and a TIFF block after it
  const Bytes payload = exif_payload(tiff_orientation(false, 6));
  one.insert(one.end(), payload.begin(), payload.end());
  EXPECT_EQ(read(one, one.size()).value, 1);
  EXPECT_EQ(read(one, one.size()).problem, "");
  // A segment of exactly "Exif\0\0" holds an empty TIFF block; one of "Exif\0" holds no signature,
  // whatever byte follows it.
  const Bytes bare = with_app1(Bytes{0xFF, 0xD8}, exif_payload(Bytes{}));
  EXPECT_NE(read(bare, bare.size()).problem.find("the Exif segment at byte 2: only 0 bytes"), std::string::npos)
      << read(bare, bare.size()).problem;
  Bytes five = with_app1(Bytes{0xFF, 0xD8}, Bytes{'E', 'x', 'i', 'f', 0});
  five.push_back(0);
  EXPECT_EQ(read(five, five.size()).value, 1);
  EXPECT_EQ(read(five, five.size()).problem, "");
}

// The PNG walk at the chunks' edges, again with bytes after the size passed: a chunk may end exactly at
// the end of the data (a file cut after it), not past it; nothing after IEND is read; a chunk over
// 65535 bytes is stepped over whole (each byte of its length read); the "Exif\0\0" prefix is taken off.
TEST(Exif, ThePngWalkHoldsToEachChunksBytes) {
  const auto read = [](const Bytes& f, size_t n) { return data::exif_orientation(f.data(), n); };
  const auto problem = [&](const Bytes& f, size_t n) { return read(f, n).problem; };
  const Bytes png = encode(random_image(4, 4, 1, fresh_seed()), "png");
  const Bytes tiff = tiff_orientation(true, 6);
  const Bytes file = with_exif_chunk(png, tiff);  // the PNG's chunks, eXIf, IEND
  const size_t exif_at = png.size() - 12, iend_at = file.size() - 12;
  EXPECT_EQ(read(file, iend_at).value, 6) << "an eXIf chunk that ends where the data does";
  EXPECT_EQ(read(file, iend_at - 1).value, 1) << "an eXIf chunk one byte longer than the data";
  EXPECT_EQ(problem(file, iend_at - 1), "");
  EXPECT_EQ(read(file, exif_at).value, 1) << "the data ends where the eXIf chunk starts";
  const Bytes empty = with_exif_chunk(png, Bytes{});  // an empty eXIf chunk as the data's last 12 bytes
  EXPECT_NE(problem(empty, empty.size() - 12).find("only 0 bytes"), std::string::npos)
      << problem(empty, empty.size() - 12);
  Bytes after_iend = png;
  after_iend.insert(after_iend.end(), file.begin() + static_cast<std::ptrdiff_t>(exif_at),
                    file.begin() + static_cast<std::ptrdiff_t>(iend_at));
  EXPECT_EQ(read(after_iend, after_iend.size()).value, 1) << "an eXIf chunk after IEND";
  EXPECT_EQ(problem(after_iend, after_iend.size()), "");
  const Bytes big = with_exif_chunk(with_png_chunk(png, "hlPd", Bytes(70000, 7)), tiff);  // 70000 is 0x11170
  EXPECT_EQ(read(big, big.size()).value, 6) << problem(big, big.size());
  EXPECT_EQ(data::decode_image(big.data(), big.size(), "big").width, 4);
  const Bytes prefix = with_exif_chunk(png, exif_payload(Bytes{}));
  EXPECT_NE(problem(prefix, prefix.size()).find("only 0 bytes"), std::string::npos) << problem(prefix, prefix.size());
  const Bytes seven = with_exif_chunk(png, exif_payload(Bytes(tiff.begin(), tiff.begin() + 7)));
  EXPECT_NE(problem(seven, seven.size()).find("only 7 bytes"), std::string::npos) << problem(seven, seven.size());
}

// read_image_upright is read_image turned by the file's orientation; read_image stays as stored.
TEST(Exif, ReadImageUprightTurnsThePhotoAndReportsTheTag) {
  TempDir dir;
  const Image img = random_image(6, 4, 3, fresh_seed());
  write_file(dir / "photo.jpg", with_app1(encode(img, "jpg"), exif_payload(tiff_orientation(false, 6))));
  const Image stored = data::read_image(dir / "photo.jpg");
  EXPECT_EQ(stored.width, 6);
  data::ExifOrientation o;
  const Image upright = data::read_image_upright(dir / "photo.jpg", 0, &o);
  EXPECT_EQ(o.value, 6);
  EXPECT_EQ(upright.width, 4);
  EXPECT_EQ(upright.height, 6);
  EXPECT_EQ(upright.pixels, data::apply_exif_orientation(stored, 6).pixels);
  EXPECT_EQ(data::read_image_upright(dir / "photo.jpg", 1).channels, 1);

  write_file(dir / "damaged.jpg", with_app1(encode(img, "jpg"), exif_payload(Bytes{'M', 'M', 0})));
  const Image as_stored = data::read_image_upright(dir / "damaged.jpg", 0, &o);
  EXPECT_EQ(o.value, 1);
  EXPECT_NE(o.problem, "");
  EXPECT_EQ(as_stored.width, 6);
  EXPECT_HL_ERROR(data::read_image_upright(dir / "missing.jpg"), "missing.jpg");
}

}  // namespace
}  // namespace hl::test
