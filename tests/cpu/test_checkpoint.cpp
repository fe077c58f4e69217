// Checkpoints: the file is safetensors as PyTorch reads it (checked by a parser written here from the
// format's description, not by load_checkpoint), a save/load round trip keeps every bit, every corrupt
// file becomes a CheckpointError naming the file and the problem, and a failed save leaves the previous
// checkpoint byte for byte as it was.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "byte_files.hpp"
#include "engine/checkpoint.hpp"
#include "engine/numbers.hpp"
#include "engine/output_file.hpp"
#include "model/lenet.hpp"
#include "train_steps.hpp"

namespace fs = std::filesystem;
using lenet::engine::Checkpoint;
using lenet::engine::CheckpointError;
using lenet::engine::TrainingState;
using lenet::model::kNumParameters;
using lenet::model::tensor_specs;
using lenet::testing::Bytes;
using lenet::testing::join;
using lenet::testing::Parts;
using lenet::testing::split;
using json = nlohmann::ordered_json;

namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float float_of_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Real initial weights plus the values a careless writer would change: -0, a subnormal, infinities,
// the largest float and a NaN with a payload (a round trip through double or text would lose it).
std::vector<float> sample_parameters() {
  std::vector<float> p = lenet::model::init_parameters<float>(42);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0f) p[i] = static_cast<float>(i) * 1e-3f;  // biases: make every tensor distinguishable
  }
  p[0] = -0.0f;
  p[1] = std::numeric_limits<float>::denorm_min();
  p[2] = std::numeric_limits<float>::infinity();
  p[3] = -std::numeric_limits<float>::infinity();
  p[4] = FLT_MAX;
  p[5] = float_of_bits(0x7fc12345u);
  p.back() = float_of_bits(0xffa00001u);
  return p;
}

// 2^51 minibatches of 256 per epoch (train_examples 2^59), so that the step count, in epoch 4 and one
// step into epoch 5, needs all 64 bits of its field.
constexpr uint64_t kSampleBatches = uint64_t{1} << 51;

TrainingState sample_state() {
  TrainingState s;
  s.epoch = 4;
  s.epochs = 10;
  s.seed = 0xfedcba9876543210ull;      // above 2^63: must not pass through a signed or double field
  s.step = uint64_t(s.epoch) * kSampleBatches + 1;  // 2^53 + 1: not representable as a double
  s.lr = 0.1 + 0.2;                    // 0.30000000000000004: needs 17 significant digits
  s.batch_size = 256;
  s.replicas = 3;
  s.train_examples = kSampleBatches * 256;
  s.test_examples = 9999;
  s.train_fingerprint = 0xcbf29ce484222325ull;  // above 2^63 too
  s.backend = "cuda";
  s.mode = "naive";
  s.epoch_so_far = {1000.0 / 3.0, 255, 0.1 + 0.7};  // the doubles' shortest round trips need 17 digits
  return s;
}

// The sample one step into epoch `epoch` + 1.
TrainingState sample_state_after_epoch(int epoch) {
  TrainingState s = sample_state();
  s.epoch = epoch;
  s.step = uint64_t(epoch) * kSampleBatches + 1;
  return s;
}

// The message of the CheckpointError a save throws; a test failure, and "", when it throws none.
std::string save_error(const std::string& path, const std::vector<float>& parameters, const TrainingState& state,
                       const lenet::engine::FileIo& io = {}) {
  try {
    lenet::engine::save_checkpoint(path, parameters, state, io);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected CheckpointError";
  return "";
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(lenet::testing::bit_difference(a, b), "");
}

void expect_same_state(const std::optional<TrainingState>& loaded, const TrainingState& b) {
  ASSERT_TRUE(loaded.has_value()) << "no training state loaded";
  const TrainingState& a = *loaded;
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.step, b.step);
  const auto bits = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    return u;
  };
  EXPECT_EQ(bits(a.lr), bits(b.lr)) << "lr " << a.lr << " vs " << b.lr;
  EXPECT_EQ(a.batch_size, b.batch_size);
  EXPECT_EQ(a.replicas, b.replicas);
  EXPECT_EQ(a.train_examples, b.train_examples);
  EXPECT_EQ(a.test_examples, b.test_examples);
  EXPECT_EQ(a.train_fingerprint, b.train_fingerprint);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(bits(a.epoch_so_far.loss_sum), bits(b.epoch_so_far.loss_sum));
  EXPECT_EQ(a.epoch_so_far.correct, b.epoch_so_far.correct);
  EXPECT_EQ(bits(a.epoch_so_far.seconds), bits(b.epoch_so_far.seconds));
}

