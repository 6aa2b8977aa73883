// A minimal HTTP/1.0 GET to 127.0.0.1 for tests (no client library needed).
#ifndef FULCRUM_COMMON_TESTING_HTTP_GET_H_
#define FULCRUM_COMMON_TESTING_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace fulcrum::testing {

struct HttpResponse {
  int status = 0;
  std::string headers;
  std::string body;
};

// GET http://127.0.0.1:port/path with a 10 s deadline.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path);
// Percent-encodes a query parameter value.
std::string UrlEncode(const std::string& s);

}  // namespace fulcrum::testing

#endif  // FULCRUM_COMMON_TESTING_HTTP_GET_H_
