// libFuzzer target: decode_image (datasets/image.h, stb_image underneath) on arbitrary bytes, in
// the file's own channels and converted to gray and RGB, then resized as the image-folder loader does;
// and exif_orientation on the same bytes, turning the image by what it finds.
#include <cstdint>
#include <cstdlib>

#include "datasets/image.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The EXIF orientation is read from the same bytes, decodable or not: 1 to 8, and 1 with any problem.
  const hl::data::ExifOrientation o = hl::data::exif_orientation(data, size);
  if (o.value < 1 || o.value > 8 || (!o.problem.empty() && o.value != 1)) std::abort();
  for (int channels : {0, 1, 3}) {
    try {
      const hl::data::Image img = hl::data::decode_image(data, size, "fuzz", channels);
      // What decode_image promises: a whole image of the size it reports.
      if (img.width <= 0 || img.height <= 0 || (channels != 0 && img.channels != channels) ||
          img.pixels.size() != static_cast<size_t>(img.width * img.height * img.channels))
        std::abort();
      if (channels == 3) hl::data::resize_image(img, 8, 8);
      if (channels == 0 && hl::data::apply_exif_orientation(img, o.value).pixels.size() != img.pixels.size())
        std::abort();
    } catch (const hl::Error&) {
    }
  }
  return 0;
}
