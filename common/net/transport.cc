#include "common/net/transport.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", path, " is not a PEM file"));
  }
  return text.str();
}

Transport& Current() {
  static Transport* transport = new Transport();
  return *transport;
}

// The host of host:port ("[::1]:80" -> "::1").
std::string HostOf(const std::string& listen) {
  if (!listen.empty() && listen[0] == '[') {
    const size_t close = listen.find(']');
    return close == std::string::npos ? listen : listen.substr(1, close - 1);
  }
  const size_t colon = listen.rfind(':');
  return colon == std::string::npos ? listen : listen.substr(0, colon);
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  int first = 0;
  const size_t dot = host.find('.');
  return dot != std::string::npos &&
         absl::SimpleAtoi(host.substr(0, dot), &first) && first == 127;
}

}  // namespace

absl::StatusOr<Transport> LoadTransport(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        files.cert.empty() ? "--tls_key is set but --tls_cert is not"
                           : "--tls_cert is set but --tls_key is not");
  }
  Transport t;
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(files.cert, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(files.key, "tls_key");
    if (!key.ok()) return key.status();
    t.cert_pem = *std::move(cert);
    t.key_pem = *std::move(key);
  }
  if (!files.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(files.ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    t.ca_pem = *std::move(ca);
  }
  return t;
}

void SetProcessTransport(Transport transport) {
  Current() = std::move(transport);
}

absl::Status UseTransport(const TlsFiles& files) {
  absl::StatusOr<Transport> t = LoadTransport(files);
  if (!t.ok()) return t.status();
  SetProcessTransport(*std::move(t));
  return absl::OkStatus();
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() {
  const Transport& t = Current();
  if (!t.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = t.ca_pem;  // empty: the system's roots
  options.pem_private_key = t.key_pem;
  options.pem_cert_chain = t.cert_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  const Transport& t = Current();
  if (t.cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      t.ca_pem.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = t.ca_pem;
  options.pem_key_cert_pairs.push_back({t.key_pem, t.cert_pem});
  return grpc::SslServerCredentials(options);
}

absl::Status CheckServing(const std::string& listen, bool allow_insecure) {
  const Transport& t = Current();
  if (t.tls() && t.cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca is set but --tls_cert/--tls_key are not: a server needs "
        "its own certificate to serve TLS");
  }
  if (t.tls() || allow_insecure || IsLoopback(HostOf(listen))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--listen=", listen,
      " is not a loopback address: serve TLS (--tls_cert, --tls_key, "
      "--tls_ca) or accept plaintext on this network with --insecure"));
}

absl::Status UseServingTransport(const TlsFiles& files,
                                 const std::string& listen,
                                 bool allow_insecure) {
  absl::Status s = UseTransport(files);
  return s.ok() ? CheckServing(listen, allow_insecure) : s;
}

std::string DescribeTransport(bool allow_insecure) {
  const Transport& t = Current();
  if (t.mutual()) return "mutual TLS";
  if (!t.cert_pem.empty()) return "TLS (no client certificates)";
  if (t.tls()) return "TLS client (no certificate of its own)";
  return allow_insecure ? "insecure: plaintext (--insecure)"
                        : "insecure: plaintext, loopback only";
}

}  // namespace fulcrum