// What `check` returns in a child process that runs as user and group 65534 (root may write any file, so a
// check of permissions runs there as another user); nothing where this process cannot become that user.
std::optional<std::string> checked_as_another_user(const std::function<std::string()>& check) {
  int ends[2];
  if (::pipe(ends) != 0) return std::nullopt;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ends[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    const std::string said = check();
    ::_exit(::write(ends[1], said.data(), said.size()) == static_cast<ssize_t>(said.size()) ? 0 : 1);
  }
  ::close(ends[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(ends[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(ends[0]);
  int status = 0;
  const bool done = child > 0 && ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return done ? std::optional<std::string>(said) : std::nullopt;
}

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("lenet_test_checkpoint_" + std::to_string(::getpid()) + "_" + info->name() +
                                        "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
    path_ = (dir_ / "model.safetensors").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_raw(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    lenet::testing::write_bytes(path, bytes);
    return path;
  }

  // A valid checkpoint as save_checkpoint writes it.
  Bytes valid_bytes() {
    lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
    return lenet::testing::read_bytes(path_);
  }

  // The valid checkpoint with its header changed by `edit` (and the data section by `edit_data`).
  Bytes edited(const std::function<void(json&)>& edit, const std::function<void(Bytes&)>& edit_data = nullptr) {
    Parts p = split(valid_bytes());
    json header = json::parse(p.header_text);
    edit(header);
    if (edit_data) edit_data(p.data);
    return join(header.dump(), p.data);
  }

  // Writes `bytes` to a file, requires load_checkpoint to throw CheckpointError naming that file, and
  // returns the message so callers can check it names the problem.
  std::string rejection(const Bytes& bytes, const std::string& name = "corrupt.safetensors") {
    const std::string path = write_raw(name, bytes);
    try {
      lenet::engine::load_checkpoint(path);
    } catch (const CheckpointError& e) {
      EXPECT_CONTAINS(e.what(), path);
      return e.what();
    }
    ADD_FAILURE() << "expected lenet::engine::CheckpointError for " << bytes.size() << " bytes";
    return "";
  }

  std::vector<std::string> folder_entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
  std::string path_;
};

// ---- the file as written ----------------------------------------------------------------------------

// The learning rate rule is about the float32 the value rounds to, to the last bit at both ends: the
// smallest double that rounds to a float above 0 and the largest that rounds to a finite float pass,
// their neighbours outside do not (as struct.pack("f") decides for the PyTorch peer).
TEST(LearningRateRule, IsWhatFloat32RoundsTo) {
  using lenet::engine::float32_positive;
  const double tiny = 0x1p-150, huge = 0x1p128 - 0x1p103;
  EXPECT_FALSE(float32_positive(tiny));
  EXPECT_TRUE(float32_positive(std::nextafter(tiny, 1.0)));
  EXPECT_TRUE(float32_positive(1e-45));  // below the smallest float, 1.4e-45, but rounds to it
  EXPECT_EQ(static_cast<float>(std::nextafter(tiny, 1.0)), std::numeric_limits<float>::denorm_min());
  EXPECT_FALSE(float32_positive(huge));
  EXPECT_TRUE(float32_positive(std::nextafter(huge, 0.0)));
  EXPECT_TRUE(float32_positive(3.4028235e38));  // above the largest float, but rounds to it
  EXPECT_EQ(static_cast<float>(std::nextafter(huge, 0.0)), std::numeric_limits<float>::max());
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) EXPECT_FALSE(float32_positive(bad));
}

TEST_F(CheckpointFiles, RoundTripKeepsEveryBitOfParametersAndState) {
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Checkpoint c = lenet::engine::load_checkpoint(path_);
  expect_same_bits(c.parameters, sample_parameters());
  expect_same_state(c.state, sample_state());
}

// The comparisons the resume tests report through (tests/train_steps.hpp): a failure there must say
// where the bits part, since on a GPU host there is little time to look again.
TEST_F(CheckpointFiles, DifferencesAreNamedByTensorAndByHeader) {
  using lenet::testing::bit_difference;
  using lenet::testing::checkpoint_difference;
  const lenet::model::TensorSpec& conv2_bias = lenet::model::tensor_specs()[3];
  const lenet::model::TensorSpec& fc2_weight = lenet::model::tensor_specs()[6];
  ASSERT_EQ(std::string(conv2_bias.name), "conv2.bias");
  ASSERT_EQ(std::string(fc2_weight.name), "fc2.weight");
  std::vector<float> a = sample_parameters();
  a[fc2_weight.offset] = -0.1f;  // 0.100000001490116..., nine significant digits shown
  EXPECT_EQ(bit_difference(a, a), "");  // NaNs with payloads included
  std::vector<float> b = a;
  b[conv2_bias.offset + 3] = 0.5f;
  b[conv2_bias.offset + 7] = 0.25f;
  b[fc2_weight.offset] = -b[fc2_weight.offset];
  EXPECT_EQ(bit_difference(a, b),
            "conv2.bias: 2 of 50 differ, the first [3] 25.203001 against 0.5; "
            "fc2.weight: 1 of 1280 differ, the first [0] -0.100000001 against 0.100000001");
  EXPECT_EQ(bit_difference({0.0f}, {-0.0f}), "values: 1 of 1 differ, the first [0] 0 against -0");
  EXPECT_EQ(bit_difference({1.0f}, {}), "1 values against 0");

  const std::string other = (dir_ / "other.safetensors").string(), same = (dir_ / "same.safetensors").string();
  lenet::engine::save_checkpoint(path_, a, sample_state());
  lenet::engine::save_checkpoint(same, a, sample_state());
  EXPECT_EQ(checkpoint_difference(path_, same), "");
  lenet::engine::save_checkpoint(other, b, sample_state());
  EXPECT_NE(checkpoint_difference(path_, other).find("; parameters: conv2.bias: 2 of 50 differ"), std::string::npos)
      << checkpoint_difference(path_, other);
  lenet::engine::save_checkpoint(other, a, sample_state_after_epoch(5));
  const std::string header = checkpoint_difference(path_, other);
  EXPECT_NE(header.find("; same parameters, the headers part at: '"), std::string::npos) << header;
  EXPECT_NE(header.find("\"epoch\":\"4\""), std::string::npos) << header;
  EXPECT_NE(header.find("\"epoch\":\"5\""), std::string::npos) << header;
}

TEST_F(CheckpointFiles, RoundTripAtTheIntegerFieldsLargestValues) {
  TrainingState s = sample_state();
  s.epochs = s.batch_size = s.replicas = INT_MAX;  // the flags' and the loader's upper bound
  s.epoch = 1;
  s.train_examples = uint64_t{INT_MAX};  // one minibatch an epoch
  s.step = 1;
  s.epoch_so_far = {};
  lenet::engine::save_checkpoint(path_, sample_parameters(), s);
  expect_same_state(lenet::engine::load_checkpoint(path_).state, s);
}

TEST_F(CheckpointFiles, LrRoundTripsExactlyForAwkwardValues) {
  // Down to float32's smallest and up to its largest, which a learning rate must stay within.
  for (const double lr : {0.2, 1.0 / 3.0, 1e-40, double(std::numeric_limits<float>::denorm_min()),
                          double(std::numeric_limits<float>::max()), 123456789.123456789, 0.1 + 0.7}) {
    TrainingState s = sample_state();
    s.lr = lr;
    lenet::engine::save_checkpoint(path_, sample_parameters(), s);
    expect_same_state(lenet::engine::load_checkpoint(path_).state, s);
  }
}

// The layout PyTorch's safetensors.torch.load_file expects, read without load_checkpoint.
TEST_F(CheckpointFiles, IndependentReaderFindsSafetensorsLayout) {
  const std::vector<float> params = sample_parameters();
  lenet::engine::save_checkpoint(path_, params, sample_state());
  const Bytes file = lenet::testing::read_bytes(path_);
  ASSERT_GE(file.size(), 8u);
  const Parts p = split(file);
  ASSERT_EQ(file.size(), 8 + p.header_length + 4 * kNumParameters) << "length, header and float32 data, nothing else";

  const nlohmann::json header = nlohmann::json::parse(p.header_text);
  ASSERT_TRUE(header.is_object());
  EXPECT_EQ(header.size(), tensor_specs().size() + 1) << header.dump();

  const nlohmann::json& meta = header.at("__metadata__");
  for (const auto& [key, value] : meta.items()) EXPECT_TRUE(value.is_string()) << key << " = " << value;
  EXPECT_EQ(meta.at("format"), "lenet-dp checkpoint 2");
  EXPECT_EQ(meta.at("epoch"), "4");
  EXPECT_EQ(meta.at("epochs"), "10");
  EXPECT_EQ(meta.at("seed"), "18364758544493064720");
  EXPECT_EQ(meta.at("step"), "9007199254740993");
  EXPECT_EQ(std::stod(meta.at("lr").get<std::string>()), 0.1 + 0.2);
  EXPECT_EQ(meta.at("batch_size"), "256");
  EXPECT_EQ(meta.at("replicas"), "3");
  EXPECT_EQ(meta.at("train_examples"), "576460752303423488");
  EXPECT_EQ(meta.at("test_examples"), "9999");
  EXPECT_EQ(meta.at("train_fingerprint"), "14695981039346656037");
  EXPECT_EQ(meta.at("backend"), "cuda");
  EXPECT_EQ(meta.at("mode"), "naive");
  EXPECT_EQ(std::stod(meta.at("epoch_loss_sum").get<std::string>()), 1000.0 / 3.0);
  EXPECT_EQ(meta.at("epoch_correct"), "255");
  EXPECT_EQ(std::stod(meta.at("epoch_seconds").get<std::string>()), 0.1 + 0.7);

  // PyTorch's names and shapes, fully connected weights [out, in], in flat-buffer order, contiguous.
  const std::vector<std::pair<std::string, std::vector<int>>> torch_shapes = {
      {"conv1.weight", {20, 1, 3, 3}}, {"conv1.bias", {20}},       {"conv2.weight", {50, 20, 5, 5}},
      {"conv2.bias", {50}},            {"fc1.weight", {128, 800}}, {"fc1.bias", {128}},
      {"fc2.weight", {10, 128}},       {"fc2.bias", {10}}};
  uint64_t expected_begin = 0;
  size_t flat = 0;
  for (const auto& [name, shape] : torch_shapes) {
    SCOPED_TRACE(name);
    const nlohmann::json& t = header.at(name);
    EXPECT_EQ(t.size(), 3u) << t.dump();
    EXPECT_EQ(t.at("dtype"), "F32");
    EXPECT_EQ(t.at("shape").get<std::vector<int>>(), shape);
    const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    size_t elements = 1;
    for (int d : shape) elements *= static_cast<size_t>(d);
    EXPECT_EQ(offsets[0], expected_begin);
    ASSERT_EQ(offsets[1], offsets[0] + 4 * elements);
    ASSERT_LE(offsets[1], p.data.size());
    for (size_t i = 0; i < elements; ++i, ++flat) {
      const size_t at = offsets[0] + 4 * i;
      const uint32_t le = uint32_t{p.data[at]} | (uint32_t{p.data[at + 1]} << 8) | (uint32_t{p.data[at + 2]} << 16) |
                          (uint32_t{p.data[at + 3]} << 24);
      ASSERT_EQ(le, bits_of(params[flat])) << "element " << i << " of " << name;
    }
    expected_begin = offsets[1];
  }
  EXPECT_EQ(flat, kNumParameters);
  EXPECT_EQ(expected_begin, p.data.size());
}

TEST_F(CheckpointFiles, DataSectionStartsEightByteAlignedAfterSpacePadding) {
  // Seeds of 1 to 8 digits make the JSON text take every length mod 8, so some of them need padding.
  std::set<size_t> padding_seen;
  uint64_t seed = 1;
  for (int digits = 1; digits <= 8; ++digits, seed *= 10) {
    TrainingState s = sample_state();
    s.seed = seed;
    lenet::engine::save_checkpoint(path_, sample_parameters(), s);
    const Parts p = split(lenet::testing::read_bytes(path_));
    EXPECT_EQ((8 + p.header_length) % 8, 0u) << "header length " << p.header_length << ", seed " << seed;
    const size_t json_end = p.header_text.find_last_of('}');
    ASSERT_NE(json_end, std::string::npos);
    const size_t padding = p.header_text.size() - json_end - 1;
    EXPECT_LT(padding, 8u) << "no more padding than alignment needs";
    for (size_t i = json_end + 1; i < p.header_text.size(); ++i) EXPECT_EQ(p.header_text[i], ' ') << "byte " << i;
    padding_seen.insert(padding);
  }
  EXPECT_EQ(padding_seen.size(), 8u) << "every amount of padding 0..7 should occur once";
}

TEST_F(CheckpointFiles, LoadFromBytesNamesTheGivenName) {
  const Bytes b = valid_bytes();
  expect_same_bits(lenet::engine::load_checkpoint_bytes(b.data(), b.size(), "memory").parameters, sample_parameters());
  try {
    lenet::engine::load_checkpoint_bytes(b.data(), 7, "in-memory copy");
    ADD_FAILURE() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_CONTAINS(e.what(), "in-memory copy");
  }
}

// ---- saving -----------------------------------------------------------------------------------------

TEST_F(CheckpointFiles, OverwritingAnExistingCheckpointReplacesIt) {
  TrainingState first = sample_state();
  lenet::engine::save_checkpoint(path_, sample_parameters(), first);
  std::vector<float> later = lenet::model::init_parameters<float>(7);
  TrainingState second = sample_state_after_epoch(7);
  lenet::engine::save_checkpoint(path_, later, second);
  const Checkpoint c = lenet::engine::load_checkpoint(path_);
  expect_same_bits(c.parameters, later);
  expect_same_state(c.state, second);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"model.safetensors"}) << "no temporary file left";
}

// The file a save replaces keeps its permission bits (a private checkpoint stays private); a new one
// gets what the umask leaves of 0666.
TEST_F(CheckpointFiles, ReplacedCheckpointKeepsItsPermissions) {
  struct Umask {
    mode_t was = ::umask(022);
    ~Umask() { ::umask(was); }
  } umask_022;
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  for (const mode_t mode : {mode_t{0600}, mode_t{0640}, mode_t{0664}}) {
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
    lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state_after_epoch(7));
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, mode);
  }
}

