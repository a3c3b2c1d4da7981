// CIFAR-10 (DESIGN.md §5), from either of its two forms:
//
//  - the official binary archive (cifar-10-binary.tar.gz): data_batch_1.bin ... data_batch_5.bin
//    (training) and test_batch.bin, each a run of 3073-byte records: 1 label byte (0-9), then
//    3072 pixel bytes, channel-major (the 1024 red bytes of the 32x32 image, row by row, then green,
//    then blue). batches.meta.txt holds the 10 class names, one per line;
//  - an image folder, <dir>/{train,test}/<class>/*.jpg|png (what datasets/fetch.sh cifar10 --from
//    makes of the JPEG archive), read through datasets/image_folder.h. The class folders must be
//    exactly CIFAR-10's ten names (cifar10_class_names()), so that label i means the same class in
//    both forms.
//
// load_cifar10 finds whichever is in the folder. Every file is checked: a size that is not a whole
// number of records, a label out of range, an empty file, a missing batch, an image folder whose class
// folders are not CIFAR-10's; each throws hl::Error naming the file and the problem, and nothing is
// returned half-loaded.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/image_folder.h"

namespace hl::data {

inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarClasses = 10;
inline constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarSide * kCifarSide;  // 3072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                    // 3073

// The records of one binary batch file, as read, before normalization.
struct CifarRecords {
  std::vector<uint8_t> labels;  // n
  std::vector<uint8_t> pixels;  // n * 3072, channel-major per image
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// Parse the bytes of one batch file. `source` names it in errors ("parse_cifar10(<source>): ...").
// Exposed over a byte buffer so that tests/fuzz/fuzz_cifar10.cpp can feed it anything.
CifarRecords parse_cifar10_batch(const uint8_t* data, size_t size, const std::string& source);
CifarRecords read_cifar10_batch(const std::string& path);

// The class names in batches.meta.txt: exactly 10 non-empty lines (blank lines ignored).
std::vector<std::string> parse_cifar10_label_names(const std::string& text, const std::string& source);
// airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck.
const std::vector<std::string>& cifar10_class_names();

// Which form of CIFAR-10 `dir` holds, and where, as load_cifar10 looks: the binary batches (in dir, or
// in the archive's cifar-10-batches-bin/) first, else the image folder (in dir, or in cifar10-jpg/).
struct Cifar10Source {
  enum class Kind { none, binary, image_folder };
  Kind kind = Kind::none;
  std::string path;  // the folder that holds the batches, or the train/ and test/ folders
};
Cifar10Source find_cifar10(const std::string& dir);

// The training set (50,000 images) or the test set (10,000), f32 [N, 3, 32, 32], normalized per
// channel, from where find_cifar10 finds it. The image folder is decoded once and cached (see
// image_folder.h); `cache_dir` overrides where that cache goes, and `info` (for the image folder)
// receives whether the cache answered.
Dataset load_cifar10(const std::string& dir, Split split, Normalization norm = cifar10_normalization(),
                     const std::string& cache_dir = "", ImageFolderInfo* info = nullptr);

}  // namespace hl::data
