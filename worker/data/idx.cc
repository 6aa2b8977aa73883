#include "worker/data/idx.h"

#include <zlib.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

bool FileExists(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  std::fclose(f);
  return true;
}

// Opens a plain or gzip file (zlib reads both transparently).
absl::StatusOr<GzPtr> Open(const std::string& path) {
  if (!FileExists(path))
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (f == nullptr)
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  gzbuffer(f.get(), 1 << 20);
  return f;
}

absl::Status ReadExactly(gzFile f, void* out, int64_t n,
                         const std::string& path, const char* what) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n, 1 << 30));
    const int got = gzread(f, p, chunk);
    if (got <= 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return absl::DataLossError(
          absl::StrCat(path, ": truncated or corrupt while reading ", what,
                       err != Z_OK ? absl::StrCat(" (", msg, ")") : ""));
    }
    p += got;
    n -= got;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadBigEndian32(gzFile f, const std::string& path,
                                         const char* what) {
  unsigned char b[4];
  RETURN_IF_ERROR(ReadExactly(f, b, 4, path, what));
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) |
         (uint32_t{b[2]} << 8) | b[3];
}

// Reads magic and the dimension sizes; checks the magic.
absl::StatusOr<std::vector<uint32_t>> ReadHeader(gzFile f,
                                                 const std::string& path,
                                                 uint32_t magic, int dims) {
  ASSIGN_OR_RETURN(const uint32_t m, ReadBigEndian32(f, path, "the header"));
  if (m != magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad IDX magic 0x%08x, expected 0x%08x", path, m, magic));
  }
  std::vector<uint32_t> sizes;
  for (int i = 0; i < dims; ++i) {
    ASSIGN_OR_RETURN(const uint32_t d, ReadBigEndian32(f, path, "the header"));
    sizes.push_back(d);
  }
  return sizes;
}

std::string Pick(const std::string& dir, const std::string& name) {
  const std::string plain = absl::StrCat(dir, "/", name);
  return FileExists(plain) ? plain : plain + ".gz";
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path,
                                        int64_t limit) {
  ASSIGN_OR_RETURN(GzPtr f, Open(path));
  ASSIGN_OR_RETURN(const std::vector<uint32_t> dims,
                   ReadHeader(f.get(), path, 0x00000803, 3));
  IdxImages out;
  out.count = dims[0];
  out.rows = static_cast<int>(dims[1]);
  out.cols = static_cast<int>(dims[2]);
  if (out.rows <= 0 || out.cols <= 0 || out.rows > 4096 || out.cols > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": implausible image size ", out.rows, "x", out.cols));
  }
  if (limit > 0 && limit < out.count) out.count = limit;
  out.pixels.resize(out.count * out.rows * out.cols);
  RETURN_IF_ERROR(ReadExactly(f.get(), out.pixels.data(), out.pixels.size(),
                              path, "pixels"));
  return out;
}

absl::StatusOr<std::vector<int32_t>> ReadIdxLabels(const std::string& path,
                                                   int64_t limit) {
  ASSIGN_OR_RETURN(GzPtr f, Open(path));
  ASSIGN_OR_RETURN(const std::vector<uint32_t> dims,
                   ReadHeader(f.get(), path, 0x00000801, 1));
  int64_t count = dims[0];
  if (limit > 0 && limit < count) count = limit;
  std::vector<uint8_t> raw(count);
  RETURN_IF_ERROR(ReadExactly(f.get(), raw.data(), count, path, "labels"));
  return std::vector<int32_t>(raw.begin(), raw.end());
}

absl::StatusOr<LabeledImages> LoadIdxSplit(const std::string& dir,
                                           const std::string& prefix,
                                           int64_t limit, int classes) {
  LabeledImages out;
  const std::string images_path = Pick(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = Pick(dir, prefix + "-labels-idx1-ubyte");
  absl::StatusOr<IdxImages> images = ReadIdxImages(images_path, limit);
  if (!images.ok()) return images.status();
  absl::StatusOr<std::vector<int32_t>> labels =
      ReadIdxLabels(labels_path, limit);
  if (!labels.ok()) return labels.status();
  if (static_cast<int64_t>(labels->size()) != images->count) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, " has ", labels->size(), " labels but ",
                     images_path, " has ", images->count, " images"));
  }
  for (size_t i = 0; i < labels->size(); ++i) {
    if ((*labels)[i] >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(labels_path, ": label ", (*labels)[i], " at index ", i,
                       " >= model classes ", classes));
    }
  }
  out.images = std::move(*images);
  out.labels = std::move(*labels);
  return out;
}

}  // namespace fulcrum