// A name as long as the folder takes leaves no room for the temporary file's suffix: the temporary
// name is cut to fit, and saving (twice: created, then replaced) works as for any other name.
TEST_F(CheckpointFiles, ANameAsLongAsTheFolderTakesSaves) {
  const std::string name(lenet::engine::longest_name(dir_), 'c');
  const std::string path = (dir_ / name).string();
  for (int epoch : {1, 2}) {
    const TrainingState s = sample_state_after_epoch(epoch);
    lenet::engine::save_checkpoint(path, sample_parameters(), s);
    expect_same_state(lenet::engine::load_checkpoint(path).state, s);
    EXPECT_EQ(folder_entries(), std::vector<std::string>{name}) << "no temporary file left";
  }
}

// The checks made before a run (engine/output_file.hpp): a name as long as the folder takes is fine and
// one byte more is not; a chain of links is followed to its end, so the folder checked is the last one's.
TEST_F(CheckpointFiles, OutputChecksTakeTheLongestNameAndFollowEveryLink) {
  const size_t most = lenet::engine::longest_name(dir_);
  EXPECT_EQ(lenet::engine::new_file_problem((dir_ / std::string(most, 'c')).string()), "");
  EXPECT_CONTAINS(lenet::engine::new_file_problem((dir_ / std::string(most + 1, 'c')).string()),
                  "a file name longer than the " + std::to_string(most) + " bytes its folder takes");
  fs::create_symlink("b", dir_ / "a");
  fs::create_symlink("missing/c", dir_ / "b");
  EXPECT_EQ(lenet::engine::follow_links((dir_ / "a").string()), (dir_ / "missing" / "c").string());
  EXPECT_CONTAINS(lenet::engine::new_file_problem((dir_ / "a").string()),
                  "cannot write into the folder " + (dir_ / "missing").string() + " (No such file or directory)");
  // A regular file where the folder should be, and a folder that may not be written (root may write any).
  lenet::testing::write_bytes((dir_ / "plain").string(), {});
  EXPECT_EQ(lenet::engine::new_file_problem((dir_ / "plain" / "c").string()),
            (dir_ / "plain" / "c").string() + ": cannot write into the folder " + (dir_ / "plain").string() +
                " (Not a directory)");
  fs::create_directory(dir_ / "locked");
  fs::permissions(dir_ / "locked", fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  const auto locked = [&] { return lenet::engine::new_file_problem((dir_ / "locked" / "c").string()); };
  const std::optional<std::string> said = ::geteuid() == 0 ? checked_as_another_user(locked) : locked();
  if (!said) GTEST_SKIP() << "root may write any folder, and this process cannot become another user";
  EXPECT_CONTAINS(*said, "cannot write into the folder " + (dir_ / "locked").string() + " (Permission denied)");
  fs::permissions(dir_ / "locked", fs::perms::owner_all);
}

// A file that may not be written is refused before the run, not replaced by the checkpoint's rename.
TEST_F(CheckpointFiles, ReadOnlyFileIsRefusedBeforeTheRun) {
  const std::string path = write_raw("read-only.safetensors", {1, 2, 3});
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0) << std::strerror(errno);  // a folder that takes new files
  const auto checks = [&] {
    return lenet::engine::replaced_file_problem(path) + "; " + lenet::engine::output_file_problem(path);
  };
  const std::optional<std::string> said = ::geteuid() == 0 ? checked_as_another_user(checks) : checks();
  if (!said) GTEST_SKIP() << "root may write any file, and this process cannot become another user";
  EXPECT_EQ(*said, path + ": is read-only; " + path + ": is read-only");
}

// The sticky bit of a folder (as /tmp's) lets only the file's owner, the folder's owner or root rename
// over a file in it: a save over another user's file there is refused before the run, as its rename would
// fail after it. The rule is held against the kernel's, in a child that takes other users' identities.
TEST_F(CheckpointFiles, AnotherUsersFileInAStickyFolderIsRefusedBeforeTheRun) {
  struct stat folder {}, file {};
  folder.st_mode = S_IFDIR | 01777;
  file.st_uid = 1000;
  EXPECT_TRUE(lenet::engine::sticky_bit_forbids_rename(folder, file, 1001));
  EXPECT_FALSE(lenet::engine::sticky_bit_forbids_rename(folder, file, 1000));  // the file's owner
  EXPECT_FALSE(lenet::engine::sticky_bit_forbids_rename(folder, file, 0));     // root
  folder.st_uid = 1001;
  EXPECT_FALSE(lenet::engine::sticky_bit_forbids_rename(folder, file, 1001));  // the folder's owner
  folder.st_mode = S_IFDIR | 0777;
  EXPECT_FALSE(lenet::engine::sticky_bit_forbids_rename(folder, file, 1002));  // no sticky bit

  if (::geteuid() != 0) GTEST_SKIP() << "taking other users' identities needs root";
  const fs::path sticky = dir_ / "sticky";
  fs::create_directory(sticky);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0) << std::strerror(errno);
  const std::string path = write_raw("sticky/model.safetensors", {1, 2, 3});
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0) << std::strerror(errno);  // anyone may write it
  const std::string refusal = path + ": another user's file in a folder with the sticky bit (as /tmp): no rename may replace it";
  // A link to it from a folder without the sticky bit: the folder of the file it names decides.
  const std::string link = (dir_ / "link.safetensors").string();
  fs::create_symlink(path, link);
  // As user 65534, the file owned by `owner`: the child's exit status has bit 0 set when the check refuses
  // the file, bit 1 when the kernel refuses a rename over it, bit 3 when the link's check differs from the
  // file's; 100 when it cannot become that user.
  auto as_another_user = [&](uid_t owner) {
    EXPECT_EQ(::chown(path.c_str(), owner, owner), 0) << std::strerror(errno);
    const pid_t child = ::fork();
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
      const std::string problem = lenet::engine::replaced_file_problem(path);
      const std::string other = (sticky / "other").string();
      const int fd = ::open(other.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      const bool kernel_refuses = fd >= 0 && ::rename(other.c_str(), path.c_str()) != 0 && errno == EPERM;
      ::unlink(other.c_str());
      const std::string via_link = problem.empty() ? "" : link + problem.substr(path.size());
      const bool link_differs = lenet::engine::replaced_file_problem(link) != via_link;
      ::_exit((problem == refusal ? 1 : problem.empty() ? 0 : 4) | (kernel_refuses ? 2 : 0) | (link_differs ? 8 : 0));
    }
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const int other_owner = as_another_user(65533);
  if (other_owner == 100) GTEST_SKIP() << "this process cannot take another user's identity";
  EXPECT_EQ(other_owner, 3) << "bits 0: the check refuses the file, 1: the kernel refuses the rename, 3: the link";
  EXPECT_EQ(as_another_user(65534), 0) << "the file's owner: neither refuses";
}

// A folder where no file can be made is found before the run, for root too (access() lets root through
// /proc's permissions), and the check leaves nothing behind where it can.
TEST_F(CheckpointFiles, FolderWhereNoFileCanBeMadeIsRefusedBeforeTheRun) {
  EXPECT_CONTAINS(lenet::engine::replaced_file_problem("/proc/lenet-checkpoint"), "/proc/lenet-checkpoint: cannot ");
  EXPECT_EQ(lenet::engine::replaced_file_problem((dir_ / "c.safetensors").string()), "");
  EXPECT_EQ(folder_entries(), std::vector<std::string>{});
}

// A file that may be written, in a folder where no new file can be made (the rename's new file): refused
// before the run, for root too.
TEST_F(CheckpointFiles, WritableFileInAFolderWhereNoFileCanBeMadeIsRefusedBeforeTheRun) {
  EXPECT_CONTAINS(lenet::engine::replaced_file_problem("/proc/self/comm"), "/proc/self/comm: cannot ");
}

