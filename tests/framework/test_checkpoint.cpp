// Checkpoints (framework/checkpoint.h): the safetensors layout, every validation rule of the reader,
// atomic writes (an injected failure and a killed writer leave the old file loadable), model and
// optimizer state with their checks, extra sections, and bit-exact resume of a training run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "framework/atomic_file.h"
#include "framework/autograd.h"
#include "framework/checkpoint.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "halfling_ckpt_XXXXXX").string();
    HL_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.detach().to(Device::cpu);
  const auto* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// Tensors of every dtype with fresh random values, plus the edge cases of the format (a scalar, an
// empty tensor, non-finite and subnormal values, whose bits must survive).
NamedTensors random_tensors(Generator& g) {
  NamedTensors t;
  t.emplace_back("weights.f32", Tensor::randn({3, 5}, g));
  t.emplace_back("weights.f16", Tensor::randn({2, 3, 4}, g, DType::f16));
  t.emplace_back("grad.f64", Tensor::randn({7}, g, DType::f64));
  std::vector<int32_t> labels(6);
  for (auto& l : labels) l = static_cast<int32_t>(g.below(2000)) - 1000;
  t.emplace_back("labels", Tensor::from_vector(labels, {2, 3}));
  t.emplace_back("scale", Tensor::scalar(std::ldexp(1.0, static_cast<int>(g.below(20))), DType::f32));
  t.emplace_back("empty", Tensor::empty({0, 4}, DType::f32));
  t.emplace_back("special", Tensor::from_vector(std::vector<float>{NAN, INFINITY, -INFINITY, -0.0f, 1e-45f}, {5}));
  t.emplace_back("subnormal.f16", Tensor::from_half({half::from_bits(0x0001), half::from_bits(0x8001)}, {2}));
  return t;
}

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);  // file order is kept
    EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
    EXPECT_EQ(bytes_of(a[i].second), bytes_of(b[i].second)) << a[i].first;
  }
}

// ---- the file format -------------------------------------------------------------------------------------

TEST(Checkpoint, SafetensorsRoundTripKeepsEveryBitNameAndOrder) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  const NamedTensors t = random_tensors(g);
  const StringMap meta{{"epoch", std::to_string(g.below(100))}, {"note", "ünïcode and \"quotes\""}};
  save_safetensors(dir.file("a.safetensors"), t, meta);
  const SafeTensors back = load_safetensors(dir.file("a.safetensors"));
  expect_same(t, back.tensors);
  EXPECT_EQ(back.metadata, meta);
  EXPECT_TRUE(back.contains("labels"));
  EXPECT_EQ(back.at("labels").to_int(), t[3].second.to_int());
  EXPECT_THROW(back.at("nope"), Error);
  // The file on disk is exactly the in-memory serialization.
  std::ifstream in(dir.file("a.safetensors"), std::ios::binary);
  const std::vector<uint8_t> disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(disk, serialize_safetensors(t, meta));
}

// Labels and counters above 2^24 are not floats: every bit must survive from_vector, the file and
// to_int/to_double (a conversion through float once rounded 16777217 to 16777216).
TEST(Checkpoint, LargeIntegersKeepEveryBit) {
  Generator g(hl::test::fresh_seed());
  std::vector<int32_t> v{16777217, -16777217, 2147483647, -2147483647 - 1};
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<int32_t>(static_cast<uint32_t>(g.next_u64())));
  const Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  EXPECT_EQ(t.to_int(), v);
  const std::vector<uint8_t> f = serialize_safetensors({{"ints", t}});
  const SafeTensors back = parse_safetensors(f.data(), f.size(), "ints");
  EXPECT_EQ(back.at("ints").to_int(), v);
  const std::vector<double> d = back.at("ints").to_double();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d[i], static_cast<double>(v[i])) << v[i];
}

TEST(Checkpoint, LayoutFollowsTheSafetensorsRules) {
  Generator g(hl::test::fresh_seed());
  const NamedTensors t = random_tensors(g);
  const std::vector<uint8_t> f = serialize_safetensors(t, {{"k", "v"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f[static_cast<size_t>(i)];
  ASSERT_LE(8 + n, f.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "the data must start 8-byte aligned";
  const std::string header(f.begin() + 8, f.begin() + 8 + static_cast<int64_t>(n));
  EXPECT_EQ(header.front(), '{');
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');  // only spaces pad it
  const auto j = nlohmann::ordered_json::parse(header);
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  uint64_t offset = 0;
  size_t i = 0;
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(name, t[i].first);
    EXPECT_EQ(info["data_offsets"][0].get<uint64_t>(), offset);
    offset = info["data_offsets"][1].get<uint64_t>();
    EXPECT_EQ(offset - info["data_offsets"][0].get<uint64_t>(), t[i].second.nbytes());
    EXPECT_EQ(info["shape"].get<Shape>(), t[i].second.shape());
    ++i;
  }
  EXPECT_EQ(j["weights.f16"]["dtype"], "F16");
  EXPECT_EQ(j["grad.f64"]["dtype"], "F64");
  EXPECT_EQ(j["labels"]["dtype"], "I32");
  EXPECT_EQ(j["scale"]["dtype"], "F32");
  EXPECT_EQ(j["scale"]["shape"].size(), 0u);
  EXPECT_EQ(8 + n + offset, f.size()) << "the tensors cover the data exactly";
}

TEST(Checkpoint, SaveRejectsBadNamesClearly) {
  TempDir dir;
  const Tensor x = Tensor::zeros({2});
  auto message = [&](const NamedTensors& t) {
    try {
      save_safetensors(dir.file("x.safetensors"), t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"a", x}, {"a", x}}).find("duplicate tensor name 'a'"), std::string::npos);
  EXPECT_NE(message({{"", x}}).find("empty name"), std::string::npos);
  EXPECT_NE(message({{"__metadata__", x}}).find("reserved"), std::string::npos);
  EXPECT_NE(message({{"u", Tensor()}}).find("'u' is undefined"), std::string::npos);
  EXPECT_NE(message({{"bad\xff", x}}).find("not valid UTF-8"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.file("x.safetensors")));
  EXPECT_TRUE(dir.entries().empty()) << "no temporary file left behind";
  try {
    save_safetensors("/nonexistent_dir_halfling/x.safetensors", {{"a", x}});
    ADD_FAILURE() << "saving into a missing directory must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent_dir_halfling/x.safetensors"), std::string::npos) << e.what();
  }
}

