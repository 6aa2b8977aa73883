#include "common/dataplane/shm_segment.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fulcrum {
namespace {

constexpr char kPrefix[] = "fulcrum-";
constexpr uint64_t kMagic = 0x314d48534d52434cULL;  // "LCRMSHM1"
constexpr int64_t kAlign = 64;

struct Header {
  uint64_t magic;
  char nonce[ShmSegment::kNonceBytes];
  int64_t grad_offset, grad_bytes;
  int64_t params_offset, params_bytes;
};
static_assert(sizeof(Header) <= ShmSegment::kHeaderBytes);

int64_t RoundUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The SIGBUS guard. Another process holding the segment's file can shrink
// it under our mapping; touching the pages past its new end is SIGBUS,
// which kills the process by default. The handler looks the address up in
// the mappings of live segments and maps zero pages over the rest of that
// mapping (so the access completes and reads zeros, as Wayland compositors
// do for their clients' buffers), and marks the segment truncated for its
// user to act on. A fault elsewhere gets the disposition from before.
constexpr int kGuardSlots = 4096;
struct GuardSlot {
  std::atomic<int> used{0};
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<std::atomic<bool>*> truncated{nullptr};
};
GuardSlot g_guard[kGuardSlots];
struct sigaction g_previous_sigbus;
uintptr_t g_page_bytes = 4096;

void OnSigbus(int, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& s : g_guard) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    const uintptr_t e = s.end.load(std::memory_order_acquire);
    if (b == 0 || a < b || a >= e) continue;
    const uintptr_t page = a & ~(g_page_bytes - 1);
    mmap(reinterpret_cast<void*>(page), e - page, PROT_READ | PROT_WRITE,
         MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (std::atomic<bool>* t = s.truncated.load(std::memory_order_acquire))
      t->store(true, std::memory_order_release);
    return;  // the access is retried, on the zero pages
  }
  sigaction(SIGBUS, &g_previous_sigbus, nullptr);  // not ours: re-faults
}

// Registers [base, base + bytes) with the guard; -1 when every slot is
// taken.
int Guard(char* base, int64_t bytes, std::atomic<bool>* truncated) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    g_page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
  for (int i = 0; i < kGuardSlots; ++i) {
    int free = 0;
    if (!g_guard[i].used.compare_exchange_strong(free, 1)) continue;
    g_guard[i].truncated.store(truncated, std::memory_order_release);
    g_guard[i].end.store(reinterpret_cast<uintptr_t>(base) + bytes,
                         std::memory_order_release);
    g_guard[i].begin.store(reinterpret_cast<uintptr_t>(base),
                           std::memory_order_release);
    return i;
  }
  return -1;
}

void Unguard(int slot) {
  if (slot < 0) return;
  g_guard[slot].begin.store(0, std::memory_order_release);
  g_guard[slot].end.store(0, std::memory_order_release);
  g_guard[slot].truncated.store(nullptr, std::memory_order_release);
  g_guard[slot].used.store(0, std::memory_order_release);
}

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