// Where the file system makes no unnamed file (O_TMPFILE fails with EOPNOTSUPP, as on some network file
// systems, or EISDIR, as on kernels older than O_TMPFILE; here a seccomp filter in a child process says
// so), the check makes a named one and removes it. A file already at that name shows that a file can be
// made there, and is left alone.
TEST_F(CheckpointFiles, CheckWithoutUnnamedFilesLeavesNothingBehind) {
  const std::string path = (dir_ / "c.safetensors").string();
  // The child's exit status: 0 when the check finds no problem, 3 when no filter can be installed.
  const auto check_where_o_tmpfile_fails = [&](unsigned err, bool probe_name_taken) {
    const pid_t child = ::fork();
    if (child == 0) {
      const unsigned tmpfile = O_TMPFILE & ~O_DIRECTORY;  // openat's flags, args[2]: their low 32 bits come first
      sock_filter filter[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 3),
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])),
          BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, tmpfile, 0, 1),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | err),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      };
      const sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
        ::_exit(3);
      if (::open(dir_.c_str(), O_TMPFILE | O_WRONLY, 0600) >= 0 || errno != static_cast<int>(err)) ::_exit(4);
      const std::string probe = lenet::engine::temporary_name(path, ".tmp." + std::to_string(::getpid()) + ".probe");
      if (probe_name_taken && ::close(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600)) != 0) ::_exit(6);
      ::_exit(lenet::engine::new_file_problem(path).empty() ? 0 : 5);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status)) << status;
    return std::pair(WEXITSTATUS(status), "c.safetensors.tmp." + std::to_string(child) + ".probe");
  };
  for (const unsigned err : {EOPNOTSUPP, EISDIR}) {
    const int status = check_where_o_tmpfile_fails(err, false).first;
    if (status == 3) GTEST_SKIP() << "no seccomp filter can be installed here";
    EXPECT_EQ(status, 0) << std::strerror(err) << ": 4: O_TMPFILE not refused, 5: a problem found";
    EXPECT_EQ(folder_entries(), std::vector<std::string>{});
  }
  const auto [status, probe] = check_where_o_tmpfile_fails(EOPNOTSUPP, true);
  EXPECT_EQ(status, 0) << "5: a problem found, 6: the probe's name not taken";
  EXPECT_EQ(folder_entries(), std::vector<std::string>{probe});
}

// A symbolic link stays a link: the checkpoint goes to the file it names, existing or not yet.
TEST_F(CheckpointFiles, SavingThroughASymbolicLinkWritesTheFileItNames) {
  std::filesystem::create_directory(dir_ / "real");
  const std::filesystem::path link = dir_ / "link.safetensors";
  std::filesystem::create_symlink("real/target.safetensors", link);
  for (int epoch : {1, 2}) {  // first the file is created, then replaced
    const TrainingState s = sample_state_after_epoch(epoch);
    lenet::engine::save_checkpoint(link.string(), sample_parameters(), s);
    EXPECT_TRUE(std::filesystem::is_symlink(link));
    const Checkpoint c = lenet::engine::load_checkpoint((dir_ / "real" / "target.safetensors").string());
    expect_same_state(c.state, s);
  }
}

// A rename over anything but a regular file would replace it (a device, a pipe): refused, left alone.
TEST_F(CheckpointFiles, SavingOverSomethingNotARegularFileIsRefused) {
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_CONTAINS(save_error(fifo, sample_parameters(), sample_state()), fifo + ": cannot save checkpoint: not a regular file");
  EXPECT_EQ(std::filesystem::status(fifo).type(), std::filesystem::file_type::fifo);
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"pipe"});
}

