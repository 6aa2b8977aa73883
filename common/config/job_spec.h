// JobSpec parsing (YAML or JSON, the user-facing format), defaults and
// validation. Errors name the offending field: "optimizer.lr must be > 0, got
// -1".
#ifndef FULCRUM_COMMON_CONFIG_JOB_SPEC_H_
#define FULCRUM_COMMON_CONFIG_JOB_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "fulcrum/v1/job.pb.h"

namespace fulcrum {

inline constexpr int64_t kDefaultPartitionBytes = 4 << 20;
inline constexpr int64_t kDefaultChunkBytes = 1 << 20;
// wire.sparse_min_bytes (BytePS's BYTEPS_MIN_COMPRESS_BYTES plays this part).
inline constexpr int64_t kDefaultSparseMinBytes = 16384;
// dataset.chunk_size defaults to this many batches.
inline constexpr int kDefaultChunkBatches = 16;
inline constexpr int64_t kMaxChunkBytes = 4 << 20;
inline constexpr int kDefaultEvalEverySteps = 200;
// An external model: at most this many tensors and elements (4 GiB of fp32).
inline constexpr int kMaxTensors = 65536;
// The longest string field a spec may hold (paths, type names).
inline constexpr size_t kMaxStringBytes = 4096;
inline constexpr int64_t kMaxModelElements = int64_t{1} << 30;
// Chunks of one epoch the coordinator keeps a table of (dataset.sharding
// chunks): a larger dataset needs a larger dataset.chunk_size.
inline constexpr int64_t kMaxChunksPerEpoch = int64_t{1} << 18;

// Parses a job file. JSON is accepted too (it is YAML). Unknown keys and
// values of the wrong type are INVALID_ARGUMENT naming the key. The result
// has defaults applied but is not validated.
absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text);

// Fills unset optional fields with their documented defaults.
void ApplyDefaults(v1::JobSpec* spec);

// OK, or INVALID_ARGUMENT naming the first bad field. Call after ApplyDefaults.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// The fraction of each chunk a sparse wire sends (wire.topk or
// wire.randomk, at most one of them set); 0: dense.
double SparseFraction(const v1::JobSpec& spec);
// wire.sparse_min_bytes, or its default when unset (ApplyDefaults sets it
// at submission).
int64_t SparseMinBytes(const v1::JobSpec& spec);
// Whether the job's momentum runs on the workers (a sparse wire with optimizer
// momentum and wire.momentum_correction not false): the shards then apply
// plain SGD to what arrives (docs/job-spec.md, wire).
bool MomentumOnWorkers(const v1::JobSpec& spec);
// Whether the job's workers pre-reduce per host (wire.pre_reduce; off
// unless the spec says true).
bool PreReduce(const v1::JobSpec& spec);
// A training-set size for `spec` (dataset.size, or a worker's lease: `field`
// names it in the error): at most dataset.train_limit when that is set, and
// at most kMaxChunksPerEpoch chunks an epoch. INVALID_ARGUMENT otherwise.
absl::Status CheckDatasetSize(const v1::JobSpec& spec, int64_t size,
                              const std::string& field);
// The model part alone (an external model's tensors, as declared).
absl::Status ValidateModelSpec(const v1::ModelSpec& model);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONFIG_JOB_SPEC_H_