// A file made by hand: the length, the header as given (padded), then the data.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data = {}, bool pad = true) {
  std::string h = header;
  if (pad) h.append((8 - (8 + h.size()) % 8) % 8, ' ');
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>(static_cast<uint64_t>(h.size()) >> (8 * i));
  bytes += h;
  std::vector<uint8_t> f(bytes.begin(), bytes.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

std::string parse_error(const std::vector<uint8_t>& f) {
  try {
    parse_safetensors(f.data(), f.size(), "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

#define EXPECT_PARSE_ERROR(file, text)                                                         \
  do {                                                                                         \
    const std::string msg_ = parse_error(file);                                                \
    EXPECT_EQ(msg_.rfind("load_safetensors(bad.safetensors): ", 0), 0u) << msg_;                \
    EXPECT_NE(msg_.find(text), std::string::npos) << "expected '" << (text) << "' in: " << msg_; \
  } while (0)

TEST(Checkpoint, LoaderRejectsEveryMalformedFileClearly) {
  const std::vector<uint8_t> eight(8, 0x11);
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  EXPECT_PARSE_ERROR(std::vector<uint8_t>({1, 2, 3}), "file too short (3 bytes)");
  {
    std::vector<uint8_t> f = make_file("{}");
    f[0] = 200;  // the length now promises more than the file holds
    EXPECT_PARSE_ERROR(f, "header length 200 is larger than the file");
    f[0] = 9;  // one byte more than the 8 after the length field
    EXPECT_PARSE_ERROR(f, "header length 9 is larger than the file (8 bytes after the length field)");
  }
  EXPECT_PARSE_ERROR(make_file(R"({"a": )"), "invalid JSON header");
  EXPECT_PARSE_ERROR(make_file("not json at all"), "invalid JSON header");
  EXPECT_PARSE_ERROR(make_file("[1, 2, 3]"), "the header must be a JSON object, got array");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
                     "tensor 'a': unsupported dtype 'BF16'");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
                     "data_offsets [0, 8] hold 8 bytes, but F32[3] needs 12");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
                     "must hold non-negative integers");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
                     "must hold non-negative integers");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[4294967296, 4294967296, 4294967296],"data_offsets":[0,8]}})", eight),
                     "too many elements");
  // Zeros do not hide an overflow (Tensor's rule, shape_numel): this tensor is empty, but its rows are not
  // countable in 64 bits. Refused here, naming the file, rather than by Tensor::empty after the checks.
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[0, 4294967296, 4294967296],"data_offsets":[0,0]}})"),
                     "tensor 'a': shape [0,4294967296,4294967296] has too many elements");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
                     "end before they begin");
  // Each offset on its own: a negative one, or one that is not a number, is named as such (not read as
  // 2^64 - 1, and not let through to nlohmann as an exception of another type).
  for (const char* off : {"[-1,8]", "[0,-8]", R"(["0",8])", R"([0,"8"])", "[0,8.0]", "[0,8,16]", "[0]", R"("0,8")"})
    EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[2],"data_offsets":)" + std::string(off) + "}}",
                                 eight),
                       "data_offsets must be [begin, end] with non-negative integers, got " + std::string(off));
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[2]}})", eight), "needs dtype, shape and data_offsets");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", eight),
                     "unknown field 'extra'");
  EXPECT_PARSE_ERROR(make_file(R"({"a": 5})"), "tensor 'a': expected an object");
  EXPECT_PARSE_ERROR(make_file(R"({"": {)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight), "a tensor has an empty name");
  EXPECT_PARSE_ERROR(make_file("{\"\xff\": 1}"), "invalid JSON header");
  // Two F32[2] tensors, a at [0, 8) and b where it says, over `data` bytes.
  auto a_then_b = [&](const std::string& b_offsets, size_t data) {
    return make_file(R"({"a": {)" + f32x2 + R"(,"data_offsets":[0,8]}, "b": {)" + f32x2 + R"(,"data_offsets":)" +
                         b_offsets + "}}",
                     std::vector<uint8_t>(data));
  };
  // Overlap: b starts inside a.
  EXPECT_PARSE_ERROR(a_then_b("[4,12]", 12), "tensor 'b' data_offsets [4, 12] overlap tensor 'a'");
  // Out of range: the data holds 8 bytes, b claims [8, 16).
  EXPECT_PARSE_ERROR(a_then_b("[8,16]", 8), "tensor 'b' data_offsets [8, 16] run past the end of the data (8 bytes)");
  // A gap: the first tensor starts at 4; or the second 4 bytes after the first ends.
  EXPECT_PARSE_ERROR(make_file(R"({"a": {)" + f32x2 + R"(,"data_offsets":[4,12]}})", std::vector<uint8_t>(12)),
                     "gap of 4 unused bytes before tensor 'a'");
  EXPECT_PARSE_ERROR(a_then_b("[12,20]", 20), "gap of 4 unused bytes before tensor 'b' (data_offsets [12, 20])");
  // The wrong size for a tensor that does not start at 0: the message counts its own bytes.
  EXPECT_PARSE_ERROR(a_then_b("[8,12]", 12), "tensor 'b': data_offsets [8, 12] hold 4 bytes, but F32[2] needs 8");
  // Bytes after the last tensor.
  EXPECT_PARSE_ERROR(make_file(R"({"a": {)" + f32x2 + R"(,"data_offsets":[0,8]}})", std::vector<uint8_t>(11)),
                     "3 unexpected bytes after the last tensor");
  // Duplicate names, at the top level and inside a tensor's entry.
  EXPECT_PARSE_ERROR(make_file(R"({"a": {)" + f32x2 + R"(,"data_offsets":[0,8]}, "a": {)" + f32x2 +
                                   R"(,"data_offsets":[0,8]}})",
                               eight),
                     "duplicate name 'a'");
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight),
                     "duplicate name 'dtype'");
  EXPECT_PARSE_ERROR(make_file(R"({"__metadata__": {"k": 3}})"), "__metadata__ value of 'k' must be a string");
  EXPECT_PARSE_ERROR(make_file(R"({"__metadata__": [1]})"), "__metadata__ must be an object");

  // The same rules hold for well-formed files: a minimal one parses.
  std::vector<uint8_t> ok = make_file(R"({"a": {)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight);
  const SafeTensors s = parse_safetensors(ok.data(), ok.size(), "ok");
  ASSERT_EQ(s.tensors.size(), 1u);
  EXPECT_EQ(s.at("a").shape(), (Shape{2}));
  EXPECT_EQ(bytes_of(s.at("a")), eight);
}

