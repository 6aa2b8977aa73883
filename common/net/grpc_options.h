// Channel and server settings shared by every process: explicit message size
// limits (payloads are chunked well below them) and deadlines helpers.
#ifndef FULCRUM_COMMON_NET_GRPC_OPTIONS_H_
#define FULCRUM_COMMON_NET_GRPC_OPTIONS_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>

#include <grpcpp/server_context.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fulcrum {

// Largest message either side accepts: one 4 MiB chunk (the maximum
// chunk_bytes) plus headroom for the envelope and a JobSpec.
inline constexpr int kMaxMessageBytes = 8 << 20;
// Keepalive ping interval and timeout on every connection (both ends), the
// longest wait between reconnection attempts and the time a connection
// attempt is given: a link that heals is noticed within about
// kReconnectMaxMs + kConnectTimeoutMs (docs/operations.md, outages).
inline constexpr int kKeepaliveMs = 1000;
inline constexpr int kReconnectMaxMs = 500;
inline constexpr int kConnectTimeoutMs = 1000;

// A channel with Fulcrum's limits and the process's transport security
// (common/net/transport.h: TLS when configured, else plaintext).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Applies the same limits to a server, and at most `max_threads` threads
// for calls (a sync server takes one per call in progress; past the bound a
// call is RESOURCE_EXHAUSTED "Server Threadpool Exhausted"). 0: no bound.
void ConfigureServer(grpc::ServerBuilder* builder, int max_threads = 0);

// Sets a deadline `timeout` from now on `context`.
void SetTimeout(grpc::ClientContext* context,
                std::chrono::milliseconds timeout);


// Adds the API token (api_token.h) to a call; nothing when `token` is empty.
void AttachToken(grpc::ClientContext* context, const std::string& token);
// The API token metadata a call carried, for ApiToken::Check.
std::optional<std::string_view> TokenMetadata(
    const grpc::ServerContext& context);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_GRPC_OPTIONS_H_
