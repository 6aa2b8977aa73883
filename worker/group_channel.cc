#include "worker/group_channel.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/group_channel_base.h"

namespace fulcrum {

bool ProcessAlive(int32_t pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ||
         (line[paren + 2] != 'Z' && line[paren + 2] != 'X');
}

std::unique_ptr<ParameterChannel> MakeGroupChannel(ChannelOptions options,
                                                   const ParameterLayout* layout,
                                                   float* params,
                                                   ChannelFactory* factory) {
  int slot = -1;
  for (size_t i = 0; i < options.host_group.size(); ++i)
    if (options.host_group[i].worker_id == options.worker_id) slot = i;
  if (options.host_group.size() < 2 || slot < 0) {
    options.host_group.clear();
    return factory->Create(std::move(options), layout, params);
  }
  if (slot == 0)
    return NewGroupLeader(std::move(options), layout, params, factory);
  return NewGroupMember(std::move(options), layout, params, factory, slot);
}

}  // namespace fulcrum
