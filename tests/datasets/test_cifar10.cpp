// CIFAR-10: binary batch files the test writes itself (random records, 1 record, truncated records,
// bad labels, missing batches, label-name files) and, when datasets/fetch.sh has put it in
// data/cifar10, the real data set's counts and class balance.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "datasets/cifar10.h"
#include "datasets/image.h"
#include "datasets/image_folder.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

using data::Dataset;
using data::Split;

// n random records: (label, 3072 pixels) each.
Bytes cifar_records(size_t n, uint64_t seed, Bytes* labels = nullptr) {
  std::mt19937_64 rng(seed);
  Bytes b;
  for (size_t i = 0; i < n; ++i) {
    const auto label = static_cast<uint8_t>(rng() % 10);
    if (labels) labels->push_back(label);
    b.push_back(label);
    for (int k = 0; k < 3072; ++k) b.push_back(static_cast<uint8_t>(rng()));
  }
  return b;
}

TEST(ParseCifar10, RecordsRoundTrip) {
  Bytes labels;
  const Bytes file = cifar_records(7, fresh_seed(), &labels);
  const data::CifarRecords r = data::parse_cifar10_batch(file.data(), file.size(), "mem");
  ASSERT_EQ(r.size(), 7);
  EXPECT_EQ(r.labels, labels);
  for (size_t i = 0; i < 7; ++i)
    for (size_t k = 0; k < 3072; ++k) ASSERT_EQ(r.pixels[i * 3072 + k], file[i * 3073 + 1 + k]) << i << "," << k;
}

TEST(ParseCifar10, OneRecord) {
  const Bytes file = cifar_records(1, fresh_seed());
  EXPECT_EQ(data::parse_cifar10_batch(file.data(), file.size(), "mem").size(), 1);
}

TEST(ParseCifar10, RejectsTruncatedAndEmptyFiles) {
  const Bytes file = cifar_records(3, fresh_seed());
  // Cut inside the last record, right after a label byte, and one byte short.
  for (size_t cut : {size_t{3073 * 2 + 100}, size_t{3073 * 2 + 1}, size_t{3073 * 3 - 1}, size_t{1}})
    EXPECT_HL_ERROR(data::parse_cifar10_batch(file.data(), cut, "f.bin"), "parse_cifar10(f.bin)", "truncated record",
                    std::to_string(cut) + " bytes");
  EXPECT_HL_ERROR(data::parse_cifar10_batch(file.data(), 0, "f.bin"), "parse_cifar10(f.bin)", "empty");
  // The arithmetic of the message: how many whole records, and how many bytes over.
  EXPECT_HL_ERROR(data::parse_cifar10_batch(file.data(), 3073 * 2 + 100, "f.bin"),
                  "truncated record: 6246 bytes is 2 whole record(s) of 3073 bytes and 100 byte(s) more");
}

TEST(ParseCifar10, RejectsLabelsOutOfRange) {
  Bytes file = cifar_records(4, fresh_seed());
  file[2 * 3073] = 10;
  EXPECT_HL_ERROR(data::parse_cifar10_batch(file.data(), file.size(), "f.bin"),
                  "label 10 of record 2 (byte offset 6146) is out of range (expected 0 to 9)");
  file[2 * 3073] = 255;
  EXPECT_HL_ERROR(data::parse_cifar10_batch(file.data(), file.size(), "f.bin"), "label 255");
}

