#include "common/tensor/table_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum/crc32c.h"
#include "common/tensor/bytes.h"

namespace fulcrum {
absl::Status WriteTableFile(const std::string& path,
                            const std::vector<ExportedTable>& tables) {
  std::string out = "FTB1";
  AppendRaw(&out, static_cast<uint32_t>(tables.size()));
  for (const ExportedTable& t : tables) {
    AppendRaw(&out, static_cast<uint32_t>(t.name.size()));
    out += t.name;
    AppendRaw(&out, static_cast<int32_t>(t.dim));
    AppendRaw(&out, static_cast<uint64_t>(t.ids.size()));
    AppendRawArray(&out, t.ids.data(), t.ids.size());
    AppendRawArray(&out, t.values.data(), t.values.size());
  }
  AppendRaw(&out, Crc32c(out.data(), out.size()));
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

absl::StatusOr<std::vector<ExportedTable>> ReadTableFile(
    const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << f.rdbuf();
  const std::string in = buffer.str();
  auto loss = [&path](const char* why) {
    return absl::DataLossError(
        absl::StrCat("table file ", path, " is corrupt: ", why));
  };
  if (in.size() < 8 || in.compare(0, 4, "FTB1") != 0) return loss("bad magic");
  uint32_t crc;
  std::memcpy(&crc, in.data() + in.size() - 4, 4);
  if (Crc32c(in.data(), in.size() - 4) != crc) return loss("checksum mismatch");
  ByteReader r(std::string_view(in).substr(4, in.size() - 8));
  uint32_t count;
  if (!r.Get(&count)) return loss("truncated");
  std::vector<ExportedTable> tables;
  for (uint32_t i = 0; i < count; ++i) {
    ExportedTable t;
    uint32_t name_size;
    int32_t dim;
    uint64_t rows;
    std::string_view name;
    if (!r.Get(&name_size) || !r.Bytes(name_size, &name))
      return loss("truncated");
    t.name = std::string(name);
    if (!r.Get(&dim) || !r.Get(&rows) || dim < 1) return loss("truncated");
    t.dim = dim;
    const uint64_t bytes = rows * (8 + sizeof(float) * static_cast<uint64_t>(dim));
    if (rows > r.left() || r.left() < bytes) return loss("truncated");
    t.ids.resize(rows);
    r.GetArray(t.ids.data(), rows);
    t.values.resize(rows * dim);
    r.GetArray(t.values.data(), t.values.size());
    tables.push_back(std::move(t));
  }
  if (r.left() != 0) return loss("trailing bytes");
  return tables;
}

}  // namespace fulcrum