// Loading from a FIFO that nobody writes to is a clear error, not a wait for a writer that never comes;
// one that is written to (as `--load <(...)` makes) loads. Each load runs in a child process that an
// alarm ends after 10 s, so that a wait fails the test instead of hanging it.
TEST_F(CheckpointFiles, LoadingFromAFifoNeverWaitsForAWriter) {
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Bytes file = lenet::testing::read_bytes(path_);
  // The child's exit status: 0 loaded, 1 the CheckpointError for a FIFO without a writer, 2 anything else. A writer
  // opens first (read and write: that does not wait for a reader), so the loader's reads find it.
  auto load_in_child = [&](bool write_to_it) {
    const int writer = write_to_it ? ::open(fifo.c_str(), O_RDWR) : -1;
    EXPECT_EQ(writer >= 0, write_to_it) << std::strerror(errno);
    const pid_t loader = ::fork();
    if (loader == 0) {
      if (writer >= 0) ::close(writer);  // else the loader itself would keep a writer and never see the end
      ::alarm(10);
      try {
        const Checkpoint c = lenet::engine::load_checkpoint(fifo);
        ::_exit(c.state.has_value() ? 0 : 2);
      } catch (const CheckpointError& e) {
        ::_exit(std::string(e.what()) == fifo + ": a FIFO that no process writes to (its writer must open it first)" ? 1 : 2);
      } catch (...) {
        ::_exit(2);
      }
    }
    if (writer >= 0) {
      ::alarm(20);  // the writer is a reader too: a loader that died early would leave this write waiting
      EXPECT_EQ(::write(writer, file.data(), file.size()), ssize_t(file.size()));  // while the loader reads
      ::alarm(0);
      ::close(writer);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(loader, &status, 0), loader);
    EXPECT_TRUE(WIFEXITED(status)) << "the loader was killed (signal " << WTERMSIG(status) << "): it waited for a writer";
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(load_in_child(false), 1);
  EXPECT_EQ(load_in_child(true), 0);
}

// A signal whose handler was installed without SA_RESTART ends a read that waits on a pipe with EINTR:
// the load reads on. The loader, a child process, loads from a FIFO whose writer is there but writes only
// once the child's timer signal has come (its handler says so through a pipe), while the read waits.
int g_timer_told_fd = -1;
TEST_F(CheckpointFiles, LoadingFromAFifoReadsOnAfterAnInterruptedRead) {
  const std::string fifo = (dir_ / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Bytes file = lenet::testing::read_bytes(path_);
  int told[2];
  ASSERT_EQ(::pipe(told), 0) << std::strerror(errno);
  const int writer = ::open(fifo.c_str(), O_RDWR);  // there before the loader opens it, writing nothing yet
  ASSERT_GE(writer, 0) << std::strerror(errno);
  const pid_t loader = ::fork();
  if (loader == 0) {
    ::close(writer);
    ::close(told[0]);
    g_timer_told_fd = told[1];
    struct sigaction action {};
    action.sa_handler = [](int) {
      const char byte = 1;
      if (::write(g_timer_told_fd, &byte, 1) != 1) ::_exit(3);
    };
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART
    ::sigaction(SIGALRM, &action, nullptr);
    itimerval once {};
    once.it_value.tv_usec = 200'000;
    ::setitimer(ITIMER_REAL, &once, nullptr);
    try {
      const Checkpoint c = lenet::engine::load_checkpoint(fifo);
      ::_exit(c.state.has_value() ? 0 : 2);
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(told[1]);
  char byte = 0;
  const bool timer_came = ::read(told[0], &byte, 1) == 1;  // 0: the loader ended before its timer
  ::close(told[0]);
  const int data = ::open(fifo.c_str(), O_WRONLY);  // does not wait: `writer` reads too
  ::close(writer);  // now only the loader reads: one that has ended makes the write fail, not wait
  void (*const old_sigpipe)(int) = ::signal(SIGPIPE, SIG_IGN);
  for (size_t done = 0; done < file.size();) {
    const ssize_t n = ::write(data, file.data() + done, file.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::signal(SIGPIPE, old_sigpipe);
  ::close(data);
  int status = 0;
  ASSERT_EQ(::waitpid(loader, &status, 0), loader);
  EXPECT_TRUE(timer_came) << "the loader ended before its timer signal came";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "loader status " << status << " (1: load failed)";
}

TEST_F(CheckpointFiles, FailedWriteLeavesPreviousCheckpointIntactAndNoTemporaryFile) {
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Bytes before = lenet::testing::read_bytes(path_);
  const uint64_t header_end = 8 + split(before).header_length;
  // A disk that fills after `room` bytes: writes succeed up to it, then fail with ENOSPC.
  for (const size_t room : {size_t{0}, size_t{1}, size_t{8}, size_t(header_end), before.size() / 2, before.size() - 1}) {
    SCOPED_TRACE("room " + std::to_string(room));
    size_t written = 0;
    lenet::engine::FileIo full_disk;
    full_disk.write = [&](int fd, const void* data, size_t size) -> ssize_t {
      if (written >= room) {
        errno = ENOSPC;
        return -1;
      }
      const ssize_t n = ::write(fd, data, std::min(size, room - written));
      if (n > 0) written += static_cast<size_t>(n);
      return n;
    };
    const TrainingState other = sample_state_after_epoch(9);
    const std::string error = save_error(path_, lenet::model::init_parameters<float>(99), other, full_disk);
    EXPECT_CONTAINS(error, path_);
    EXPECT_CONTAINS(error, " failed after " + std::to_string(room) + " bytes (" + std::strerror(ENOSPC) + ")");
    EXPECT_EQ(lenet::testing::read_bytes(path_), before) << "the previous checkpoint must be unchanged, byte for byte";
    EXPECT_EQ(folder_entries(), std::vector<std::string>{"model.safetensors"}) << "temporary file left behind";
  }
}

// What the CLI's handler of a second signal does before _exit: the temporary file of the save in
// progress goes, the previous checkpoint stays. Here the "signal" comes in the middle of the write.
TEST_F(CheckpointFiles, SignalCleanupMidSaveRemovesTheTemporaryFileOnly) {
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Bytes before = lenet::testing::read_bytes(path_);
  std::vector<std::string> during, after_cleanup;
  lenet::engine::FileIo interrupted;
  interrupted.write = [&](int fd, const void* data, size_t size) -> ssize_t {
    if (during.empty()) {
      during = folder_entries();
      lenet::engine::remove_replacement_in_progress();
      after_cleanup = folder_entries();
    }
    return ::write(fd, data, size);
  };
  // The save goes on writing to the unlinked file and then fails to rename it: an error, no damage.
  EXPECT_THROW(lenet::engine::save_checkpoint(path_, lenet::model::init_parameters<float>(5), sample_state(), interrupted),
               CheckpointError);
  EXPECT_EQ(during.size(), 2u) << "the temporary file exists during the write";
  EXPECT_EQ(after_cleanup, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(lenet::testing::read_bytes(path_), before);
  // Outside a save there is nothing to remove.
  lenet::engine::remove_replacement_in_progress();
  EXPECT_EQ(lenet::testing::read_bytes(path_), before);
}

TEST_F(CheckpointFiles, ShortWritesAndInterruptionsAreRetried) {
  int calls = 0;
  lenet::engine::FileIo trickle;
  trickle.write = [&](int fd, const void* data, size_t size) -> ssize_t {
    if (++calls % 3 == 1) {
      errno = EINTR;  // a signal arrived before anything was written
      return -1;
    }
    return ::write(fd, data, std::min<size_t>(size, 4093));
  };
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state(), trickle);
  EXPECT_GT(calls, 100);
  const Checkpoint c = lenet::engine::load_checkpoint(path_);
  expect_same_bits(c.parameters, sample_parameters());
  expect_same_state(c.state, sample_state());
}

TEST_F(CheckpointFiles, WriteThatMakesNoProgressFailsInsteadOfLooping) {
  lenet::engine::FileIo stuck;
  stuck.write = [](int, const void*, size_t) -> ssize_t { return 0; };
  const std::string error = save_error(path_, sample_parameters(), sample_state(), stuck);
  EXPECT_CONTAINS(error, " failed after 0 bytes (" + std::string(std::strerror(ENOSPC)) + ")");
  EXPECT_TRUE(folder_entries().empty());
}

// Two replacements of one file in one process use two temporary files: one begun while the other is being
// written (here from within its first write) leaves the other's file alone, and the later rename wins.
TEST_F(CheckpointFiles, ASaveBegunDuringAnotherOfTheSameFileUsesItsOwnTemporaryFile) {
  bool nested = false;
  lenet::engine::FileIo io;
  io.write = [&](int fd, const void* data, size_t size) -> ssize_t {
    if (!nested) {
      nested = true;
      lenet::engine::save_checkpoint(path_, lenet::model::init_parameters<float>(5), sample_state());
    }
    return ::write(fd, data, size);
  };
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state(), io);
  expect_same_bits(lenet::engine::load_checkpoint(path_).parameters, sample_parameters());
  EXPECT_EQ(folder_entries(), std::vector<std::string>{"model.safetensors"});
}

// What each fsync of a save sees: first the temporary file, complete, while `path` still holds the
// previous checkpoint (its data is on disk before the rename makes it visible); then the folder, once
// `path` holds the new one (the rename is durable).
TEST_F(CheckpointFiles, SyncsTheCompleteFileBeforeTheRenameAndTheFolderAfterIt) {
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Bytes before = lenet::testing::read_bytes(path_);
  struct Sync {
    bool folder;
    off_t size;
    Bytes at_path;
  };
  std::vector<Sync> syncs;
  lenet::engine::FileIo io;
  io.fsync = [&](int fd) {
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    syncs.push_back({S_ISDIR(st.st_mode), st.st_size, lenet::testing::read_bytes(path_)});
    return ::fsync(fd);
  };
  lenet::engine::save_checkpoint(path_, lenet::model::init_parameters<float>(7), sample_state(), io);
  const Bytes after = lenet::testing::read_bytes(path_);
  ASSERT_NE(after, before);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_FALSE(syncs[0].folder);
  EXPECT_EQ(syncs[0].size, static_cast<off_t>(after.size())) << "the temporary file is synced once complete";
  EXPECT_EQ(syncs[0].at_path, before) << "and before the rename";
  EXPECT_TRUE(syncs[1].folder);
  EXPECT_EQ(syncs[1].at_path, after) << "the folder is synced after the rename";
}

// Before the rename, a failing fsync, or a close that reports a deferred write error (NFS does), leaves
// the previous checkpoint as it was.
TEST_F(CheckpointFiles, FailedSyncOrCloseOfTheFileLeavesPreviousCheckpointIntact) {
  lenet::engine::save_checkpoint(path_, sample_parameters(), sample_state());
  const Bytes before = lenet::testing::read_bytes(path_);
  for (const std::string call : {"fsync", "close"}) {
    SCOPED_TRACE(call);
    lenet::engine::FileIo io;
    const auto fail = [](int) {
      errno = EIO;
      return -1;
    };
    if (call == "fsync") io.fsync = fail;
    io.close = [&](int fd) {
      const int rc = ::close(fd);  // released either way
      return call == "close" ? fail(fd) : rc;
    };
    const std::string error = save_error(path_, lenet::model::init_parameters<float>(7), sample_state(), io);
    EXPECT_CONTAINS(error, path_);
    EXPECT_CONTAINS(error, call + " of");
    EXPECT_CONTAINS(error, std::strerror(EIO));
    EXPECT_CONTAINS(error, "the previous checkpoint, if any, is unchanged");
    EXPECT_EQ(lenet::testing::read_bytes(path_), before);
    EXPECT_EQ(folder_entries(), std::vector<std::string>{"model.safetensors"}) << "temporary file left behind";
  }
}

// After the rename the new checkpoint is in place: a folder that cannot be synced is an error saying so,
// except EINVAL, a file system that cannot sync folders at all (some network and FUSE ones).
TEST_F(CheckpointFiles, FailedSyncOfTheFolderIsAnErrorUnlessFoldersCannotBeSynced) {
  const std::vector<float> parameters = lenet::model::init_parameters<float>(7);
  for (const int err : {EINVAL, EIO}) {
    SCOPED_TRACE(std::strerror(err));
    lenet::engine::FileIo io;
    io.fsync = [err](int fd) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        errno = err;
        return -1;
      }
      return ::fsync(fd);
    };
    if (err == EINVAL) {
      lenet::engine::save_checkpoint(path_, parameters, sample_state(), io);
    } else {
      const std::string error = save_error(path_, parameters, sample_state(), io);
      EXPECT_CONTAINS(error, path_);
      EXPECT_CONTAINS(error, "written, but fsync of folder");
      EXPECT_CONTAINS(error, std::strerror(EIO));
    }
    expect_same_bits(lenet::engine::load_checkpoint(path_).parameters, parameters);
    EXPECT_EQ(folder_entries(), std::vector<std::string>{"model.safetensors"});
  }
}

TEST_F(CheckpointFiles, SavingIntoMissingFolderNamesThePath) {
  const std::string path = (dir_ / "no_such_folder" / "model.safetensors").string();
  const std::string error = save_error(path, sample_parameters(), sample_state());
  EXPECT_CONTAINS(error, path);
  EXPECT_CONTAINS(error, std::strerror(ENOENT));
  EXPECT_TRUE(folder_entries().empty());
}

TEST_F(CheckpointFiles, SavingIntoTheCurrentFolderByBareName) {
  const fs::path previous = fs::current_path();
  fs::current_path(dir_);
  lenet::engine::save_checkpoint("bare.safetensors", sample_parameters(), sample_state());
  fs::current_path(previous);
  expect_same_bits(lenet::engine::load_checkpoint((dir_ / "bare.safetensors").string()).parameters, sample_parameters());
}

TEST_F(CheckpointFiles, SaveRejectsWrongParameterCountAndUnresumableStateWritingNothing) {
  std::vector<float> short_params(kNumParameters - 1, 0.0f);
  const std::string error = save_error(path_, short_params, sample_state());
  EXPECT_CONTAINS(error, path_);
  EXPECT_CONTAINS(error, std::to_string(kNumParameters));
  const std::vector<std::pair<std::string, std::function<void(TrainingState&)>>> bad = {
      {"epochs is 0", [](TrainingState& s) { s.epochs = 0; }},
      // Zero epochs is refused for itself, not only because step and epoch cannot fit it.
      {"epochs is 0", [](TrainingState& s) { s.epochs = s.epoch = 0, s.step = 0, s.epoch_so_far = {}; }},
      {"epoch is 11", [](TrainingState& s) { s.epoch = s.epochs + 1; }},
      {"epoch is -1", [](TrainingState& s) { s.epoch = -1; }},
      {"lr", [](TrainingState& s) { s.lr = std::nan(""); }},
      {"lr", [](TrainingState& s) { s.lr = -0.1; }},
      {"lr", [](TrainingState& s) { s.lr = 1e-300; }},  // 0 as float32: would train nothing
      {"lr", [](TrainingState& s) { s.lr = DBL_MAX; }},  // infinite as float32
      {"batch_size is 0", [](TrainingState& s) { s.batch_size = 0; }},
      {"replicas", [](TrainingState& s) { s.replicas = 0; }},
      {"replicas", [](TrainingState& s) { s.replicas = s.batch_size + 1; }},
      {"train_examples", [](TrainingState& s) { s.train_examples = 0; }},
      {"epoch_loss_sum", [](TrainingState& s) { s.epoch_so_far.loss_sum = std::nan(""); }},
      {"epoch_loss_sum", [](TrainingState& s) { s.epoch_so_far.loss_sum = -1; }},
      {"epoch_seconds", [](TrainingState& s) { s.epoch_so_far.seconds = HUGE_VAL; }},
      {"epoch_correct is", [](TrainingState& s) { s.epoch_so_far.correct = s.train_examples + 1; }},
      // The step count against the epochs and the training set's minibatches.
      {"step", [](TrainingState& s) { s.step = uint64_t(s.epoch) * kSampleBatches - 1; }},
      {"step", [](TrainingState& s) { s.step = uint64_t(s.epoch + 1) * kSampleBatches; }},
      {"step", [](TrainingState& s) { s.epoch = s.epochs, s.step = uint64_t(s.epochs) * kSampleBatches + 1; }},
      {"do not fit 1 steps", [](TrainingState& s) { s.epoch_so_far.correct = 257; }},
      {"do not fit 0 steps", [](TrainingState& s) { s.step = uint64_t(s.epoch) * kSampleBatches; }},
      // At an epoch's end each of the three sums alone must be zero.
      {"do not fit 0 steps", [](TrainingState& s) { s.step = uint64_t(s.epoch) * kSampleBatches, s.epoch_so_far = {1.0, 0, 0}; }},
      {"do not fit 0 steps", [](TrainingState& s) { s.step = uint64_t(s.epoch) * kSampleBatches, s.epoch_so_far = {0, 1, 0}; }},
      {"do not fit 0 steps", [](TrainingState& s) { s.step = uint64_t(s.epoch) * kSampleBatches, s.epoch_so_far = {0, 0, 1.0}; }},
      // A backend and a mode that no Backend names together.
      {"backend \"cuda\" with mode \"cpu\"", [](TrainingState& s) { s.mode = "cpu"; }},
      {"backend \"cpu\" with mode \"graph\"", [](TrainingState& s) { s.backend = "cpu", s.mode = "graph"; }},
      {"backend \"\" with mode \"naive\"", [](TrainingState& s) { s.backend = ""; }},
      {"backend \"cuda\" with mode \"\"", [](TrainingState& s) { s.mode = ""; }},
  };
  for (const auto& [field, spoil] : bad) {
    TrainingState s = sample_state();
    spoil(s);
    EXPECT_CONTAINS(save_error(path_, sample_parameters(), s), field) << " for " << field;
  }
  EXPECT_TRUE(folder_entries().empty());
}

// Every row of the steps so far predicted right is a state a run can be in: one step of 256 rows, 256 hits.
TEST_F(CheckpointFiles, EveryRowOfTheEpochSoFarCorrectIsResumable) {
  TrainingState s = sample_state();  // one step into epoch 5, minibatches of 256
  s.epoch_so_far.correct = 256;
  lenet::engine::save_checkpoint(path_, sample_parameters(), s);
  expect_same_state(lenet::engine::load_checkpoint(path_).state, s);
}

// Too many parameters is as wrong as too few: the extra values belong to no tensor and would be lost.
TEST_F(CheckpointFiles, SaveRejectsMoreParametersThanTheNetworkHas) {
  const std::vector<float> long_params(kNumParameters + 1, 0.0f);
  EXPECT_CONTAINS(save_error(path_, long_params, sample_state()),
                  std::to_string(kNumParameters + 1) + " parameters, expected " + std::to_string(kNumParameters));
  EXPECT_TRUE(folder_entries().empty());
}

// The cpu backend has one mode, cpu: no CUDA mode and no missing mode goes with it, saving or loading.
TEST_F(CheckpointFiles, TheCpuBackendGoesWithTheCpuModeOnly) {
  for (const char* mode : {"naive", "graph", ""}) {
    SCOPED_TRACE(mode);
    const std::string expected = std::string("backend \"cpu\" with mode \"") + mode + "\" is none of";
    TrainingState s = sample_state();
    s.backend = "cpu";
    s.mode = mode;
    EXPECT_CONTAINS(save_error(path_, sample_parameters(), s), expected);
    EXPECT_CONTAINS(rejection(edited([&](json& h) {
                      h["__metadata__"]["backend"] = "cpu";
                      h["__metadata__"]["mode"] = mode;
                    })),
                    expected);
  }
}

// ---- loading: every corruption named ------------------------------------------------------------------

TEST_F(CheckpointFiles, MissingFileAndFolderAreRejected) {
  const std::string missing = (dir_ / "absent.safetensors").string();
  try {
    lenet::engine::load_checkpoint(missing);
    ADD_FAILURE() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_CONTAINS(e.what(), missing);
    EXPECT_CONTAINS(e.what(), std::strerror(ENOENT));
  }
  EXPECT_THROW(lenet::engine::load_checkpoint(dir_.string()), CheckpointError);
}

TEST_F(CheckpointFiles, TruncatedFilesAreRejected) {
  const Bytes full = valid_bytes();
  const size_t header_end = 8 + split(full).header_length;
  for (const size_t length : {size_t{0}, size_t{1}, size_t{7}}) {
    EXPECT_CONTAINS(rejection(Bytes(full.begin(), full.begin() + length)), "shorter than the 8-byte header length");
  }
  for (const size_t length : {size_t{8}, size_t{9}, header_end / 2, header_end - 1}) {
    const std::string m = rejection(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(length)));
    EXPECT_CONTAINS(m, "runs past the end of the file");
  }
  for (const size_t length : {header_end, header_end + 1, full.size() / 2, full.size() - 4, full.size() - 1}) {
    const std::string m = rejection(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(length)));
    EXPECT_CONTAINS(m, "truncated");
    EXPECT_CONTAINS(m, std::to_string(4 * kNumParameters));
  }
}

TEST_F(CheckpointFiles, AbsurdOrOverlongHeaderLengthIsRejected) {
  Bytes b = valid_bytes();
  for (int i = 0; i < 8; ++i) b[i] = 0xff;
  EXPECT_CONTAINS(rejection(b), "header length 18446744073709551615 is absurd");
  b = valid_bytes();
  const uint64_t just_over_cap = lenet::engine::kMaxCheckpointHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(just_over_cap >> (8 * i));
  EXPECT_CONTAINS(rejection(b), "absurd");
  b = valid_bytes();
  const uint64_t past_end = b.size() - 7;  // under the cap, one byte more than the file holds
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(past_end >> (8 * i));
  EXPECT_CONTAINS(rejection(b), "header length " + std::to_string(past_end) + " runs past the end of the file");
}

// The cap is the longest header allowed: a header of exactly kMaxCheckpointHeaderBytes (space padded)
// loads, through load_checkpoint's read limit too; one byte more is absurd.
TEST_F(CheckpointFiles, HeaderAsLongAsTheCapLoads) {
  const Parts p = split(valid_bytes());
  std::string text = p.header_text;
  text.resize(lenet::engine::kMaxCheckpointHeaderBytes, ' ');
  const Checkpoint c = lenet::engine::load_checkpoint(write_raw("padded.safetensors", join(text, p.data)));
  expect_same_bits(c.parameters, sample_parameters());
  expect_same_state(c.state, sample_state());
  text.push_back(' ');
  const Bytes over = join(text, p.data);
  try {
    lenet::engine::load_checkpoint_bytes(over.data(), over.size(), "x");
    ADD_FAILURE() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_CONTAINS(e.what(),
                    "header length " + std::to_string(lenet::engine::kMaxCheckpointHeaderBytes + 1) + " is absurd");
  }
}

TEST_F(CheckpointFiles, HeaderThatIsNotJsonIsRejected) {
  const Parts p = split(valid_bytes());
  std::string text = p.header_text;
  text[text.find(':')] = ';';
  EXPECT_CONTAINS(rejection(join(text, p.data)), "header is not valid JSON");
  EXPECT_CONTAINS(rejection(join(std::string(p.header_text.size(), '\0'), p.data)), "header holds a NUL byte at offset 8");
  // The parser would stop at a NUL: the header's own JSON, then a NUL and anything, must not load.
  const std::string after = p.header_text + std::string(1, '\0') + "{not json [[[";
  EXPECT_CONTAINS(rejection(join(after, p.data)), "header holds a NUL byte at offset " + std::to_string(8 + p.header_text.size()));
  const std::string not_utf8 = rejection(join("{\"a\":\"\xff\"}", p.data));
  EXPECT_CONTAINS(not_utf8, "header is not valid JSON");
  EXPECT_CONTAINS(not_utf8, "\\xff");  // the byte named, not sent raw to the terminal
  for (const char c : not_utf8) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << not_utf8;
}

// Only the bytes a terminal cannot show are escaped: DEL (0x7f) is, the parser's own words and spaces
// are not.
TEST_F(CheckpointFiles, JsonErrorEscapesTheDeleteByteAndNothingPrintable) {
  const Parts p = split(valid_bytes());
  const std::string m = rejection(join("{\x7f}", p.data));
  EXPECT_CONTAINS(m, "header is not valid JSON");
  EXPECT_CONTAINS(m, "syntax error while parsing");
  EXPECT_CONTAINS(m, "'{\\x7f'");
  for (const char c : m) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << m;
}

TEST_F(CheckpointFiles, HeaderThatIsNotAnObjectIsRejected) {
  const Parts p = split(valid_bytes());
  EXPECT_CONTAINS(rejection(join("[1,2,3]", p.data)), "not a JSON object");
  EXPECT_CONTAINS(rejection(join("\"conv1.weight\"", p.data)), "not a JSON object");
  EXPECT_CONTAINS(rejection(join(std::string(p.header_text.size(), ' '), p.data)), "not valid JSON");
}

TEST_F(CheckpointFiles, WrongShapeIsRejected) {
  // The transposed fully connected weight: same size, the layout PyTorch would misread.
  const std::string m = rejection(edited([](json& h) { h["fc1.weight"]["shape"] = {800, 128}; }));
  EXPECT_CONTAINS(m, "'fc1.weight' has shape [800,128], expected [128,800]");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv1.bias"]["shape"] = {20, 1}; })), "'conv1.bias' has shape");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv1.bias"]["shape"] = {-20}; })), "non-negative integers");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv1.bias"]["shape"] = "20"; })), "not an array");
  // One level deeper than a header has (object, entry, shape) is refused as such, before its meaning.
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv1.bias"]["shape"] = {{20}}; })), "nested deeper than a checkpoint header");
}

