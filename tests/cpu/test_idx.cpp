// The IDX reader and the data set loader: every malformed file must become a DataError that names the
// file and the problem, never a crash or a silently wrong tensor.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
// zlib writes the .gz fixtures where the build links it (LENET_TEST_CAN_WRITE_GZIP, set by CMake with the
// reader's LENET_HAVE_ZLIB: a zlib.h without its library must not be taken). Without it the build cannot
// read gzip either, and those tests skip.
#ifdef LENET_TEST_CAN_WRITE_GZIP
#include <zlib.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "byte_files.hpp"
#include "io/dataset.hpp"
#include "io/idx.hpp"

namespace fs = std::filesystem;
using lenet::io::DataError;
using lenet::testing::Bytes;
using lenet::testing::idx_images;
using lenet::testing::idx_labels;
using lenet::testing::pixel_value;
using lenet::testing::put_be32;

namespace {

// Runs `f`, requires a DataError, and returns its message so callers can check what it names.
std::string data_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected lenet::io::DataError";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lenet_test_idx_" + std::to_string(::getpid()) + "_" + info->name() + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_raw(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    lenet::testing::write_bytes(path, bytes);
    return path;
  }

  std::string write_gz(const std::string& name, [[maybe_unused]] const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
#ifdef LENET_TEST_CAN_WRITE_GZIP
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
#else
    ADD_FAILURE() << "write_gz needs zlib, which this build has not: its test must skip without gzip support";
#endif
    return path;
  }

  fs::path dir_;
};

void expect_images_exact(const lenet::io::IdxImages& img, uint32_t count) {
  ASSERT_EQ(img.count, count);
  ASSERT_EQ(img.pixels.size(), size_t{count} * 784);
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t p = 0; p < 784; ++p) ASSERT_EQ(img.pixels[i * 784 + p], pixel_value(i, p)) << i << "," << p;
}

// ---- good files -------------------------------------------------------------------------------------

TEST_F(IdxFiles, ReadsRawImagesAndLabelsExactly) {
  expect_images_exact(lenet::io::read_idx_images(write_raw("img", idx_images(3))), 3);
  const Bytes labels = {0, 9, 4, 1, 7};
  EXPECT_EQ(lenet::io::read_idx_labels(write_raw("lab", idx_labels(labels))), labels);
}

TEST_F(IdxFiles, ReadsGzipImagesAndLabelsExactly) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  expect_images_exact(lenet::io::read_idx_images(write_gz("img.gz", idx_images(4))), 4);
  const Bytes labels = {3, 3, 0, 9};
  EXPECT_EQ(lenet::io::read_idx_labels(write_gz("lab.gz", idx_labels(labels))), labels);
}

TEST_F(IdxFiles, LoadSplitPairsImagesWithLabels) {
  const auto split = lenet::io::load_split(write_raw("img", idx_images(2)), write_raw("lab", idx_labels({5, 8})));
  EXPECT_EQ(split.size(), 2u);
  EXPECT_EQ(split.labels, (Bytes{5, 8}));
  EXPECT_EQ(split.pixels[784 + 10], pixel_value(1, 10));
}

// ---- corrupt files: each must name the file and the problem -------------------------------------------

// The fingerprint a checkpoint records is FNV-1a (64 bits) over the pixels, then the labels: the
// published test vectors pin the algorithm, and a changed pixel or label, or another order, changes it.
TEST(SplitFingerprint, IsFnv1aOverPixelsThenLabels) {
  lenet::io::Split s;
  EXPECT_EQ(s.fingerprint(), 0xcbf29ce484222325ull);  // FNV-1a 64 of nothing: the offset basis
  s.labels = {'a'};
  EXPECT_EQ(s.fingerprint(), 0xaf63dc4c8601ec8cull);  // of "a"
  s.pixels = {'f', 'o', 'o'};
  s.labels = {'b', 'a', 'r'};
  EXPECT_EQ(s.fingerprint(), 0x85944171f73967e8ull);  // of "foobar"
  lenet::io::Split a;
  a.pixels.assign(2 * 784, 7);
  a.labels = {1, 2};
  const uint64_t base = a.fingerprint();
  lenet::io::Split b = a;
  EXPECT_EQ(b.fingerprint(), base);
  b.pixels[783] = 8;
  EXPECT_NE(b.fingerprint(), base);
  b = a;
  b.labels = {2, 1};
  EXPECT_NE(b.fingerprint(), base);
}