// The edges of two limits. A dimension may be as large as an int64 holds (a tensor with another
// dimension of 0 is empty, so nothing has to be allocated for it), not one more. A header may be as long
// as the format's 100,000,000 bytes (the reference implementation's limit), not one byte more.
TEST(Checkpoint, LimitsAreTakenUpToTheirEdge) {
  const std::string max = std::to_string(std::numeric_limits<int64_t>::max());
  const std::vector<uint8_t> ok =
      make_file(R"({"a": {"dtype":"F32","shape":[)" + max + R"(,0],"data_offsets":[0,0]}})");
  const SafeTensors s = parse_safetensors(ok.data(), ok.size(), "ok");
  EXPECT_EQ(s.at("a").shape(), (Shape{std::numeric_limits<int64_t>::max(), 0}));
  EXPECT_PARSE_ERROR(make_file(R"({"a": {"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})"),
                     "dimension 9223372036854775808 is too large");

  constexpr size_t kLimit = 100'000'000;
  std::vector<uint8_t> f = make_file(std::string("{}").append(kLimit - 2, ' '), {}, false);
  ASSERT_EQ(f.size(), kLimit + 8);
  EXPECT_TRUE(parse_safetensors(f.data(), f.size(), "big").tensors.empty());
  f = make_file(std::string("{}").append(kLimit - 1, ' '), {}, false);
  EXPECT_PARSE_ERROR(f, "header length 100000001 exceeds the format's limit of 100000000");
}

TEST(Checkpoint, EveryTruncationOfAValidFileIsRejected) {
  Generator g(hl::test::fresh_seed());
  const std::vector<uint8_t> f = serialize_safetensors(random_tensors(g));
  for (size_t len = 0; len < f.size(); ++len) {
    try {
      parse_safetensors(f.data(), len, "cut");
      ADD_FAILURE() << "a file cut to " << len << " of " << f.size() << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("load_safetensors(cut): ", 0), 0u) << e.what();
    }
  }
}

TEST(Checkpoint, MissingFileNamesThePath) {
  try {
    load_safetensors("/nonexistent/halfling.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("load_safetensors(/nonexistent/halfling.safetensors): cannot open"),
              std::string::npos)
        << e.what();
  }
  // A path that opens but cannot be read: a read error is reported, not retried forever.
  TempDir dir;
  try {
    load_safetensors(dir.file(""));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("): read failed: ").append(std::strerror(EISDIR))),
              std::string::npos)
        << e.what();
  }
}

// With standard input closed (a daemon, a job runner), open() gives the file descriptor 0: it is read
// like any other, and closed again.
TEST(Checkpoint, LoadsThroughDescriptorZero) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  Generator g(hl::test::fresh_seed());
  const NamedTensors want = random_tensors(g);
  save_safetensors(path, want);
  const hl::test::StdinClosed stdin_closed;
  ASSERT_EQ(hl::test::lowest_free_fd(), 0);
  const SafeTensors back = load_safetensors(path);
  EXPECT_EQ(hl::test::lowest_free_fd(), 0) << "descriptor 0 was left open";
  ASSERT_EQ(back.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bytes_of(back.tensors[i].second), bytes_of(want[i].second));
}

// ---- atomic writes -----------------------------------------------------------------------------------------