TEST_F(CheckpointFiles, WrongDtypeIsRejected) {
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv2.weight"]["dtype"] = "F16"; })),
                  "'conv2.weight' has dtype \"F16\", expected \"F32\"");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv2.weight"]["dtype"] = 32; })), "dtype 32");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["conv2.weight"].erase("dtype"); })), "has no \"dtype\"");
}

TEST_F(CheckpointFiles, TensorEntryThatIsNotAnObjectIsRejected) {
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["fc2.bias"] = "F32"; })),
                  "tensor 'fc2.bias' is \"F32\", not an object");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["fc2.bias"] = {1, 2}; })),
                  "tensor 'fc2.bias' is [1,2], not an object");
}

TEST_F(CheckpointFiles, MissingShapeOrDataOffsetsIsRejected) {
  for (const char* field : {"shape", "data_offsets"}) {
    const std::string m = rejection(edited([&](json& h) { h["fc1.weight"].erase(field); }));
    EXPECT_CONTAINS(m, std::string("tensor 'fc1.weight' has no \"") + field + "\"");
  }
}

// A shape must be an array: an object whose values are the right dimensions is no shape.
TEST_F(CheckpointFiles, ShapeThatIsAnObjectIsRejectedWhateverItHolds) {
  const std::string m = rejection(edited([](json& h) { h["conv1.bias"]["shape"] = json::object({{"0", 20}}); }));
  EXPECT_CONTAINS(m, "'conv1.bias' has shape {\"0\":20}, not an array");
}

