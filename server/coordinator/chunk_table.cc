#include "server/coordinator/chunk_table.h"

#include <algorithm>

namespace fulcrum {

void ChunkTable::set_dataset_size(int64_t n) {
  dataset_size_ = n;
  EnsureEpoch(0);
}

int64_t ChunkTable::chunks_per_epoch() const {
  return (dataset_size_ + chunk_size_ - 1) / chunk_size_;
}

void ChunkTable::EnsureEpoch(int64_t epoch) {
  if (dataset_size_ <= 0) return;
  const int64_t per = chunks_per_epoch();
  if (chunks_.count(epoch * per)) return;
  for (int64_t i = 0; i < per; ++i) {
    Chunk c;
    c.begin = i * chunk_size_;
    c.end = std::min(c.begin + chunk_size_, dataset_size_);
    c.next = c.begin;
    chunks_[epoch * per + i] = c;
  }
}

void ChunkTable::Rebuild(const LedgerMap& ledger) {
  if (dataset_size_ <= 0) return;
  const int64_t per = chunks_per_epoch();
  for (const auto& [id, entry] : ledger) EnsureEpoch(id / per);
  for (auto& [id, c] : chunks_) {
    c.holder.clear();
    c.released = false;
    auto e = ledger.find(id);
    c.next = e == ledger.end()
                 ? c.begin
                 : std::clamp<int64_t>(e->second.end(), c.begin, c.end);
    c.done = c.next >= c.end;
  }
}

void ChunkTable::Release(const std::string& worker) {
  for (auto& [id, c] : chunks_) {
    if (c.holder != worker) continue;
    c.holder.clear();
    c.released = true;
  }
}

v1::LeaseChunkResponse ChunkTable::Lease(
    const std::string& worker, const std::vector<int64_t>& done,
    const std::vector<int64_t>& in_flight) {
  for (int64_t id : done) {
    auto c = chunks_.find(id);
    if (c != chunks_.end() && c->second.holder == worker) {
      c->second.holder.clear();
      c->second.done = true;
      c->second.next = c->second.end;
    }
  }
  const int64_t per = chunks_per_epoch();
  v1::LeaseChunkResponse response;
  auto lease = [&](int64_t id, Chunk& c) {
    c.holder = worker;
    v1::DataRange* r = response.mutable_chunk();
    r->set_chunk(id);
    r->set_begin(c.next);
    r->set_end(c.end);
    response.set_epoch(static_cast<int32_t>(id / per));
  };
  int held = 0;
  for (auto& [id, c] : chunks_) {  // a lease the worker already holds
    if (c.holder != worker) continue;
    if (std::find(in_flight.begin(), in_flight.end(), id) == in_flight.end()) {
      lease(id, c);
      return response;
    }
    ++held;
  }
  if (held >= kMaxInFlight) return response;  // none now: train those first
  bool all_done = true;
  for (int64_t epoch = 0; epoch < epochs_; ++epoch) {
    EnsureEpoch(epoch);
    for (int64_t id = epoch * per; id < (epoch + 1) * per; ++id) {
      Chunk& c = chunks_[id];
      if (c.done) continue;
      all_done = false;
      if (c.holder.empty() && !c.released) {
        lease(id, c);
        return response;
      }
    }
  }
  response.set_exhausted(all_done);
  return response;
}

std::vector<v1::EpochSamples> ChunkTable::Epochs(
    const LedgerMap& ledger) const {
  std::vector<v1::EpochSamples> epochs;
  if (dataset_size_ <= 0) return epochs;
  const int64_t per = chunks_per_epoch();
  int64_t last = -1;
  if (!chunks_.empty()) last = chunks_.rbegin()->first / per;
  if (!ledger.empty()) last = std::max(last, ledger.rbegin()->first / per);
  for (int64_t e = 0; e <= last; ++e) {
    v1::EpochSamples out;
    out.set_epoch(static_cast<int32_t>(e));
    out.set_total(dataset_size_);
    epochs.push_back(out);
  }
  for (const auto& [id, entry] : ledger) {
    v1::EpochSamples& out = epochs[id / per];
    out.set_trained(out.trained() + entry.samples());
  }
  return epochs;
}

}  // namespace fulcrum
