#include "server/ps/embedding/embedding_table.h"

#include <algorithm>

#include "common/embedding/placement.h"

namespace fulcrum {
namespace {

// Rows past their ttl a push expires per stripe it touches (a sweep is
// Expire's).
constexpr int64_t kExpirePerPush = 16;
constexpr int kMaxStripes = 16;
// A stripe holds at least this many rows (small tables: one stripe, exact
// lru).
constexpr int64_t kMinStripeRows = 4096;

}  // namespace

EmbeddingTable::EmbeddingTable(const v1::EmbeddingTableSpec& spec,
                               uint64_t seed, int64_t rows, Env* env,
                               bool undoable)
    : name_(spec.name()),
      dim_(spec.dim()),
      rows_(rows),
      env_(env),
      start_(env->Now()) {
  int stripes = 1;
  while (stripes < kMaxStripes && rows / (2 * stripes) >= kMinStripeRows) {
    stripes *= 2;
  }
  RowStoreConfig c;
  c.dim = spec.dim();
  c.init = RowInitFromSpec(spec, seed);
  c.optimizer = RowOptimizerFromSpec(spec.optimizer());
  c.capacity = (rows + stripes - 1) / stripes;
  c.eviction = spec.eviction() == "lfu" ? RowStoreConfig::Eviction::kLfu
                                        : RowStoreConfig::Eviction::kLru;
  c.min_count = spec.min_count();
  c.ttl_seconds = spec.ttl_seconds();
  c.undoable = undoable;
  for (int s = 0; s < stripes; ++s) {
    c.seed = Mix64(seed + s + 1);
    stripes_.push_back(std::make_unique<Stripe>(c));
  }
}

int EmbeddingTable::StripeOf(uint64_t id) const {
  // Not placement's bits: ids on one shard share those.
  return static_cast<int>(Mix64(id ^ 0x510e527fade682d1ULL) &
                          (stripes_.size() - 1));
}

void EmbeddingTable::GroupByStripe(absl::Span<const uint64_t> ids,
                                   std::vector<uint32_t>* order,
                                   std::vector<uint32_t>* begin) const {
  const size_t n = stripes_.size();
  begin->assign(n + 1, 0);
  order->resize(ids.size());
  if (n == 1) {
    for (size_t i = 0; i < ids.size(); ++i) (*order)[i] = i;
    (*begin)[1] = ids.size();
    return;
  }
  std::vector<uint8_t> of(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    of[i] = static_cast<uint8_t>(StripeOf(ids[i]));
    ++(*begin)[of[i] + 1];
  }
  for (size_t s = 0; s < n; ++s) (*begin)[s + 1] += (*begin)[s];
  std::vector<uint32_t> next(begin->begin(), begin->end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) (*order)[next[of[i]]++] = i;
}

int64_t EmbeddingTable::Now() const {
  return absl::ToInt64Seconds(env_->Now() - start_);
}

void EmbeddingTable::Pull(absl::Span<const uint64_t> ids, float* out) const {
  std::vector<uint32_t> order, begin;
  GroupByStripe(ids, &order, &begin);
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (begin[s] == begin[s + 1]) continue;
    const Stripe& stripe = *stripes_[s];
    absl::ReaderMutexLock lock(&stripe.mu);
    for (uint32_t k = begin[s]; k < begin[s + 1]; ++k) {
      const uint32_t i = order[k];
      stripe.store.Read(ids[i], out + static_cast<size_t>(i) * dim_);
    }
  }
}

