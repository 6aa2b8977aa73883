// What a fulcrum_worker handle holds, shared by the C API's files
// (capi.cc: membership and dense parameters; capi_rows.cc: embedding
// rows). Internal: nothing here leaves libfulcrum.so.
#ifndef FULCRUM_WORKER_CAPI_WORKER_HANDLE_H_
#define FULCRUM_WORKER_CAPI_WORKER_HANDLE_H_

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics.h"
#include "common/tensor/layout.h"
#include "worker/capi/fulcrum.h"
#include "worker/coordinator_link.h"
#include "worker/grpc_channel.h"
#include "worker/grpc_row_channel.h"
#include "worker/row_client.h"
#include "worker/worker_metrics.h"
#include "worker/worker_session.h"

struct fulcrum_worker {
  // The metrics (fulcrum_worker_*, as fulcrum-worker's) and their endpoint;
  // declared first so that they outlive everything that reports to them.
  fulcrum::metrics::Registry registry;
  std::unique_ptr<fulcrum::WorkerMetrics> metrics;
  fulcrum::WorkerMetrics::Job job_metrics;
  std::unique_ptr<fulcrum::metrics::HttpServer> metrics_server;
  absl::Time step_start = absl::InfinitePast();  // the last wait's end
  std::atomic<bool> joined{false};  // /readyz (read by the HTTP thread)
  int64_t samples_reported = 0;

  std::unique_ptr<fulcrum::CoordinatorLink> link;
  fulcrum::GrpcChannelFactory channels{
      fulcrum::SharedMemoryFromEnvironment()};
  std::string job_id;
  absl::Duration step_timeout = absl::Minutes(5);
  absl::Duration rejoin_timeout = absl::Seconds(60);
  std::optional<fulcrum::ParameterLayout> layout;
  float* params = nullptr;  // the caller's, fixed at the first join
  std::unique_ptr<fulcrum::WorkerSession> session;
  // Embedding rows of the session's generation (made at the first use in
  // each generation).
  int64_t rows_generation = -1;
  std::unique_ptr<fulcrum::GrpcRowChannel> row_channel;
  std::unique_ptr<fulcrum::RowClient> rows;
};

namespace fulcrum::capi {

// Fills *error (may be null) and returns the status code.
inline int Fail(const absl::Status& s, fulcrum_error* error) {
  if (error != nullptr) {
    error->code = static_cast<int>(s.code());
    const std::string m(s.message());
    const size_t n = std::min(m.size(), sizeof(error->message) - 1);
    std::memcpy(error->message, m.data(), n);
    error->message[n] = '\0';
  }
  return static_cast<int>(s.code());
}

}  // namespace fulcrum::capi

#endif  // FULCRUM_WORKER_CAPI_WORKER_HANDLE_H_
