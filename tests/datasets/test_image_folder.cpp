// Image-folder data sets: layout and label order, the decoded-pixel cache (hit, invalidation when the
// folder changes, a damaged cache rebuilt, a separate cache folder), and every bad folder rejected
// with an error naming the folder or file.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "datasets/image.h"
#include "datasets/image_folder.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

using data::Image;
using data::ImageFolderInfo;
using data::ImageFolderOptions;

namespace fs = std::filesystem;

Image random_image(int64_t w, int64_t h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Image img{w, h, 3, Bytes(static_cast<size_t>(w * h * 3))};
  for (auto& p : img.pixels) p = static_cast<uint8_t>(rng());
  return img;
}

// root/train/<class>/<k>.png for the given classes; returns the images in load order.
std::vector<Image> make_folder(const TempDir& root, const std::vector<std::pair<std::string, int>>& classes,
                               uint64_t seed, int64_t side = 6) {
  std::vector<std::pair<std::string, int>> sorted = classes;
  std::sort(sorted.begin(), sorted.end());
  std::vector<Image> in_order;
  for (const auto& [name, count] : sorted) {
    fs::create_directories(root / ("train/" + name));
    for (int k = 0; k < count; ++k) {
      const Image img = random_image(side, side, seed++);
      data::write_png(root / ("train/" + name + "/" + std::to_string(100 + k) + ".png"), img);
      in_order.push_back(img);
    }
  }
  return in_order;
}

void expect_images(const data::Dataset& ds, const std::vector<Image>& want) {
  ASSERT_EQ(ds.size(), static_cast<int64_t>(want.size()));
  const std::vector<float> x = ds.images.to_vector();
  const int64_t side = want[0].width, plane = side * side;
  for (size_t i = 0; i < want.size(); ++i)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t k = 0; k < plane; ++k)
        ASSERT_EQ(x[i * 3 * plane + c * plane + k], static_cast<float>(want[i].pixels[k * 3 + c] / 255.0))
            << "image " << i;  // default normalization: pixel/255
}

