// The saved form of one partition's whole state, as checkpoints hold it:
// a fixed header (magic "FPS1", format version, partition, optimizer state
// slots, size, version, update count), the values, the optimizer state
// (slot-major), then (format 2) the data ledger as a uint64 count and
// (chunk, end, samples) int64 triples. All little-endian. Format 1 blobs
// (no ledger) are still read.
#ifndef FULCRUM_SERVER_PS_PARTITION_FORMAT_H_
#define FULCRUM_SERVER_PS_PARTITION_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/ps/data_ledger.h"

namespace fulcrum {

// A partition's state to save; pointers are not owned.
struct PartitionImage {
  int32_t partition = 0;
  int32_t slots = 0;  // optimizer state floats per value
  int64_t size = 0;   // values
  int64_t version = 0;
  int64_t updates = 0;
  const float* values = nullptr;  // size floats
  const float* state = nullptr;   // slots * size floats
  const Ledger* ledger = nullptr;  // may be null: no entries
};

std::string EncodePartition(const PartitionImage& image);

// A decoded blob; values/state point into the blob.
struct DecodedPartition {
  int64_t version = 0;
  int64_t updates = 0;
  const char* values = nullptr;
  const char* state = nullptr;
  Ledger ledger;
};

// Decodes a blob saved for `partition` of `size` values and `slots` state
// slots. INVALID_ARGUMENT when it is not a known format or is for another
// partition shape; DATA_LOSS when truncated or padded.
absl::StatusOr<DecodedPartition> DecodePartition(std::string_view blob,
                                                 int32_t partition,
                                                 int64_t size, int slots);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_PARTITION_FORMAT_H_