TEST_F(IdxFiles, WrongMagicIsRejected) {
  const std::string img = write_raw("img", idx_images(1, 28, 28, 0x801));
  std::string msg = data_error_of([&] { lenet::io::read_idx_images(img); });
  EXPECT_CONTAINS(msg, img);
  EXPECT_CONTAINS(msg, "bad magic number 0x00000801, expected 0x00000803 (IDX images)");
  const std::string lab = write_raw("lab", idx_labels({1}, 0x803));
  msg = data_error_of([&] { lenet::io::read_idx_labels(lab); });
  EXPECT_CONTAINS(msg, lab);
  EXPECT_CONTAINS(msg, "bad magic number 0x00000803, expected 0x00000801 (IDX labels)");
  // A first byte of 0x1f without gzip's second (0x8b) is no gzip file: its magic number is what is wrong.
  const std::string odd = write_raw("img-1f", idx_images(1, 28, 28, 0x1f000803));
  EXPECT_CONTAINS(data_error_of([&] { lenet::io::read_idx_images(odd); }), "bad magic number 0x1f000803");
}

TEST_F(IdxFiles, TruncatedHeaderIsRejected) {
  // Every length short of a whole header, down to one byte: below 4 the magic number is cut too.
  auto expect_truncated = [&](const Bytes& whole, size_t header, void (*read)(const std::string&)) {
    for (size_t n = 1; n < header; ++n) {
      const std::string path = write_raw("idx", Bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n)));
      const std::string msg = data_error_of([&] { read(path); });
      EXPECT_CONTAINS(msg, path);
      EXPECT_CONTAINS(msg, n < 4 ? "truncated header (" + std::to_string(n) + " bytes)"
                                 : "truncated header (" + std::to_string(n) + " of " + std::to_string(header) + " bytes)");
    }
  };
  expect_truncated(idx_images(1), 16, [](const std::string& p) { lenet::io::read_idx_images(p); });
  expect_truncated(idx_labels({3}), 8, [](const std::string& p) { lenet::io::read_idx_labels(p); });
}

TEST_F(IdxFiles, CountsAboveSixteenBitsAreRead) {
  const Bytes labels(65537, 7);
  EXPECT_EQ(lenet::io::read_idx_labels(write_raw("lab", idx_labels(labels))).size(), 65537u);
}

TEST_F(IdxFiles, TruncatedDataIsRejected) {
  Bytes b = idx_images(2);
  b.pop_back();
  const std::string path = write_raw("img", b);
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  // 16 header bytes and 2 images of 784 pixels, less the byte cut.
  EXPECT_CONTAINS(msg, "truncated data: header promises 2 items (1584 bytes) but the file has 1583 bytes");
}

