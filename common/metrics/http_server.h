// The metrics endpoint every Fulcrum process serves (civetweb):
//   /metrics  the registry in the text exposition format 0.0.4
//   /healthz  200 while the process runs
//   /readyz   200 once `ready()` says so (e.g. registered with the
//             coordinator), 503 before
#ifndef FULCRUM_COMMON_METRICS_HTTP_SERVER_H_
#define FULCRUM_COMMON_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/metrics.h"

struct mg_context;
struct mg_connection;

namespace fulcrum::metrics {

class HttpServer {
 public:
  // Listens on address:port (port 0: the kernel picks one). `registry` is
  // not owned and must outlive the server; `ready` may be null (always ready).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, int port, const Registry* registry,
      std::function<bool()> ready);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer(const Registry* registry, std::function<bool()> ready)
      : registry_(registry), ready_(std::move(ready)) {}
  static int HandleMetrics(::mg_connection* conn, void* self);
  static int HandleHealth(::mg_connection* conn, void* self);
  static int HandleReady(::mg_connection* conn, void* self);

  const Registry* const registry_;  // Not owned.
  const std::function<bool()> ready_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

// What every binary does at start: registers fulcrum_build_info{role,
// version}, serves the registry on address:port (0: any free port), logs the
// port and writes it to `port_file` when non-empty. A negative port means
// metrics are off: returns null.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeProcessMetrics(
    const std::string& role, const std::string& address, int port,
    const std::string& port_file, Registry* registry,
    std::function<bool()> ready);

// The version baked into fulcrum_build_info.
inline constexpr char kFulcrumVersion[] = "0.3.0";

}  // namespace fulcrum::metrics

#endif  // FULCRUM_COMMON_METRICS_HTTP_SERVER_H_
