#include "common/config/yaml_fields.h"

#include <set>
#include <utility>

#include "common/status/status_macros.h"

namespace fulcrum::config {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", what));
}

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

absl::Status ReadMap(const YAML::Node& node, const std::string& prefix,
                     const std::map<std::string, Handler>& handlers) {
  if (!node.IsMap()) {
    return Bad(prefix.empty() ? "job" : prefix, "must be a mapping");
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate field ", Quote(Join(prefix, key))));
    }
    auto it = handlers.find(key);
    if (it == handlers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field ", Quote(Join(prefix, key))));
    }
    RETURN_IF_ERROR(it->second(kv.second, Join(prefix, key)));
  }
  return absl::OkStatus();
}

Handler Str(std::string* out) {
  return [out](const YAML::Node& n, const std::string& f) -> absl::Status {
    std::string v;
    RETURN_IF_ERROR(Read<std::string>(n, f, "a string", &v));
    if (v.empty()) {
      return Bad(f, "must not be empty (leave the field out for its default)");
    }
    *out = std::move(v);
    return absl::OkStatus();
  };
}

Handler Nested(const std::map<std::string, Handler>& handlers) {
  return [&handlers](const YAML::Node& n, const std::string& f) {
    return ReadMap(n, f, handlers);
  };
}

}  // namespace fulcrum::config
