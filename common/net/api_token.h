// The API token of the user-facing Coordinator calls (fulcrumctl: submit,
// status, list, cancel, members). The caller sends the metadata
// "authorization: Bearer <token>"; the coordinator compares it in constant
// time and answers UNAUTHENTICATED otherwise. Processes (workers, servers)
// are authenticated by their certificates (mutual TLS), not by the token.
#ifndef FULCRUM_COMMON_NET_API_TOKEN_H_
#define FULCRUM_COMMON_NET_API_TOKEN_H_

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/statusor.h"

namespace fulcrum {

// The token in `path` (--token_file), surrounding whitespace removed.
// INVALID_ARGUMENT naming --token_file when unreadable, empty, or not
// printable ASCII.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Adds the token to a call (nothing when `token` is empty).
void AttachToken(grpc::ClientContext* context, const std::string& token);

class ApiToken {
 public:
  // An empty token accepts every call (no --token_file).
  explicit ApiToken(std::string token = "") : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // OK, or UNAUTHENTICATED saying whether the token was missing or wrong.
  grpc::Status Check(const grpc::ServerContext& context) const;

 private:
  std::string token_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_API_TOKEN_H_