EmbeddingTable::Pushed EmbeddingTable::Push(absl::Span<const uint64_t> ids,
                                            const float* gradients,
                                            absl::Span<const uint32_t> counts,
                                            int64_t step,
                                            const CutWindow& cuts) {
  std::vector<uint32_t> order, begin;
  GroupByStripe(ids, &order, &begin);
  const int64_t now = Now();
  Pushed out;
  for (size_t s = 0; s < stripes_.size(); ++s) {
    if (begin[s] == begin[s + 1]) continue;
    Stripe& stripe = *stripes_[s];
    absl::MutexLock lock(&stripe.mu);
    stripe.store.SetCuts(cuts);
    for (uint32_t k = begin[s]; k < begin[s + 1]; ++k) {
      const uint32_t i = order[k];
      const RowStore::Pushed p = stripe.store.Push(
          ids[i], gradients + static_cast<size_t>(i) * dim_,
          counts.empty() ? 1 : counts[i], now, step);
      if (p == RowStore::Pushed::kPending) {
        ++out.pending;
        continue;
      }
      ++out.applied;
      if (p == RowStore::Pushed::kCreated) ++out.created;
    }
    stripe.store.Expire(now, kExpirePerPush);
  }
  return out;
}

bool EmbeddingTable::Undo(int64_t to) {
  const int64_t now = Now();
  bool ok = true;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    ok &= stripe->store.Undo(to, now);
  }
  return ok;
}

int64_t EmbeddingTable::Expire() {
  const int64_t now = Now();
  int64_t n = 0;
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    n += stripe->store.Expire(now, INT64_MAX);
  }
  return n;
}

RowStore::Stats EmbeddingTable::stats() const {
  RowStore::Stats sum;
  for (const auto& stripe : stripes_) {
    absl::ReaderMutexLock lock(&stripe->mu);
    const RowStore::Stats s = stripe->store.stats();
    sum.resident += s.resident;
    sum.created += s.created;
    sum.evicted_capacity += s.evicted_capacity;
    sum.evicted_ttl += s.evicted_ttl;
    sum.pending_pushes += s.pending_pushes;
    sum.bytes += s.bytes;
    sum.cut_rows += s.cut_rows;
    sum.undo_rows += s.undo_rows;
    sum.undone += s.undone;
  }
  return sum;
}

int EmbeddingTable::record_floats() const {
  absl::ReaderMutexLock lock(&stripes_[0]->mu);
  return stripes_[0]->store.record_floats();
}

void EmbeddingTable::ForEachRecord(
    const std::function<void(uint64_t, uint32_t, const float*)>& fn) const {
  for (const auto& stripe : stripes_) {
    absl::ReaderMutexLock lock(&stripe->mu);
    stripe->store.ForEachRecord(fn);
  }
}

void EmbeddingTable::ForEachRecordSince(
    bool full,
    const std::function<void(uint64_t, uint32_t, const float*, bool)>& fn,
    int64_t cut) {
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stripe->store.ForEachRecordSince(full, fn, cut);
  }
}

void EmbeddingTable::Clear() {
  for (auto& stripe : stripes_) {
    absl::MutexLock lock(&stripe->mu);
    stripe->store.Clear();
  }
}

void EmbeddingTable::Restore(const std::vector<uint64_t>& ids,
                             const std::vector<uint32_t>& freq,
                             const std::vector<float>& records) {
  Clear();
  const int64_t now = Now();
  const size_t record = record_floats();
  // Oldest first, so that each stripe's most recent ends at its front.
  for (size_t k = ids.size(); k-- > 0;) {
    Stripe& stripe = *stripes_[StripeOf(ids[k])];
    absl::MutexLock lock(&stripe.mu);
    stripe.store.Insert(ids[k], records.data() + k * record, freq[k], now);
  }
}

void EmbeddingTable::ForEachRowOfStripe(
    int s, const std::function<void(uint64_t, const float*, const float*)>& fn)
    const {
  absl::ReaderMutexLock lock(&stripes_[s]->mu);
  stripes_[s]->store.ForEachRow(fn);
}

void EmbeddingTable::ForEachRow(
    const std::function<void(uint64_t, const float*, const float*)>& fn)
    const {
  for (const auto& stripe : stripes_) {
    absl::ReaderMutexLock lock(&stripe->mu);
    stripe->store.ForEachRow(fn);
  }
}

}  // namespace fulcrum
