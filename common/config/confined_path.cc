#include "common/config/confined_path.h"

#include <limits.h>
#include <stdlib.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/quote.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace fulcrum {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", why));
}

// Components without "" and "."; false on "..".
bool Components(absl::string_view path, std::vector<std::string>* out) {
  for (absl::string_view c : absl::StrSplit(path, '/')) {
    if (c.empty() || c == ".") continue;
    if (c == "..") return false;
    out->emplace_back(c);
  }
  return true;
}

std::string Join(const std::vector<std::string>& parts) {
  return "/" + absl::StrJoin(parts, "/");
}

bool Under(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root ||
         (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
          path[root.size()] == '/');
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

}  // namespace

absl::StatusOr<std::string> ConfinedPath(const std::string& root,
                                         const std::string& path,
                                         const std::string& field) {
  std::vector<std::string> base;
  if (root.empty() || root[0] != '/' || !Components(root, &base)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the root for ", field, " must be an absolute path without '..', got ",
        Quote(root)));
  }
  if (path.find('\0') != std::string::npos)
    return Bad(field, "must not contain a NUL byte");
  std::vector<std::string> parts;
  if (!Components(path, &parts)) {
    return Bad(field, absl::StrCat("must not contain '..', got ", Quote(path)));
  }
  const std::string root_path = Join(base);
  if (!path.empty() && path[0] == '/') {
    const std::string absolute = Join(parts);
    if (!Under(absolute, root_path)) {
      return Bad(field, absl::StrCat(Quote(path), " is outside ", root_path,
                                     " (relative paths are taken from it)"));
    }
    return absolute;
  }
  base.insert(base.end(), parts.begin(), parts.end());
  return Join(base);
}

absl::StatusOr<std::string> ResolveConfined(const std::string& root,
                                            const std::string& path,
                                            const std::string& field) {
  absl::StatusOr<std::string> lexical = ConfinedPath(root, path, field);
  if (!lexical.ok()) return lexical;
  std::vector<std::string> base;
  Components(root, &base);
  const std::string real_root = RealPath(Join(base));
  if (real_root.empty()) return lexical;  // nothing exists under it yet
  // The longest existing prefix of the result, resolved.
  std::string probe = *lexical;
  std::string real;
  while (true) {
    real = RealPath(probe);
    if (!real.empty() || probe == "/") break;
    probe = probe.substr(0, probe.rfind('/'));
    if (probe.empty()) probe = "/";
  }
  if (!real.empty() && !Under(real, real_root)) {
    return Bad(field, absl::StrCat(Quote(path), " leads out of ", real_root,
                                   " (through a symbolic link to ", Quote(real),
                                   ")"));
  }
  return lexical;
}

}  // namespace fulcrum