TEST_F(IdxFiles, TrailingBytesAreRejected) {
  Bytes b = idx_labels({1, 2});
  b.push_back(3);
  const std::string path = write_raw("lab", b);
  const std::string msg = data_error_of([&] { lenet::io::read_idx_labels(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, ": 1 unexpected bytes after 2 items");
}

TEST_F(IdxFiles, WrongDimensionsAreRejected) {
  const std::string path = write_raw("img", idx_images(1, 27, 28));
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "27x28");
  EXPECT_CONTAINS(msg, "expected 28x28");
  // The columns too (as many pixels per image as 28x28 would hold, so the length check cannot catch it).
  const std::string cols = write_raw("img-cols", idx_images(1, 28, 27));
  EXPECT_CONTAINS(data_error_of([&] { lenet::io::read_idx_images(cols); }), "28x27");
}

TEST_F(IdxFiles, CountMismatchBetweenImagesAndLabelsIsRejected) {
  const std::string img = write_raw("img", idx_images(3));
  const std::string lab = write_raw("lab", idx_labels({1, 2, 3, 4}));
  const std::string msg = data_error_of([&] { lenet::io::load_split(img, lab); });
  EXPECT_CONTAINS(msg, img);
  EXPECT_CONTAINS(msg, lab);
  EXPECT_CONTAINS(msg, "3 images");
  EXPECT_CONTAINS(msg, "4 labels");
}

TEST_F(IdxFiles, EmptySplitIsRejected) {
  // A zero-count file is well formed, but training on it would divide by zero later.
  const std::string img = write_raw("img", idx_images(0));
  EXPECT_EQ(lenet::io::read_idx_images(img).count, 0u);
  const std::string msg = data_error_of([&] { lenet::io::load_split(img, write_raw("lab", idx_labels({}))); });
  EXPECT_CONTAINS(msg, img);
  EXPECT_CONTAINS(msg, "no examples");
}

TEST_F(IdxFiles, LabelOutsideZeroToNineIsRejected) {
  const std::string path = write_raw("lab", idx_labels({0, 9, 10}));
  const std::string msg = data_error_of([&] { lenet::io::read_idx_labels(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "label 10");
  EXPECT_CONTAINS(msg, "index 2");
}

TEST_F(IdxFiles, EmptyFileIsRejected) {
  const std::string path = write_raw("img", {});
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "empty");
}

TEST_F(IdxFiles, GzNameWithoutGzipContentIsRejected) {
  const std::string path = write_raw("img.gz", idx_images(1));
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "not a gzip");
}

// A build without zlib (CI's clang stage) says what to do with a gzip file instead of misreading it.
TEST_F(IdxFiles, GzipWithoutZlibSaysToGunzipIt) {
  if (lenet::io::gzip_supported()) GTEST_SKIP() << "built with zlib, which reads gzip";
  // A gzip header (magic 1f 8b, deflate, OS Unix) needs no zlib to write.
  const std::string path = write_raw("img.gz", Bytes{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0x03});
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "this build has no zlib: gunzip it first");
}

TEST_F(IdxFiles, TruncatedGzipIsRejected) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  Bytes gz = lenet::testing::read_bytes(write_gz("full.gz", idx_images(5)));
  gz.resize(gz.size() / 2);
  const std::string path = write_raw("img.gz", gz);
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "truncated gzip");
}

// The gzip magic alone is a gzip file cut short, not a raw file named .gz.
TEST_F(IdxFiles, GzipMagicAloneIsATruncatedGzipFile) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  const std::string path = write_raw("img.gz", Bytes{0x1f, 0x8b});
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "truncated gzip");
}

TEST_F(IdxFiles, CorruptGzipIsRejected) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  Bytes gz = lenet::testing::read_bytes(write_gz("full.gz", idx_images(5)));
  ASSERT_GT(gz.size(), 64u);
  // Inverting a run of deflate bytes (past the 10-byte gzip header) breaks the Huffman codes or the CRC.
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 8; ++i) gz[i] ^= 0xff;
  const std::string path = write_raw("img.gz", gz);
  const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "corrupt gzip");
}

// Several gzip members one after another (`cat a.gz b.gz`) hold their data joined, as gzip -d reads them.
TEST_F(IdxFiles, GzipMembersAreReadOneAfterAnother) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  const Bytes labels = {1, 2, 3, 4, 5, 6, 7};
  const Bytes whole = idx_labels(labels);
  const size_t cut = 10;  // inside the labels, past the 8-byte header
  Bytes gz = lenet::testing::read_bytes(write_gz("a.gz", Bytes(whole.begin(), whole.begin() + cut)));
  const Bytes second = lenet::testing::read_bytes(write_gz("b.gz", Bytes(whole.begin() + cut, whole.end())));
  gz.insert(gz.end(), second.begin(), second.end());
  EXPECT_EQ(lenet::io::read_idx_labels(write_raw("lab.gz", gz)), labels);
  // A second member of its magic number alone is a member cut short, not junk after the first.
  const Bytes first = lenet::testing::read_bytes(write_gz("c.gz", whole));
  Bytes magic_only = first;
  magic_only.insert(magic_only.end(), {0x1f, 0x8b});
  const std::string magic_path = write_raw("magic.gz", magic_only);
  EXPECT_CONTAINS(data_error_of([&] { lenet::io::read_idx_labels(magic_path); }), "truncated gzip");
  // A member cut short is still a truncated file.
  gz.resize(gz.size() - 4);
  EXPECT_CONTAINS(data_error_of([&] { lenet::io::read_idx_labels(write_raw("cut.gz", gz)); }), "truncated gzip");
}

