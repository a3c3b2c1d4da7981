// Image files: PNG written by halfling and read back through stb_image gives the same tensor; JPEG
// and BMP decode; resize, grids, tensor <-> image conversions; and every damaged file is an
// hl::Error naming the file, never a partly decoded image.
#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

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
  img.pixels[0] = 0;  // both ends of the range
  img.pixels[1] = 255;
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
  Bytes empty = bottom_up;
  for (size_t k = 0; k < 4; ++k) empty[22 + k] = 0;
  EXPECT_HL_ERROR(data::decode_image(empty.data(), empty.size(), "e.bmp"),
                  "decode_image(e.bmp): the header claims 7x0 pixels; halfling accepts at most 67108864 pixels");
}

TEST(Image, WideBmpCutShortIsCaughtBeforeDecoding) {
  // 65537 = 0x00010001 pixels wide: the width's third byte is not 0 (a 32-bit little-endian read
  // must use all four bytes). Cut in half, the file must be refused as truncated, with its size.
  const Image wide{65537, 1, 3, Bytes(65537 * 3, 100)};
  const Bytes bmp = encode(wide, "bmp");
  ASSERT_EQ(data::decode_image(bmp.data(), bmp.size(), "w.bmp").width, 65537);
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
  EXPECT_HL_ERROR(data::load_image_tensor(dir / "digit.png", {2, 28, 28}, {}), "channels must be 1 or 3");
}

TEST(Image, TensorToImageMinMaxAndClamping) {
  const Tensor t = Tensor::from_vector(std::vector<float>{-2.0f, 0.0f, 2.0f, 6.0f}, {2, 2});
  const Image mm = data::tensor_to_image_minmax(t);
  EXPECT_EQ(mm.pixels, (Bytes{0, 64, 128, 255}));  // (v + 2) / 8 * 255, rounded
  const Image unit = data::tensor_to_image(t, data::Normalization::unit());
  EXPECT_EQ(unit.pixels, (Bytes{0, 0, 255, 255}));  // clamped to [0, 1]
  EXPECT_HL_ERROR(data::tensor_to_image(Tensor::zeros({2, 4, 4}), {}), "[C, H, W]", "C = 1 or 3");
  for (const Image& empty : {Image{4, 0, 3, {}}, Image{0, 4, 3, {}}, Image{4, 4, 0, {}}}) {
    EXPECT_HL_ERROR(data::image_to_tensor(empty, {}), "image_to_tensor: the image");
  }
}

}  // namespace
}  // namespace hl::test
