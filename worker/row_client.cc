#include "worker/row_client.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/embedding/placement.h"

namespace fulcrum {
namespace {

// Positions [begin, end) of one shard's rows: one request.
struct Run {
  int shard;
  size_t begin, end;
  int32_t chunk, chunks;
};

// Cuts each shard's rows (by_shard[s], positions into the unique rows) into
// runs of at most `max_rows`, laying the positions out shard by shard in
// *order. `every_shard`: a shard without rows gets an empty run.
std::vector<Run> Runs(const std::vector<std::vector<uint32_t>>& by_shard,
                      int64_t max_rows, std::vector<uint32_t>* order,
                      bool every_shard = false) {
  std::vector<Run> runs;
  order->clear();
  for (size_t s = 0; s < by_shard.size(); ++s) {
    const size_t n = by_shard[s].size();
    if (n == 0) {
      if (every_shard) {
        runs.push_back({static_cast<int>(s), order->size(), order->size(), 0, 1});
      }
      continue;
    }
    const int32_t chunks = static_cast<int32_t>((n + max_rows - 1) / max_rows);
    for (int32_t c = 0; c < chunks; ++c) {
      const size_t begin = order->size() + c * max_rows;
      runs.push_back({static_cast<int>(s), begin,
                      std::min(begin + max_rows, order->size() + n), c, chunks});
    }
    order->insert(order->end(), by_shard[s].begin(), by_shard[s].end());
  }
  return runs;
}

}  // namespace

RowClient::RowClient(RowChannel* channel, Options options)
    : channel_(channel), options_(options) {}

absl::Status RowClient::RunAll(
    int n, absl::Time deadline,
    const std::function<void(int, std::function<void(absl::Status)>)>& issue) {
  std::vector<int> todo(n);
  for (int i = 0; i < n; ++i) todo[i] = i;
  absl::Duration backoff = options_.first_backoff;
  absl::Status last;
  while (!todo.empty()) {
    absl::Mutex mu;
    int left = static_cast<int>(todo.size());
    std::vector<absl::Status> result(n);
    for (int i : todo) {
      issue(i, [&, i](absl::Status s) {
        absl::MutexLock lock(&mu);
        result[i] = std::move(s);
        --left;
      });
    }
    {
      absl::MutexLock lock(&mu);
      // Every call carries the deadline; a transport answers by then. The
      // extra second only guards a transport that would not.
      auto all_done = [&left]() { return left == 0; };
      if (!mu.AwaitWithDeadline(absl::Condition(&all_done),
                                deadline + absl::Seconds(1))) {
        // The callbacks still refer to mu and result: wait them out.
        mu.Await(absl::Condition(&all_done));
      }
    }
    std::vector<int> again;
    for (int i : todo) {
      if (result[i].ok()) continue;
      // NOT_FOUND: a restarted shard that does not hold the job yet (the
      // coordinator is re-initialising it), as the dense channel treats it.
      // The callers check the table against the job's spec first.
      if (result[i].code() != absl::StatusCode::kUnavailable &&
          result[i].code() != absl::StatusCode::kNotFound) {
        return result[i];
      }
      last = result[i];
      again.push_back(i);
    }
    todo = std::move(again);
    if (todo.empty()) break;
    if (absl::Now() + backoff >= deadline) {
      return absl::Status(last.code(),
                          absl::StrCat("embedding rows: a shard stayed ",
                                       last.code() == absl::StatusCode::kNotFound
                                           ? "without the job"
                                           : "unavailable",
                                       ": ", last.message()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, options_.max_backoff);
  }
  return absl::OkStatus();
}

absl::Status RowClient::Pull(const std::string& table, int dim,
                             absl::Span<const uint64_t> ids, float* out,
                             int64_t step) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  // Each id once.
  std::vector<uint64_t> unique;
  std::vector<uint32_t> slot(ids.size());
  absl::flat_hash_map<uint64_t, uint32_t> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, fresh] = seen.try_emplace(ids[i], unique.size());
    if (fresh) unique.push_back(ids[i]);
    slot[i] = it->second;
  }
  std::vector<uint32_t> order;
  const std::vector<Run> runs =
      Runs(SplitByShard(unique, options_.shards),
           std::max<int64_t>(1, options_.chunk_bytes / (4 * dim)), &order);
  std::vector<uint64_t> run_ids(order.size());
  for (size_t k = 0; k < order.size(); ++k) run_ids[k] = unique[order[k]];
  std::vector<float> rows(order.size() * dim);
  absl::Status s = RunAll(
      static_cast<int>(runs.size()), deadline,
      [&](int i, std::function<void(absl::Status)> done) {
        const Run& r = runs[i];
        RowPullCall call;
        call.shard = r.shard;
        call.table = &table;
        call.ids = absl::MakeConstSpan(run_ids).subspan(r.begin, r.end - r.begin);
        call.out = rows.data() + r.begin * dim;
        call.dim = dim;
        call.step = step;
        call.deadline = deadline;
        channel_->Pull(call, std::move(done));
      });
  if (!s.ok()) return s;
  std::vector<uint32_t> where(unique.size());  // unique row -> its place in rows
  for (size_t k = 0; k < order.size(); ++k) where[order[k]] = k;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(out + i * dim, rows.data() + size_t{where[slot[i]]} * dim,
                sizeof(float) * dim);
  }
  return absl::OkStatus();
}