// The reader sizes its buffer from the last member's trailer: a first member larger than the last makes
// it grow (here from 1 MiB to 2 and 4) and keep every byte; a trailer that lies about the length is
// refused by zlib's check, whatever buffer it sized.
TEST_F(IdxFiles, GzipTrailerSizesTheBufferButNeverTheData) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  const uint32_t count = 4000;  // 3.1 MB of pixels
  const Bytes whole = idx_images(count);
  const size_t cut = whole.size() - 100;
  Bytes gz = lenet::testing::read_bytes(write_gz("a.gz", Bytes(whole.begin(), whole.begin() + cut)));
  const Bytes last = lenet::testing::read_bytes(write_gz("b.gz", Bytes(whole.begin() + cut, whole.end())));
  gz.insert(gz.end(), last.begin(), last.end());
  expect_images_exact(lenet::io::read_idx_images(write_raw("img.gz", gz)), count);
  for (const int delta : {-1, 1}) {
    Bytes lying = lenet::testing::read_bytes(write_gz("c.gz", whole));
    lying[lying.size() - 4] = static_cast<uint8_t>(lying[lying.size() - 4] + delta);  // ISIZE's low byte
    const std::string path = write_raw("lying.gz", lying);
    const std::string msg = data_error_of([&] { lenet::io::read_idx_images(path); });
    EXPECT_CONTAINS(msg, path);
    EXPECT_CONTAINS(msg, "corrupt gzip data (incorrect length check)");  // zlib's reason
  }
}

// The kernel's peak resident set of this process (VmHWM) in bytes, and its reset to the present size.
size_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
  ADD_FAILURE() << "no VmHWM in /proc/self/status";
  return 0;
}
bool reset_peak_resident() {  // "5" resets VmHWM (proc(5), /proc/pid/clear_refs, Linux 4.0 on)
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5" << std::flush;
  return clear.good();
}

// The trailer's size is taken only once the stream has filled its first MiB: a short file of junk behind
// a gzip header that claims 4 GiB is refused without first allocating (and zeroing) the 256 MiB bound.
TEST_F(IdxFiles, GzipTrailerIsTrustedOnlyOnceTheStreamHasFilledItsFirstMiB) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  Bytes junk = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};  // a gzip header, deflate, no flags
  std::mt19937 rng(7);
  while (junk.size() < (size_t{256} << 10)) junk.push_back(static_cast<uint8_t>(rng()));
  for (int i = 0; i < 4; ++i) junk.push_back(0xff);  // ISIZE 2^32 - 1
  const std::string path = write_raw("junk.gz", junk);
  // Without the reset (a kernel or sandbox without clear_refs) an earlier test's peak could hide the growth.
  if (!reset_peak_resident()) GTEST_SKIP() << "/proc/self/clear_refs cannot be written here";
  const size_t before = peak_resident_bytes();
  EXPECT_CONTAINS(data_error_of([&] { lenet::io::read_idx_images(path); }), "corrupt gzip data");
  const size_t grew = peak_resident_bytes() - before;
  // Far below the 256 MiB the bound would take, and above the kernel's approximate per-CPU RSS counting.
  EXPECT_LT(grew, size_t{128} << 20) << "the peak resident set grew by " << (grew >> 20) << " MiB";
}

