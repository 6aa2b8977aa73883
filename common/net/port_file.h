// Publishing a bound port to a file (for launchers and tests that start
// processes on port 0).
#ifndef FULCRUM_COMMON_NET_PORT_FILE_H_
#define FULCRUM_COMMON_NET_PORT_FILE_H_

#include <string>

namespace fulcrum {

// Writes "<port>\n" to `path` atomically (temp file + rename), so a reader
// never sees a partial number. Returns false on an I/O error.
bool WritePortFile(const std::string& path, int port);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_NET_PORT_FILE_H_
