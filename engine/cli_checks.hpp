// CLI11 reads an empty value ("--epochs ''") as 0 or as the option's default, a silent wrong answer for
// a script whose variable was unset. Both programs refuse one instead.
// CLI11 2.x also converts an integer with strtoll in base 0, so "010" would be 8 and "0x10" 16, and
// clamps one past the range of long long; integer flags take the Decimal check instead.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
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

// An optional sign and decimal digits without a leading zero, within the range of long long. An empty
// value passes here, for option_with_empty_value to name.
inline const CLI::Validator Decimal(
    [](std::string& s) {
      if (s.empty()) return std::string();
      const size_t d = s[0] == '-' || s[0] == '+';
      long long v = 0;
      const char* end = s.data() + s.size();
      const bool digits = s.size() > d && s.find_first_not_of("0123456789", d) == std::string::npos &&
                          (s[d] != '0' || s.size() == d + 1);
      if (!digits) return s + " is not a decimal integer (digits without a leading zero)";
      const std::from_chars_result r = std::from_chars(s.data() + (s[0] == '-' ? 0 : d), end, v);
      if (r.ec != std::errc()) return s + " is out of range";  // the digits were checked: it read them all
      return std::string();
    },
    "");  // no description: CLI11 would add it to the option's type name in --help

}  // namespace lenet::engine