bool RandomBytes(char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// "fulcrum-<pid>-<16 hex>" (without the slash): the creator's pid.
bool ParseName(absl::string_view name, int64_t* pid) {
  if (!absl::ConsumePrefix(&name, kPrefix)) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  if (parts.size() != 2 || parts[1].size() != 16) return false;
  for (char c : parts[1])
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return absl::SimpleAtoi(parts[0], pid) && *pid > 0;
}

absl::Status Errno(absl::string_view what, const std::string& name) {
  const int e = errno;
  const std::string message =
      absl::StrCat(what, " ", name, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(message);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

absl::StatusOr<const char*> Region(const ShmSegment& s, int64_t begin,
                                   int64_t size, int64_t offset, int64_t bytes,
                                   const char* field) {
  if (offset < begin || bytes < 0 || offset % 4 != 0 ||
      bytes > begin + size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " [", offset, ", +", bytes, ") is outside the segment's region [",
        begin, ", +", size, ") or not 4-aligned"));
  }
  return s.at(offset);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(
    int64_t grad_bytes, int64_t params_bytes) {
  char random[8 + kNonceBytes];
  if (!RandomBytes(random, sizeof(random)))
    return absl::UnavailableError("getrandom failed");
  return CreateTagged(grad_bytes, params_bytes, Hex(std::string(random, 8)),
                      std::string(random + 8, kNonceBytes));
}

absl::StatusOr<std::string> ShmSegment::FindTagged(const std::string& tag,
                                                   const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno("listing", dir);
  std::string found;
  while (dirent* e = readdir(d)) {
    int64_t pid;
    if (ParseName(e->d_name, &pid) &&
        absl::EndsWith(e->d_name, absl::StrCat("-", tag))) {
      found = absl::StrCat("/", e->d_name);
      break;
    }
  }
  closedir(d);
  if (found.empty())
    return absl::NotFoundError(absl::StrCat("no segment tagged ", tag));
  return found;
}

void ShmSegment::Unlink() {
  if (creator_) shm_unlink(name_.c_str());
  creator_ = false;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::CreateTagged(
    int64_t grad_bytes, int64_t params_bytes, const std::string& tag,
    const std::string& nonce) {
  int64_t ignored;
  if (!ParseName(absl::StrCat(kPrefix, "1-", tag), &ignored) ||
      nonce.size() != static_cast<size_t>(kNonceBytes)) {
    return absl::InvalidArgumentError(
        "a segment's tag is 16 hex digits and its nonce 16 bytes");
  }
  if (grad_bytes < 0 || params_bytes < 0)
    return absl::InvalidArgumentError("negative shared-memory region");
  // One stream may not take the host's shared memory from everyone else
  // (other streams, PyTorch's data loaders): at most half of what is free.
  if (absl::Status fits =
          FitsIn("/dev/shm", kHeaderBytes + RoundUp(grad_bytes) +
                                 RoundUp(params_bytes));
      !fits.ok()) {
    return fits;
  }
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->nonce_ = nonce;
  s->name_ = absl::StrCat("/", kPrefix, getpid(), "-", tag);
  s->grad_offset_ = kHeaderBytes;
  s->grad_bytes_ = RoundUp(grad_bytes);
  s->params_offset_ = s->grad_offset_ + s->grad_bytes_;
  s->params_bytes_ = RoundUp(params_bytes);
  s->size_ = s->params_offset_ + s->params_bytes_;
  const int fd =
      shm_open(s->name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("creating", s->name_);
  s->creator_ = true;  // from here the destructor unlinks it
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, s->size_) != 0) {
    const absl::Status e = Errno("sizing", s->name_);
    close(fd);
    return e;
  }
  // Take the pages now: a full /dev/shm (64 MB in a default container)
  // fails here, not with SIGBUS at the first write of a step.
  if (const int e = posix_fallocate(fd, 0, s->size_); e != 0) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", s->size_, " bytes of shared memory for ", s->name_,
        ": ", strerror(e)));
  }
  void* base =
      mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("mapping", s->name_);
  s->base_ = static_cast<char*>(base);
  s->guard_ = Guard(s->base_, s->size_, &s->truncated_);
  if (s->guard_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mapping ", s->name_, ": ", kGuardSlots, " segments are mapped already"));
  }
  Header h{};
  h.magic = kMagic;
  std::memcpy(h.nonce, s->nonce_.data(), kNonceBytes);
  h.grad_offset = s->grad_offset_;
  h.grad_bytes = s->grad_bytes_;
  h.params_offset = s->params_offset_;
  h.params_bytes = s->params_bytes_;
  std::memcpy(s->base_, &h, sizeof(h));
  return s;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Attach(
    const std::string& name, const std::string& nonce, bool unlink) {
  int64_t pid;
  if (name.empty() || name[0] != '/' || !ParseName(name.substr(1), &pid)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hello.shm.name '", name, "' is not /fulcrum-<pid>-<16 hex digits>"));
  }
  if (nonce.size() != static_cast<size_t>(kNonceBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hello.shm.nonce has ", nonce.size(), " bytes, not ", kNonceBytes));
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return Errno("opening", name);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const absl::Status e = Errno("inspecting", name);
    close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 07777) != 0600) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        name, " is not a regular object of uid ", geteuid(), " with mode 0600"
        " (uid ", st.st_uid, ", mode ", absl::Hex(st.st_mode & 07777), ")"));
  }
  if (st.st_size < kHeaderBytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is smaller than its header"));
  }
  std::unique_ptr<ShmSegment> s(new ShmSegment());
  s->name_ = name;
  s->nonce_ = nonce;
  s->size_ = st.st_size;
  void* base =
      mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("mapping", name);
  s->base_ = static_cast<char*>(base);
  s->guard_ = Guard(s->base_, s->size_, &s->truncated_);
  if (s->guard_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mapping ", name, ": ", kGuardSlots, " segments are mapped already"));
  }
  Header h;
  std::memcpy(&h, s->base_, sizeof(h));
  if (h.magic != kMagic || std::memcmp(h.nonce, nonce.data(), kNonceBytes) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        name, "'s header does not hold hello.shm.nonce"));  // not unlinked
  }
  const auto inside = [&](int64_t off, int64_t n) {
    return off >= kHeaderBytes && n >= 0 && off % kAlign == 0 &&
           n <= s->size_ - off;
  };
  if (!inside(h.grad_offset, h.grad_bytes) ||
      !inside(h.params_offset, h.params_bytes) ||
      (h.grad_offset < h.params_offset
           ? h.grad_offset + h.grad_bytes > h.params_offset
           : h.params_offset + h.params_bytes > h.grad_offset)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "'s header names regions outside the segment"));
  }
  s->grad_offset_ = h.grad_offset;
  s->grad_bytes_ = h.grad_bytes;
  s->params_offset_ = h.params_offset;
  s->params_bytes_ = h.params_bytes;
  if (unlink) shm_unlink(name.c_str());  // the mapping stays; the name goes
  return s;
}

