// An embedding table's rows on one shard as bytes, for checkpoints: every
// resident row with its values, optimizer state and push frequency.
//
// Blob: magic "FET1", uint32 name length, name, int32 dim, int32 record
// floats (dim + optimizer state), uint64 rows, then per row: uint64 id,
// uint32 frequency, the record's floats. Little-endian. The checkpoint
// file's CRC covers it.
#ifndef FULCRUM_SERVER_PS_EMBEDDING_TABLE_FORMAT_H_
#define FULCRUM_SERVER_PS_EMBEDDING_TABLE_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/ps/embedding/embedding_table.h"

namespace fulcrum {

struct SavedRows {
  std::string table;
  int dim = 0;
  int record = 0;  // floats per row: dim + optimizer state
  std::vector<uint64_t> ids;
  std::vector<uint32_t> freq;
  std::vector<float> records;  // ids.size() x record
};

// Every resident row of `table` (stripe by stripe, each under its lock).
std::string SaveTable(const EmbeddingTable& table);

// DATA_LOSS when the blob is truncated or not a table's; INVALID_ARGUMENT
// when it is another table's or another shape's than `table`.
absl::StatusOr<SavedRows> DecodeTable(std::string_view blob,
                                      const EmbeddingTable& table);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_TABLE_FORMAT_H_