struct HookReset {
  ~HookReset() {
    detail::set_atomic_write_hook({});
    detail::set_atomic_write_function({});
  }
};

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(Checkpoint, ShortWritesAndInterruptedWritesStillWriteEveryByteOnce) {
  // A local disk writes all it is given; a pipe, a network file system or a signal need not. Here
  // every call writes half of what it is asked (at least 1 byte: each chunk ends with a 1-byte
  // write) and every third call is interrupted before writing anything (-1, EINTR).
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors t{{"big", Tensor::randn({600, 1000}, g)}, {"small", Tensor::randn({3}, g)}};
  const std::vector<uint8_t> want = serialize_safetensors(t, {{"k", "v"}});
  HookReset reset;
  int64_t calls = 0;
  size_t total = 0;
  detail::set_atomic_write_function([&](int fd, const void* data, size_t n) -> ssize_t {
    // A writer that writes the same bytes again, or retries an error forever: fail, do not fill the
    // disk or hang.
    if (total > 2 * want.size() || calls > 100000) throw Error("the checkpoint writer does not advance");
    if (++calls % 3 == 0) {
      errno = EINTR;
      return -1;
    }
    const ssize_t w = ::write(fd, data, std::max<size_t>(1, n / 2));
    if (w > 0) total += static_cast<size_t>(w);
    return w;
  });
  std::vector<size_t> counts;
  detail::set_atomic_write_hook([&](size_t written) { counts.push_back(written); });
  save_safetensors(path, t, {{"k", "v"}});
  EXPECT_EQ(file_bytes(path), want);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
  // The hook sees the running count: rising after every write, ending at the file's size.
  ASSERT_FALSE(counts.empty());
  for (size_t i = 1; i < counts.size(); ++i) ASSERT_GT(counts[i], counts[i - 1]) << i;
  EXPECT_EQ(counts.back(), want.size());
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  HL_CHECK(::lstat(path.c_str(), &st) == 0, "lstat(", path, ") failed");
  return st.st_mode & 07777;
}

// A save replaces the file by a rename, so the new file's permissions are chosen, not inherited: those of
// the file it replaces (a checkpoint made private with chmod 600 stays private), else those of any file
// the user creates. A symbolic link is replaced, not written through: its target keeps the old values.
TEST(Checkpoint, ReplacingAFileKeepsItsPermissionBits) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors t = random_tensors(g);
  const mode_t mask = ::umask(0);  // POSIX reads the umask only by setting it
  ::umask(mask);
  save_safetensors(path, t);
  EXPECT_EQ(mode_of(path), 0666 & ~mask) << "a new file";
  for (const mode_t mode : {0600, 0640, 0444, 0604}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    save_safetensors(path, t, {{"mode", std::to_string(mode)}});
    EXPECT_EQ(load_safetensors(path).metadata.at("mode"), std::to_string(mode));
    EXPECT_EQ(mode_of(path), mode) << std::oct << "replacing a file of mode 0" << mode;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});

  const std::string link = dir.file("latest.safetensors");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(::symlink("model.safetensors", link.c_str()), 0);
  save_safetensors(link, t, {{"mode", "via link"}});
  EXPECT_FALSE(fs::is_symlink(link)) << "the link is replaced by a regular file";
  EXPECT_EQ(mode_of(link), 0666 & ~mask) << "a new file: the target's mode is not the link's";
  EXPECT_EQ(load_safetensors(link).metadata.at("mode"), "via link");
  EXPECT_EQ(load_safetensors(path).metadata.at("mode"), std::to_string(0604)) << "the target is left as it was";
  EXPECT_EQ(mode_of(path), 0600);
}

TEST(Checkpoint, AWriteOfNothingOrAFullDiskFailsClearlyAndKeepsTheOldFile) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors old_t = random_tensors(g);
  save_safetensors(path, old_t, {{"version", "old"}});
  const NamedTensors new_t{{"w", Tensor::randn({50, 50}, g)}};
  HookReset reset;
  const auto expect_refusal = [&](const std::string& what) {
    try {
      save_safetensors(path, new_t, {{"version", "new"}});
      ADD_FAILURE() << "no error (expected '" << what << "')";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
    const SafeTensors back = load_safetensors(path);
    EXPECT_EQ(back.metadata.at("version"), "old");
    expect_same(old_t, back.tensors);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"}) << "the temporary file is removed";
  };
  // write(2) returning 0 forever would never finish: it is an error, not a retry. errno means
  // nothing then; a stale EINTR in it must not be taken for an interruption.
  int64_t zero_calls = 0;
  detail::set_atomic_write_function([&](int, const void*, size_t) -> ssize_t {
    if (++zero_calls > 1000) throw Error("the checkpoint writer retries a write of 0 bytes");
    errno = EINTR;
    return 0;
  });
  expect_refusal("write failed after 0 bytes: no bytes written");
  EXPECT_EQ(zero_calls, 1);
  // The disk fills up after 100 bytes.
  size_t room = 100;
  detail::set_atomic_write_function([&](int fd, const void* data, size_t n) -> ssize_t {
    if (room == 0) {
      errno = ENOSPC;
      return -1;
    }
    const ssize_t w = ::write(fd, data, std::min(n, room));
    room -= static_cast<size_t>(w);
    return w;
  });
  expect_refusal("write failed after 100 bytes: " + std::string(std::strerror(ENOSPC)));
}

