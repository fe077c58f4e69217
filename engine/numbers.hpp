// Numbers as text, exactly and independent of the C locale: the shortest decimal that reads back to the
// same double or float, and a strict unsigned parse (digits only, no sign, no leading zero, no overflow). And two
// checks of floats: a learning rate float32 keeps (and its parse), and finite parameters.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace lenet::engine {

// A float's is the float's shortest: 3e+38, not 3.0000000054977558e+38 as for the double it widens to.
template <typename Float>
inline std::string format_shortest(Float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
inline std::string format_double(double v) { return format_shortest(v); }

inline bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty() || s[0] < '0' || s[0] > '9' || (s[0] == '0' && s.size() > 1)) return false;  // no leading zero
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
inline constexpr const char* kU64Rule = "must be an integer from 0 to 2^64-1 in decimal digits without a leading zero";

// A --seed value: parse_u64 after an optional '+', as the integer flags take one (cli_checks.hpp).
inline bool parse_seed(const std::string& s, uint64_t& v) { return parse_u64(s.rfind('+', 0) == 0 ? s.substr(1) : s, v); }

// A learning rate the float32 arithmetic keeps: > 0 after rounding to float32 and finite (a smaller one
// would train nothing, a larger one overflow; NaN fails both comparisons). Rounding to nearest, ties to
// even: 2^-150, half the smallest float, rounds to 0 and anything above it to at least that float;
// 2^128 - 2^103, half an ulp above the largest float, rounds to infinity and anything below it to a float.
inline bool float32_positive(double v) { return v > 0x1p-150 && v < 0x1p128 - 0x1p103; }
inline constexpr const char* kFloat32PositiveRule = "must be a decimal number that rounds to a finite float32 above 0 (1.4e-45 to 3.4e38 once rounded)";

// A --lr value: a decimal number after an optional '+' (no spaces, no hex, nothing after it) that
// float32_positive takes. The text, not a parsed double, goes into the error ("1e400", not "inf").
inline bool parse_lr(const std::string& s, double& v) {
  const size_t d = s.rfind('+', 0) == 0;
  const auto r = std::from_chars(s.data() + d, s.data() + s.size(), v);
  return s.size() > d && r.ec == std::errc() && r.ptr == s.data() + s.size() && float32_positive(v);
}

inline bool all_finite(const std::vector<float>& v) {
  for (const float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace lenet::engine