TEST_F(IdxFiles, JunkAfterGzipStreamIsRejected) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  Bytes gz = lenet::testing::read_bytes(write_gz("full.gz", idx_labels({1, 2})));
  gz.push_back(0);
  const std::string path = write_raw("lab.gz", gz);
  const std::string msg = data_error_of([&] { lenet::io::read_idx_labels(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, ": 1 unexpected bytes after the gzip stream");
}

// A file larger than any IDX file of the data set is refused before it is read into memory.
TEST_F(IdxFiles, FileLargerThanAnyIdxFileIsRejectedBeforeReading) {
  const fs::path path = dir_ / "huge";
  write_raw("huge", {});
  fs::resize_file(path, lenet::io::kMaxDecompressedBytes + 1);  // sparse: no disk space taken
  const std::string msg = data_error_of([&] { lenet::io::read_file_bytes(path.string()); });
  EXPECT_CONTAINS(msg, path.string());
  EXPECT_CONTAINS(msg, ": 256 MiB, larger than any IDX file");
  fs::resize_file(path, lenet::io::kMaxDecompressedBytes);  // the bound itself is read
  EXPECT_EQ(lenet::io::read_file_bytes(path.string()).size(), lenet::io::kMaxDecompressedBytes);
}

#ifdef LENET_TEST_CAN_WRITE_GZIP
// A gzip stream of `n` zero bytes, made in memory (zeros compress about a thousandfold).
Bytes gzip_of_zeros(size_t n) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  const std::vector<uint8_t> zeros(size_t{1} << 20, 0);
  Bytes out(size_t{1} << 20);
  size_t written = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    const size_t take = std::min(n, zeros.size());
    zs.next_in = const_cast<uint8_t*>(zeros.data());
    zs.avail_in = static_cast<uInt>(take);
    n -= take;
    do {
      if (written == out.size()) out.resize(out.size() * 2);
      zs.next_out = out.data() + written;
      zs.avail_out = static_cast<uInt>(out.size() - written);
      rc = deflate(&zs, n == 0 ? Z_FINISH : Z_NO_FLUSH);
      written = out.size() - zs.avail_out;
    } while (zs.avail_out == 0 || (n == 0 && rc != Z_STREAM_END));
  }
  deflateEnd(&zs);
  out.resize(written);
  return out;
}

// A small file whose trailer claims far more than deflate's 1032:1 could give it is not taken at its
// word once the first MiB is full: 1.5 MiB of zeros whose trailer says 200 MiB grows the buffer to 2 MiB,
// not 200, before zlib's length check refuses it.
TEST(GzipBound, TrailerIsCappedByDeflatesLargestRatio) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  Bytes gz = gzip_of_zeros(size_t{3} << 19);
  ASSERT_LT(gz.size() * 1032, size_t{100} << 20);
  const uint32_t claimed = uint32_t{200} << 20;
  for (int i = 0; i < 4; ++i) gz[gz.size() - 4 + i] = static_cast<uint8_t>(claimed >> (8 * i));
  if (!reset_peak_resident()) GTEST_SKIP() << "/proc/self/clear_refs cannot be written here";
  const size_t before = peak_resident_bytes();
  EXPECT_CONTAINS(data_error_of([&] { lenet::io::maybe_gunzip(std::move(gz), "lying.gz"); }), "corrupt gzip data");
  const size_t grew = peak_resident_bytes() - before;
  EXPECT_LT(grew, size_t{100} << 20) << "the peak resident set grew by " << (grew >> 20) << " MiB";
}

// The bound against decompression bombs: a stream decompressing to exactly the bound is read, one byte
// more is refused. Also where the buffer grows past the size a last member of 129 MiB gives (doubled, it
// would be 258 MiB).
TEST(GzipBound, StreamsUpToTheBoundAreReadAndOneByteMoreIsRefused) {
  if (!lenet::io::gzip_supported()) GTEST_SKIP() << "built without zlib";
  const size_t bound = lenet::io::kMaxDecompressedBytes, last = size_t{129} << 20;
  const Bytes last_member = gzip_of_zeros(last);
  for (const size_t extra : {0, 1}) {
    const std::string name = extra == 0 ? "at-bound.gz" : "bomb.gz";
    Bytes two = gzip_of_zeros(bound - last + extra);
    two.insert(two.end(), last_member.begin(), last_member.end());
    for (Bytes gz : {gzip_of_zeros(bound + extra), two}) {
      if (extra == 0) {
        EXPECT_EQ(lenet::io::maybe_gunzip(std::move(gz), name).size(), bound);
        continue;
      }
      const std::string msg = data_error_of([&] { lenet::io::maybe_gunzip(std::move(gz), name); });
      EXPECT_CONTAINS(msg, name);
      EXPECT_CONTAINS(msg, "decompresses to more than 256 MiB");
    }
  }
}
#endif

