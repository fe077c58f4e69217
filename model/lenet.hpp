// The LeNet of the source text (see the team's ARCHITECTURE.md, outside this repository): its shapes,
// the layout of all parameters in one flat buffer (and gradients in another of the same layout),
// initialisation and SGD.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lenet::model {

// Layer shapes. Convolutions have stride 1 and no padding; pools are 2x2 average with stride 2 (floor).
constexpr int kInSide = 28;
constexpr int kC1 = 20, kK1 = 3, kS1 = kInSide - kK1 + 1;  // conv1: 1 -> 20 channels, 28 -> 26
constexpr int kP1 = kS1 / 2;                               // pool1: 26 -> 13
constexpr int kC2 = 50, kK2 = 5, kS2 = kP1 - kK2 + 1;      // conv2: 20 -> 50 channels, 13 -> 9
constexpr int kP2 = kS2 / 2;                               // pool2: 9 -> 4 (the last row and column dropped)
constexpr int kFlat = kC2 * kP2 * kP2;                     // 800, flattened C, H, W
constexpr int kHidden = 128;
constexpr int kClasses = 10;
constexpr int kInPixels = kInSide * kInSide;

enum ParamId { kConv1W, kConv1B, kConv2W, kConv2B, kFc1W, kFc1B, kFc2W, kFc2B, kNumTensors };

struct TensorSpec {
  const char* name;            // as a PyTorch module of this network names it
  std::array<int, 4> shape;    // unused trailing dimensions are 0
  int rank;
  size_t offset;               // in elements, into the flat buffer
  size_t size;                 // elements
  bool is_weight;              // drawn from N(0, 0.01^2); biases start at 0
};

// The eight tensors in flat-buffer order: conv1.weight [20,1,3,3], conv1.bias, conv2.weight [50,20,5,5],
// conv2.bias, fc1.weight [128,800], fc1.bias, fc2.weight [10,128], fc2.bias. Fully connected weights are
// [out, in] as in torch.nn.Linear. No padding between tensors.
const std::array<TensorSpec, kNumTensors>& tensor_specs();
constexpr size_t kNumParameters = 129068;

// Named views into a flat buffer (parameters or gradients).
template <typename T>
struct LenetView {
  T* conv1_w; T* conv1_b; T* conv2_w; T* conv2_b; T* fc1_w; T* fc1_b; T* fc2_w; T* fc2_b;
};
template <typename T>
LenetView<T> view(T* flat) {
  const auto& s = tensor_specs();
  return {flat + s[kConv1W].offset, flat + s[kConv1B].offset, flat + s[kConv2W].offset, flat + s[kConv2B].offset,
          flat + s[kFc1W].offset,   flat + s[kFc1B].offset,   flat + s[kFc2W].offset,   flat + s[kFc2B].offset};
}

// Weights ~ N(0, 0.01^2), biases 0, drawn in flat-buffer order from lenet::Rng(seed, stream 0), so every
// backend and replica count starts from the same numbers.
template <typename T>
std::vector<T> init_parameters(uint64_t seed);

// w -= lr_over_batch * g, elementwise over the whole flat buffer, the product and the difference each
// rounded (no FMA), as the GPU's kernels do: the same gradients give the same bits on both.
template <typename T>
void sgd_update(T* w, const T* g, size_t n, T lr_over_batch);

// lr_over_batch for a minibatch of `rows` examples: one float division that every backend and mode
// takes from here, so that their updates scale the summed gradients by the same bits.
inline float sgd_scale(float lr, int rows) { return lr / static_cast<float>(rows); }

// Floating-point operations of one training step on `rows` examples (forward and backward, counting a
// multiply-add as two), and of a forward pass alone: the arithmetic floor the benchmarks compare with.
double train_flops_per_example();
double forward_flops_per_example();

}  // namespace lenet::model