ShmSegment::~ShmSegment() {
  Unguard(guard_);
  if (base_ != nullptr) munmap(base_, size_);
  if (creator_) shm_unlink(name_.c_str());  // ENOENT once the peer did
}

absl::StatusOr<const char*> ShmSegment::Grad(int64_t offset, int64_t bytes,
                                             const char* field) const {
  return Region(*this, grad_offset_, grad_bytes_, offset, bytes, field);
}

absl::StatusOr<const char*> ShmSegment::Params(int64_t offset, int64_t bytes,
                                               const char* field) const {
  return Region(*this, params_offset_, params_bytes_, offset, bytes, field);
}

absl::Status ShmSegment::FitsIn(const std::string& dir, int64_t bytes) {
  struct statvfs st;
  if (statvfs(dir.c_str(), &st) != 0) return Errno("looking at", dir);
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) *
                             static_cast<int64_t>(st.f_frsize);
  if (bytes > free_bytes / 2) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a segment of ", bytes, " bytes would take more than half of the ",
        free_bytes, " bytes free in ", dir));
  }
  return absl::OkStatus();
}

int ShmSegment::SweepStale(absl::Duration min_age, const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  const time_t newest = absl::ToTimeT(absl::Now() - min_age);
  while (dirent* e = readdir(d)) {
    int64_t pid;
    if (!ParseName(e->d_name, &pid)) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || st.st_mtime > newest) continue;
    if (unlink(path.c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

bool IsOnThisHost(const std::string& address) {
  std::string host = address;
  const size_t colon = address.rfind(':');
  if (colon != std::string::npos && address.find(']') == std::string::npos &&
      address.find(':') == colon) {
    host = address.substr(0, colon);  // host:port
  } else if (!address.empty() && address[0] == '[') {
    host = address.substr(1, address.find(']') - 1);  // [v6]:port
  }
  if (absl::StartsWith(host, "ipv4:")) host = host.substr(5);
  if (host == "localhost" || absl::StartsWith(host, "127.") || host == "::1")
    return true;
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, host.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return false;  // a name: not resolved here
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET) {
      found = std::memcmp(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr,
                          &v4, sizeof(v4)) == 0;
    } else if (is_v6 && i->ifa_addr->sa_family == AF_INET6) {
      found = std::memcmp(
                  &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                  &v6, sizeof(v6)) == 0;
    }
  }
  freeifaddrs(list);
  return found;
}

}  // namespace fulcrum