TEST(Checkpoint, FailureMidWriteLeavesThePreviousFileIntact) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors old_t = random_tensors(g);
  save_safetensors(path, old_t, {{"version", "old"}});
  const NamedTensors new_t{{"big", Tensor::randn({600, 1000}, g)}};  // 2.4 MB: written in 3 chunks
  const size_t total = serialize_safetensors(new_t).size();
  HookReset reset;
  // Fail after a random number of bytes, at least once in the header and once in the data.
  for (size_t fail_after : {size_t(1), size_t(1) + g.below(total - 1), total - 1}) {
    detail::set_atomic_write_hook([fail_after](size_t written) {
      if (written >= fail_after) throw Error("injected failure");
    });
    EXPECT_THROW(save_safetensors(path, new_t, {{"version", "new"}}), Error) << fail_after;
    const SafeTensors back = load_safetensors(path);
    EXPECT_EQ(back.metadata.at("version"), "old");
    expect_same(old_t, back.tensors);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"}) << "the temporary file is removed";
  }
  detail::set_atomic_write_hook({});
  save_safetensors(path, new_t, {{"version", "new"}});
  EXPECT_EQ(load_safetensors(path).metadata.at("version"), "new");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(Checkpoint, KilledWriterLeavesThePreviousFileIntact) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const NamedTensors old_t = random_tensors(g);
  save_safetensors(path, old_t, {{"version", "old"}});
  const NamedTensors new_t{{"big", Tensor::randn({1000, 1000}, g)}};  // 4 MB
  const size_t stop_at = (size_t(1) << 20) + g.below(size_t(2) << 20);  // somewhere in the data

  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The writer: it tells the parent once `stop_at` bytes are on disk, then waits to be killed.
    ::close(pipefd[0]);
    try {
      detail::set_atomic_write_hook([&](size_t written) {
        if (written < stop_at) return;
        const char c = 'x';
        if (::write(pipefd[1], &c, 1) != 1) ::_exit(3);
        for (;;) ::pause();
      });
      save_safetensors(path, new_t, {{"version", "new"}});
    } catch (...) {
    }
    ::_exit(2);  // only reached if the hook never fired
  }
  ::close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1) << "the writer exited before reaching " << stop_at << " bytes";
  ::close(pipefd[0]);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  const SafeTensors back = load_safetensors(path);
  EXPECT_EQ(back.metadata.at("version"), "old");
  expect_same(old_t, back.tensors);
  // The killed writer's partial temporary file is all that is left of it, named after the target.
  const auto entries = dir.entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].rfind(".ckpt.safetensors.tmp.", 0), 0u) << entries[0];
  EXPECT_LT(fs::file_size(dir.file(entries[0])), serialize_safetensors(new_t).size());
  // ... and the next save still works.
  save_safetensors(path, new_t, {{"version", "new"}});
  EXPECT_EQ(load_safetensors(path).metadata.at("version"), "new");
}

// ---- model and optimizer checkpoints ----------------------------------------------------------------------

std::shared_ptr<nn::Sequential> small_mlp(Generator& g, int64_t hidden = 32) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, hidden, g), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(hidden, 5, g)});
}

// A few SGD steps on random data, so that the optimizer has momentum buffers.
void train_steps(nn::Module& model, optim::Optimizer& opt, Generator& g, int steps) {
  for (int i = 0; i < steps; ++i) {
    const Tensor x = Tensor::randn({8, 16}, g);
    std::vector<int32_t> y(8);
    for (auto& v : y) v = static_cast<int32_t>(g.below(5));
    opt.zero_grad();
    cross_entropy(model(x), Tensor::from_vector(y, {8})).backward();
    opt.step();
  }
}

std::string load_error(const std::string& path, nn::Module& m, optim::Optimizer* opt = nullptr) {
  try {
    load_checkpoint(path, m, opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Checkpoint, ModelAndOptimizerRoundTripIntoTheSameHandles) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  auto a = small_mlp(g);
  optim::SGD sa(a->parameters(), {.lr = 0.05, .momentum = 0.9});
  train_steps(*a, sa, g, 3);
  save_checkpoint(dir.file("c.safetensors"), *a, &sa, {{"epoch", "3"}});

  const SafeTensors raw = load_safetensors(dir.file("c.safetensors"));
  EXPECT_TRUE(raw.contains("model.0.weight"));
  EXPECT_TRUE(raw.contains("model.2.bias"));
  EXPECT_TRUE(raw.contains("optim.momentum.0"));
  EXPECT_EQ(raw.metadata.at("optim.type"), "SGD");
  EXPECT_EQ(raw.metadata.at("optim.steps"), "3");
  EXPECT_EQ(raw.metadata.at("user.epoch"), "3");
  EXPECT_EQ(raw.metadata.at("halfling.format"), "checkpoint");
  EXPECT_EQ(raw.metadata.at("halfling.version"), "1");

  auto b = small_mlp(g);  // different initial values
  const Tensor handle = b->parameters()[0];
  optim::SGD sb(b->parameters(), {.lr = 1.0, .momentum = 0.9});
  const Checkpoint c = load_checkpoint(dir.file("c.safetensors"), *b, &sb);
  EXPECT_EQ(c.metadata, (StringMap{{"epoch", "3"}}));
  EXPECT_TRUE(c.sections.empty());
  EXPECT_EQ(handle.impl(), b->parameters()[0].impl()) << "parameters are filled in place";
  EXPECT_EQ(handle.to_vector(), a->parameters()[0].to_vector());
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_EQ(bytes_of(a->parameters()[i]), bytes_of(b->parameters()[i]));
    EXPECT_EQ(bytes_of(sa.momentum_buffers()[i]), bytes_of(sb.momentum_buffers()[i]));
  }
  EXPECT_EQ(sb.steps(), 3);
  EXPECT_EQ(sb.lr(), 0.05);
  EXPECT_TRUE(b->parameters()[0].requires_grad());

  // Weights only: the optimizer state in the file is not needed.
  auto w = small_mlp(g);
  load_checkpoint(dir.file("c.safetensors"), *w);
  EXPECT_EQ(bytes_of(w->parameters()[3]), bytes_of(a->parameters()[3]));
}

