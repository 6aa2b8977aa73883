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
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

void ConfigureServer(grpc::ServerBuilder* builder, int max_threads) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
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
