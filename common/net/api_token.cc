#include "common/net/api_token.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

constexpr char kHeader[] = "authorization";
constexpr char kScheme[] = "Bearer ";

// Compares without an early exit, so the time taken does not tell how much
// of a guess was right.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file: cannot read ", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file: ", path, " is empty"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--token_file: ", path,
          " holds characters other than printable ASCII without spaces"));
    }
  }
  return token;
}

void AttachToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata(kHeader, kScheme + token);
}

grpc::Status ApiToken::Check(const grpc::ServerContext& context) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kHeader);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: missing API token (send "
                        "'authorization: Bearer <token>'; fulcrumctl "
                        "--token_file)");
  }
  const std::string value(it->second.data(), it->second.size());
  const std::string scheme = kScheme;
  if (value.compare(0, scheme.size(), scheme) != 0 ||
      !ConstantTimeEquals(value.substr(scheme.size()), token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization: invalid API token");
  }
  return grpc::Status::OK;
}

}  // namespace fulcrum