TEST_F(IdxFiles, MissingFileIsRejected) {
  const std::string dir = dir_.string();
  std::string msg = data_error_of([&] { lenet::io::find_data_file(dir, "train-images-idx3-ubyte"); });
  EXPECT_CONTAINS(msg, dir + "/train-images-idx3-ubyte");
  EXPECT_CONTAINS(msg, "not found");
  EXPECT_CONTAINS(msg, "apt-get install dataset-fashion-mnist");
  const std::string path = dir + "/absent";
  msg = data_error_of([&] { lenet::io::read_idx_images(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "cannot open");
  msg = data_error_of([&] { lenet::io::read_idx_images(dir); });  // a folder opens but cannot be read
  EXPECT_CONTAINS(msg, dir);
  EXPECT_CONTAINS(msg, "read error");
}

// A named pipe is refused at once, not waited on for a writer that may never come.
TEST_F(IdxFiles, NamedPipeIsRefusedWithoutWaitingForAWriter) {
  const std::string path = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  auto read = std::async(std::launch::async, [&] { return data_error_of([&] { lenet::io::read_idx_labels(path); }); });
  if (read.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // lets the waiting open return
    if (writer >= 0) ::close(writer);
    FAIL() << "reading a named pipe without a writer waited for one";
  }
  const std::string msg = read.get();
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "not a regular file");
}

TEST_F(IdxFiles, DataFileThatIsNotARegularFileIsNamed) {
  std::filesystem::create_directory(dir_ / "train-labels-idx1-ubyte");
  const std::string msg = data_error_of([&] { lenet::io::find_data_file(dir_.string(), "train-labels-idx1-ubyte"); });
  EXPECT_CONTAINS(msg, dir_.string() + "/train-labels-idx1-ubyte: not a regular file");
  // Both names taken by folders: the first name tried, the plain one, is the one named.
  std::filesystem::create_directory(dir_ / "train-labels-idx1-ubyte.gz");
  const std::string both = data_error_of([&] { lenet::io::find_data_file(dir_.string(), "train-labels-idx1-ubyte"); });
  EXPECT_CONTAINS(both, dir_.string() + "/train-labels-idx1-ubyte: not a regular file");
  std::filesystem::remove(dir_ / "train-labels-idx1-ubyte.gz");
  // A regular file beside it is still found.
  const std::string gz = write_raw("train-labels-idx1-ubyte.gz", {});
  EXPECT_EQ(lenet::io::find_data_file(dir_.string(), "train-labels-idx1-ubyte"), gz);
}

// A named pipe where a data file should be is named as not a regular file, not returned to be read.
TEST_F(IdxFiles, DataFileThatIsANamedPipeIsNamed) {
  const std::string path = (dir_ / "train-labels-idx1-ubyte").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  const std::string msg = data_error_of([&] { lenet::io::find_data_file(dir_.string(), "train-labels-idx1-ubyte"); });
  EXPECT_CONTAINS(msg, path + ": not a regular file");
}

// What the data folder holds but cannot be looked at is named with its reason, not called missing.
TEST_F(IdxFiles, DataFolderProblemsAreNamed) {
  const std::string file = write_raw("plain-file", {});
  std::string msg = data_error_of([&] { lenet::io::find_data_file(file, "train-images-idx3-ubyte"); });
  EXPECT_EQ(msg, file + ": a file, not a folder; point --data-dir / LENET_DATA_DIR at the folder holding the four IDX files");
  const std::filesystem::path loop = dir_ / "train-images-idx3-ubyte";
  std::filesystem::create_symlink(loop.filename(), loop);  // a link to itself
  msg = data_error_of([&] { lenet::io::find_data_file(dir_.string(), "train-images-idx3-ubyte"); });
  EXPECT_EQ(msg, loop.string() + ": " + std::strerror(ELOOP));
  // The folder itself a loop of links: named as the data folder.
  msg = data_error_of([&] { lenet::io::find_data_file(loop.string(), "train-images-idx3-ubyte"); });
  EXPECT_EQ(msg, loop.string() + ": " + std::strerror(ELOOP) + " (the data folder: --data-dir / LENET_DATA_DIR)");
  if (::geteuid() != 0) {  // root looks into any folder
    const std::filesystem::path closed = dir_ / "closed";
    std::filesystem::create_directory(closed);
    std::filesystem::permissions(closed, std::filesystem::perms::none);
    msg = data_error_of([&] { lenet::io::find_data_file(closed.string(), "train-images-idx3-ubyte"); });
    std::filesystem::permissions(closed, std::filesystem::perms::owner_all);
    EXPECT_EQ(msg, (closed / "train-images-idx3-ubyte").string() + ": " + std::strerror(EACCES));
  }
}

TEST_F(IdxFiles, FindDataFilePrefersRawThenGz) {
  const std::string gz = write_raw("x.gz", {});
  EXPECT_EQ(lenet::io::find_data_file(dir_.string(), "x"), gz);
  const std::string raw = write_raw("x", {});
  EXPECT_EQ(lenet::io::find_data_file(dir_.string(), "x"), raw);
}

// ---- robustness: no input may crash the parser ---------------------------------------------------------

TEST(IdxRobustness, EveryTruncationThrows) {
  const Bytes full = idx_images(2);
  for (size_t len = 0; len < full.size(); ++len) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));  // exact size: ASan sees over-reads
    EXPECT_THROW(lenet::io::parse_idx_images(cut.data(), cut.size(), "cut"), DataError) << "length " << len;
  }
}

