#include "common/metrics/http_server.h"

#include <civetweb.h>

#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/net/port_file.h"

namespace fulcrum::metrics {
namespace {

void Reply(::mg_connection* conn, int code, const char* status,
           const char* type, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, status, type, body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, int port, const Registry* registry,
    std::function<bool()> ready) {
  static const unsigned init = mg_init_library(0);
  (void)init;
  std::unique_ptr<HttpServer> server(
      new HttpServer(registry, std::move(ready)));
  const std::string ports = absl::StrCat(address, ":", port);
  const char* options[] = {
      "listening_ports",    ports.c_str(), "num_threads", "2",
      "request_timeout_ms", "10000",       nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_data init_data;
  std::memset(&init_data, 0, sizeof(init_data));
  init_data.callbacks = &callbacks;
  init_data.user_data = server.get();
  init_data.configuration_options = options;
  char error_text[256] = {0};
  mg_error_data error;
  std::memset(&error, 0, sizeof(error));
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->ctx_ = mg_start2(&init_data, &error);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", ports, ": ",
        error_text[0] != '\0' ? error_text : "civetweb did not start"));
  }
  mg_server_port bound[4];
  const int n = mg_get_server_ports(server->ctx_, 4, bound);
  if (n < 1) return absl::InternalError("metrics server has no listening port");
  server->port_ = bound[0].port;
  mg_set_request_handler(server->ctx_, "/metrics$", &HttpServer::HandleMetrics,
                         server.get());
  mg_set_request_handler(server->ctx_, "/healthz$", &HttpServer::HandleHealth,
                         server.get());
  mg_set_request_handler(server->ctx_, "/readyz$", &HttpServer::HandleReady,
                         server.get());
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int HttpServer::HandleMetrics(::mg_connection* conn, void* self) {
  const auto* s = static_cast<const HttpServer*>(self);
  Reply(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
        s->registry_->Expose());
  return 200;
}

int HttpServer::HandleHealth(::mg_connection* conn, void*) {
  Reply(conn, 200, "OK", "text/plain", "ok\n");
  return 200;
}

int HttpServer::HandleReady(::mg_connection* conn, void* self) {
  const auto* s = static_cast<const HttpServer*>(self);
  if (!s->ready_ || s->ready_()) {
    Reply(conn, 200, "OK", "text/plain", "ready\n");
    return 200;
  }
  Reply(conn, 503, "Service Unavailable", "text/plain", "not ready\n");
  return 503;
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeProcessMetrics(
    const std::string& role, const std::string& address, int port,
    const std::string& port_file, Registry* registry,
    std::function<bool()> ready) {
  registry
      ->AddGauge("fulcrum_build_info",
                 "Always 1; labels say which binary and version.",
                 {"role", "version"})
      .WithLabels({role, kFulcrumVersion})
      .Set(1);
  if (port < 0) return std::unique_ptr<HttpServer>();  // metrics off
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(address, port, registry, std::move(ready));
  if (!server.ok()) return server.status();
  std::cerr << "fulcrum-" << role << ": metrics on http://" << address << ":"
            << (*server)->port() << "/metrics\n";
  if (!port_file.empty() && !WritePortFile(port_file, (*server)->port())) {
    return absl::InternalError(absl::StrCat("cannot write ", port_file));
  }
  return server;
}

}  // namespace fulcrum::metrics
