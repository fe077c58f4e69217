// Numbers as text, exactly and independent of the C locale: the shortest decimal that reads back to the
// same double, and a strict unsigned parse (digits only, no sign, no overflow).
#pragma once
#include <charconv>
#include <cstdint>
#include <string>

namespace lenet::engine {

inline std::string format_double(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

inline bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace lenet::engine