TEST_F(CheckpointFiles, MalformedDataOffsetsAreRejected) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array({-4, 76}), "non-negative integers"},
      {json::array({720.0, 800.0}), "non-negative integers"},
      {json::array({720, 800, 880}), "expected [begin,end]"},
      {json::array({800, 720}), "negative length"},
      {json::array({720, 804}), "spanning 84 bytes, expected 80"},
      {json("720-800"), "expected [begin,end]"},
  };
  for (const auto& c : cases) {  // not a structured binding: C++17 lambdas cannot capture one
    const json& offsets = c.first;
    const std::string m = rejection(edited([&](json& h) { h["conv1.bias"]["data_offsets"] = offsets; }));
    EXPECT_CONTAINS(m, "'conv1.bias' has data_offsets");
    EXPECT_CONTAINS(m, c.second);
  }
}

// The end offset is checked as strictly as the begin: a float or a string of the right value is refused.
TEST_F(CheckpointFiles, DataOffsetsEndThatIsNotAnIntegerIsRejected) {
  for (const json& end : {json(800.0), json("800")}) {
    const std::string m =
        rejection(edited([&](json& h) { h["conv1.bias"]["data_offsets"] = json::array({720, end}); }));
    EXPECT_CONTAINS(m, "'conv1.bias' has data_offsets [720," + end.dump() +
                           "], expected [begin,end] of non-negative integers");
  }
}

TEST_F(CheckpointFiles, OverlappingOffsetsAreRejected) {
  // conv1.bias moved 4 bytes back onto the last float of conv1.weight.
  const std::string m = rejection(edited([](json& h) { h["conv1.bias"]["data_offsets"] = {716, 796}; }));
  EXPECT_CONTAINS(m, "'conv1.bias' at bytes [716,796) overlaps tensor 'conv1.weight'");
  // fc2.bias (40 bytes) on the first half of conv1.bias; the 40 bytes it leaves at the end are no excuse.
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["fc2.bias"]["data_offsets"] = {720, 760}; })), "overlaps");
}

// The overlap is measured against where the earlier tensor ends, and the message says where that is.
TEST_F(CheckpointFiles, OverlapNamesWhereTheEarlierTensorEnds) {
  const std::string m = rejection(edited([](json& h) { h["conv1.bias"]["data_offsets"] = {716, 796}; }));
  EXPECT_CONTAINS(m, "overlaps tensor 'conv1.weight', which ends at 720");
}

TEST_F(CheckpointFiles, GapInOffsetsIsRejected) {
  // Every tensor after conv1.weight moved 4 bytes on, with 4 bytes more data: sizes and total agree,
  // but 4 bytes belong to no tensor.
  const std::string m = rejection(edited(
      [](json& h) {
        for (auto& [name, entry] : h.items()) {
          if (name == "__metadata__" || name == "conv1.weight") continue;
          entry["data_offsets"][0] = entry["data_offsets"][0].get<uint64_t>() + 4;
          entry["data_offsets"][1] = entry["data_offsets"][1].get<uint64_t>() + 4;
        }
      },
      [](Bytes& data) { data.insert(data.begin() + 720, 4, 0); }));
  EXPECT_CONTAINS(m, "gap of 4 bytes between tensor 'conv1.weight' and tensor 'conv1.bias'");
  // The data not starting at 0 is a gap too.
  const std::string first = rejection(edited(
      [](json& h) {
        for (auto& [name, entry] : h.items()) {
          if (name == "__metadata__") continue;
          entry["data_offsets"][0] = entry["data_offsets"][0].get<uint64_t>() + 8;
          entry["data_offsets"][1] = entry["data_offsets"][1].get<uint64_t>() + 8;
        }
      },
      [](Bytes& data) { data.insert(data.begin(), 8, 0); }));
  EXPECT_CONTAINS(first, "gap of 8 bytes between the start of the data and tensor 'conv1.weight'");
}

// safetensors' own writer orders the data by dtype and name (conv1.bias before conv1.weight), not in
// flat-buffer order: any order that tiles the data section loads, each tensor from its own offsets.
TEST_F(CheckpointFiles, TensorsStoredInAnotherOrderLoadIntoTheirPlaces) {
  const Parts p = split(valid_bytes());
  json header = json::parse(p.header_text);
  std::vector<const lenet::model::TensorSpec*> order;
  for (const auto& t : tensor_specs()) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return std::string(a->name) < b->name; });
  Bytes data;
  for (const auto* t : order) {
    const uint64_t begin = data.size();
    data.insert(data.end(), p.data.begin() + std::ptrdiff_t(4 * t->offset),
                p.data.begin() + std::ptrdiff_t(4 * (t->offset + t->size)));
    header[t->name]["data_offsets"] = {begin, uint64_t(data.size())};
  }
  ASSERT_EQ(data.size(), p.data.size());
  ASSERT_NE(data, p.data);
  const Bytes b = join(header.dump(), data);
  const Checkpoint c = lenet::engine::load_checkpoint_bytes(b.data(), b.size(), "sorted.safetensors");
  expect_same_bits(c.parameters, sample_parameters());
  expect_same_state(c.state, sample_state());
}

TEST_F(CheckpointFiles, ExtraTrailingBytesAreRejected) {
  Bytes b = valid_bytes();
  b.push_back(0);
  EXPECT_CONTAINS(rejection(b), "1 unexpected bytes after the last tensor");
  b.insert(b.end(), 99, 0x41);
  EXPECT_CONTAINS(rejection(b), "100 unexpected bytes after the last tensor");
}

// The loader reads at most the largest checkpoint there can be (length, the longest header, the data)
// and refuses a file longer than that as such, without reading it all.
TEST_F(CheckpointFiles, FileLongerThanAnyCheckpointIsRefusedAsSuch) {
  const size_t largest = 8 + lenet::engine::kMaxCheckpointHeaderBytes + 4 * lenet::model::kNumParameters;
  Bytes b = valid_bytes();
  b.resize(largest, 0);
  EXPECT_CONTAINS(rejection(b), "unexpected bytes after the last tensor");
  b.push_back(0);
  EXPECT_CONTAINS(rejection(b), "larger than any checkpoint (over " + std::to_string(largest) + " bytes)");
}

TEST_F(CheckpointFiles, MissingTensorIsRejected) {
  for (const auto& t : tensor_specs()) {
    const std::string m = rejection(edited([&](json& h) { h.erase(t.name); }));
    EXPECT_CONTAINS(m, std::string("missing tensor '") + t.name + "'");
  }
}

TEST_F(CheckpointFiles, UnknownTensorIsRejected) {
  const std::string m = rejection(edited([](json& h) {
    h["fc3.weight"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {516272, 516272}}};
  }));
  EXPECT_CONTAINS(m, "unknown tensor \"fc3.weight\"");
}

