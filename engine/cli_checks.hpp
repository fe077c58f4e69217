// CLI11 reads an empty value ("--epochs ''") as 0 or as the option's default, a silent wrong answer for
// a script whose variable was unset. Both programs refuse one instead.
// CLI11 2.x also converts an integer with strtoll in base 0, so "010" would be 8 and "0x10" 16, and
// clamps one past the range of long long; integer flags take the decimal check instead.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <limits>
#include <string>

namespace lenet::engine {

// The name of the first option given with an empty value, or "" when there is none.
inline std::string option_with_empty_value(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag without value
    for (const std::string& value : opt->results())
      if (value.empty()) return opt->get_name();
  }
  return "";
}

// An optional sign and decimal digits without a leading zero, for a value from lo to hi (the option's
// range, within its type T: beyond that CLI11 would only say that it "could not convert"). An empty
// value passes here, for option_with_empty_value to name.
template <typename T>
CLI::Validator decimal(T lo, T hi = std::numeric_limits<T>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& s) {
        if (s.empty()) return std::string();
        const size_t d = s[0] == '-' || s[0] == '+';
        T v = 0;
        const char* end = s.data() + s.size();
        const bool digits = s.size() > d && s.find_first_not_of("0123456789", d) == std::string::npos &&
                            (s[d] != '0' || s.size() == d + 1);
        if (!digits) return s + " is not a decimal integer (digits without a leading zero)";
        // The digits were checked: from_chars reads them all, or fails for a value beyond T.
        const std::from_chars_result r = std::from_chars(s.data() + (s[0] == '-' ? 0 : d), end, v);
        if (r.ec != std::errc() || v < lo || v > hi)
          return s + " is out of range (" + std::to_string(lo) + " to " + std::to_string(hi) + ")";
        return std::string();
      },
      "");  // no description: CLI11 would add it to the option's type name in --help
}

}  // namespace lenet::engine
