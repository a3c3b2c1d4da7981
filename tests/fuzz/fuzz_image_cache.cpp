// libFuzzer target: parse_image_cache (datasets/image_folder.h), the decoded-pixel cache that the
// image-folder loader reads back on every run; a damaged cache must be an hl::Error, never a crash
// or a huge allocation.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "datasets/image_folder.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hl::data::ImageCache c = hl::data::parse_image_cache(data, size, "fuzz");
    if (c.labels.size() != static_cast<size_t>(c.count) ||
        c.pixels.size() != static_cast<size_t>(c.count * c.channels * c.height * c.width))
      std::abort();
    for (int32_t l : c.labels)
      if (l < 0 || static_cast<size_t>(l) >= c.class_names.size()) std::abort();
    // Writing it back gives the same bytes: the format has no slack a parser could misread.
    const auto again = hl::data::serialize_image_cache(c);
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  } catch (const hl::Error&) {
  }
  return 0;
}
