// An embedding table's rows on one shard as bytes, for checkpoints: every
// resident row's id and push frequency, and the records (values, then
// optimizer state) of all of them (a full save) or of those pushed since
// the last full save (a differential, which names that save's step).
//
// Blob: magic "FET2", uint32 name length, name, int32 dim, int32 record
// floats (dim + optimizer state), int64 base step (-1: full), uint64 rows,
// then per row, most recent first: uint64 id, uint32 frequency, uint8 1 if
// the record's floats follow (always in a full save), the floats.
// Little-endian. The checkpoint file's CRC covers it. "FET1" blobs (every
// row with its record, no base, no flag byte) still decode.
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
  int record = 0;           // floats per row: dim + optimizer state
  int64_t base_step = -1;   // >= 0: a differential against that step's save
  std::vector<uint64_t> ids;        // every resident row, most recent first
  std::vector<uint32_t> freq;
  std::vector<uint8_t> has_record;  // differential: which rows' records
                                    // `records` holds (empty: all)
  std::vector<float> records;       // of those rows, in order, x record
};

// Every resident row of `table` (stripe by stripe, each under its lock) as
// a full save (`base_step` < 0; afterwards no row counts as changed) or as
// a differential against the full save of step `base_step`: the records of
// the rows pushed since that save only. `cut` >= 0: the rows as they were
// at that checkpoint cut (EmbeddingTable::ForEachRecordSince).
std::string SaveTable(EmbeddingTable& table, int64_t base_step,
                      int64_t cut = -1);

// What a blob says of itself, without a table to check it against (tools,
// tests): DATA_LOSS when it is not a table blob.
struct TableBlobHeader {
  std::string table;
  int dim = 0;
  int record = 0;
  int64_t base_step = -1;  // >= 0: a differential
  uint64_t rows = 0;       // every resident row
};
absl::StatusOr<TableBlobHeader> ReadTableHeader(std::string_view blob);

// DATA_LOSS when the blob is truncated or not a table's; INVALID_ARGUMENT
// when it is another table's or another shape's than `table`.
absl::StatusOr<SavedRows> DecodeTable(std::string_view blob,
                                      const EmbeddingTable& table);

// A differential made whole with its base (a full save of the same table):
// every row of `diff`, with its record from `diff` where it has one, else
// from `base`. DATA_LOSS naming a row neither holds (or a base that is not
// a full save of the table).
absl::StatusOr<SavedRows> ApplyDifferential(const SavedRows& base,
                                            const SavedRows& diff);

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_EMBEDDING_TABLE_FORMAT_H_
