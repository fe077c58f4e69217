// CLI11 reads an empty value ("--epochs ''") as 0 or as the option's default, a silent wrong answer for
// a script whose variable was unset. Both programs refuse one instead.
// CLI11 2.x also converts an integer with strtoll in base 0, so "010" would be 8 and "0x10" 16, and
// clamps one past the range of long long; integer flags take the decimal check instead.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/output_file.hpp"

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

// CLI11 takes the argument after an option that wants a value as its value even when that argument is
// another option ("--metrics --quiet" would write to a file named --quiet and leave --quiet unset), and
// takes the next argument after "--metrics=" too; and it drops the empty items of a list ("1,,2" reads
// as 1,2). All three are refused before the parse: what is wrong with the first such option, or "" when
// there is none. A value that starts as an option's name goes after "=".
inline std::string option_without_value(const CLI::App& app, int argc, const char* const* argv) {
  auto option = [&app](const std::string& arg) -> const CLI::Option* {
    return arg.size() > 1 && arg[0] == '-' ? app.get_option_no_throw(arg.substr(0, arg.find('='))) : nullptr;
  };
  auto takes_value = [](const CLI::Option* opt) { return opt != nullptr && opt->get_expected_max() > 0; };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // what follows is not an option (this "--" is no value and ends no list)
    const CLI::Option* opt = option(arg);
    if (!takes_value(opt)) continue;
    const size_t eq = arg.find('=');
    std::vector<std::string> values;
    if (eq != std::string::npos) {
      if (eq + 1 == arg.size() && arg.rfind("--", 0) == 0) return arg.substr(0, eq) + ": empty value";
      values.push_back(arg.substr(eq + 1));
    } else {
      if (i + 1 == argc) continue;
      if (option(argv[i + 1]) != nullptr)
        return arg + ": no value before the option " + argv[i + 1] +
               " (a value that is an option's name goes after =: " + arg + "=" + argv[i + 1] + ")";
      values.push_back(argv[++i]);  // "--" too
    }
    // An option of several values takes the words up to the next option (--replicas 1,2 4).
    while (opt->get_expected_max() > 1 && i + 1 < argc && std::string(argv[i + 1]) != "--" &&
           option(argv[i + 1]) == nullptr)
      values.push_back(argv[++i]);
    // CLI11 takes a "--" right after a list's values as the end of the list, not of the options.
    if (opt->get_expected_max() > 1 && i + 1 < argc && std::string(argv[i + 1]) == "--") ++i;
    const char delimiter = opt->get_delimiter();
    for (const std::string& value : values)
      if (delimiter != '\0' && !value.empty() &&
          (value.front() == delimiter || value.back() == delimiter ||
           value.find(std::string(2, delimiter)) != std::string::npos))
        return arg.substr(0, eq) + ": an empty item in the list " + value;
  }
  return "";
}

// CLI11's message for a failed parse, with a repeated flag said plainly (CLI11 words it as "--epochs: At
// Most 1 required but received 2").
inline std::string parse_error_text(const CLI::ParseError& e, int argc, const char* const* argv) {
  const std::string what = e.what(), flag = what.substr(0, what.find(':'));
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) == nullptr) return what;
  int given = 0;
  for (int i = 1; i < argc; ++i) given += std::string(argv[i]).substr(0, std::string(argv[i]).find('=')) == flag;
  return given > 1 ? flag + ": given more than once" : what;
}

// What --help and --version print, on stdout, which must take it (as a run's final line): "" when
// written, else "stdout: write failed (reason)".
inline std::string print_help_or_version(const CLI::App& app, const CLI::ParseError& e) {
  std::ostringstream text;
  app.exit(e, text);
  return write_all(std::cout, text.str(), "stdout");
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
