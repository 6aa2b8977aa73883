#include "server/ps/embedding/table_format.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/tensor/bytes.h"

namespace fulcrum {
namespace {

constexpr char kMagic[4] = {'F', 'E', 'T', '2'};
constexpr char kMagicV1[4] = {'F', 'E', 'T', '1'};

}  // namespace

std::string SaveTable(EmbeddingTable& table, int64_t base_step,
                      int64_t cut) {
  const bool full = base_step < 0;
  std::string rows;
  uint64_t count = 0;
  const int record = table.record_floats();
  table.ForEachRecordSince(
      full, [&](uint64_t id, uint32_t freq, const float* r, bool changed) {
        AppendRaw(&rows, id);
        AppendRaw(&rows, freq);
        const bool with = full || changed;
        AppendRaw(&rows, static_cast<uint8_t>(with ? 1 : 0));
        if (with)
          AppendRawArray(&rows, r, record);
        ++count;
      },
      cut);
  std::string out(kMagic, sizeof(kMagic));
  AppendRaw(&out, static_cast<uint32_t>(table.name().size()));
  out += table.name();
  AppendRaw(&out, static_cast<int32_t>(table.dim()));
  AppendRaw(&out, static_cast<int32_t>(record));
  AppendRaw(&out, static_cast<int64_t>(full ? -1 : base_step));
  AppendRaw(&out, count);
  out += rows;
  return out;
}

absl::StatusOr<TableBlobHeader> ReadTableHeader(std::string_view blob) {
  ByteReader r(blob);
  std::string_view magic, name;
  uint32_t name_size = 0;
  TableBlobHeader h;
  int32_t dim = 0, record = 0;
  if (!r.Bytes(4, &magic) ||
      (std::memcmp(magic.data(), kMagic, 4) != 0 &&
       std::memcmp(magic.data(), kMagicV1, 4) != 0)) {
    return absl::DataLossError("not a table blob");
  }
  const bool v1 = std::memcmp(magic.data(), kMagicV1, 4) == 0;
  if (!r.Get(&name_size) || !r.Bytes(name_size, &name) || !r.Get(&dim) ||
      !r.Get(&record) || (!v1 && !r.Get(&h.base_step)) || !r.Get(&h.rows)) {
    return absl::DataLossError("a truncated table blob");
  }
  h.table = std::string(name);
  h.dim = dim;
  h.record = record;
  if (h.base_step < 0) h.base_step = -1;
  return h;
}

absl::StatusOr<SavedRows> DecodeTable(std::string_view blob,
                                      const EmbeddingTable& table) {
  ByteReader r(blob);
  std::string_view magic, name;
  uint32_t name_size = 0;
  int32_t dim = 0, record = 0;
  int64_t base_step = -1;
  uint64_t count = 0;
  const auto not_a_table = [&] {
    return absl::DataLossError(
        absl::StrCat("saved table '", table.name(), "' is not a table blob (",
                     blob.size(), " bytes)"));
  };
  if (!r.Bytes(4, &magic)) return not_a_table();
  const bool v1 = std::memcmp(magic.data(), kMagicV1, 4) == 0;
  if (!v1 && std::memcmp(magic.data(), kMagic, 4) != 0) return not_a_table();
  if (!r.Get(&name_size) || !r.Bytes(name_size, &name) || !r.Get(&dim) ||
      !r.Get(&record) || (!v1 && !r.Get(&base_step)) || !r.Get(&count)) {
    return not_a_table();
  }
  if (name != table.name() || dim != table.dim() ||
      record != table.record_floats()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saved table '", std::string(name).substr(0, 64), "' dim ", dim,
        " record ", record, " is not table '", table.name(), "' dim ",
        table.dim(), " record ", table.record_floats()));
  }
  const auto truncated = [&] {
    return absl::DataLossError(absl::StrCat("saved table '", table.name(),
                                            "' says ", count, " rows in ",
                                            blob.size(), " bytes"));
  };
  // Each row takes at least its id, frequency and flag.
  if (count > r.left() / 12) return truncated();
  SavedRows out;
  out.table = std::string(name);
  out.dim = dim;
  out.record = record;
  out.base_step = base_step < 0 ? -1 : base_step;
  out.ids.resize(count);
  out.freq.resize(count);
  if (out.base_step >= 0) out.has_record.resize(count);
  out.records.reserve(base_step < 0 ? count * record : 0);
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t with = 1;
    if (!r.Get(&out.ids[i]) || !r.Get(&out.freq[i]) || (!v1 && !r.Get(&with)) ||
        with > 1 || (base_step < 0 && with != 1)) {
      return truncated();
    }
    if (out.base_step >= 0) out.has_record[i] = with;
    if (with == 0) continue;
    std::string_view floats;
    if (!r.Bytes(sizeof(float) * record, &floats)) return truncated();
    const size_t at = out.records.size();
    out.records.resize(at + record);
    std::memcpy(out.records.data() + at, floats.data(), floats.size());
  }
  if (r.left() != 0) return truncated();
  return out;
}

absl::StatusOr<SavedRows> ApplyDifferential(const SavedRows& base,
                                            const SavedRows& diff) {
  if (base.base_step >= 0 || base.table != diff.table ||
      base.record != diff.record) {
    return absl::DataLossError(absl::StrCat(
        "the base of table '", diff.table, "''s differential (step ",
        diff.base_step, ") is not a full save of it"));
  }
  absl::flat_hash_map<uint64_t, size_t> in_base;
  in_base.reserve(base.ids.size());
  for (size_t i = 0; i < base.ids.size(); ++i) in_base[base.ids[i]] = i;
  SavedRows out;
  out.table = diff.table;
  out.dim = diff.dim;
  out.record = diff.record;
  out.ids = diff.ids;
  out.freq = diff.freq;
  out.records.resize(diff.ids.size() * diff.record);
  const size_t record = diff.record;
  size_t next = 0;  // diff's next own record
  for (size_t i = 0; i < diff.ids.size(); ++i) {
    const float* from;
    if (diff.has_record.empty() || diff.has_record[i]) {
      from = diff.records.data() + next * record;
      ++next;
    } else {
      auto it = in_base.find(diff.ids[i]);
      if (it == in_base.end()) {
        return absl::DataLossError(absl::StrCat(
            "table '", diff.table, "': row ", diff.ids[i],
            " is unchanged since step ", diff.base_step,
            " but that save does not hold it"));
      }
      from = base.records.data() + it->second * record;
    }
    std::memcpy(out.records.data() + i * record, from, record * sizeof(float));
  }
  return out;
}

}  // namespace fulcrum
