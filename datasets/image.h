// Image files: PNG, JPEG and BMP in (through stb_image), PNG out (through stb_image_write), and the
// conversions between an image and a tensor, so a user can classify their own 28x28 digit or
// 32x32 photo and look at samples, augmentations and learned filters.
//
//   Tensor x = load_image_tensor("my_digit.png", {.channels = 1, .height = 28, .width = 28},
//                                mnist_normalization());          // f32 [1, 1, 28, 28], model-ready
//   save_png_grid("samples.png", batch.x, ds.norm, 8);             // 8 images per row
//
// An Image holds 8-bit pixels, height x width x channels, interleaved (what stb_image returns);
// tensors are channel-major [C, H, W], like the data sets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dataset.h"

namespace hl::data {

struct Image {
  int64_t width = 0, height = 0, channels = 0;  // channels: 1 (gray), 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;                  // height * width * channels, row by row, interleaved

  uint8_t at(int64_t y, int64_t x, int64_t c) const { return pixels[static_cast<size_t>((y * width + x) * channels + c)]; }
  // Sides >= 0, channels > 0, and exactly width * height * channels bytes of pixels: the product
  // computed without overflow, since a hand-built Image may claim any sides (2^62 x 4 wrapped to 0).
  bool holds_its_pixels() const {
    int64_t n = 0;
    return width >= 0 && height >= 0 && channels > 0 && !__builtin_mul_overflow(width, height, &n) &&
           !__builtin_mul_overflow(n, channels, &n) && pixels.size() == static_cast<uint64_t>(n);
  }
};

// Decode a PNG, JPEG or BMP file held in memory, converted to `channels` (1 = gray, 2 = gray + alpha,
// 3 = RGB, 4 = RGBA; 0 keeps the file's own). 1 and 3 drop an alpha channel as it is, keeping the color
// stored under transparent pixels (often black, in a drawing made on a transparent canvas): to see the
// image as a viewer shows it, ask for 2 or 4 and call flatten_alpha. Throws
// hl::Error("decode_image(<source>): <the reason>") for anything that is not a whole, valid image:
// never a partly decoded one. A JPEG ends at the end-of-image marker after its last scan; bytes after
// it (a "motion photo"'s video) are ignored. Exposed over a byte buffer so that
// tests/fuzz/fuzz_image.cpp can feed it anything.
Image decode_image(const uint8_t* data, size_t size, const std::string& source, int channels = 0);
Image read_image(const std::string& path, int channels = 0);

// EXIF orientation (tag 0x0112), which phones and cameras write instead of turning the pixels: 1 is
// stored upright; 2 to 8 say how the stored pixels are mirrored and/or turned to be seen upright (6:
// turned 90 degrees clockwise). decode_image and read_image ignore it (stb_image does), as
// torchvision's ImageFolder does (PIL does not apply it either), so the data sets' images stay as
// stored; read_image_upright applies it, as a photo viewer does (tutorial 10).
struct ExifOrientation {
  int value = 1;        // 1 to 8; 1 when the file has no orientation
  std::string problem;  // non-empty when an Exif block or its tag could not be read (value is then 1): why
};
// From a JPEG's APP1 "Exif" segment or a PNG's eXIf chunk, held in memory; 1 for BMP and for a file
// without one. Never throws and never reads outside [data, data + size): a damaged block gives 1 and
// says what is wrong in `problem`, since the pixels themselves may be fine.
ExifOrientation exif_orientation(const uint8_t* data, size_t size);
// The image as a viewer shows it: orientation 2 to 8 undone (5 to 8 swap width and height); 1 returns
// it as it is. Throws hl::Error for an orientation outside 1..8.
Image apply_exif_orientation(const Image& img, int orientation);
// What turning a stored image upright does, in words ("turned 90 degrees clockwise"), for messages.
const char* exif_orientation_name(int orientation);
// read_image, then turned upright by the file's EXIF orientation, which `orientation` (if not null)
// receives, with any problem reading it.
Image read_image_upright(const std::string& path, int channels = 0, ExifOrientation* orientation = nullptr);

// The longest side an image may have, decoded or resized: JPEG's own limit. stb_image_resize's scratch
// memory grows with the longest side of the source (about 84 bytes per row), so a side is bounded as
// well as the total (2^26 pixels): at 65535 that scratch stays under 6 MB.
inline constexpr int64_t kMaxImageSide = 65535;
// The most pixels an image may have, decoded or resized (source and target): 2^26, an 8192 x 8192
// photo, 256 MiB as RGBA.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// Resampled to width x height (stb_image_resize: a Mitchell filter when shrinking, Catmull-Rom when
// enlarging). The source and the target each have at most kMaxImageSide pixels per side and
// kMaxImagePixels in all; larger ones are refused with an hl::Error. Returns a copy when the size
// already matches.
Image resize_image(const Image& img, int64_t width, int64_t height);
// An image with an alpha channel (2 channels: gray + alpha; 4: RGBA) composited onto a solid
// `background` gray (255 = white), the way a viewer shows it on such a page: each color value becomes
// (value * alpha + background * (255 - alpha)) / 255, rounded. The alpha channel is dropped, so 2
// channels become 1 and 4 become 3. An image without alpha (1 or 3 channels) comes back unchanged.
Image flatten_alpha(const Image& img, uint8_t background = 255);
// Enlarged by an integer factor, each pixel becoming a factor x factor block (for looking at 32x32
// samples on a screen without blur).
Image scale_nearest(const Image& img, int64_t factor);
// A grid of equally sized images, `cols` per row, `padding` pixels of `background` between them.
Image make_grid(const std::vector<Image>& images, int64_t cols, int64_t padding = 2, uint8_t background = 255);

// f32 [C, H, W], normalized per channel: x = (pixel/255 - mean[c]) / std[c].
Tensor image_to_tensor(const Image& img, const Normalization& norm);

struct ImageInput {
  int channels = 3;                // 1 or 3
  int64_t height = 0, width = 0;   // resized to this; 0 keeps the file's size
};
// read_image_upright (a photo turned by its EXIF orientation) + resize + image_to_tensor, with a batch
// dimension: f32 [1, C, H, W].
Tensor load_image_tensor(const std::string& path, const ImageInput& in, const Normalization& norm);

// One image tensor, [C, H, W] or [H, W] (C = 1 or 3), back to 8-bit pixels: the normalization
// undone, x*std + mean scaled to 0..255, rounded, clamped. Any device and floating dtype.
Image tensor_to_image(const Tensor& t, const Normalization& norm);
// The same, scaled so the tensor's minimum is 0 and its maximum 255 (learned filters, whose values
// have no fixed range). A constant tensor gives mid-gray.
Image tensor_to_image_minmax(const Tensor& t);

// PNG out (stb_image_write). write_png is atomic (temp file + rename); errors name the file.
void write_png(const std::string& path, const Image& img);
void save_png(const std::string& path, const Tensor& image, const Normalization& norm);
// The first min(N, max_images) images of a batch [N, C, H, W] as a grid, `cols` per row, each
// enlarged `scale` times.
void save_png_grid(const std::string& path, const Tensor& batch, const Normalization& norm, int64_t cols,
                   int64_t scale = 1, int64_t max_images = 1 << 30);

}  // namespace hl::data
