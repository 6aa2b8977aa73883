#include "common/dataplane/host_id.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace fulcrum {
namespace {

constexpr size_t kTokenChars = 32;

bool ValidToken(const std::string& t) {
  if (t.size() != kTokenChars) return false;
  for (char c : t)
    if (!absl::ascii_isxdigit(c)) return false;
  return true;
}

std::string ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return ValidToken(token) ? token : "";
}

// The random token in `shm_dir`, made by the first process that looks
// (written to a file of its own, then linked into place: a reader never
// sees half a token, and two racing writers agree on the one linked
// first). Empty when the directory cannot hold it.
std::string ShmToken(const std::string& shm_dir) {
  const std::string path = shm_dir + "/fulcrum-host-token";
  if (std::string t = ReadToken(path); !t.empty()) return t;
  absl::BitGen gen;
  std::string token;
  for (size_t i = 0; i < kTokenChars / 16; ++i)
    absl::StrAppend(&token, absl::Hex(absl::Uniform<uint64_t>(gen),
                                      absl::kZeroPad16));
  const std::string tmp =
      absl::StrCat(path, ".", getpid(), ".", absl::Uniform<uint32_t>(gen));
  {
    std::ofstream out(tmp);
    out << token << "\n";
    if (!out.flush()) {
      std::remove(tmp.c_str());
      return "";
    }
  }
  chmod(tmp.c_str(), 0644);
  link(tmp.c_str(), path.c_str());  // EEXIST: another process was first
  std::remove(tmp.c_str());
  return ReadToken(path);
}

}  // namespace

std::string HostId(const std::string& boot_id_file,
                   const std::string& shm_dir) {
  std::ifstream in(boot_id_file);
  std::string boot;
  if (!std::getline(in, boot)) return "";
  boot = std::string(absl::StripAsciiWhitespace(boot));
  if (boot.empty() || boot.size() > 64) return "";
  const std::string token = ShmToken(shm_dir);
  if (!token.empty()) return absl::StrCat(boot, "/", token, "/", geteuid());
  struct stat st;  // a read-only shm_dir: its mount, as the next best
  if (stat(shm_dir.c_str(), &st) != 0) return "";
  return absl::StrCat(boot, "/", static_cast<uint64_t>(st.st_dev), ":",
                      static_cast<uint64_t>(st.st_ino), "/", geteuid());
}

}  // namespace fulcrum
