#include "common/env/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

absl::Status ErrnoStatus(const std::string& what, const std::string& path,
                         int err) {
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == ENOTEMPTY) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Append(std::string_view data) override {
    const char* p = data.data();
    size_t n = data.size();
    while (n > 0) {
      const ssize_t w = write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return ErrnoStatus("cannot write", path_, errno);
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) return ErrnoStatus("cannot fsync", path_, errno);
    return absl::OkStatus();
  }
  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && close(fd) != 0)
      return ErrnoStatus("cannot close", path_, errno);
    return absl::OkStatus();
  }
  absl::Status Truncate() override {
    if (ftruncate(fd_, 0) != 0)
      return ErrnoStatus("cannot truncate", path_, errno);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class PosixEnv : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_TRUNC);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_APPEND);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("cannot open", path, errno);
    std::string data;
    char buffer[1 << 16];
    for (;;) {
      const ssize_t r = read(fd, buffer, sizeof(buffer));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int err = errno;
        close(fd);
        return ErrnoStatus("cannot read", path, err);
      }
      if (r == 0) break;
      data.append(buffer, static_cast<size_t>(r));
    }
    close(fd);
    return data;
  }
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0)
      return ErrnoStatus("cannot rename", from, errno);
    return absl::OkStatus();
  }
  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0)
      return ErrnoStatus("cannot remove", path, errno);
    return absl::OkStatus();
  }
  absl::Status RemoveDir(const std::string& path) override {
    if (rmdir(path.c_str()) != 0)
      return ErrnoStatus("cannot remove", path, errno);
    return absl::OkStatus();
  }
  absl::Status CreateDirs(const std::string& path) override {
    for (size_t i = 1; i <= path.size(); ++i) {
      if (i < path.size() && path[i] != '/') continue;
      const std::string prefix = path.substr(0, i);
      if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
        return ErrnoStatus("cannot create", prefix, errno);
    }
    return absl::OkStatus();
  }
  absl::Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("cannot open", dir, errno);
    const int r = fsync(fd);
    const int err = errno;
    close(fd);
    return r == 0 ? absl::OkStatus() : ErrnoStatus("cannot fsync", dir, err);
  }
  bool FileExists(const std::string& path) override {
    return access(path.c_str(), F_OK) == 0;
  }
  absl::StatusOr<std::vector<std::string>> GetChildren(
      const std::string& dir) override {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus("cannot list", dir, errno);
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
    return names;
  }
  absl::Status TruncateFile(const std::string& path, uint64_t size) override {
    if (truncate(path.c_str(), static_cast<off_t>(size)) != 0)
      return ErrnoStatus("cannot truncate", path, errno);
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::unique_ptr<WritableFile>> Open(const std::string& path,
                                                     int flags) {
    const int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("cannot create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* const env = new PosixEnv;  // stateless, never destroyed
  return env;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status WriteFileAtomically(Env* env, const std::string& path,
                                 std::string_view data) {
  const std::string dir = Dirname(path);
  absl::Status s = env->CreateDirs(dir);
  if (!s.ok()) return s;
  const std::string tmp = path + ".tmp";
  absl::StatusOr<std::unique_ptr<WritableFile>> file =
      env->NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  s = (*file)->Append(data);
  if (s.ok()) s = (*file)->Sync();
  absl::Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = env->RenameFile(tmp, path);
  if (!s.ok()) {
    env->RemoveFile(tmp).IgnoreError();
    return s;
  }
  return env->SyncDir(dir);  // the rename itself durable
}

}  // namespace fulcrum
