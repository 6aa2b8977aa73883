#include "common/net/api_token.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

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

std::string TokenMetadataValue(const std::string& token) {
  return kScheme + token;
}

absl::Status ApiToken::Check(std::optional<std::string_view> value) const {
  if (token_.empty()) return absl::OkStatus();
  if (!value.has_value()) {
    return absl::UnauthenticatedError(
        "authorization: missing API token (send 'authorization: Bearer "
        "<token>'; fulcrumctl --token_file)");
  }
  const std::string_view scheme = kScheme;
  if (value->substr(0, scheme.size()) != scheme ||
      !ConstantTimeEquals(std::string(value->substr(scheme.size())), token_)) {
    return absl::UnauthenticatedError("authorization: invalid API token");
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