TEST(Checkpoint, MismatchesAreNamedAndChangeNothing) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  auto a = small_mlp(g);
  save_checkpoint(dir.file("m.safetensors"), *a);

  // Another architecture: shapes differ.
  auto wide = small_mlp(g, 64);
  const auto before = bytes_of(wide->parameters()[0]);
  std::string msg = load_error(dir.file("m.safetensors"), *wide);
  EXPECT_EQ(msg.rfind("load_checkpoint(" + dir.file("m.safetensors") + "): ", 0), 0u) << msg;
  EXPECT_NE(msg.find("'model.0.weight' has shape [32, 16] in the file but [64, 16] in the model"), std::string::npos)
      << msg;
  EXPECT_EQ(bytes_of(wide->parameters()[0]), before) << "a failed load changes nothing";

  // Missing and unexpected parameters.
  auto deeper = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 32, g), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5, g),
      std::make_shared<nn::Linear>(5, 5, g)});
  msg = load_error(dir.file("m.safetensors"), *deeper);
  EXPECT_NE(msg.find("missing model.3.weight, model.3.bias"), std::string::npos) << msg;
  auto no_bias = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 32, g), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5, g, false)});
  msg = load_error(dir.file("m.safetensors"), *no_bias);
  EXPECT_NE(msg.find("unexpected model.2.bias"), std::string::npos) << msg;

  // dtypes: narrowing is refused, exact widening is done.
  auto half_model = small_mlp(g);
  half_model->to(DType::f16);
  msg = load_error(dir.file("m.safetensors"), *half_model);
  EXPECT_NE(msg.find("'model.0.weight' is f32 in the file but f16 in the model"), std::string::npos) << msg;
  save_checkpoint(dir.file("h.safetensors"), *half_model);
  auto f32_model = small_mlp(g);
  load_checkpoint(dir.file("h.safetensors"), *f32_model);
  EXPECT_EQ(f32_model->parameters()[0].dtype(), DType::f32);
  EXPECT_EQ(f32_model->parameters()[0].to_vector(), half_model->parameters()[0].to_vector());

  // An optimizer but no optimizer state in the file.
  auto b = small_mlp(g);
  optim::SGD sb(b->parameters(), {.lr = 0.1, .momentum = 0.9});
  msg = load_error(dir.file("m.safetensors"), *b, &sb);
  EXPECT_NE(msg.find("holds no optimizer state"), std::string::npos) << msg;

  // Another version of the checkpoint format is refused, by both numbers. A file without a version
  // (one written by another tool, with the same tensor names) is read as this version.
  {
    SafeTensors f = load_safetensors(dir.file("m.safetensors"));
    f.metadata["halfling.version"] = "2";
    save_safetensors(dir.file("v2.safetensors"), f.tensors, f.metadata);
    auto v = small_mlp(g);
    const auto v_before = bytes_of(v->parameters()[0]);
    msg = load_error(dir.file("v2.safetensors"), *v);
    EXPECT_NE(msg.find("checkpoint format version 2 is not supported (this halfling reads version 1)"),
              std::string::npos)
        << msg;
    EXPECT_EQ(bytes_of(v->parameters()[0]), v_before) << "a refused version changes nothing";
    f.metadata.erase("halfling.version");
    save_safetensors(dir.file("unversioned.safetensors"), f.tensors, f.metadata);
    load_checkpoint(dir.file("unversioned.safetensors"), *v);
    EXPECT_EQ(bytes_of(v->parameters()[0]), bytes_of(a->parameters()[0]));
  }

  // Tensors outside every section.
  save_safetensors(dir.file("odd.safetensors"), {{"model.0.weight", a->parameters()[0]}, {"stray", Tensor::zeros({1})}});
  msg = load_error(dir.file("odd.safetensors"), *b);
  EXPECT_NE(msg.find("unexpected tensors stray"), std::string::npos) << msg;

  // Optimizer tensors without the optimizer's metadata: the file holds optimizer state, and it does
  // not fit (it is not "no optimizer state").
  optim::SGD sa(a->parameters(), {.lr = 0.1, .momentum = 0.9});
  train_steps(*a, sa, g, 1);
  save_checkpoint(dir.file("o.safetensors"), *a, &sa);
  const SafeTensors o = load_safetensors(dir.file("o.safetensors"));
  StringMap meta;
  for (const auto& [k, v] : o.metadata)
    if (k.rfind("optim.", 0) != 0) meta[k] = v;
  save_safetensors(dir.file("o.safetensors"), o.tensors, meta);
  msg = load_error(dir.file("o.safetensors"), *b, &sb);
  EXPECT_NE(msg.find("optimizer state does not fit"), std::string::npos) << msg;
}

