#include "engine/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <nlohmann/json.hpp>

#include "engine/numbers.hpp"
#include "engine/read_file.hpp"
#include "engine/strict_json.hpp"
#include "io/sampler.hpp"
#include "model/lenet.hpp"

namespace lenet::engine {
namespace {

using model::kNumParameters;
using model::tensor_specs;
using model::TensorSpec;

constexpr size_t kLengthBytes = 8;  // the u64 header length
constexpr size_t kAlignment = 8;    // of the data section, as safetensors' own writer pads it
constexpr uint64_t kDataBytes = uint64_t{4} * kNumParameters;

// ---- little-endian bytes, independent of the host's byte order ------------------------------------

void put_le64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_le_float(uint8_t* p, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

float get_le_float(const uint8_t* p) {
  const uint32_t bits = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// ---- the training state as metadata strings -------------------------------------------------------

std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// The reason a recorded backend and mode are not a pair a Backend names, or empty.
std::string engine_problem(const std::string& backend, const std::string& mode) {
  if (backend == "cpu" ? mode == "cpu" : backend == "cuda" && (mode == "naive" || mode == "graph")) return "";
  return "backend " + quoted(backend) + " with mode " + quoted(mode) + " is none of cpu with cpu, cuda with naive, cuda with graph";
}

// The reason `state` cannot be resumed from, or empty. One rule for saving and loading, so the saver
// never writes a file the loader rejects.
std::string state_problem(const TrainingState& s) {
  if (s.epochs < 1) return "epochs is " + std::to_string(s.epochs) + ", must be at least 1";
  if (s.epoch < 0 || s.epoch > s.epochs) {
    return "epoch is " + std::to_string(s.epoch) + ", must be in 0.." + std::to_string(s.epochs) + " (epochs)";
  }
  if (!float32_positive(s.lr)) return "lr is " + format_double(s.lr) + ", " + kFloat32PositiveRule;
  if (s.batch_size < 1) return "batch_size is " + std::to_string(s.batch_size) + ", must be at least 1";
  if (s.replicas < 1) return "replicas is " + std::to_string(s.replicas) + ", must be at least 1";
  if (s.replicas > s.batch_size) {
    return "replicas is " + std::to_string(s.replicas) + ", more than batch_size " + std::to_string(s.batch_size) +
           " (every replica needs a row of a full minibatch)";
  }
  if (s.train_examples < 1) return "train_examples is 0, must be at least 1";
  if (s.epoch_so_far.correct > s.train_examples) {
    return "epoch_correct is " + std::to_string(s.epoch_so_far.correct) + ", more than train_examples " +
           std::to_string(s.train_examples);
  }
  if (!std::isfinite(s.epoch_so_far.loss_sum) || s.epoch_so_far.loss_sum < 0)
    return "epoch_loss_sum is " + format_double(s.epoch_so_far.loss_sum) + ", must be finite and >= 0";
  if (!std::isfinite(s.epoch_so_far.seconds) || s.epoch_so_far.seconds < 0)
    return "epoch_seconds is " + format_double(s.epoch_so_far.seconds) + ", must be finite and >= 0";
  // The steps: `epoch` full epochs of ceil(train_examples / batch_size) minibatches, then some of the
  // next one (none after the last), whose sums so far are zero when no step of it is done.
  const uint64_t batches = io::num_batches(s.train_examples, uint64_t(s.batch_size));
  const uint64_t into_epoch = s.step % batches;
  if (s.step / batches != uint64_t(s.epoch) || (s.epoch == s.epochs && into_epoch != 0)) {
    return "step is " + std::to_string(s.step) + ", which does not fit epoch " + std::to_string(s.epoch) + " of " +
           std::to_string(s.epochs) + " at " + std::to_string(batches) + " minibatches per epoch (train_examples " +
           std::to_string(s.train_examples) + ", batch_size " + std::to_string(s.batch_size) + ")";
  }
  const EpochSoFar& so_far = s.epoch_so_far;
  if (into_epoch == 0 ? so_far.loss_sum != 0 || so_far.correct != 0 || so_far.seconds != 0
                      : so_far.correct > into_epoch * uint64_t(s.batch_size)) {
    return "epoch_loss_sum, epoch_correct and epoch_seconds do not fit " + std::to_string(into_epoch) +
           " steps into an epoch";
  }
  if (!s.backend.empty() || !s.mode.empty()) return engine_problem(s.backend, s.mode);
  return "";
}

// Bytes from the file, safe for a terminal: anything but printable ASCII as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

// Decimal digits only: no sign, space or exponent, and no silent wrap-around.

// ---- header validation ----------------------------------------------------------------------------

struct Placed {
  const TensorSpec* spec;
  uint64_t begin, end;  // bytes into the data section
};

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& name) : name_(name) {}

  [[noreturn]] void fail(const std::string& problem) const { throw CheckpointError(name_ + ": " + problem); }

  nlohmann::json parse(const uint8_t* begin, const uint8_t* end) const {
    // A checkpoint header has three levels: the header, a tensor's entry, its shape or offsets.
    auto refuse = [this](const std::string& repeated_key) {
      if (repeated_key.empty()) fail("header is nested deeper than a checkpoint header (3 levels)");
      fail("header repeats the key " + repeated_key);
    };
    try {
      return parse_strict_json(begin, end, 3, refuse);
    } catch (const nlohmann::json::exception& e) {
      fail("header is not valid JSON (" + printable(e.what()) + ")");  // nlohmann quotes the bytes it read
    }
  }

  // Shape and offsets of one tensor entry; the offsets' order against the others is checked later.
  Placed tensor(const TensorSpec& spec, const nlohmann::json& entry) const {
    const std::string who = std::string("tensor '") + spec.name + "'";
    if (!entry.is_object()) fail(who + " is " + entry.dump() + ", not an object");
    for (const auto& [key, value] : entry.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") fail(who + " has an unknown field " + quoted(key));
    }
    if (!entry.contains("dtype")) fail(who + " has no \"dtype\"");
    if (!entry.contains("shape")) fail(who + " has no \"shape\"");
    if (!entry.contains("data_offsets")) fail(who + " has no \"data_offsets\"");

    const auto& dtype = entry["dtype"];
    if (dtype != "F32") fail(who + " has dtype " + dtype.dump() + ", expected \"F32\" (float32)");

    const std::vector<uint64_t> expected(spec.shape.begin(), spec.shape.begin() + spec.rank);
    const auto& shape = entry["shape"];
    if (!shape.is_array()) fail(who + " has shape " + shape.dump() + ", not an array");
    std::vector<uint64_t> got;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) fail(who + " has shape " + shape.dump() + ", not an array of non-negative integers");
      got.push_back(d.get<uint64_t>());
    }
    if (got != expected) fail(who + " has shape " + shape_text(got) + ", expected " + shape_text(expected));

    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      fail(who + " has data_offsets " + offsets.dump() + ", expected [begin,end] of non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (end < begin || end - begin != 4 * uint64_t{spec.size}) {
      fail(who + " has data_offsets " + offsets.dump() + " spanning " +
           (end < begin ? std::string("a negative length") : std::to_string(end - begin) + " bytes") + ", expected " +
           std::to_string(4 * spec.size) + " (" + std::to_string(spec.size) + " float32)");
    }
    return {&spec, begin, end};
  }

