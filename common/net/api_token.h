// The API token of the user-facing Coordinator calls (fulcrumctl: submit,
// status, list, cancel, members). The caller sends the metadata
// "authorization: Bearer <token>"; the coordinator compares it in constant
// time and answers UNAUTHENTICATED otherwise. Processes (workers, servers)
// are authenticated by their certificates (mutual TLS), not by the token.
#ifndef FULCRUM_COMMON_NET_API_TOKEN_H_
#define FULCRUM_COMMON_NET_API_TOKEN_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace fulcrum {

// The token in `path` (--token_file), surrounding whitespace removed.
// INVALID_ARGUMENT naming --token_file when unreadable, empty, or not
// printable ASCII.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The metadata key a call carries the token in.
inline constexpr char kTokenMetadataKey[] = "authorization";
// The metadata value that carries `token` ("Bearer <token>").
std::string TokenMetadataValue(const std::string& token);

class ApiToken {
 public:
  // An empty token accepts every call (no --token_file).
  explicit ApiToken(std::string token = "") : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // OK, or UNAUTHENTICATED saying whether the token was missing or wrong.
  // `value`: the call's kTokenMetadataKey metadata, if it had one.
  absl::Status Check(std::optional<std::string_view> value) const;

 private:
  std::string token_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_API_TOKEN_H_