TEST(Checkpoint, BadOptimizerStateRollsTheModelBack) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  auto a = small_mlp(g);
  optim::SGD sa(a->parameters(), {.lr = 0.05, .momentum = 0.9});
  train_steps(*a, sa, g, 2);
  save_checkpoint(dir.file("good.safetensors"), *a, &sa);
  // Corrupt the optimizer state only, three ways: a momentum buffer of the wrong shape, a step count
  // and a learning rate that are not numbers (the state's numbers are parsed only after the model
  // was loaded, so they must roll it back too).
  struct Corruption {
    std::string what, tensor, key, value, expect;
  };
  const std::vector<Corruption> corruptions{{"a momentum buffer's shape", "optim.momentum.1", "", "", "momentum.1"},
                                            {"the step count", "", "optim.steps", "2x", "'steps'"},
                                            {"the learning rate", "", "optim.lr", "nan", "'lr'"}};
  for (const Corruption& c : corruptions) {
    SCOPED_TRACE(c.what);
    SafeTensors f = load_safetensors(dir.file("good.safetensors"));
    for (auto& [name, t] : f.tensors)
      if (name == c.tensor) t = Tensor::zeros({3});
    if (!c.key.empty()) f.metadata[c.key] = c.value;
    save_safetensors(dir.file("bad.safetensors"), f.tensors, f.metadata);

    auto b = small_mlp(g);
    optim::SGD sb(b->parameters(), {.lr = 0.2, .momentum = 0.9});
    train_steps(*b, sb, g, 1);
    std::vector<std::vector<uint8_t>> params_before, momentum_before;
    for (const auto& p : b->parameters()) params_before.push_back(bytes_of(p));
    for (const auto& m : sb.momentum_buffers()) momentum_before.push_back(bytes_of(m));
    const std::string msg = load_error(dir.file("bad.safetensors"), *b, &sb);
    EXPECT_NE(msg.find("optimizer state does not fit"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    for (size_t i = 0; i < params_before.size(); ++i) {
      EXPECT_EQ(bytes_of(b->parameters()[i]), params_before[i]) << i;
      EXPECT_EQ(bytes_of(sb.momentum_buffers()[i]), momentum_before[i]) << i;
    }
    EXPECT_EQ(sb.steps(), 1);
    EXPECT_EQ(sb.lr(), 0.2);
  }
}

TEST(Checkpoint, ExtraSectionsRoundTrip) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  auto a = small_mlp(g);
  const double scale = std::ldexp(1.0, static_cast<int>(g.below(24)));
  CheckpointSection scaler;
  scaler.tensors.emplace_back("scale", Tensor::scalar(scale));
  scaler.meta["growth_tracker"] = std::to_string(g.below(2000));
  scaler.meta["kind"] = "dynamic";
  CheckpointSection data;
  data.meta["epoch"] = "7";
  CheckpointSection ema;  // a name with a 9, in the middle of the list "data_loader,ema9,scaler"
  ema.meta["decay"] = "0.999";
  save_checkpoint(dir.file("s.safetensors"), *a, nullptr, {{"run", "x"}},
                  {{"scaler", scaler}, {"data_loader", data}, {"ema9", ema}});
  EXPECT_TRUE(load_safetensors(dir.file("s.safetensors")).contains("scaler.scale"));
  EXPECT_EQ(load_safetensors(dir.file("s.safetensors")).metadata.at("halfling.sections"), "data_loader,ema9,scaler");

  auto b = small_mlp(g);
  const Checkpoint c = load_checkpoint(dir.file("s.safetensors"), *b);
  ASSERT_EQ(c.sections.size(), 3u);
  EXPECT_EQ(c.sections.at("ema9").meta, ema.meta);
  const CheckpointSection& s = c.sections.at("scaler");
  ASSERT_EQ(s.tensors.size(), 1u);
  EXPECT_EQ(s.tensors[0].first, "scale");
  EXPECT_EQ(s.tensors[0].second.item(), scale);
  EXPECT_EQ(s.meta, scaler.meta);
  EXPECT_EQ(c.sections.at("data_loader").meta, data.meta);
  EXPECT_TRUE(c.sections.at("data_loader").tensors.empty());
  EXPECT_EQ(c.metadata, (StringMap{{"run", "x"}}));

  for (const std::string bad : {"model", "optim", "user", "halfling", "Scaler", "a.b", ""}) {
    EXPECT_THROW(save_checkpoint(dir.file("bad.safetensors"), *a, nullptr, {}, {{bad, scaler}}), Error) << bad;
  }
  EXPECT_FALSE(fs::exists(dir.file("bad.safetensors")));

  // An empty list of sections (another writer's way of saying "none") is no sections.
  save_checkpoint(dir.file("none.safetensors"), *a);
  SafeTensors f = load_safetensors(dir.file("none.safetensors"));
  f.metadata["halfling.sections"] = "";
  save_safetensors(dir.file("none.safetensors"), f.tensors, f.metadata);
  EXPECT_TRUE(load_checkpoint(dir.file("none.safetensors"), *b).sections.empty());
}

TEST(Checkpoint, LoadParametersFromAPyTorchStyleStateDict) {
  // safetensors.torch.save_file(model.state_dict()) names tensors "0.weight" etc., with no prefix.
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  auto a = small_mlp(g);
  save_safetensors(dir.file("sd.safetensors"), a->named_parameters(), {{"format", "pt"}});
  auto b = small_mlp(g);
  load_parameters(load_safetensors(dir.file("sd.safetensors")), *b, "", "sd.safetensors");
  for (size_t i = 0; i < a->parameters().size(); ++i) EXPECT_EQ(bytes_of(a->parameters()[i]), bytes_of(b->parameters()[i]));
}

