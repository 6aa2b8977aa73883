// How the coordinator quotes what a caller sent in an error message: ids at
// most 64 bytes (a 10 KB id came back whole in a NOT_FOUND before).
#ifndef FULCRUM_SERVER_COORDINATOR_ECHO_H_
#define FULCRUM_SERVER_COORDINATOR_ECHO_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace fulcrum {

inline std::string Id(const std::string& id) {
  return id.size() <= 64 ? id : absl::StrCat(id.substr(0, 64), "...");
}

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_ECHO_H_
