#include "server/ps/embedding/table_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

constexpr char kMagic[4] = {'F', 'E', 'T', '1'};

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (in_.size() < n) return false;
    *out = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

}  // namespace

std::string SaveTable(const EmbeddingTable& table) {
  std::string rows;
  uint64_t count = 0;
  const int record = table.record_floats();
  table.ForEachRecord([&](uint64_t id, uint32_t freq, const float* r) {
    Put(&rows, id);
    Put(&rows, freq);
    rows.append(reinterpret_cast<const char*>(r), sizeof(float) * record);
    ++count;
  });
  std::string out(kMagic, sizeof(kMagic));
  Put(&out, static_cast<uint32_t>(table.name().size()));
  out += table.name();
  Put(&out, static_cast<int32_t>(table.dim()));
  Put(&out, static_cast<int32_t>(record));
  Put(&out, count);
  out += rows;
  return out;
}

absl::StatusOr<SavedRows> DecodeTable(std::string_view blob,
                                      const EmbeddingTable& table) {
  Reader r(blob);
  std::string_view magic, name;
  uint32_t name_size = 0;
  int32_t dim = 0, record = 0;
  uint64_t count = 0;
  if (!r.Bytes(4, &magic) || std::memcmp(magic.data(), kMagic, 4) != 0 ||
      !r.Get(&name_size) || !r.Bytes(name_size, &name) || !r.Get(&dim) ||
      !r.Get(&record) || !r.Get(&count)) {
    return absl::DataLossError(
        absl::StrCat("saved table '", table.name(), "' is not a table blob (",
                     blob.size(), " bytes)"));
  }
  if (name != table.name() || dim != table.dim() ||
      record != table.record_floats()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saved table '", std::string(name).substr(0, 64), "' dim ", dim,
        " record ", record, " is not table '", table.name(), "' dim ",
        table.dim(), " record ", table.record_floats()));
  }
  const size_t row_bytes = 12 + sizeof(float) * record;
  if (count > r.left() / row_bytes || r.left() != count * row_bytes) {
    return absl::DataLossError(absl::StrCat(
        "saved table '", table.name(), "' says ", count, " rows in ",
        r.left(), " bytes"));
  }
  SavedRows out;
  out.table = std::string(name);
  out.dim = dim;
  out.record = record;
  out.ids.resize(count);
  out.freq.resize(count);
  out.records.resize(count * record);
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view floats;
    r.Get(&out.ids[i]);
    r.Get(&out.freq[i]);
    r.Bytes(sizeof(float) * record, &floats);
    std::memcpy(out.records.data() + i * record, floats.data(), floats.size());
  }
  return out;
}

}  // namespace fulcrum
