// Channel and server settings shared by every process: explicit message size
// limits (payloads are chunked well below them) and deadlines helpers.
#ifndef FULCRUM_COMMON_NET_GRPC_OPTIONS_H_
#define FULCRUM_COMMON_NET_GRPC_OPTIONS_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <memory>
#include <string>

namespace fulcrum {

// Largest message either side accepts: one 4 MiB chunk (the maximum
// chunk_bytes) plus headroom for the envelope and a JobSpec.
inline constexpr int kMaxMessageBytes = 8 << 20;

// A channel with Fulcrum's limits and the process's transport security
// (common/net/transport.h: TLS when configured, else plaintext).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Applies the same limits to a server.
void ConfigureServer(grpc::ServerBuilder* builder);

// Sets a deadline `timeout` from now on `context`.
void SetTimeout(grpc::ClientContext* context,
                std::chrono::milliseconds timeout);

// Exponential backoff with full jitter, bounded by `max`: attempt 0 waits up
// to `initial`, each later attempt doubles the bound.
std::chrono::milliseconds Backoff(int attempt,
                                  std::chrono::milliseconds initial,
                                  std::chrono::milliseconds max,
                                  uint64_t random);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_GRPC_OPTIONS_H_
