#include "common/tensor/model_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum/crc32c.h"

namespace fulcrum {
namespace {

constexpr uint32_t kFormat = 1;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Get(const std::string& in, size_t* at, T* v) {
  if (in.size() - *at < sizeof(T)) return false;
  std::memcpy(v, in.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

}  // namespace

absl::Status WriteModelFile(const std::string& path, const ModelFile& m) {
  std::string out = "FMD1";
  Put(&out, kFormat);
  Put(&out, m.version);
  Put(&out, static_cast<uint32_t>(m.layers.size()));
  for (int32_t l : m.layers) Put(&out, l);
  Put(&out, static_cast<int64_t>(m.params.size()));
  Put(&out, Crc32c(m.params.data(), m.params.size() * sizeof(float)));
  out.append(reinterpret_cast<const char*>(m.params.data()),
             m.params.size() * sizeof(float));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    if (!f.good())
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelFile> ReadModelFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << f.rdbuf();
  const std::string in = buffer.str();
  auto loss = [&path](const char* why) {
    return absl::DataLossError(
        absl::StrCat("model file ", path, " is corrupt: ", why));
  };
  if (in.size() < 4 || in.compare(0, 4, "FMD1") != 0) return loss("bad magic");
  size_t at = 4;
  uint32_t format, layers;
  ModelFile m;
  if (!Get(in, &at, &format) || format != kFormat)
    return loss("unknown format version");
  if (!Get(in, &at, &m.version) || !Get(in, &at, &layers) || layers > 4096) {
    return loss("bad header");
  }
  m.layers.resize(layers);
  for (int32_t& l : m.layers) {
    if (!Get(in, &at, &l)) return loss("truncated header");
  }
  int64_t n;
  uint32_t crc;
  if (!Get(in, &at, &n) || !Get(in, &at, &crc) || n < 0)
    return loss("truncated header");
  if (in.size() - at != static_cast<size_t>(n) * sizeof(float))
    return loss("wrong length");
  m.params.resize(n);
  std::memcpy(m.params.data(), in.data() + at, n * sizeof(float));
  if (Crc32c(m.params.data(), n * sizeof(float)) != crc)
    return loss("CRC-32C mismatch");
  return m;
}

}  // namespace fulcrum
