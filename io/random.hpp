// Portable pseudo-random numbers: the same bits on every platform and compiler for a given seed, which
// std::*_distribution does not promise. A leaf header, used by io (epoch shuffles) and model
// (parameter initialisation).
#pragma once
#include <cmath>
#include <cstdint>

namespace lenet {

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a Weyl constant and finalised with
// a bijective mixer; passes BigCrush, and every (seed, stream) pair gives an independent sequence.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : state_(mix(seed) ^ mix(stream * kGolden + 1)) {}

  uint64_t next_u64() {
    state_ += kGolden;
    return mix(state_);
  }

  // Uniform integer in [0, n) for n >= 1, unbiased: draws below 2^64 mod n are rejected.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next_u64();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform double in (0, 1]: 53 random bits, never 0 so that log() is finite.
  double uniform_open0() { return static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53; }

  // Standard normal by the Box-Muller transform (one value per call; the sine half is dropped so the
  // sequence does not depend on how many values a caller asked for before).
  double normal() {
    const double u1 = uniform_open0();
    const double u2 = uniform_open0();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  // The Weyl constant and the bijective finaliser (public for the tests, which undo them).
  static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace lenet
