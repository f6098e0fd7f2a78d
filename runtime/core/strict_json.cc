#include "runtime/core/strict_json.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerod {
namespace {

struct DuplicateKey {
  std::string message;
};

}  // namespace

absl::StatusOr<nlohmann::json> parse_strict_json(const std::string& text, const std::string& what) {
  using Event = nlohmann::json::parse_event_t;
  // Per open object or array: the keys seen (objects) and the last one,
  // which names the value being parsed in the path of a message.
  struct Open {
    bool object;
    std::set<std::string> keys;
    std::string key;
  };
  std::vector<Open> open;
  auto path = [&] {
    // The keys that lead to the innermost object, the one holding the duplicate.
    std::vector<std::string> names;
    for (size_t i = 0; i + 1 < open.size(); ++i) {
      if (open[i].object) names.push_back(open[i].key);
    }
    return names.empty() ? std::string("the top level") : absl::StrJoin(names, ".");
  };
  const nlohmann::json::parser_callback_t check = [&](int, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        open.push_back({event == Event::object_start, {}, {}});
        break;
      case Event::object_end:
      case Event::array_end:
        open.pop_back();
        break;
      case Event::key: {
        Open& o = open.back();
        o.key = parsed.get<std::string>();
        if (!o.keys.insert(o.key).second) {
          throw DuplicateKey{absl::StrCat("duplicate key '", o.key, "' in ", path())};
        }
        break;
      }
      case Event::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const DuplicateKey& d) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON: ", d.message));
  } catch (const nlohmann::json::exception& e) {
    // A syntax error, or a number beyond a double's range (1e999).
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON: ", e.what()));
  }
}

}  // namespace zerod
