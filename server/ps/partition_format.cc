#include "server/ps/partition_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

struct SavedHeader {
  char magic[4];  // "FPS1"
  uint32_t format_version;
  int32_t partition;
  int32_t slots;
  int64_t size;
  int64_t version;
  int64_t updates;
};
constexpr uint32_t kSavedFormat = 2;
static_assert(sizeof(SavedHeader) == 40,
              "the blob layout is part of the format");

}  // namespace

std::string EncodePartition(const PartitionImage& image) {
  const SavedHeader h{{'F', 'P', 'S', '1'}, kSavedFormat, image.partition,
                      image.slots,          image.size,   image.version,
                      image.updates};
  const uint64_t entries = image.ledger == nullptr ? 0 : image.ledger->size();
  const size_t values = image.size * sizeof(float);
  const size_t state = image.size * image.slots * sizeof(float);
  std::string blob(sizeof(h) + values + state + sizeof(entries) +
                       entries * 3 * sizeof(int64_t),
                   '\0');
  char* out = blob.data();
  std::memcpy(out, &h, sizeof(h));
  out += sizeof(h);
  std::memcpy(out, image.values, values);
  out += values;
  if (state > 0) std::memcpy(out, image.state, state);
  out += state;
  std::memcpy(out, &entries, sizeof(entries));
  out += sizeof(entries);
  if (image.ledger == nullptr) return blob;
  for (const auto& [chunk, e] : *image.ledger) {
    const int64_t triple[3] = {chunk, e.end, e.samples};
    std::memcpy(out, triple, sizeof(triple));
    out += sizeof(triple);
  }
  return blob;
}

absl::StatusOr<DecodedPartition> DecodePartition(std::string_view blob,
                                                 int32_t partition,
                                                 int64_t size, int slots) {
  SavedHeader h;
  if (blob.size() < sizeof(h)) {
    return absl::DataLossError(
        absl::StrCat("saved partition is truncated: ", blob.size(),
                     " bytes, the header alone is ", sizeof(h)));
  }
  std::memcpy(&h, blob.data(), sizeof(h));
  if (std::memcmp(h.magic, "FPS1", 4) != 0 ||
      (h.format_version != 1 && h.format_version != kSavedFormat)) {
    return absl::InvalidArgumentError(
        "not a saved partition of a known format");
  }
  if (h.partition != partition || h.size != size || h.slots != slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "saved partition ", h.partition, " (", h.size, " elements, ", h.slots,
        " state slots) does not match partition ", partition, " (", size,
        ", ", slots, ")"));
  }
  const size_t body = sizeof(h) + (1 + h.slots) * h.size * sizeof(float);
  uint64_t entries = 0;
  if (h.format_version >= 2 && blob.size() >= body + sizeof(entries))
    std::memcpy(&entries, blob.data() + body, sizeof(entries));
  const size_t want =
      h.format_version < 2
          ? body
          : body + sizeof(entries) + entries * 3 * sizeof(int64_t);
  if (blob.size() != want || entries > blob.size()) {
    return absl::DataLossError(absl::StrCat("saved partition has ", blob.size(),
                                            " bytes, expected ", want));
  }
  DecodedPartition d;
  d.version = h.version;
  d.updates = h.updates;
  d.values = blob.data() + sizeof(h);
  d.state = d.values + h.size * sizeof(float);
  const char* in = blob.data() + body + sizeof(entries);
  for (uint64_t i = 0; i < entries; ++i) {
    int64_t triple[3];
    std::memcpy(triple, in, sizeof(triple));
    in += sizeof(triple);
    d.ledger[triple[0]] = LedgerEntry{triple[1], triple[2]};
  }
  return d;
}

}  // namespace fulcrum
