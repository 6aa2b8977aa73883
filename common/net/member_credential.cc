#include "common/net/member_credential.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {

std::string HmacHex(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       out, &len);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(out), len));
}

bool SameCredential(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

MemberSecret MemberSecret::Random() {
  unsigned char bytes[32];
  RAND_bytes(bytes, sizeof(bytes));
  return MemberSecret(std::string(reinterpret_cast<char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<MemberSecret> MemberSecret::LoadOrCreate(const std::string& dir) {
  if (dir.empty()) return Random();
  const std::string path = dir + "/member.secret";
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::ostringstream s;
    s << in.rdbuf();
    const std::string secret = s.str();
    if (secret.size() != 32) {
      return absl::DataLossError(absl::StrCat(path, " holds ", secret.size(),
                                              " bytes, expected 32"));
    }
    return MemberSecret(secret);
  }
  MemberSecret made = Random();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << made.secret_;
    out.flush();
    if (!out) {
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  chmod(tmp.c_str(), 0600);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::UnavailableError(absl::StrCat("cannot create ", path));
  return made;
}

std::string MemberMetadataValue(std::string_view id,
                                std::string_view credential) {
  std::string out(id);
  out += ':';
  out += credential;
  return out;
}

std::optional<MemberClaim> ParseMemberMetadata(std::string_view value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string_view::npos || colon == 0 ||
      colon + 1 == value.size() || value.size() > 512) {
    return std::nullopt;
  }
  return MemberClaim{std::string(value.substr(0, colon)),
                     std::string(value.substr(colon + 1))};
}

}  // namespace fulcrum
