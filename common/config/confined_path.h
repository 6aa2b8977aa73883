// File paths a job spec names (dataset.dir, checkpoint.dir) are confined
// to a root each process is given (--data_root, --checkpoint_root): a
// relative path is taken from the root, an absolute one must lie under it,
// and nothing may lead out of it - no ".." component, and (where the files
// are: shards and workers) no symbolic link out of the root.
//
// Thread safety: pure functions.
#ifndef FULCRUM_COMMON_CONFIG_CONFINED_PATH_H_
#define FULCRUM_COMMON_CONFIG_CONFINED_PATH_H_

#include <string>

#include "absl/status/statusor.h"

namespace fulcrum {

// Lexically: `path` under absolute `root`, normalised (no "." or empty
// components). INVALID_ARGUMENT naming `field` for a ".." component, a
// NUL byte, an absolute path outside root, or a root that is not
// absolute. Touches no file (the coordinator checks specs at submit).
absl::StatusOr<std::string> ConfinedPath(const std::string& root,
                                         const std::string& path,
                                         const std::string& field);

// ConfinedPath, then on the file system: the real path (symbolic links
// resolved) of the longest existing prefix of the result must lie under
// the real path of root. Returns the lexical result.
absl::StatusOr<std::string> ResolveConfined(const std::string& root,
                                            const std::string& path,
                                            const std::string& field);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONFIG_CONFINED_PATH_H_