TEST(ParseCifar10, LabelNames) {
  const auto names = data::parse_cifar10_label_names("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n",
                                                     "meta");
  EXPECT_EQ(names, data::cifar10_class_names());
  EXPECT_EQ(data::parse_cifar10_label_names("a\r\nb\nc\nd\ne\nf\ng\nh\ni\nj", "meta").front(), "a");
  // Trailing blanks of either kind are not part of a name.
  const auto padded = data::parse_cifar10_label_names("a\t\nb \nc\t \nd\ne\nf\ng\nh\ni\nj", "meta");
  EXPECT_EQ(std::vector<std::string>(padded.begin(), padded.begin() + 3), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_HL_ERROR(data::parse_cifar10_label_names("a\nb\nc\n", "meta.txt"), "meta.txt", "found 3", "expected 10");
}

// A binary CIFAR-10 folder: `per_batch` records in each training batch, `test_n` in the test batch.
struct FakeCifar {
  Bytes train_labels, train_pixels, test_labels;
};
FakeCifar write_fake_cifar(const TempDir& dir, size_t per_batch, size_t test_n, uint64_t seed) {
  FakeCifar f;
  for (int b = 1; b <= 5; ++b) {
    Bytes labels;
    const Bytes rec = cifar_records(per_batch, seed + static_cast<uint64_t>(b), &labels);
    write_file(dir / ("data_batch_" + std::to_string(b) + ".bin"), rec);
    f.train_labels.insert(f.train_labels.end(), labels.begin(), labels.end());
    for (size_t i = 0; i < per_batch; ++i)
      f.train_pixels.insert(f.train_pixels.end(), rec.begin() + static_cast<long>(i * 3073 + 1),
                            rec.begin() + static_cast<long>((i + 1) * 3073));
  }
  write_file(dir / "test_batch.bin", cifar_records(test_n, seed + 99, &f.test_labels));
  return f;
}

TEST(LoadCifar10, BinaryBatchesNormalizedPerChannel) {
  TempDir dir;
  const FakeCifar f = write_fake_cifar(dir, 3, 2, fresh_seed());
  const Dataset tr = data::load_cifar10(dir.str(), Split::train);
  ASSERT_EQ(tr.size(), 15);
  EXPECT_EQ(tr.images.shape(), (Shape{15, 3, 32, 32}));
  EXPECT_EQ(tr.name, "cifar10/train");
  EXPECT_EQ(tr.num_classes, 10);
  EXPECT_EQ(tr.class_names, data::cifar10_class_names());
  const auto y = tr.labels.to_int();
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(y[i], f.train_labels[i]);
  const std::vector<float> x = tr.images.to_vector();
  const data::Normalization norm = data::cifar10_normalization();
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i / 1024 % 3);
    const double want = (f.train_pixels[i] / 255.0 - norm.mean_of(c)) / norm.std_of(c);
    // One float rounding of a value of magnitude < 4: 4 * 2^-24 < 1e-6.
    ASSERT_NEAR(x[i], want, 1e-6) << "element " << i;
  }
  EXPECT_EQ(data::load_cifar10(dir.str(), Split::test).size(), 2);
}

TEST(LoadCifar10, ReadsLabelNamesAndTheArchiveSubfolder) {
  TempDir dir;
  std::filesystem::create_directory(dir / "cifar-10-batches-bin");
  const std::string sub = dir / "cifar-10-batches-bin";
  for (int b = 1; b <= 5; ++b) write_file(sub + "/data_batch_" + std::to_string(b) + ".bin", cifar_records(1, 5));
  write_file(sub + "/test_batch.bin", cifar_records(1, 6));
  const std::string names = "c0\nc1\nc2\nc3\nc4\nc5\nc6\nc7\nc8\nc9\n";
  write_file(sub + "/batches.meta.txt", Bytes(names.begin(), names.end()));
  const Dataset ds = data::load_cifar10(dir.str(), Split::test);
  EXPECT_EQ(ds.size(), 1);
  EXPECT_EQ(ds.class_names.back(), "c9");
}

TEST(LoadCifar10, RejectsBadFolders) {
  TempDir dir;
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train), "load_cifar10(" + dir.str() + ")", "found neither",
                  "fetch.sh cifar10");
  write_fake_cifar(dir, 2, 2, fresh_seed());
  std::filesystem::remove(dir / "data_batch_4.bin");
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train), dir / "data_batch_4.bin", "missing");
  // A truncated record in one batch fails the whole load, naming that file.
  Bytes rec = cifar_records(2, 3);
  rec.resize(rec.size() - 10);
  write_file(dir / "data_batch_4.bin", rec);
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train), "parse_cifar10(" + dir / "data_batch_4.bin" + ")",
                  "truncated record");
  write_file(dir / "data_batch_4.bin", Bytes{});
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train), "data_batch_4.bin", "empty");
  write_file(dir / "data_batch_4.bin", cifar_records(2, 3));
  write_file(dir / "batches.meta.txt", Bytes{'a', '\n'});
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train), "batches.meta.txt", "found 1");
  std::filesystem::remove(dir / "batches.meta.txt");
  EXPECT_EQ(data::load_cifar10(dir.str(), Split::train).size(), 10);
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train, {{0.5f, 0.5f}, {0.2f, 0.2f}}), "load_cifar10(",
                  "2 mean(s)");
}

