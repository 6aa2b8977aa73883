// The `embeddings:` part of a job spec (docs/embeddings.md): parsing,
// defaults and validation of its tables. Errors name the field:
// "embeddings[1].dim must be in [1, 1024], got 0".
#ifndef FULCRUM_COMMON_CONFIG_EMBEDDING_SPEC_H_
#define FULCRUM_COMMON_CONFIG_EMBEDDING_SPEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/config/yaml_fields.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

inline constexpr int kMaxEmbeddingTables = 64;
inline constexpr int kMaxEmbeddingDim = 1024;
inline constexpr int kMaxMinCount = 255;
// Rows one shard may hold of one table (row slots are 32-bit).
inline constexpr int64_t kMaxRowsPerShard = int64_t{1} << 31;
inline constexpr double kDefaultEmbeddingInitScale = 0.01;

// Reads `embeddings:` (a list of tables) into spec->embeddings.
config::Handler EmbeddingTablesField(v1::JobSpec* spec);

// Fills each table's unset fields with their documented defaults.
void ApplyEmbeddingDefaults(v1::JobSpec* spec);

// OK, or INVALID_ARGUMENT naming the first bad field. After the defaults.
absl::Status ValidateEmbeddingTables(const v1::JobSpec& spec);

// Rows of `table` one of `shards` shards may hold: capacity / shards,
// rounded up.
int64_t RowsPerShard(const v1::EmbeddingTableSpec& table, int shards);

// The most bytes one resident row of `table` takes on a shard: values and
// optimizer state, 24 bytes of metadata, 21 of index (its load while it
// grows), and 8 of admission counters when min_count > 1.
int64_t BytesPerRow(const v1::EmbeddingTableSpec& table);
// What the job's tables hold on one of `shards` shards when full.
int64_t EmbeddingShardBytes(const v1::JobSpec& spec);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONFIG_EMBEDDING_SPEC_H_
