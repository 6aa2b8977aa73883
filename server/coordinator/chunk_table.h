// A running job's data chunks: each epoch's sample order cut into chunks of
// dataset.chunk_size, leased to workers one at a time, done when every
// sample was pushed. A cache: every generation rebuilds it from the shards'
// data ledger (what the parameters include), so a dead worker's chunk
// resumes where the parameters end and nothing is trained twice.
//
// Thread safety: none; the Coordinator's lock guards it.
#ifndef FULCRUM_SERVER_COORDINATOR_CHUNK_TABLE_H_
#define FULCRUM_SERVER_COORDINATOR_CHUNK_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fulcrum/v1/coordinator.pb.h"

namespace fulcrum {

using LedgerMap = std::map<int64_t, v1::LedgerEntry>;  // by chunk

class ChunkTable {
 public:
  ChunkTable(int64_t chunk_size, int64_t epochs)
      : chunk_size_(chunk_size), epochs_(epochs) {}

  // The dataset's size, from the first worker's lease request; -1 before.
  int64_t dataset_size() const { return dataset_size_; }
  void set_dataset_size(int64_t n);
  int64_t chunks_per_epoch() const;

  // Every chunk leased by no one and resumed at the ledger's end.
  void Rebuild(const LedgerMap& ledger);
  // The worker left: its lease returns to the queue at the next Rebuild,
  // not before - the worker may have pushed more of it than the table knows
  // (or, alive after all, still push in this generation), and only the
  // ledger says where it resumes.
  void Release(const std::string& worker);
  // The most chunks one worker holds at once (in flight + the current one).
  static constexpr int kMaxInFlight = 4;

  // Reports `done` chunks of `worker` and leases it the next one: the one
  // it holds and has not named `in_flight`, if any, else a free one (none
  // when it holds kMaxInFlight already). exhausted: every chunk of every
  // epoch is done.
  v1::LeaseChunkResponse Lease(const std::string& worker,
                               const std::vector<int64_t>& done,
                               const std::vector<int64_t>& in_flight = {});
  // Samples per epoch as the ledger has them (trained == total for every
  // epoch is exactly once).
  std::vector<v1::EpochSamples> Epochs(const LedgerMap& ledger) const;

 private:
  struct Chunk {
    int64_t begin = 0, end = 0;  // positions in the epoch's order
    int64_t next = 0;            // where the next lease starts
    std::string holder;          // worker holding the lease, if any
    bool released = false;       // its holder left: leased after Rebuild
    bool done = false;           // every sample pushed (or in the ledger)
  };
  void EnsureEpoch(int64_t epoch);

  const int64_t chunk_size_;
  const int64_t epochs_;
  int64_t dataset_size_ = -1;
  std::map<int64_t, Chunk> chunks_;  // by id; epochs created as reached
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_COORDINATOR_CHUNK_TABLE_H_
