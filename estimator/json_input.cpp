// estimator/json_input.cpp — see json_input.h.
#include "json_input.h"

#include <vector>

#include "input_error.h"

namespace coloc::est {

using nlohmann::json;

namespace {

std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

}  // namespace

json parse_json_input(std::string_view text, const std::string& source) {
  // The key being read at each depth, so that an error inside a value names its field. The
  // parser reports a key before it reads the key's value; the value's own error comes next.
  std::vector<std::string> keys;
  int depth_now = -1;
  auto track = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key) {
      if (keys.size() <= size_t(depth)) keys.resize(size_t(depth) + 1);
      keys[size_t(depth)] = parsed.is_string() ? parsed.get<std::string>() : std::string();
      depth_now = depth;
    } else if (event == json::parse_event_t::object_end || event == json::parse_event_t::array_end) {
      depth_now = depth - 1;
    }
    return true;
  };
  auto field = [&]() {
    std::string path;
    for (int d = 0; d <= depth_now && size_t(d) < keys.size(); ++d) {
      if (keys[size_t(d)].empty()) continue;
      path += (path.empty() ? "" : ".") + keys[size_t(d)];
    }
    return path;
  };
  try {
    return json::parse(text, track);
  } catch (const json::out_of_range& e) {
    // 406: a number the parser cannot hold. Its message quotes the number.
    std::string msg = one_line(e.what());
    std::string number;
    if (auto q = msg.find('\''); q != std::string::npos)
      if (auto q2 = msg.find('\'', q + 1); q2 != std::string::npos) number = msg.substr(q, q2 - q + 1);
    const std::string f = field();
    throw InputError(source + ": " + (f.empty() ? std::string() : "\"" + f + "\": ") + "number out of range" +
                     (number.empty() ? std::string() : " (" + number + ")"));
  } catch (const json::exception& e) {
    throw InputError(source + ": not valid JSON (" + one_line(e.what()) + ")");
  }
}

}  // namespace coloc::est
