// libFuzzer target: decode_image (datasets/image.h, stb_image underneath) on arbitrary bytes, in
// the file's own channels and converted to gray and RGB, then resized as the image-folder loader does.
#include <cstdint>
#include <cstdlib>

#include "datasets/image.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (int channels : {0, 1, 3}) {
    try {
      const hl::data::Image img = hl::data::decode_image(data, size, "fuzz", channels);
      // What decode_image promises: a whole image of the size it reports.
      if (img.width <= 0 || img.height <= 0 || (channels != 0 && img.channels != channels) ||
          img.pixels.size() != static_cast<size_t>(img.width * img.height * img.channels))
        std::abort();
      if (channels == 3) hl::data::resize_image(img, 8, 8);
    } catch (const hl::Error&) {
    }
  }
  return 0;
}