TEST(IdxRobustness, HeaderMutationsParseConsistentlyOrThrow) {
  const Bytes good = idx_images(2);
  std::mt19937 gen(12345);
  int parsed = 0, rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes b = good;
    b[gen() % 16] = static_cast<uint8_t>(gen());
    try {
      const auto img = lenet::io::parse_idx_images(b.data(), b.size(), "mutant");
      ASSERT_EQ(size_t{16} + size_t{img.count} * 784, b.size());
      ASSERT_EQ(img.pixels.size(), size_t{img.count} * 784);
      ++parsed;
    } catch (const DataError&) {
      ++rejected;
    }
  }
  // Most single-byte changes break the header; a few rewrite a byte to its own value and must still parse.
  EXPECT_GT(rejected, 1500);
  EXPECT_GT(parsed, 0);
}

// ---- pixel conversion ----------------------------------------------------------------------------------

TEST(SplitConversion, GatherAndSliceScaleBytesToUnitInterval) {
  lenet::io::Split split;
  split.labels = {4, 7};
  split.pixels.resize(2 * 784);
  for (size_t p = 0; p < 784; ++p) {
    split.pixels[p] = static_cast<uint8_t>(p % 256);
    split.pixels[784 + p] = static_cast<uint8_t>(255 - p % 256);
  }
  std::vector<float> x(2 * 784);
  std::array<int32_t, 2> y{};
  const std::array<uint32_t, 2> idx = {1, 0};
  split.gather(idx.data(), 2, x.data(), y.data());
  EXPECT_EQ(y[0], 7);
  EXPECT_EQ(y[1], 4);
  EXPECT_EQ(x[0], 1.0f);          // row 1, pixel 0 is 255
  EXPECT_EQ(x[784 + 0], 0.0f);    // row 0, pixel 0 is 0
  EXPECT_EQ(x[784 + 255], 1.0f);  // row 0, pixel 255 is 255
  for (size_t p = 0; p < 784; ++p) ASSERT_EQ(x[784 + p], static_cast<float>(p % 256) / 255.0f) << p;

  std::vector<float> xs(784);
  int32_t ys = -1;
  split.slice(1, 1, xs.data(), &ys);
  EXPECT_EQ(ys, 7);
  EXPECT_TRUE(std::equal(xs.begin(), xs.end(), x.begin()));
}

// ---- data folder ---------------------------------------------------------------------------------------

TEST(DataDir, FlagBeatsEnvironmentBeatsDefault) {
  const char* old = std::getenv("LENET_DATA_DIR");
  const std::string saved = old ? old : "";
  ::setenv("LENET_DATA_DIR", "/from/env", 1);
  EXPECT_EQ(lenet::io::resolve_data_dir("/from/flag"), "/from/flag");
  EXPECT_EQ(lenet::io::resolve_data_dir(""), "/from/env");
  ::setenv("LENET_DATA_DIR", "", 1);  // empty counts as unset
  EXPECT_EQ(lenet::io::resolve_data_dir(""), lenet::io::kDefaultDataDir);
  ::unsetenv("LENET_DATA_DIR");
  EXPECT_EQ(lenet::io::resolve_data_dir(""), "/usr/share/datasets/fashion-mnist");
  if (old) ::setenv("LENET_DATA_DIR", saved.c_str(), 1);
}

