// JSON as nlohmann parses it, less what it accepts silently.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lenet::engine {

// The JSON value in [begin, end), refusing what nlohmann would accept silently: a key repeated in one
// object (it keeps the last, hiding the first) and nesting deeper than `max_levels` (a megabyte of '['
// would build half a million nested values). `refuse`, which must throw, is called with the repeated key
// as JSON text, or with "" for the nesting. Malformed JSON throws nlohmann::json::parse_error.
template <typename Iterator, typename Refuse>
nlohmann::json parse_strict_json(Iterator begin, Iterator end, int max_levels, const Refuse& refuse) {
  std::vector<std::set<std::string>> keys;  // one set per open object or array, the outermost first
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      if (static_cast<int>(keys.size()) == max_levels) refuse(std::string());
      keys.emplace_back();
    } else if (event == E::object_end || event == E::array_end) {
      keys.pop_back();
    } else if (event == E::key && !keys.back().insert(parsed.get<std::string>()).second) {
      refuse(parsed.dump());
    }
    return true;
  };
  return nlohmann::json::parse(begin, end, callback);
}

}  // namespace lenet::engine