// A folder with only one split's file is still the binary layout: its split loads (with the
// normalization it was given, which the data set remembers), and the other split names every file it
// needs.
TEST(LoadCifar10, AFolderWithOnlyTheTestBatch) {
  TempDir dir;
  write_file(dir / "test_batch.bin", cifar_records(2, fresh_seed()));
  const data::Normalization norm{{0.25f, 0.5f, 0.75f}, {0.5f, 0.25f, 0.125f}};
  const Dataset te = data::load_cifar10(dir.str(), Split::test, norm);
  EXPECT_EQ(te.size(), 2);
  EXPECT_EQ(te.norm.mean, norm.mean);
  EXPECT_EQ(te.norm.std, norm.std);
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train), dir / "data_batch_1.bin",
                  "is missing; the train split needs data_batch_1.bin to data_batch_5.bin");
  TempDir train_only;
  write_fake_cifar(train_only, 1, 1, fresh_seed());
  std::filesystem::remove(train_only / "test_batch.bin");
  EXPECT_EQ(data::load_cifar10(train_only.str(), Split::train).size(), 5);
  EXPECT_HL_ERROR(data::load_cifar10(train_only.str(), Split::test), train_only / "test_batch.bin",
                  "is missing; the test split needs test_batch.bin");
}

// The JPEG-folder copy (cifar10-jpg/<split>/<class>/*.jpg, as in ../shared/datasets), made here of
// PNGs, which the folder reader takes too: every image comes out 3x32x32 (one of another size is
// resized), the data set is named after CIFAR-10's split, and a folder with another number of
// classes is refused.
TEST(LoadCifar10, ReadsTheImageFolderLayout) {
  TempDir dir, cache;
  const std::vector<std::string>& names = data::cifar10_class_names();
  for (size_t c = 0; c < names.size(); ++c) {
    const int64_t side = c == 3 ? 40 : 32;  // one image of another size
    const auto value = static_cast<uint8_t>(20 * c + 5);
    std::filesystem::create_directories(dir / ("cifar10-jpg/train/" + names[c]));
    data::write_png(dir / ("cifar10-jpg/train/" + names[c] + "/0.png"),
                    data::Image{side, side, 3, Bytes(static_cast<size_t>(side * side * 3), value)});
  }
  const Dataset ds = data::load_cifar10(dir.str(), Split::train, data::Normalization::unit(), cache.str());
  EXPECT_EQ(ds.name, "cifar10/train");
  EXPECT_FALSE(std::filesystem::is_empty(cache.str())) << "the decoded-pixel cache goes to cache_dir";
  EXPECT_EQ(ds.class_names, names);
  ASSERT_EQ(ds.images.shape(), (Shape{10, 3, 32, 32}));
  EXPECT_EQ(ds.labels.to_int(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const std::vector<float> x = ds.images.to_vector();
  for (size_t i = 0; i < 10; ++i) {  // uniform images stay uniform through the resize
    const float want = static_cast<float>((20 * i + 5) / 255.0);
    for (size_t k = 0; k < 3072; ++k) ASSERT_EQ(x[i * 3072 + k], want) << "image " << i << " value " << k;
  }
  // Another normalization, through the same cache of decoded pixels: applied per channel, and remembered.
  const data::Normalization norm = data::cifar10_normalization();
  const Dataset normed = data::load_cifar10(dir.str(), Split::train, norm, cache.str());
  EXPECT_EQ(normed.norm.mean, norm.mean);
  EXPECT_EQ(normed.norm.std, norm.std);
  const std::vector<float> xn = normed.images.to_vector();
  for (size_t i = 0; i < 10; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      const double want = ((20 * i + 5) / 255.0 - norm.mean_of(c)) / norm.std_of(c);
      EXPECT_NEAR(xn[i * 3072 + static_cast<size_t>(c) * 1024], want, 1e-6) << "image " << i << " channel " << c;
    }
  }
  std::filesystem::remove_all(dir / ("cifar10-jpg/train/" + names[9]));
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train, data::Normalization::unit(), cache.str()),
                  "load_cifar10(", "holds 9 class folders; CIFAR-10 has 10");
}

