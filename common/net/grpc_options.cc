#include "common/net/grpc_options.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>

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

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
}

void SetTimeout(grpc::ClientContext* context,
                std::chrono::milliseconds timeout) {
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

std::chrono::milliseconds Backoff(int attempt,
                                  std::chrono::milliseconds initial,
                                  std::chrono::milliseconds max,
                                  uint64_t random) {
  const int shift = std::min(attempt, 20);
  const int64_t bound =
      std::min<int64_t>(max.count(), initial.count() << shift);
  return std::chrono::milliseconds(
      bound <= 0 ? 0 : static_cast<int64_t>(random % (bound + 1)));
}

}  // namespace fulcrum