  // The tensors must tile the data section: no overlap (two tensors sharing bytes), no gap (bytes that
  // belong to nothing), nothing missing or left over at the end.
  void check_tiling(std::vector<Placed> placed, uint64_t data_size) const {
    std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
    uint64_t at = 0;
    const char* previous = nullptr;
    for (const auto& p : placed) {
      const std::string where = previous ? std::string("tensor '") + previous + "'" : "the start of the data";
      if (p.begin < at) {
        fail(std::string("tensor '") + p.spec->name + "' at bytes [" + std::to_string(p.begin) + "," +
             std::to_string(p.end) + ") overlaps " + where + ", which ends at " + std::to_string(at));
      }
      if (p.begin > at) {
        fail("gap of " + std::to_string(p.begin - at) + " bytes between " + where + " and tensor '" + p.spec->name +
             "' (data_offsets must be contiguous)");
      }
      at = p.end;
      previous = p.spec->name;
    }
    if (data_size < at) {
      fail("truncated: the tensors need " + std::to_string(at) + " data bytes, the file has " +
           std::to_string(data_size) + " after the header");
    }
    if (data_size > at) fail(std::to_string(data_size - at) + " unexpected bytes after the last tensor");
  }

  // The training state, when the file is one of ours. A safetensors file from elsewhere (PyTorch's
  // save_file writes no __metadata__, or its own "format") or of format 1 holds parameters only: nullopt.
  std::optional<TrainingState> metadata(const nlohmann::json& header) const {
    if (!header.contains("__metadata__")) return std::nullopt;
    const auto& meta = header["__metadata__"];
    if (!meta.is_object()) fail("\"__metadata__\" is " + meta.dump() + ", not an object");
    for (const auto& [key, value] : meta.items()) {
      // safetensors defines metadata as a string-to-string map; PyTorch's loader rejects anything else.
      if (!value.is_string()) fail("__metadata__ " + quoted(key) + " is " + value.dump() + ", not a string");
    }
    const std::string format = meta.value("format", std::string());
    if (format.rfind(kCheckpointFormatName, 0) != 0 || format == kCheckpointFormatParametersOnly) return std::nullopt;
    if (format != kCheckpointFormat) {
      fail("__metadata__ \"format\" is " + quoted(format) + ", expected " + quoted(kCheckpointFormat) +
           " (written by a newer version of lenet-dp)");
    }
    TrainingState s;
    s.epoch = int_field(meta, "epoch");
    s.epochs = int_field(meta, "epochs");
    s.seed = u64_field(meta, "seed");
    s.step = u64_field(meta, "step");
    s.lr = double_field(meta, "lr");
    s.batch_size = int_field(meta, "batch_size");
    s.replicas = int_field(meta, "replicas");
    s.train_examples = u64_field(meta, "train_examples");
    // Added within format 2, so optional; a recorded size is at least 1 (0 stands for "not recorded").
    if (meta.contains("test_examples") && (s.test_examples = u64_field(meta, "test_examples")) == 0)
      fail("__metadata__ test_examples is 0, must be at least 1");
    if (meta.contains("train_fingerprint")) s.train_fingerprint = u64_field(meta, "train_fingerprint");
    if (meta.contains("backend") || meta.contains("mode")) {
      s.backend = field(meta, "backend");
      s.mode = field(meta, "mode");
      if (const std::string problem = engine_problem(s.backend, s.mode); !problem.empty()) fail("__metadata__ " + problem);
    }
    s.epoch_so_far.loss_sum = double_field(meta, "epoch_loss_sum");
    s.epoch_so_far.correct = u64_field(meta, "epoch_correct");
    s.epoch_so_far.seconds = double_field(meta, "epoch_seconds");
    const std::string problem = state_problem(s);
    if (!problem.empty()) fail("__metadata__ " + problem);
    return s;
  }