TEST_F(CheckpointFiles, UnknownFieldInTensorEntryIsRejected) {
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["fc2.bias"]["stride"] = {1}; })),
                  "'fc2.bias' has an unknown field \"stride\"");
}

TEST_F(CheckpointFiles, RepeatedKeyIsRejected) {
  // nlohmann keeps the last of two equal keys; a file that says two things must not load as either.
  const Parts p = split(valid_bytes());
  std::string text = p.header_text;
  const size_t at = text.find("\"replicas\":\"3\"");
  ASSERT_NE(at, std::string::npos) << text;
  text.insert(at, "\"replicas\":\"2\",");
  EXPECT_CONTAINS(rejection(join(text, p.data)), "repeats the key \"replicas\"");
}

TEST_F(CheckpointFiles, MissingStateFieldIsRejected) {
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"] = "epoch 3"; })), "not an object");
  for (const char* field : {"epoch", "epochs", "seed", "step", "lr", "batch_size", "replicas", "train_examples", "epoch_loss_sum",
                            "epoch_correct", "epoch_seconds"}) {
    const std::string m = rejection(edited([&](json& h) { h["__metadata__"].erase(field); }));
    EXPECT_CONTAINS(m, std::string("__metadata__ has no \"") + field + "\"");
  }
}

// The test set's size, the training examples' fingerprint, the backend and the mode came within format
// 2: a checkpoint written before them still resumes, with them unknown; one written without them leaves
// the fields out. A recorded test set size of 0 is refused (0 stands for "not recorded"); the backend
// and the mode come together, and only as a Backend names them.
TEST_F(CheckpointFiles, FieldsAddedWithinTheFormatAreOptional) {
  const std::string older = write_raw("older.safetensors", edited([](json& h) {
    for (const char* f : {"test_examples", "train_fingerprint", "backend", "mode"}) h["__metadata__"].erase(f);
  }));
  const Checkpoint c = lenet::engine::load_checkpoint(older);
  ASSERT_TRUE(c.state.has_value());
  EXPECT_EQ(c.state->test_examples, 0u);
  EXPECT_FALSE(c.state->train_fingerprint.has_value());
  EXPECT_EQ(c.state->backend, "");
  EXPECT_EQ(c.state->mode, "");
  TrainingState unknown = sample_state();
  unknown.test_examples = 0;
  unknown.train_fingerprint.reset();
  unknown.backend = unknown.mode = "";
  lenet::engine::save_checkpoint(path_, sample_parameters(), unknown);
  const json meta = json::parse(split(lenet::testing::read_bytes(path_)).header_text).at("__metadata__");
  for (const char* f : {"test_examples", "train_fingerprint", "backend", "mode"}) EXPECT_FALSE(meta.contains(f)) << f;
  expect_same_state(lenet::engine::load_checkpoint(path_).state, unknown);
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"]["test_examples"] = "0"; })),
                  "test_examples is 0, must be at least 1");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"].erase("mode"); })), "__metadata__ has no \"mode\"");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"].erase("backend"); })), "__metadata__ has no \"backend\"");
  for (const auto& [backend, mode] : {std::pair<const char*, const char*>{"cpu", "cpu"}, {"cuda", "naive"}, {"cuda", "graph"}}) {
    const Bytes b = edited([&, backend = backend, mode = mode](json& h) {
      h["__metadata__"]["backend"] = backend;
      h["__metadata__"]["mode"] = mode;
    });
    const Checkpoint loaded = lenet::engine::load_checkpoint_bytes(b.data(), b.size(), "x");
    EXPECT_EQ(loaded.state->backend, backend);
    EXPECT_EQ(loaded.state->mode, mode);
  }
  for (const auto& [backend, mode] : {std::pair<const char*, const char*>{"gpu", "graph"}, {"cuda", "cpu"}, {"CPU", "cpu"}, {"", ""}}) {
    const std::string m = rejection(edited([&, backend = backend, mode = mode](json& h) {
      h["__metadata__"]["backend"] = backend;
      h["__metadata__"]["mode"] = mode;
    }));
    EXPECT_CONTAINS(m, std::string("backend \"") + backend + "\" with mode \"" + mode + "\" is none of");
  }
}

// What PyTorch's safetensors.torch.save_file writes for the source text's network: the same tensors
// with no __metadata__, or with metadata of its own. Its parameters load; there is no state to resume.
TEST_F(CheckpointFiles, ForeignSafetensorsLoadsAsParametersOnly) {
  const std::vector<std::function<void(json&)>> foreign = {
      [](json& h) { h.erase("__metadata__"); },
      [](json& h) { h["__metadata__"] = {{"format", "pt"}}; },
      [](json& h) { h["__metadata__"].erase("format"); },
      // An older lenet-dp's checkpoint: the same tensors, a state without the fields a resume now needs.
      [](json& h) {
        h["__metadata__"]["format"] = "lenet-dp checkpoint 1";
        for (const char* f : {"train_examples", "epoch_loss_sum", "epoch_correct", "epoch_seconds"})
          h["__metadata__"].erase(f);
      },
  };
  for (const auto& edit : foreign) {
    const Bytes b = edited(edit);
    const Checkpoint c = lenet::engine::load_checkpoint_bytes(b.data(), b.size(), "torch.safetensors");
    EXPECT_FALSE(c.state.has_value());
    expect_same_bits(c.parameters, sample_parameters());
  }
  // Foreign metadata is still safetensors metadata: string values only.
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"] = {{"format", "pt"}, {"epoch", 3}}; })),
                  "__metadata__ \"epoch\" is 3, not a string");
}

TEST_F(CheckpointFiles, UnparsableMetadataIsRejected) {
  const std::vector<std::pair<std::string, std::string>> numbers = {
      {"epoch", "3x"}, {"epoch", "-1"}, {"epoch", ""}, {"epoch", " 3"}, {"epochs", "1e1"}, {"epochs", "+10"},
      {"seed", "18446744073709551616"},  // 2^64
      {"step", "0x10"}, {"step", "010"}, {"batch_size", "256.0"}, {"replicas", "three"}, {"epoch_correct", "-5"}, {"test_examples", "1e4"},
      {"train_fingerprint", "18446744073709551616"}};
  for (const auto& c : numbers) {
    const std::string &field = c.first, &value = c.second;
    const std::string m = rejection(edited([&](json& h) { h["__metadata__"][field] = value; }));
    EXPECT_CONTAINS(m, "__metadata__ \"" + field + "\" is \"" + value + "\", not a non-negative integer");
  }
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"]["epochs"] = "2147483648"; })), "too large");
  for (const char* field : {"lr", "epoch_loss_sum", "epoch_seconds"}) {
    for (const std::string value : {"abc", "0.2x", "", " 0.2"}) {
      const std::string m = rejection(edited([&](json& h) { h["__metadata__"][field] = value; }));
      EXPECT_CONTAINS(m, "__metadata__ \"" + std::string(field) + "\" is \"" + value + "\", not a number");
    }
    for (const std::string value : {"nan", "inf", "-0.2"})
      EXPECT_CONTAINS(rejection(edited([&](json& h) { h["__metadata__"][field] = value; })), std::string(field) + " is");
  }
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"]["lr"] = "0"; })), "lr is 0");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"]["epoch"] = "11"; })), "epoch is 11");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"]["epoch"] = 3; })),
                  "__metadata__ \"epoch\" is 3, not a string");
  EXPECT_CONTAINS(rejection(edited([](json& h) { h["__metadata__"]["format"] = "lenet-dp checkpoint 3"; })),
                  "expected \"lenet-dp checkpoint 2\" (written by a newer version of lenet-dp)");
}

TEST_F(CheckpointFiles, ExtraMetadataStringsAreAccepted) {
  // Tools that copy safetensors files may add their own metadata; only the fields we need are required.
  const Bytes b = edited([](json& h) { h["__metadata__"]["note"] = "copied"; });
  expect_same_state(lenet::engine::load_checkpoint_bytes(b.data(), b.size(), "x").state, sample_state());
}

// No byte of the length or header, changed to any of a few values, may do worse than a CheckpointError:
// a cheap, deterministic cousin of tests/fuzz/fuzz_checkpoint.cpp that runs with every build.
TEST_F(CheckpointFiles, EveryHeaderByteCorruptedLoadsOrThrowsCheckpointError) {
  Bytes b = valid_bytes();
  const size_t header_end = 8 + split(b).header_length;
  size_t rejected = 0, loaded = 0;
  for (size_t i = 0; i < header_end; ++i) {
    const uint8_t original = b[i];
    for (const uint8_t v : {uint8_t{0}, uint8_t{'"'}, uint8_t{'9'}, uint8_t{'}'}, uint8_t(original ^ 0x80)}) {
      if (v == original) continue;
      b[i] = v;
      try {
        lenet::engine::load_checkpoint_bytes(b.data(), b.size(), "flipped");
        ++loaded;  // e.g. a digit of the seed changed: still a valid checkpoint
      } catch (const CheckpointError&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << i << " = " << int(v) << ": " << e.what();
      }
    }
    b[i] = original;
  }
  EXPECT_GT(rejected, header_end);
  EXPECT_GT(loaded, 0u);
}

}  // namespace