// ---- the real data set ---------------------------------------------------------------------------------

class RealData : public ::testing::Test {
 protected:
  // Loading 60000 images takes a moment: one full copy is shared. A load failure is reported by each
  // test (the data set is a prerequisite, so it fails rather than skips).
  static void SetUpTestSuite() {
    try {
      full_ = new lenet::io::FashionMnist(lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR));
    } catch (const std::exception& e) {
      load_error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    delete full_;
    full_ = nullptr;
  }
  void SetUp() override {
    // The packaged data set is gzip only; a build without zlib is told so by the loader and cannot do better.
    if (full_ == nullptr && !lenet::io::gzip_supported()) GTEST_SKIP() << load_error_;
    ASSERT_NE(full_, nullptr) << "cannot load " LENET_TEST_DATA_DIR ": " << load_error_;
  }
  static lenet::io::FashionMnist* full_;
  static std::string load_error_;
};
lenet::io::FashionMnist* RealData::full_ = nullptr;
std::string RealData::load_error_;

TEST_F(RealData, HasBalancedSplitsOfTheExpectedSize) {
  ASSERT_EQ(full_->train.size(), 60000u);
  ASSERT_EQ(full_->test.size(), 10000u);
  EXPECT_EQ(full_->train.pixels.size(), 60000u * 784);
  EXPECT_EQ(full_->test.pixels.size(), 10000u * 784);
  std::array<int, 10> train_counts{}, test_counts{};
  for (uint8_t l : full_->train.labels) ++train_counts.at(l);
  for (uint8_t l : full_->test.labels) ++test_counts.at(l);
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train_counts[c], 6000) << "class " << c;
    EXPECT_EQ(test_counts[c], 1000) << "class " << c;
  }
  // The published files start with these labels: the examples are read in stored order.
  EXPECT_EQ(Bytes(full_->train.labels.begin(), full_->train.labels.begin() + 10), (Bytes{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(Bytes(full_->test.labels.begin(), full_->test.labels.begin() + 10), (Bytes{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
}

TEST_F(RealData, LimitsKeepTheFirstExamples) {
  const auto limited = lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, 1000, 500);
  ASSERT_EQ(limited.train.size(), 1000u);
  ASSERT_EQ(limited.test.size(), 500u);
  EXPECT_TRUE(std::equal(limited.train.labels.begin(), limited.train.labels.end(), full_->train.labels.begin()));
  ASSERT_EQ(limited.train.pixels.size(), 1000u * 784);
  EXPECT_TRUE(std::equal(limited.train.pixels.begin(), limited.train.pixels.end(), full_->train.pixels.begin()));
  EXPECT_TRUE(std::equal(limited.test.pixels.begin(), limited.test.pixels.end(), full_->test.pixels.begin()));
}

TEST_F(RealData, LimitEqualToTheSetKeepsEveryExample) {
  const lenet::io::FashionMnist all = lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, 60000, 10000);
  EXPECT_EQ(all.train.labels, full_->train.labels);
  EXPECT_EQ(all.test.labels, full_->test.labels);
}

TEST_F(RealData, LimitLargerThanTheSetIsRejected) {
  EXPECT_THROW(lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, 60001, 0), lenet::io::LimitError);
  std::string msg = data_error_of([] { lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, 60001, 0); });
  EXPECT_CONTAINS(msg, "--train-limit");
  EXPECT_CONTAINS(msg, "60001");
  msg = data_error_of([] { lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, 0, 10001); });
  EXPECT_CONTAINS(msg, "--test-limit");
}

// The error carries the flag of the limit that is too large: lenet-train words its usage error by it.
TEST_F(RealData, LimitErrorCarriesItsFlag) {
  for (const auto& [train, test, flag] :
       {std::tuple<size_t, size_t, std::string>{60001, 0, "--train-limit"}, {0, 10001, "--test-limit"}}) {
    try {
      lenet::io::load_fashion_mnist(LENET_TEST_DATA_DIR, train, test);
      ADD_FAILURE() << flag << " larger than the set was taken";
    } catch (const lenet::io::LimitError& e) {
      EXPECT_EQ(e.flag, flag) << e.what();
    }
  }
}

}  // namespace
