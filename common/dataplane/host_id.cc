#include "common/dataplane/host_id.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace fulcrum {

std::string HostId(const std::string& boot_id_file,
                   const std::string& shm_dir) {
  std::ifstream in(boot_id_file);
  std::string boot;
  if (!std::getline(in, boot)) return "";
  boot = std::string(absl::StripAsciiWhitespace(boot));
  struct stat st;
  if (boot.empty() || boot.size() > 64 || stat(shm_dir.c_str(), &st) != 0)
    return "";
  return absl::StrCat(boot, "/", static_cast<uint64_t>(st.st_dev), ":",
                      static_cast<uint64_t>(st.st_ino));
}

}  // namespace fulcrum
