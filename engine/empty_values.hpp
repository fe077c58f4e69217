// CLI11 reads an empty value ("--epochs ''") as 0 or as the option's default, a silent wrong answer for
// a script whose variable was unset. Both programs refuse one instead.
#pragma once
#include <CLI/CLI.hpp>

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

}  // namespace lenet::engine
