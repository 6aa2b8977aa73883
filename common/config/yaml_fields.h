// Reading a YAML mapping into a protobuf message, field by field, with
// errors that name the field ("optimizer.lr must be a number, got \"x\"").
// Shared by the job spec's parts (job_spec.cc, embedding_spec.cc).
#ifndef FULCRUM_COMMON_CONFIG_YAML_FIELDS_H_
#define FULCRUM_COMMON_CONFIG_YAML_FIELDS_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config/quote.h"
#include "yaml-cpp/yaml.h"

namespace fulcrum::config {

// INVALID_ARGUMENT "<field> <what>".
absl::Status Bad(const std::string& field, const std::string& what);
// "prefix.key" (or "key" at the top).
std::string Join(const std::string& prefix, const std::string& key);

// Reads one scalar as T, or says which field has the wrong type.
template <typename T>
absl::Status Read(const YAML::Node& node, const std::string& field,
                  const char* type_name, T* out) {
  if (!node.IsScalar()) return Bad(field, absl::StrCat("must be ", type_name));
  try {
    *out = node.as<T>();
  } catch (const YAML::Exception&) {
    return Bad(field, absl::StrCat("must be ", type_name, ", got ",
                                   Quote(node.Scalar())));
  }
  return absl::OkStatus();
}

// Reads the value of one key; the second argument is the field's full name.
using Handler =
    std::function<absl::Status(const YAML::Node&, const std::string&)>;

// Dispatches each key of a mapping to its handler; unknown and repeated keys
// are errors.
absl::Status ReadMap(const YAML::Node& node, const std::string& prefix,
                     const std::map<std::string, Handler>& handlers);

template <typename T, typename Setter>
Handler Scalar(const char* type_name, Setter set) {
  return [type_name, set](const YAML::Node& n, const std::string& f) {
    T v{};
    absl::Status s = Read<T>(n, f, type_name, &v);
    if (s.ok()) set(v);
    return s;
  };
}

// A string field: never empty when written (leave it out for the default).
// Its length is the validator's to bound (specs also come as protos).
Handler Str(std::string* out);

// A nested mapping read with `handlers` (which must outlive the handler).
Handler Nested(const std::map<std::string, Handler>& handlers);

}  // namespace fulcrum::config

#endif  // FULCRUM_COMMON_CONFIG_YAML_FIELDS_H_
