// Checkpoints: the flat parameter buffer and the training state needed to resume, in the safetensors
// format (https://github.com/huggingface/safetensors), so `safetensors.torch.load_file` reads the
// parameters into a PyTorch LeNet of the source text with the same names and shapes.
//
// Layout: an 8-byte little-endian u64 header length N, N bytes of JSON header (padded with spaces so the
// data starts 8-byte aligned), then the eight tensors as little-endian float32 in flat-buffer order
// (model::tensor_specs()), contiguous. The header maps each tensor name to
// {"dtype":"F32","shape":[...],"data_offsets":[begin,end]} (bytes into the data section, end exclusive)
// and "__metadata__" to string values: "format" and the TrainingState fields.
//
// Any other safetensors file holding exactly these eight float32 tensors loads too, as parameters only
// (no training state): what PyTorch's `safetensors.torch.save_file(model.state_dict(), ...)` writes for
// the source text's network, with no "__metadata__" or with a "format" of its own, and a checkpoint of
// format 1 (an older lenet-dp's).
//
// Saving is atomic: a crash or a full disk leaves the previous checkpoint intact. Loading trusts nothing:
// every malformed byte sequence becomes a CheckpointError naming the file and the problem.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>
#include "engine/replace_file.hpp"

namespace lenet::engine {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The value of __metadata__["format"]; a reader of another layout must change the version. Version 1
// (no epoch_* or train_examples fields; the same tensors) loads as parameters only; any other version
// is rejected (a newer lenet-dp wrote it). Within version 2, "test_examples", "train_fingerprint",
// "backend" and "mode" are optional (added later; older readers ignore metadata they do not know).
constexpr const char* kCheckpointFormatName = "lenet-dp checkpoint";
constexpr const char* kCheckpointFormat = "lenet-dp checkpoint 2";
constexpr const char* kCheckpointFormatParametersOnly = "lenet-dp checkpoint 1";
// Our header is under 1 KiB. The cap keeps a corrupt length from making the loader allocate or parse
// gigabytes (safetensors itself allows 100 MB).
constexpr size_t kMaxCheckpointHeaderBytes = size_t{1} << 20;

// The training pass of the epoch in progress, up to a stop in its middle: what the resumed epoch adds
// its own steps to, so that its metrics cover the whole epoch.
struct EpochSoFar {
  double loss_sum = 0;   // summed training loss of the rows trained, finite, >= 0
  uint64_t correct = 0;  // their correct predictions
  double seconds = 0;    // training time, finite, >= 0
};

// What a resumed run needs besides the parameters. Written as decimal strings; doubles in the shortest
// form that reads back to the same value.
struct TrainingState {
  int epoch = 0;        // completed epochs, 0..epochs
  int epochs = 0;       // total asked, >= 1
  uint64_t seed = 0;    // initial parameters and every epoch's shuffle
  uint64_t step = 0;    // SGD steps completed over all epochs
  double lr = 0;        // finite, > 0
  int batch_size = 0;   // global minibatch, >= 1
  int replicas = 0;     // >= 1
  uint64_t train_examples = 0;  // the training set's size (after --train-limit), >= 1
  EpochSoFar epoch_so_far;  // of epoch `epoch` + 1 when `step` is in its middle; zero at an epoch's end
  uint64_t test_examples = 0;  // the test set's size (after --test-limit); 0: not recorded (optional field)
  // io::Split::fingerprint() of the training examples used; absent: not recorded (optional field).
  std::optional<uint64_t> train_fingerprint = std::nullopt;
  // What trained it, as Backend::name() and mode() say: "cpu" and "cpu", or "cuda" and "naive" or "graph"
  // (their sums round differently). Both empty: not recorded (optional fields, written together).
  std::string backend = "", mode = "";
};

struct Checkpoint {
  std::vector<float> parameters;       // model::kNumParameters, flat-buffer order
  std::optional<TrainingState> state;  // absent in a parameters-only safetensors file
};

// Replaces `path` with the checkpoint all at once (replace_file).
// Throws CheckpointError naming `path` and the OS error on any failure, after removing the temporary
// file; `path` then still holds whatever it held before. Also throws, writing nothing, when
// `parameters` is not model::kNumParameters long or `state` is one load_checkpoint would reject.
void save_checkpoint(const std::string& path, const std::vector<float>& parameters, const TrainingState& state,
                     const FileIo& io = {});

// Reads and validates a whole checkpoint. Throws CheckpointError naming `path` and the problem.
Checkpoint load_checkpoint(const std::string& path);

// The same checks on bytes in memory; `name` is used in error messages only.
Checkpoint load_checkpoint_bytes(const uint8_t* data, size_t size, const std::string& name);

}  // namespace lenet::engine
