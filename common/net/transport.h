// Transport security of a process's gRPC channels and servers.
//
// TLS comes from three PEM files, the same flags in every binary:
// --tls_cert and --tls_key (this process's certificate and key: a server
// serves with them, a client presents them) and --tls_ca (the authority
// peers' certificates must chain to). With all three, every connection is
// mutual TLS: servers require and verify client certificates, clients verify
// the server's name against its certificate. A server with a certificate but
// no CA serves TLS without asking for client certificates; a client with only
// a CA verifies the server and presents nothing.
//
// Without TLS a server may listen on loopback only (127.0.0.0/8, ::1,
// localhost) unless it is told --insecure: plaintext gRPC across a network is
// an explicit choice, and the log says so.
//
// Thread safety: SetProcessTransport is called once in main, before any
// channel or server exists; everything else is safe from any thread.
#ifndef FULCRUM_COMMON_NET_TRANSPORT_H_
#define FULCRUM_COMMON_NET_TRANSPORT_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fulcrum {

struct TlsFiles {
  std::string cert;  // --tls_cert
  std::string key;   // --tls_key
  std::string ca;    // --tls_ca
};

struct Transport {
  std::string cert_pem, key_pem, ca_pem;
  // Clients dial with TLS, servers (with a certificate) serve it.
  bool tls() const { return !cert_pem.empty() || !ca_pem.empty(); }
  bool mutual() const { return !cert_pem.empty() && !ca_pem.empty(); }
};

// Reads the files named by the flags. INVALID_ARGUMENT naming the flag for a
// certificate without its key (or the reverse), an unreadable file, or a file
// that is not PEM.
absl::StatusOr<Transport> LoadTransport(const TlsFiles& files);

// The process's transport (default: plaintext). MakeChannel and
// ServerCredentials use it.
void SetProcessTransport(Transport transport);
// LoadTransport + SetProcessTransport, for main.
absl::Status UseTransport(const TlsFiles& files);

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials();
std::shared_ptr<grpc::ServerCredentials> ServerCredentials();

// Whether a server may listen on `listen` (host:port): with TLS it needs a
// certificate (--tls_cert/--tls_key); without TLS the host must be loopback
// unless `allow_insecure` (--insecure). INVALID_ARGUMENT naming the flags.
absl::Status CheckServing(const std::string& listen, bool allow_insecure);

// A server's main: UseTransport(files), then CheckServing.
absl::Status UseServingTransport(const TlsFiles& files,
                                 const std::string& listen,
                                 bool allow_insecure);

// One line for the log: "mutual TLS", "TLS (no client certificates)",
// "insecure: plaintext, loopback only" or "insecure: plaintext (--insecure)".
std::string DescribeTransport(bool allow_insecure);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_TRANSPORT_H_
