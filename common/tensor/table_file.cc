#include "common/tensor/table_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum/crc32c.h"

namespace fulcrum {
namespace {

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

absl::Status WriteTableFile(const std::string& path,
                            const std::vector<ExportedTable>& tables) {
  std::string out = "FTB1";
  Put(&out, static_cast<uint32_t>(tables.size()));
  for (const ExportedTable& t : tables) {
    Put(&out, static_cast<uint32_t>(t.name.size()));
    out += t.name;
    Put(&out, static_cast<int32_t>(t.dim));
    Put(&out, static_cast<uint64_t>(t.ids.size()));
    out.append(reinterpret_cast<const char*>(t.ids.data()),
               t.ids.size() * sizeof(uint64_t));
    out.append(reinterpret_cast<const char*>(t.values.data()),
               t.values.size() * sizeof(float));
  }
  Put(&out, Crc32c(out.data(), out.size()));
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
  const std::string body = in.substr(0, in.size() - 4);
  size_t at = 4;
  uint32_t count;
  if (!Get(body, &at, &count)) return loss("truncated");
  std::vector<ExportedTable> tables;
  for (uint32_t i = 0; i < count; ++i) {
    ExportedTable t;
    uint32_t name_size;
    int32_t dim;
    uint64_t rows;
    if (!Get(body, &at, &name_size) || body.size() - at < name_size)
      return loss("truncated");
    t.name = body.substr(at, name_size);
    at += name_size;
    if (!Get(body, &at, &dim) || !Get(body, &at, &rows) || dim < 1)
      return loss("truncated");
    t.dim = dim;
    const uint64_t bytes = rows * (8 + sizeof(float) * static_cast<uint64_t>(dim));
    if (rows > body.size() || body.size() - at < bytes) return loss("truncated");
    t.ids.resize(rows);
    std::memcpy(t.ids.data(), body.data() + at, rows * 8);
    at += rows * 8;
    t.values.resize(rows * dim);
    std::memcpy(t.values.data(), body.data() + at, t.values.size() * sizeof(float));
    at += t.values.size() * sizeof(float);
    tables.push_back(std::move(t));
  }
  if (at != body.size()) return loss("trailing bytes");
  return tables;
}

}  // namespace fulcrum