absl::Status RowClient::Push(const std::string& table, int dim, int64_t step,
                             absl::Span<const uint64_t> ids,
                             absl::Span<const float> grads) {
  if (grads.size() != ids.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradients: ", grads.size(), " floats for ", ids.size(),
                     " ids of dim ", dim));
  }
  return Push(table, step, Coalesce(ids, grads, dim));
}

absl::Status RowClient::Push(const std::string& table, int64_t step,
                             const SparseBatch& batch) {
  return PushSummed(table, batch.dim, step, batch.ids, batch.counts,
                    batch.gradients);
}

absl::Status RowClient::PushSummed(const std::string& table, int dim,
                                   int64_t step,
                                   absl::Span<const uint64_t> batch_ids,
                                   absl::Span<const uint32_t> batch_counts,
                                   absl::Span<const float> batch_grads) {
  if (batch_counts.size() != batch_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts: ", batch_counts.size(), " for ",
                     batch_ids.size(), " ids"));
  }
  if (batch_grads.size() != batch_ids.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradients: ", batch_grads.size(), " floats for ",
                     batch_ids.size(), " ids of dim ", dim));
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  std::vector<uint32_t> order;
  const std::vector<Run> runs =
      Runs(SplitByShard(batch_ids, options_.shards),
           std::max<int64_t>(1, options_.chunk_bytes / (4 * dim)), &order,
           /*every_shard=*/true);
  for (const Run& r : runs) {
    if (r.chunks > kMaxChunks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding rows: ", batch_ids.size(), " rows of table '", table,
          "' need more than ", kMaxChunks, " requests of chunk_bytes per "
          "shard; raise chunk_bytes or use smaller batches"));
    }
  }
  std::vector<uint64_t> ids(order.size());
  std::vector<uint32_t> counts(order.size());
  std::vector<float> grads(order.size() * dim);
  for (size_t k = 0; k < order.size(); ++k) {
    ids[k] = batch_ids[order[k]];
    counts[k] = batch_counts[order[k]];
    std::memcpy(grads.data() + k * dim,
                batch_grads.data() + size_t{order[k]} * dim,
                sizeof(float) * dim);
  }
  return RunAll(static_cast<int>(runs.size()), deadline,
                [&](int i, std::function<void(absl::Status)> done) {
                  const Run& r = runs[i];
                  RowPushCall call;
                  call.shard = r.shard;
                  call.table = &table;
                  call.step = step;
                  call.chunk = r.chunk;
                  call.chunks = r.chunks;
                  const size_t n = r.end - r.begin;
                  call.ids = absl::MakeConstSpan(ids).subspan(r.begin, n);
                  call.counts = absl::MakeConstSpan(counts).subspan(r.begin, n);
                  call.gradients =
                      absl::MakeConstSpan(grads).subspan(r.begin * dim, n * dim);
                  call.deadline = deadline;
                  channel_->Push(call, std::move(done));
                });
}

}  // namespace fulcrum
