#include <grpcpp/resource_quota.h>
#include "common/net/grpc_options.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>

#include "common/net/api_token.h"
#include "common/net/transport.h"

namespace fulcrum {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a peer restarts (the default backoff reaches 120
  // s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectMaxMs);
  // A connection attempt gives up after this (default 20 s): one started
  // while a link was down otherwise waits for TCP's SYN retries (1, 3, 7,
  // 15, 31 s) and a healed link is noticed up to 16 s late.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  // Keepalive pings, also on idle connections: a connection across a link
  // that went down fails within kKeepaliveMs * 2 instead of when TCP gives
  // up (minutes), so calls move to a new connection once the link heals.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

void ConfigureServer(grpc::ServerBuilder* builder, int max_threads) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  // Accept the clients' keepalive pings (MakeChannel) and send our own, so
  // that a stream from a host that was cut off ends within seconds.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kKeepaliveMs / 2);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  if (max_threads > 0) {
    grpc::ResourceQuota quota("fulcrum-server-threads");
    quota.SetMaxThreads(max_threads);
    builder->SetResourceQuota(quota);
  }
}

void SetTimeout(grpc::ClientContext* context,
                std::chrono::milliseconds timeout) {
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}


void AttachToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty())
    context->AddMetadata(kTokenMetadataKey, TokenMetadataValue(token));
}

std::optional<std::string_view> TokenMetadata(
    const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kTokenMetadataKey);
  if (it == metadata.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

}  // namespace fulcrum
