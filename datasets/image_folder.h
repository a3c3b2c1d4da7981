// Image-folder data sets, in torchvision's ImageFolder layout:
//
//   root/<split>/<class>/*.jpg|*.jpeg|*.png|*.bmp      e.g. cifar10/train/airplane/0001.jpg
//
// Classes are the sub-folders of root/<split>, sorted by name (byte order, like torchvision), and
// numbered from 0 in that order; files are taken in name order within a class. Hidden entries
// (".name") and files with other extensions are ignored.
//
// Decoding tens of thousands of JPEGs takes seconds, so the decoded pixels are cached in one compact
// binary file (8-bit pixels, labels, class names) and later loads read only that. The cache is keyed
// by a fingerprint of the folder (every file's relative path, size, modification time and status
// change time, so a replacement that keeps the old mtime, as cp -p and rsync -a do, still counts) and
// of the decoding options; any change to the folder invalidates it. It lives next to the data
// (root/.halfling-cache-<split>-c<C>-<H>x<W>.bin) when root is writable, else in
// $XDG_CACHE_HOME/halfling (or ~/.cache/halfling), and is written atomically (temp file + rename),
// so concurrent loads never see half a cache. A damaged cache is reported on stderr and rebuilt.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dataset.h"

namespace hl::data {

struct ImageFolderOptions {
  int channels = 3;               // 1 (gray) or 3 (RGB); stb_image converts
  int64_t height = 0, width = 0;  // resize every image to this; 0: all must share the first one's size
  Normalization norm;             // default: pixel/255
  bool use_cache = true;
  std::string cache_dir;          // "" = next to the data, or the user cache folder if root is read-only
  std::string name;               // Dataset::name; default "<root's folder name>/<split>"
};

// What a load did (for tests, benchmarks and the curious).
struct ImageFolderInfo {
  bool from_cache = false;
  int64_t decoded = 0;     // images decoded from their files in this call (0 with a cache hit)
  std::string cache_path;  // where the cache is (or would be); "" with use_cache = false
};

// split may be "" to read root itself as the folder of classes. Throws hl::Error naming the folder
// or file for: a missing folder, no class folders, a class with no images, an image that does not
// decode, an image whose size differs from the others (when no size is given).
Dataset load_image_folder(const std::string& root, const std::string& split, const ImageFolderOptions& opt = {},
                          ImageFolderInfo* info = nullptr);

// The cache file's contents. Exposed so that tests and tests/fuzz/fuzz_image_cache.cpp can write and
// parse it directly; parse_image_cache checks every length and count against the buffer size.
struct ImageCache {
  uint64_t fingerprint = 0;
  int64_t count = 0, channels = 0, height = 0, width = 0;
  std::vector<std::string> class_names;
  std::vector<int32_t> labels;  // count, each < class_names.size()
  std::vector<uint8_t> pixels;  // count * channels * height * width, channel-major per image
};
std::vector<uint8_t> serialize_image_cache(const ImageCache& cache);
ImageCache parse_image_cache(const uint8_t* data, size_t size, const std::string& source);

}  // namespace hl::data