 private:
  std::string field(const nlohmann::json& meta, const char* key) const {
    if (!meta.contains(key)) fail(std::string("__metadata__ has no \"") + key + "\"");
    return meta[key].get<std::string>();
  }
  uint64_t u64_field(const nlohmann::json& meta, const char* key) const {
    const std::string text = field(meta, key);
    uint64_t v = 0;
    if (!parse_u64(text, v)) fail("__metadata__ " + quoted(key) + " is " + quoted(text) + ", not a non-negative integer");
    return v;
  }
  double double_field(const nlohmann::json& meta, const char* key) const {
    const std::string text = field(meta, key);
    double v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size())
      fail("__metadata__ " + quoted(key) + " is " + quoted(text) + ", not a number");
    return v;
  }
  int int_field(const nlohmann::json& meta, const char* key) const {
    const uint64_t v = u64_field(meta, key);
    if (v > uint64_t{INT_MAX}) fail("__metadata__ " + quoted(key) + " is " + std::to_string(v) + ", too large");
    return static_cast<int>(v);
  }

  const std::string& name_;
};

// ---- writing --------------------------------------------------------------------------------------

std::vector<uint8_t> encode(const std::vector<float>& parameters, const TrainingState& state) {
  // ordered_json keeps the header readable: metadata first, then the tensors in flat-buffer order.
  nlohmann::ordered_json header;
  auto& meta = header["__metadata__"];
  meta["format"] = kCheckpointFormat;
  meta["epoch"] = std::to_string(state.epoch);
  meta["epochs"] = std::to_string(state.epochs);
  meta["seed"] = std::to_string(state.seed);
  meta["step"] = std::to_string(state.step);
  meta["lr"] = format_double(state.lr);
  meta["batch_size"] = std::to_string(state.batch_size);
  meta["replicas"] = std::to_string(state.replicas);
  meta["train_examples"] = std::to_string(state.train_examples);
  if (state.test_examples != 0) meta["test_examples"] = std::to_string(state.test_examples);
  if (state.train_fingerprint) meta["train_fingerprint"] = std::to_string(*state.train_fingerprint);
  if (!state.backend.empty() || !state.mode.empty()) {
    meta["backend"] = state.backend;
    meta["mode"] = state.mode;
  }
  meta["epoch_loss_sum"] = format_double(state.epoch_so_far.loss_sum);
  meta["epoch_correct"] = std::to_string(state.epoch_so_far.correct);
  meta["epoch_seconds"] = format_double(state.epoch_so_far.seconds);
  for (const auto& t : tensor_specs()) {
    auto& entry = header[t.name];
    entry["dtype"] = "F32";
    entry["shape"] = std::vector<uint64_t>(t.shape.begin(), t.shape.begin() + t.rank);
    entry["data_offsets"] = {uint64_t{4} * t.offset, uint64_t{4} * (t.offset + t.size)};
  }
  std::string text = header.dump();
  text.append((kAlignment - (kLengthBytes + text.size()) % kAlignment) % kAlignment, ' ');

  std::vector<uint8_t> bytes;
  bytes.reserve(kLengthBytes + text.size() + kDataBytes);
  put_le64(bytes, text.size());
  bytes.insert(bytes.end(), text.begin(), text.end());
  const size_t data_start = bytes.size();
  bytes.resize(data_start + kDataBytes);
  for (size_t i = 0; i < kNumParameters; ++i) put_le_float(&bytes[data_start + 4 * i], parameters[i]);
  return bytes;
}

}  // namespace

