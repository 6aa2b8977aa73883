// Member identity: the coordinator holds a secret and gives each member, at
// registration, credential = hex(HMAC-SHA256(secret, subject)). A member
// sends "<member id>:<credential>" in the kMemberMetadataKey metadata of
// every call it makes as that member, so one process cannot act as another
// (all of them may share one TLS certificate). Subjects:
//   "worker/<id>", "shard/<id>"             a member's calls to the coordinator
//   "coordinator@<shard address>"           the coordinator's calls to a shard
// and a shard derives a worker's stream credential for a job from its own
// coordinator credential (StreamCredential), so that it can check a hello
// without asking anyone.
//
// Thread safety: MemberSecret is immutable after construction.
#ifndef FULCRUM_COMMON_NET_MEMBER_CREDENTIAL_H_
#define FULCRUM_COMMON_NET_MEMBER_CREDENTIAL_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fulcrum {

inline constexpr char kMemberMetadataKey[] = "x-fulcrum-member";
inline constexpr char kCoordinatorMetadataKey[] = "x-fulcrum-coordinator";

// hex(HMAC-SHA256(key, message)).
std::string HmacHex(std::string_view key, std::string_view message);
// Compares in time independent of where they differ.
bool SameCredential(std::string_view a, std::string_view b);

class MemberSecret {
 public:
  // The secret in `dir`/member.secret, created (random, 0600) when absent,
  // so that a restarted coordinator recognises its members. `dir` empty:
  // a random secret of this process only.
  static absl::StatusOr<MemberSecret> LoadOrCreate(const std::string& dir);
  static MemberSecret Random();

  std::string Credential(std::string_view subject) const {
    return HmacHex(secret_, subject);
  }
  bool Check(std::string_view subject, std::string_view credential) const {
    return SameCredential(Credential(subject), credential);
  }

 private:
  explicit MemberSecret(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;
};

// The credential worker `worker_id` presents in its hello to the shard
// whose coordinator credential is `shard_key`, for job `job_id`.
inline std::string StreamCredential(std::string_view shard_key,
                                    std::string_view job_id,
                                    std::string_view worker_id) {
  std::string message(job_id);
  message += '/';
  message += worker_id;
  return HmacHex(shard_key, message);
}

// A credential learned at run time and read by other threads: a shard
// learns the coordinator's when it registers (again). Thread-safe.
class SharedCredential {
 public:
  void Set(std::string value) {
    absl::MutexLock lock(&mu_);
    value_ = std::move(value);
  }
  std::string Get() const {
    absl::MutexLock lock(&mu_);
    return value_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string value_ ABSL_GUARDED_BY(mu_);
};

// "<id>:<credential>" as sent, and parsed back (nullopt: malformed).
std::string MemberMetadataValue(std::string_view id, std::string_view credential);
struct MemberClaim {
  std::string id, credential;
};
std::optional<MemberClaim> ParseMemberMetadata(std::string_view value);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_MEMBER_CREDENTIAL_H_