// The image folder's labels are its sorted folder names' ranks, so a copy that names a class
// differently ("plane") would give label 0 to automobile, where the binary batches and
// cifar10_class_names() have airplane. Such a folder is refused, with both lists of names.
TEST(LoadCifar10, ImageFolderClassesMustBeCifar10s) {
  TempDir dir, cache;
  std::vector<std::string> names = data::cifar10_class_names();
  names[0] = "plane";
  for (const std::string& name : names) {
    std::filesystem::create_directories(dir / ("train/" + name));
    data::write_png(dir / ("train/" + name + "/0.png"), data::Image{32, 32, 3, Bytes(32 * 32 * 3, 7)});
  }
  const std::string official = "airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck";
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train, data::Normalization::unit(), cache.str()),
                  "load_cifar10(" + dir.str() + "): the class folders of " + dir / "train" + " are not CIFAR-10's",
                  "expected " + official + "; found automobile, bird, cat, deer, dog, frog, horse, plane, ship, truck",
                  "rename the folders");
  // Renamed, the same folder loads, airplane first.
  std::filesystem::rename(dir / "train/plane", dir / "train/airplane");
  const Dataset ds = data::load_cifar10(dir.str(), Split::train, data::Normalization::unit(), cache.str());
  EXPECT_EQ(ds.class_names, data::cifar10_class_names());
  EXPECT_EQ(ds.labels.to_int(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // A missing class is named in the lists as well.
  std::filesystem::remove_all(dir / "train/ship");
  EXPECT_HL_ERROR(data::load_cifar10(dir.str(), Split::train, data::Normalization::unit(), cache.str()),
                  "holds 9 class folders; CIFAR-10 has 10 (expected " + official + "; found ",
                  "horse, truck)");
}

// ---- the real data set (datasets/fetch.sh cifar10 [--from ...]) ------------------------------------

// data_dir treats a folder with nothing in it (as a failed fetch once left) as no data set, and says
// why, so that the tests that need the data skip instead of failing on the empty folder.
TEST(DataDir, AnEmptyFolderIsNoDataSet) {
  TempDir tmp;
  const char* old = std::getenv("HALFLING_DATA");
  const std::string saved = old != nullptr ? old : "";
  ASSERT_EQ(setenv("HALFLING_DATA", tmp.str().c_str(), 1), 0);
  const std::string dir = tmp / "cifar10";
  EXPECT_EQ(data_dir("cifar10"), "");
  EXPECT_EQ(data_dir_absent_reason("cifar10"), dir + " does not exist");
  std::filesystem::create_directories(dir + "/.fetch.abc123");  // only hidden entries: still empty
  EXPECT_EQ(data_dir("cifar10"), "");
  EXPECT_EQ(data_dir_absent_reason("cifar10"), dir + " is empty (a failed datasets/fetch.sh?)");
  std::filesystem::create_directories(dir + "/train");
  EXPECT_EQ(data_dir("cifar10"), dir);
  EXPECT_EQ(data_dir_absent_reason("cifar10"), "");
  write_file(tmp / "mnist", Bytes{1});
  EXPECT_EQ(data_dir("mnist"), "");
  EXPECT_EQ(data_dir_absent_reason("mnist"), tmp / "mnist" + " is not a folder");
  if (old != nullptr)
    setenv("HALFLING_DATA", saved.c_str(), 1);
  else
    unsetenv("HALFLING_DATA");
}

TEST(RealCifar10, CountsAndClassBalance) {
  const std::string dir = data_dir("cifar10");
  if (dir.empty())
    GTEST_SKIP() << data_dir_absent_reason("cifar10") << "; run datasets/fetch.sh cifar10 --from "
                    "/work/shared/datasets/cifar10-jpg.tar.gz (or datasets/fetch.sh cifar10 online)";
  for (const Split split : {Split::train, Split::test}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Dataset ds = data::load_cifar10(dir, split);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ info     ] " << ds.name << ": " << ds.size() << " images in " << s << " s\n";
    const int64_t per_class = split == Split::train ? 5000 : 1000;
    ASSERT_EQ(ds.size(), 10 * per_class);
    EXPECT_EQ(ds.images.shape(), (Shape{10 * per_class, 3, 32, 32}));
    EXPECT_EQ(ds.class_names, data::cifar10_class_names());
    std::vector<int64_t> counts(10, 0);
    for (int32_t l : ds.labels.to_int()) counts[static_cast<size_t>(l)]++;
    EXPECT_EQ(counts, std::vector<int64_t>(10, per_class));
    // Normalized with the training-set statistics, each channel of the training set has mean ~0 and
    // std ~1. Tolerance 0.05: the JPEG copy's pixels differ slightly from the binary batches the
    // published statistics were computed on.
    if (split == Split::train) {
      const std::vector<float> x = ds.images.to_vector();
      for (size_t c = 0; c < 3; ++c) {
        double sum = 0, sq = 0;
        int64_t cnt = 0;
        for (size_t i = 0; i < x.size(); i += 3072)
          for (size_t k = c * 1024; k < (c + 1) * 1024; ++k, ++cnt) {
            sum += x[i + k];
            sq += double{x[i + k]} * x[i + k];
          }
        const double mean = sum / static_cast<double>(cnt);
        EXPECT_NEAR(mean, 0.0, 0.05) << "channel " << c;
        EXPECT_NEAR(std::sqrt(sq / static_cast<double>(cnt) - mean * mean), 1.0, 0.05) << "channel " << c;
      }
    }
  }
}

}  // namespace
}  // namespace hl::test
