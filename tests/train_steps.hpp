// Shared by the tests that compare backends: the first minibatches of epoch 0 of a seeded shuffle, the
// Euclidean distance between two parameter vectors and between their tensors, and what differs between
// two that should be identical, or between two checkpoint files.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "model/lenet.hpp"

namespace lenet::testing {

// Trains `max_steps` minibatches of epoch 0 (all of them by default) with lr 0.2.
inline void train_epoch0(engine::Backend& b, const io::Split& data, int batch, uint64_t seed,
                         size_t max_steps = std::numeric_limits<size_t>::max()) {
  const io::EpochSampler sampler(data.size(), size_t(batch), seed, true);
  const std::vector<uint32_t> order = sampler.epoch_order(0);
  for (size_t k = 0; k < sampler.num_batches() && k < max_steps; ++k) {
    const io::BatchRange r = sampler.batch(k);
    b.train_step(data, order.data() + r.first, int(r.rows), 0.2f);
  }
}

// Infinite for vectors of different sizes: a backend that returned too few parameters is not close.
inline double distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

inline std::vector<float> slice(const std::vector<float>& v, size_t offset, size_t count) {
  return std::vector<float>(v.begin() + long(offset), v.begin() + long(offset + count));
}

// The largest over the eight tensors of |got - ref| / |ref - start| on that tensor alone, and the
// tensor's name: an error in a tensor that moves little would vanish in the whole vector's distance.
struct TensorError {
  double relative = 0;
  const char* name = "";
};
inline TensorError worst_tensor_error(const std::vector<float>& got, const std::vector<float>& ref,
                                      const std::vector<float>& start) {
  if (got.size() != model::kNumParameters || ref.size() != got.size() || start.size() != got.size())
    return {std::numeric_limits<double>::infinity(), "(a vector of the wrong size)"};
  TensorError worst;
  for (const model::TensorSpec& t : model::tensor_specs()) {
    const auto part = [&t](const std::vector<float>& v) { return slice(v, t.offset, t.size); };
    const double error = distance(part(got), part(ref)), moved = distance(part(ref), part(start));
    if (std::isnan(error)) return {error, t.name};  // not finite: fails every bound
    // A tensor that did not move is right only where it did not move either.
    const double relative = moved > 0 ? error / moved : error > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    if (relative > worst.relative) worst = {relative, t.name};
  }
  return worst;
}

// "" where a and b hold the same bits (-0 differs from +0, a NaN equals itself), else what differs: in
// each tensor of a parameter vector, how many values and the first of them. EXPECT_EQ on the vectors
// would print their first 32 values, which say nothing about where 129,068 values part.
inline std::string bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::to_string(a.size()) + " values against " + std::to_string(b.size());
  const auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  };
  std::ostringstream out;
  out.precision(9);  // every float's digits
  const auto part = [&](const char* name, size_t offset, size_t size) {
    size_t count = 0, first = 0;
    for (size_t i = offset; i < offset + size; ++i) {
      if (bits(a[i]) != bits(b[i]) && count++ == 0) first = i;
    }
    if (count == 0) return;
    out << (out.tellp() > 0 ? "; " : "") << name << ": " << count << " of " << size << " differ, the first ["
        << first - offset << "] " << a[first] << " against " << b[first];
    if (std::isnan(a[first]) && std::isnan(b[first]))  // NaNs that differ in their payloads
      out << " (0x" << std::hex << bits(a[first]) << " against 0x" << bits(b[first]) << std::dec << ")";
  };
  if (a.size() == model::kNumParameters) {
    for (const model::TensorSpec& t : model::tensor_specs()) part(t.name, t.offset, t.size);
  } else {
    part("values", 0, a.size());
  }
  return out.str();
}

// "" where two files have the same bytes, else what differs between the two checkpoints: their parameters
// (bit_difference), or where their headers part.
inline std::string checkpoint_difference(const std::string& path_a, const std::string& path_b) {
  std::string a, b;
  for (const auto& [path, bytes] : {std::pair{&path_a, &a}, std::pair{&path_b, &b}}) {
    std::ifstream in(*path, std::ios::binary);
    if (!in) return "cannot read " + *path;
    bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (a == b) return "";
  const size_t at = size_t(std::mismatch(a.begin(), a.begin() + long(std::min(a.size(), b.size())), b.begin()).first -
                           a.begin());
  const std::string out = std::to_string(a.size()) + " bytes against " + std::to_string(b.size()) +
                          ", first difference at byte " + std::to_string(at);
  const auto parameters = [](const std::string& bytes, const std::string& path) {
    return engine::load_checkpoint_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path).parameters;
  };
  try {
    const std::string params = bit_difference(parameters(a, path_a), parameters(b, path_b));
    if (!params.empty()) return out + "; parameters: " + params;
    const size_t from = at < 40 ? 0 : at - 40;  // the parameters agree: the headers part there
    return out + "; same parameters, the headers part at: '" + a.substr(from, 80) + "' against '" +
           b.substr(from, 80) + "'";
  } catch (const std::exception& e) {
    return out + "; " + e.what();
  }
}

}  // namespace lenet::testing