TEST(ImageFolder, LayoutLabelsAndCache) {
  TempDir root;
  const auto images = make_folder(root, {{"zebra", 2}, {"ant", 3}, {"moth", 1}}, fresh_seed());
  ImageFolderInfo info;
  const data::Dataset ds = data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_FALSE(info.from_cache);
  EXPECT_EQ(info.decoded, 6);
  EXPECT_EQ(ds.class_names, (std::vector<std::string>{"ant", "moth", "zebra"}));  // sorted by name
  EXPECT_EQ(ds.labels.to_int(), (std::vector<int32_t>{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(ds.images.shape(), (Shape{6, 3, 6, 6}));
  EXPECT_EQ(ds.num_classes, 3);
  expect_images(ds, images);
  EXPECT_TRUE(fs::exists(info.cache_path));
  EXPECT_EQ(fs::path(info.cache_path).parent_path(), fs::path(root.str()));  // next to the data

  const data::Dataset again = data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_TRUE(info.from_cache);
  EXPECT_EQ(info.decoded, 0);
  EXPECT_EQ(again.images.to_vector(), ds.images.to_vector());
  EXPECT_EQ(again.labels.to_int(), ds.labels.to_int());
}

TEST(ImageFolder, CacheIsInvalidatedWhenTheFolderChanges) {
  TempDir root;
  make_folder(root, {{"a", 2}, {"b", 2}}, fresh_seed());
  ImageFolderInfo info;
  data::load_image_folder(root.str(), "train", {}, &info);
  ASSERT_FALSE(info.from_cache);
  // A new file.
  data::write_png(root / "train/b/900.png", random_image(6, 6, 1));
  EXPECT_EQ(data::load_image_folder(root.str(), "train", {}, &info).size(), 5);
  EXPECT_FALSE(info.from_cache);
  // A file replaced by another of the same size: only its modification time differs.
  const Image replacement = random_image(6, 6, 2);
  const fs::file_time_type before = fs::last_write_time(root / "train/a/100.png");
  data::write_png(root / "train/a/100.png", replacement);
  fs::last_write_time(root / "train/a/100.png", before + std::chrono::seconds(1));
  const data::Dataset ds = data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_FALSE(info.from_cache);
  EXPECT_EQ(ds.images.slice_rows(0, 1).to_vector(), data::image_to_tensor(replacement, {}).to_vector());
  // A removed file.
  fs::remove(root / "train/b/900.png");
  EXPECT_EQ(data::load_image_folder(root.str(), "train", {}, &info).size(), 4);
  EXPECT_FALSE(info.from_cache);
  // Other decoding options use another cache file.
  ImageFolderOptions gray;
  gray.channels = 1;
  EXPECT_EQ(data::load_image_folder(root.str(), "train", gray, &info).images.shape(), (Shape{4, 1, 6, 6}));
  EXPECT_FALSE(info.from_cache);
  data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_TRUE(info.from_cache);
}

// cp -p, rsync -a and tar x keep a file's modification time, so a replacement of the same size can
// look unchanged by name, size and mtime; the change time, which touch -r cannot set back, gives it away.
TEST(ImageFolder, CacheSeesAReplacementThatKeepsTheOldMtime) {
  TempDir root, scratch;
  make_folder(root, {{"a", 2}}, fresh_seed());
  const std::string file = root / "train/a/100.png";
  ImageFolderInfo info;
  data::load_image_folder(root.str(), "train", {}, &info);
  ASSERT_FALSE(info.from_cache);
  data::load_image_folder(root.str(), "train", {}, &info);
  ASSERT_TRUE(info.from_cache);
  // Another image whose PNG has exactly the old file's size (random pixels barely compress, so a
  // few seeds find one).
  const uintmax_t size = fs::file_size(file);
  Image replacement;
  Bytes bytes;
  for (uint64_t seed = fresh_seed(), tries = 0; bytes.size() != size && tries < 1000; ++seed, ++tries) {
    replacement = random_image(6, 6, seed);
    data::write_png(scratch / "r.png", replacement);
    bytes = read_file(scratch / "r.png");
  }
  ASSERT_EQ(bytes.size(), size) << "no same-size replacement found";
  const fs::file_time_type mtime = fs::last_write_time(file);
  // The kernel stamps the change time from a clock that ticks every few milliseconds: let it tick
  // after the stats of the loads above, as it does between any real load and a later copy.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  write_file(file, bytes);
  fs::last_write_time(file, mtime);  // touch -r: the old modification time, to the nanosecond
  ASSERT_EQ(fs::last_write_time(file), mtime);
  ASSERT_EQ(fs::file_size(file), size);
  const data::Dataset ds = data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_FALSE(info.from_cache) << "the cache served the replaced file's old pixels";
  EXPECT_EQ(info.decoded, 2);
  EXPECT_EQ(ds.images.slice_rows(0, 1).to_vector(), data::image_to_tensor(replacement, {}).to_vector());
  data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_TRUE(info.from_cache) << "an unchanged folder still hits the rebuilt cache";
}

TEST(ImageFolder, DamagedCacheIsRebuilt) {
  TempDir root;
  const auto images = make_folder(root, {{"a", 3}}, fresh_seed());
  ImageFolderInfo info;
  data::load_image_folder(root.str(), "train", {}, &info);
  Bytes cache = read_file(info.cache_path);
  cache.resize(cache.size() - 7);
  write_file(info.cache_path, cache);
  expect_images(data::load_image_folder(root.str(), "train", {}, &info), images);
  EXPECT_FALSE(info.from_cache);
  data::load_image_folder(root.str(), "train", {}, &info);
  EXPECT_TRUE(info.from_cache) << "the rebuilt cache was not written back";
}

TEST(ImageFolder, CacheDirAndResize) {
  TempDir root, cache;
  make_folder(root, {{"a", 1}, {"b", 1}}, fresh_seed(), 9);
  data::write_png(root / "train/b/odd.png", random_image(5, 7, 3));  // another size
  ImageFolderOptions opt;
  opt.height = opt.width = 4;
  opt.cache_dir = cache.str();
  ImageFolderInfo info;
  const data::Dataset ds = data::load_image_folder(root.str(), "train", opt, &info);
  EXPECT_EQ(ds.images.shape(), (Shape{3, 3, 4, 4}));
  EXPECT_EQ(fs::path(info.cache_path).parent_path(), fs::path(cache.str()));
  for (const auto& e : fs::directory_iterator(root.str())) EXPECT_EQ(e.path().filename(), "train");
  opt.use_cache = false;
  data::load_image_folder(root.str(), "train", opt, &info);
  EXPECT_TRUE(info.cache_path.empty());
  EXPECT_EQ(info.decoded, 3);
}

// A cache that cannot be written costs only time: the load succeeds and says so on stderr, and the next
// load decodes again.
TEST(ImageFolder, ACacheThatCannotBeWrittenIsAWarning) {
  TempDir root, other;
  const auto images = make_folder(root, {{"a", 2}}, fresh_seed());
  write_file(other / "file", Bytes{1});
  ImageFolderOptions opt;
  opt.cache_dir = (fs::path(other / "file") / "cache").string();  // under a regular file: no one can make it
  ImageFolderInfo info;
  testing::internal::CaptureStderr();
  const data::Dataset ds = data::load_image_folder(root.str(), "train", opt, &info);
  const std::string err = testing::internal::GetCapturedStderr();
  expect_images(ds, images);
  EXPECT_NE(err.find("load_image_folder"), std::string::npos) << err;
  EXPECT_NE(err.find("could not write the cache (the next load decodes again)"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(info.cache_path));
  data::load_image_folder(root.str(), "train", opt, &info);
  EXPECT_FALSE(info.from_cache);
  EXPECT_EQ(info.decoded, 2);
}

TEST(ImageFolder, RejectsBadFolders) {
  TempDir root;
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train"), "load_image_folder(" + root / "train" + ")",
                  "no such folder");
  fs::create_directories(root / "train");
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train"), "holds no class folders");
  fs::create_directories(root / "train/cat");
  write_file(root / "train/cat/notes.txt", Bytes{'x'});
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train"), root / "train/cat", "holds no images");
  data::write_png(root / "train/cat/1.png", random_image(6, 6, 1));
  data::write_png(root / "train/cat/2.png", random_image(6, 8, 2));
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train"), root / "train/cat/2.png", "is 6x8",
                  "but " + root / "train/cat/1.png" + " is 6x6", "different sizes");
  fs::remove(root / "train/cat/2.png");
  write_file(root / "train/cat/3.jpg", Bytes{0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F'});
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train"), "decode_image(" + root / "train/cat/3.jpg" + ")");
  fs::remove(root / "train/cat/3.jpg");
  EXPECT_EQ(data::load_image_folder(root.str(), "train").size(), 1);
  ImageFolderOptions bad;
  bad.channels = 2;
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train", bad), "channels must be 1 or 3");
  // A file beside the class folders (a README, a licence) is not a class.
  write_file(root / "train/README.txt", Bytes{'x'});
  EXPECT_EQ(data::load_image_folder(root.str(), "train").class_names, (std::vector<std::string>{"cat"}));
  // The first image of all is checked like the others (0.jpg sorts before 1.png).
  write_file(root / "train/cat/0.jpg", Bytes{0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F'});
  EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train"), "decode_image(" + root / "train/cat/0.jpg" + ")");
}

// A resize target is both sides or neither, each from 1 to 65535; each side is checked on its own,
// and 65535 itself is taken.
TEST(ImageFolder, ResizeTargetLimits) {
  TempDir root;
  fs::create_directories(root / "train/cat");
  data::write_png(root / "train/cat/1.png", random_image(6, 6, 1));
  struct Target {
    int64_t height, width;
  };
  for (const Target t : {Target{70000, 10}, Target{10, 70000}, Target{65537, 65537}, Target{0, 4}, Target{65536, 1},
                         Target{1, 65536}}) {
    ImageFolderOptions opt;
    opt.use_cache = false;
    opt.height = t.height;
    opt.width = t.width;
    EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train", opt),
                    "give both height and width (or neither), each at most 65535; got " + std::to_string(t.height) + "x" +
                        std::to_string(t.width));
  }
  // A negative side is refused by itself, also beside a valid one (4 x -3 passed the both-or-neither
  // test and failed later, once per file, inside resize_image).
  for (const Target t : {Target{-1, -1}, Target{4, -3}, Target{-3, 4}, Target{0, -1}}) {
    ImageFolderOptions opt;
    opt.use_cache = false;
    opt.height = t.height;
    opt.width = t.width;
    EXPECT_HL_ERROR(data::load_image_folder(root.str(), "train", opt),
                    "load_image_folder(" + root / "train" + "): the size to resize to cannot be negative; got " +
                        std::to_string(t.height) + "x" + std::to_string(t.width));
  }
  for (const Target t : {Target{65535, 1}, Target{1, 65535}}) {
    ImageFolderOptions opt;
    opt.use_cache = false;
    opt.channels = 1;
    opt.height = t.height;
    opt.width = t.width;
    EXPECT_EQ(data::load_image_folder(root.str(), "train", opt).images.shape(), (Shape{1, 1, t.height, t.width}));
  }
}

TEST(ImageCache, ParseRejectsEveryDamagedField) {
  data::ImageCache c{42, 2, 1, 2, 2, {"a", "bb"}, {1, 0}, Bytes(8, 7)};
  const Bytes good = data::serialize_image_cache(c);
  const data::ImageCache back = data::parse_image_cache(good.data(), good.size(), "c");
  EXPECT_EQ(back.fingerprint, 42u);
  EXPECT_EQ(back.class_names, c.class_names);
  EXPECT_EQ(back.labels, c.labels);
  EXPECT_EQ(back.pixels, c.pixels);
  for (size_t cut = 0; cut < good.size(); ++cut)
    EXPECT_HL_ERROR(data::parse_image_cache(good.data(), cut, "c.bin"), "parse_image_cache(c.bin)");
  Bytes extra = good;
  extra.push_back(0);
  EXPECT_HL_ERROR(data::parse_image_cache(extra.data(), extra.size(), "c.bin"), "size mismatch");
  c.labels[1] = 2;
  const Bytes bad_label = data::serialize_image_cache(c);
  EXPECT_HL_ERROR(data::parse_image_cache(bad_label.data(), bad_label.size(), "c.bin"), "label 2", "out of range");
}

// The header's fields at their limits, each refused by name (values a damaged or foreign file may
// hold), and the format pinned: a cache starts with "HLIMGC", 0 and the format version, 1, so a
// change of layout must come with a new version (an old cache is then refused, and rebuilt).
TEST(ImageCache, HeaderLimitsAndTheFormatVersion) {
  const data::ImageCache c{42, 2, 1, 2, 2, {"a", "bb"}, {1, 0}, Bytes(8, 7)};
  const Bytes good = data::serialize_image_cache(c);
  EXPECT_EQ(Bytes(good.begin(), good.begin() + 8), (Bytes{'H', 'L', 'I', 'M', 'G', 'C', 0, 1}));
  // Little-endian fields: the magic (8 bytes), the fingerprint (8), count, channels, height, width
  // (8 each, from byte 16), the number of classes (4, at 48), then each name's length (4) and bytes.
  const auto with = [&](size_t at, uint64_t v, int bytes) {
    Bytes b = good;
    for (int i = 0; i < bytes; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
    return b;
  };
  Bytes no_images = with(16, 0, 8);  // count 0, and nothing after the names: still refused
  no_images.resize(good.size() - 2 * (4 + 4));
  // 2^61 images of 4 bytes, each with its 4-byte label: 2^64 bytes, which is 0 in 64 bits. Nothing
  // follows the names either, so only a check made before multiplying refuses it.
  Bytes wrapped = with(16, uint64_t{1} << 61, 8);
  wrapped.resize(good.size() - 2 * (4 + 4));
  struct Case {
    const char* what;
    Bytes bytes;
    std::string expect;
  };
  const std::vector<Case> cases{
      {"no images", no_images, "size mismatch: the header promises 0 images"},
      {"2^61 images", wrapped, "size mismatch: the header promises 2305843009213693952 images"},
      {"images 0 pixels high", with(32, 0, 8), "bad header: images of 0x2 pixels"},
      {"images 0 pixels wide", with(40, 0, 8), "bad header: images of 2x0 pixels"},
      {"no classes", with(48, 0, 4), "bad header: 0 classes"},
      {"2^20 + 1 classes", with(48, (1u << 20) + 1, 4), "bad header: 1048577 classes"},
      {"a name of 0 bytes", with(52, 0, 4), "bad class name length 0 for class 0"},
      {"a cut fingerprint", Bytes(good.begin(), good.begin() + 12),
       "truncated: a 64-bit field at byte 8 needs 8 byte(s), 4 left"},
      {"format version 2", with(7, 2, 1),
       "wrong magic: not a halfling image cache (or one of another format version)"},
      {"not a cache", with(0, 'X', 1), "wrong magic"},
  };
  for (const Case& k : cases) {
    const std::string e = error_of([&] { data::parse_image_cache(k.bytes.data(), k.bytes.size(), "c.bin"); });
    EXPECT_NE(e.find("parse_image_cache(c.bin): " + k.expect), std::string::npos) << k.what << ": " << e;
  }
  // 2^20 classes pass the header check (this file then runs out of names).
  const Bytes most = with(48, 1u << 20, 4);
  const std::string e = error_of([&] { data::parse_image_cache(most.data(), most.size(), "c.bin"); });
  EXPECT_EQ(e.find("classes"), std::string::npos) << e;
  EXPECT_NE(e.find("parse_image_cache(c.bin): "), std::string::npos) << e;
  // Images one pixel high are valid, and so are sides of 65536 and names of 4096 bytes; one more is not.
  const data::ImageCache row{7, 1, 1, 1, 4, {"a"}, {0}, Bytes{1, 2, 3, 4}};
  const Bytes row_bytes = data::serialize_image_cache(row);
  EXPECT_EQ(data::parse_image_cache(row_bytes.data(), row_bytes.size(), "c.bin").pixels, row.pixels);
  for (const bool tall : {true, false}) {
    const int64_t h = tall ? 65536 : 1, w = tall ? 1 : 65536;
    const data::ImageCache big{7, 1, 1, h, w, {std::string(4096, 'n')}, {0}, Bytes(65536, 9)};
    const Bytes ok = data::serialize_image_cache(big);
    EXPECT_EQ(data::parse_image_cache(ok.data(), ok.size(), "c.bin").class_names, big.class_names);
    data::ImageCache over = big;
    (tall ? over.height : over.width) = 65537;
    over.pixels.push_back(9);
    const Bytes too_big = data::serialize_image_cache(over);
    const std::string side = error_of([&] { data::parse_image_cache(too_big.data(), too_big.size(), "c.bin"); });
    EXPECT_NE(side.find(tall ? "bad header: images of 65537x1 pixels" : "bad header: images of 1x65537 pixels"),
              std::string::npos)
        << side;
  }
  data::ImageCache long_name = row;
  long_name.class_names = {std::string(4097, 'n')};
  const Bytes long_bytes = data::serialize_image_cache(long_name);
  const std::string name = error_of([&] { data::parse_image_cache(long_bytes.data(), long_bytes.size(), "c.bin"); });
  EXPECT_NE(name.find("bad class name length 4097 for class 0"), std::string::npos) << name;
}

}  // namespace
}  // namespace hl::test