void save_checkpoint(const std::string& path, const std::vector<float>& parameters, const TrainingState& state,
                     const FileIo& io) {
  const auto fail = [&](const std::string& problem) {
    throw CheckpointError(path + ": cannot save checkpoint: " + problem);
  };
  if (parameters.size() != kNumParameters) {
    fail(std::to_string(parameters.size()) + " parameters, expected " + std::to_string(kNumParameters));
  }
  if (const std::string problem = state_problem(state); !problem.empty()) fail("training state " + problem);
  const std::vector<uint8_t> bytes = encode(parameters, state);
  if (const std::string problem = replace_file(path, bytes.data(), bytes.size(), "checkpoint", io); !problem.empty()) fail(problem);
}

Checkpoint load_checkpoint_bytes(const uint8_t* data, size_t size, const std::string& name) {
  const HeaderReader reader(name);
  if (size < kLengthBytes) {
    reader.fail("truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  const uint64_t header_size = get_le64(data);
  if (header_size > kMaxCheckpointHeaderBytes) {
    reader.fail("header length " + std::to_string(header_size) + " is absurd (a checkpoint header is under " +
                std::to_string(kMaxCheckpointHeaderBytes) + " bytes): not a checkpoint, or corrupt");
  }
  if (header_size > size - kLengthBytes) {
    reader.fail("truncated: header length " + std::to_string(header_size) + " runs past the end of the file (" +
                std::to_string(size) + " bytes)");
  }
  const uint8_t* header_begin = data + kLengthBytes;
  // The JSON parser takes a NUL byte for the end of its input, which would leave the bytes after it unread.
  if (const void* nul = std::memchr(header_begin, 0, header_size); nul != nullptr) {
    reader.fail("header holds a NUL byte at offset " +
                std::to_string(kLengthBytes + (static_cast<const uint8_t*>(nul) - header_begin)) + ", not JSON text");
  }
  const nlohmann::json header = reader.parse(header_begin, header_begin + header_size);
  if (!header.is_object()) reader.fail("header is " + std::string(header.type_name()) + ", not a JSON object");

  std::vector<Placed> placed;
  for (const auto& t : tensor_specs()) {
    if (!header.contains(t.name)) reader.fail(std::string("missing tensor '") + t.name + "'");
    placed.push_back(reader.tensor(t, header[t.name]));
  }
  for (const auto& item : header.items()) {
    const std::string& key = item.key();
    if (key == "__metadata__") continue;
    const auto& specs = tensor_specs();
    if (std::none_of(specs.begin(), specs.end(), [&](const TensorSpec& t) { return key == t.name; })) {
      reader.fail("unknown tensor " + quoted(key) + " (this network has conv1, conv2, fc1, fc2 weights and biases)");
    }
  }
  const uint64_t data_size = size - kLengthBytes - header_size;
  reader.check_tiling(placed, data_size);

  Checkpoint checkpoint;
  checkpoint.state = reader.metadata(header);
  checkpoint.parameters.resize(kNumParameters);
  const uint8_t* data_section = header_begin + header_size;
  for (const auto& p : placed) {
    for (size_t i = 0; i < p.spec->size; ++i) {
      checkpoint.parameters[p.spec->offset + i] = get_le_float(data_section + p.begin + 4 * i);
    }
  }
  return checkpoint;
}

Checkpoint load_checkpoint(const std::string& path) {
  // One byte past the largest valid checkpoint is enough to reject any larger file without reading it.
  const size_t limit = kLengthBytes + kMaxCheckpointHeaderBytes + kDataBytes + 1;
  const std::vector<uint8_t> bytes = read_without_waiting<CheckpointError>(path, limit, "checkpoint");
  if (bytes.size() == limit) {
    throw CheckpointError(path + ": larger than any checkpoint (over " + std::to_string(limit - 1) + " bytes)");
  }
  return load_checkpoint_bytes(bytes.data(), bytes.size(), path);
}

}  // namespace lenet::engine