// PyTorch's BatchNorm keeps an int64 step counter, num_batches_tracked, in its state_dict. halfling
// reads no I64 tensor, and the message for this one says what to do (docs/checkpoints.md); another I64
// tensor gets the plain message.
TEST(Checkpoint, PyTorchsBatchNormCounterIsRefusedWithTheWayOut) {
  const std::vector<uint8_t> eight(8, 0);
  const std::string counter = parse_error(
      make_file(R"({"model.1.num_batches_tracked": {"dtype":"I64","shape":[],"data_offsets":[0,8]}})", eight));
  EXPECT_EQ(counter.rfind("load_safetensors(bad.safetensors): tensor 'model.1.num_batches_tracked': unsupported "
                          "dtype 'I64' (halfling reads F32, F16, F64 and I32); this is PyTorch's BatchNorm step "
                          "counter, which halfling does not keep: leave the *.num_batches_tracked keys out when "
                          "saving (docs/checkpoints.md",
                          0),
            0u)
      << counter;
  const std::string other =
      parse_error(make_file(R"({"steps": {"dtype":"I64","shape":[],"data_offsets":[0,8]}})", eight));
  EXPECT_EQ(other, "load_safetensors(bad.safetensors): tensor 'steps': unsupported dtype 'I64' (halfling reads F32, "
                   "F16, F64 and I32)");
  // The counter of a BatchNorm saved alone (no module path before the name) is the same counter.
  const std::string alone =
      parse_error(make_file(R"({"num_batches_tracked": {"dtype":"I64","shape":[],"data_offsets":[0,8]}})", eight));
  EXPECT_NE(alone.find("this is PyTorch's BatchNorm step counter"), std::string::npos) << alone;
  const std::string shorter =
      parse_error(make_file(R"({"batches_tracked": {"dtype":"I64","shape":[],"data_offsets":[0,8]}})", eight));
  EXPECT_EQ(shorter.find("BatchNorm"), std::string::npos) << shorter;
}

// halfling.format is written as "checkpoint". A file that says it is something else is refused, naming
// the file and the value; a file without the key (written by another tool with the same names) loads.
TEST(Checkpoint, AnotherFormatIsRefusedAndNoneIsAccepted) {
  Generator g(hl::test::fresh_seed());
  TempDir dir;
  auto a = small_mlp(g);
  NamedTensors tensors;
  for (const auto& [name, p] : a->named_state()) tensors.emplace_back("model." + name, p);
  const std::string other = dir.file("other.safetensors");
  save_safetensors(other, tensors, {{"halfling.format", "not-a-checkpoint"}});
  auto b = small_mlp(g);
  const auto before = bytes_of(b->parameters()[0]);
  EXPECT_EQ(load_error(other, *b), "load_checkpoint(" + other + "): halfling.format is 'not-a-checkpoint', not "
                                   "'checkpoint': this file is not a halfling training checkpoint");
  EXPECT_EQ(bytes_of(b->parameters()[0]), before) << "a refused file changes nothing";
  const std::string plain = dir.file("plain.safetensors");
  save_safetensors(plain, tensors);
  EXPECT_EQ(load_error(plain, *b), "no error");
  EXPECT_EQ(bytes_of(b->parameters()[0]), bytes_of(a->parameters()[0]));
}

// ---- exact resume -------------------------------------------------------------------------------------------

// Train 10 steps straight; and train 4, checkpoint, load into a fresh model and optimizer, train 6
// more. The data stream is the same in both runs, so every loss must agree bit for bit: weights,
// momentum buffers, the step count and the learning rate all come back from the file.
TEST(Checkpoint, ResumeIsBitExact) {
  const uint64_t seed = hl::test::fresh_seed();
  TempDir dir;
  const int total = 10, split = 4;
  // Fresh random data, drawn once and shared by both runs.
  Generator data_gen(seed + 1);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < total; ++i) {
    xs.push_back(Tensor::randn({8, 16}, data_gen));
    std::vector<int32_t> y(8);
    for (auto& v : y) v = static_cast<int32_t>(data_gen.below(5));
    ys.push_back(Tensor::from_vector(y, {8}));
  }
  const optim::SGD::Options opts{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3};
  auto step = [&](nn::Module& m, optim::Optimizer& opt, int i) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m(xs[static_cast<size_t>(i)]), ys[static_cast<size_t>(i)]);
    loss.backward();
    opt.step();
    return loss.item();
  };

  Generator ga(seed);
  auto a = small_mlp(ga);
  optim::SGD sa(a->parameters(), opts);
  std::vector<double> straight;
  for (int i = 0; i < total; ++i) straight.push_back(step(*a, sa, i));

  Generator gb(seed);
  auto b = small_mlp(gb);
  optim::SGD sb(b->parameters(), opts);
  std::vector<double> resumed;
  for (int i = 0; i < split; ++i) resumed.push_back(step(*b, sb, i));
  save_checkpoint(dir.file("resume.safetensors"), *b, &sb, {{"step", std::to_string(split)}});

  Generator gc(seed + 2);  // a different initialization, which the checkpoint must overwrite
  auto c = small_mlp(gc);
  optim::SGD sc(c->parameters(), {.lr = 0.5, .momentum = 0.9, .weight_decay = 1e-3});
  const Checkpoint ck = load_checkpoint(dir.file("resume.safetensors"), *c, &sc);
  ASSERT_EQ(std::stoi(ck.metadata.at("step")), split);
  for (int i = split; i < total; ++i) resumed.push_back(step(*c, sc, i));

  ASSERT_EQ(resumed.size(), straight.size());
  for (int i = 0; i < total; ++i) EXPECT_EQ(resumed[static_cast<size_t>(i)], straight[static_cast<size_t>(i)]) << "step " << i;
  for (size_t i = 0; i < a->parameters().size(); ++i) EXPECT_EQ(bytes_of(a->parameters()[i]), bytes_of(c->parameters()[i]));
  EXPECT_EQ(sc.steps(), total);
}

}  // namespace
