#include "common/tensor/model_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum/crc32c.h"
#include "common/tensor/bytes.h"

namespace fulcrum {
namespace {

constexpr uint32_t kFormat = 1;

}  // namespace

absl::Status WriteModelFile(const std::string& path, const ModelFile& m) {
  std::string out = "FMD1";
  AppendRaw(&out, kFormat);
  AppendRaw(&out, m.version);
  AppendRaw(&out, static_cast<uint32_t>(m.layers.size()));
  for (int32_t l : m.layers) AppendRaw(&out, l);
  AppendRaw(&out, static_cast<int64_t>(m.params.size()));
  AppendRaw(&out, Crc32c(m.params.data(), m.params.size() * sizeof(float)));
  AppendRawArray(&out, m.params.data(), m.params.size());
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
  ByteReader r(std::string_view(in).substr(4));
  uint32_t format, layers;
  ModelFile m;
  if (!r.Get(&format) || format != kFormat)
    return loss("unknown format version");
  if (!r.Get(&m.version) || !r.Get(&layers) || layers > 4096) {
    return loss("bad header");
  }
  m.layers.resize(layers);
  if (!r.GetArray(m.layers.data(), layers)) return loss("truncated header");
  int64_t n;
  uint32_t crc;
  if (!r.Get(&n) || !r.Get(&crc) || n < 0) return loss("truncated header");
  if (r.left() != static_cast<size_t>(n) * sizeof(float))
    return loss("wrong length");
  m.params.resize(n);
  r.GetArray(m.params.data(), n);
  if (Crc32c(m.params.data(), n * sizeof(float)) != crc)
    return loss("CRC-32C mismatch");
  return m;
}

}  // namespace fulcrum
