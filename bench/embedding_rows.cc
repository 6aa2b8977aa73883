// Embedding rows on one shard, without the network (docs/benchmarks.md,
// "Embedding rows"):
//   1. memory: a dim-16 Adagrad table filled to --rows resident rows over 2
//      shards (both in this process), bytes per row against its values plus
//      optimizer state (128 bytes), and the process's RSS growth;
//   2. speed: batches of --batch Zipf(--zipf) ids over --ids distinct ids,
//      summed per id as a worker would, pulled then pushed on shard 0, by 1
//      and 2 threads: rows per second per shard;
//   3. eviction: a table bounded at --bounded rows pushed 3x as many
//      distinct ids stays at its bound.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "common/config/job_spec.h"
#include "common/embedding/placement.h"
#include "common/embedding/sparse_batch.h"
#include "common/env/env.h"
#include "server/ps/embedding/embedding_tables.h"

ABSL_FLAG(int64_t, rows, 10'000'000, "resident rows over 2 shards (memory)");
ABSL_FLAG(int64_t, ids, 10'000'000, "distinct ids the Zipf batches draw from");
ABSL_FLAG(double, zipf, 1.05, "Zipf exponent of the batches' ids");
ABSL_FLAG(int, batch, 4096, "ids per batch (before summing duplicates)");
ABSL_FLAG(double, seconds, 3, "seconds per speed measurement");
ABSL_FLAG(int64_t, bounded, 1'000'000, "capacity of the eviction table");

namespace fulcrum {
namespace {

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, rss = 0;
  statm >> pages >> rss;
  return rss * 4096;
}

v1::JobSpec Spec(int64_t capacity, int shards) {
  auto spec = ParseJobSpec(
      "name: bench\nmodel: {type: external}\noptimizer: {type: sgd, lr: "
      "0.1}\nchunk_bytes: 4194304\nshards: " +
      std::to_string(shards) + "\nembeddings:\n  - {name: t, dim: 16, "
      "capacity: " + std::to_string(capacity) +
      ", optimizer: {type: adagrad, lr: 0.05}}\n");
  if (!spec.ok() || !ValidateJobSpec(*spec).ok()) {
    std::fprintf(stderr, "bad spec\n");
    std::exit(1);
  }
  return *spec;
}

// Zipf-like ranks in [0, n): inverse CDF of the continuous power law.
struct Zipf {
  double s, n;
  uint64_t state;
  uint64_t Next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const double u = ((state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    const double a = 1.0 - s;
    const double x = std::pow((std::pow(n, a) - 1.0) * u + 1.0, 1.0 / a);
    return static_cast<uint64_t>(x) - 1;
  }
};

// Pushes `count` distinct ids of `shard` (of `shards`) in batches - the
// ids Mix64(k) for k = *next_id, ... (the Zipf batches draw from the same
// ids) - as a new worker each time (so no push is a repeat of an earlier
// Fill's); returns seconds.
double Fill(EmbeddingTables& t, int shard, int shards, uint64_t* next_id,
            int64_t count) {
  static int fills = 0;
  const std::string worker = "fill-" + std::to_string(fills++);
  const absl::Time start = absl::Now();
  std::vector<uint64_t> ids;
  std::vector<float> g(4096 * 16, 0.01f);
  int64_t step = 0;
  while (count > 0) {
    ids.clear();
    while (static_cast<int64_t>(ids.size()) < std::min<int64_t>(count, 4096)) {
      const uint64_t id = Mix64((*next_id)++);
      if (ShardOfRow(id, shards) == shard) ids.push_back(id);
    }
    RowsPush p;
    p.table = "t";
    p.generation = 1;
    p.step = step++;
    p.ids = ids;
    p.gradients = reinterpret_cast<const char*>(g.data());
    p.gradient_bytes = ids.size() * 16 * 4;
    if (!t.Push(worker, p).ok()) std::exit(1);
    count -= ids.size();
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

struct Speed {
  double pulled_per_s = 0, pushed_per_s = 0, unique_per_batch = 0;
};  // rows per second of the calls' time

// `threads` workers, each: a batch of Zipf ids on shard 0, summed, pulled,
// then pushed. Rows per second for the shard in all.
Speed Measure(EmbeddingTables& t, int threads) {
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::vector<int64_t> rows(threads, 0), batches(threads, 0);
  std::vector<double> pull_s(threads, 0), push_s(threads, 0);
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      Zipf zipf{absl::GetFlag(FLAGS_zipf),
                static_cast<double>(absl::GetFlag(FLAGS_ids)),
                static_cast<uint64_t>(w + 1) * 7919};
      const int batch = absl::GetFlag(FLAGS_batch);
      std::vector<uint64_t> raw;
      std::vector<float> grads(static_cast<size_t>(batch) * 16, 0.001f);
      std::vector<float> out;
      const absl::Time end = absl::Now() + absl::Seconds(seconds);
      for (int64_t step = 0; absl::Now() < end; ++step) {
        raw.clear();
        while (static_cast<int>(raw.size()) < batch) {
          const uint64_t id = Mix64(zipf.Next());  // ranks scattered
          if (ShardOfRow(id, 2) == 0) raw.push_back(id);
        }
        const SparseBatch b = Coalesce(raw, grads, 16);
        const absl::Time t0 = absl::Now();
        if (!t.Pull("t", b.ids, &out).ok()) std::exit(1);
        const absl::Time t1 = absl::Now();
        RowsPush p;
        p.table = "t";
        p.generation = 1;
        p.step = step;
        p.ids = b.ids;
        p.gradients = reinterpret_cast<const char*>(b.gradients.data());
        p.gradient_bytes = b.gradients.size() * 4;
        p.counts = b.counts;
        if (!t.Push("w" + std::to_string(w), p).ok()) std::exit(1);
        pull_s[w] += absl::ToDoubleSeconds(t1 - t0);
        push_s[w] += absl::ToDoubleSeconds(absl::Now() - t1);
        rows[w] += b.ids.size();
        ++batches[w];
      }
    });
  }
  for (auto& th : pool) th.join();
  Speed s;
  int64_t all_rows = 0, all_batches = 0;
  double all_pull = 0, all_push = 0;
  for (int w = 0; w < threads; ++w) {
    all_rows += rows[w];
    all_batches += batches[w];
    all_pull += pull_s[w];
    all_push += push_s[w];
  }
  // The shard's rate with `threads` clients at once: rows over the time the
  // calls took, the threads' times averaged (they overlap). Making the
  // batches (Zipf draws, summing) is not counted.
  s.pulled_per_s = all_rows / (all_pull / threads);
  s.pushed_per_s = all_rows / (all_push / threads);
  s.unique_per_batch = static_cast<double>(all_rows) / all_batches;
  return s;
}

int Main() {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  // 1. Memory. Capacity 10% above the rows, so none is evicted while the
  // stripes fill unevenly.
  const v1::JobSpec spec = Spec(rows + rows / 10, 2);
  const int64_t rss0 = RssBytes();
  EmbeddingTables shard0(spec, 0, 2, Env::Default());
  EmbeddingTables shard1(spec, 1, 2, Env::Default());
  uint64_t next0 = 0, next1 = 0;
  const double fill0 = Fill(shard0, 0, 2, &next0, rows / 2);
  Fill(shard1, 1, 2, &next1, rows - rows / 2);
  const RowStore::Stats s0 = shard0.Find("t")->stats();
  const RowStore::Stats s1 = shard1.Find("t")->stats();
  const int64_t resident = s0.resident + s1.resident;
  const int64_t bytes = s0.bytes + s1.bytes;
  const int64_t rss = RssBytes() - rss0;
  const double values = 128.0 * resident;  // 16 values + 16 accumulators
  std::printf("memory: %lld resident rows (dim 16, adagrad) over 2 shards\n",
              static_cast<long long>(resident));
  std::printf("  table bytes %.3f GB = %.1f B/row = %.3fx values+state; "
              "RSS growth %.3f GB = %.3fx\n",
              bytes / 1e9, static_cast<double>(bytes) / resident,
              bytes / values, rss / 1e9, rss / values);
  std::printf("  creating rows: %.0f rows/s on one shard\n",
              (rows / 2) / fill0);

  // 2. Speed on shard 0 (full: every id the batches draw is resident).
  Measure(shard0, 1);  // warm-up, not reported
  for (int threads : {1, 2}) {
    const Speed s = Measure(shard0, threads);
    std::printf("speed: %d thread(s), batch %d Zipf(%.2f) over %lld ids "
                "(%.0f distinct rows of this shard per batch): pull %.2f M "
                "rows/s, push %.2f M rows/s per shard\n",
                threads, absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_zipf),
                static_cast<long long>(absl::GetFlag(FLAGS_ids)),
                s.unique_per_batch, s.pulled_per_s / 1e6,
                s.pushed_per_s / 1e6);
  }

  // 3. Eviction keeps a bounded table at its bound.
  const int64_t bound = absl::GetFlag(FLAGS_bounded);
  EmbeddingTables bounded(Spec(bound, 1), 0, 1, Env::Default());
  uint64_t next = 1ULL << 40;  // ids no other table holds
  Fill(bounded, 0, 1, &next, bound);
  const RowStore::Stats full = bounded.Find("t")->stats();
  Fill(bounded, 0, 1, &next, 2 * bound);
  const RowStore::Stats after = bounded.Find("t")->stats();
  std::printf("eviction: capacity %lld, %lld distinct ids pushed: %lld "
              "resident, %lld evicted; bytes %.1f MB at the bound, %.1f MB "
              "after\n",
              static_cast<long long>(bound), static_cast<long long>(3 * bound),
              static_cast<long long>(after.resident),
              static_cast<long long>(after.evicted_capacity), full.bytes / 1e6,
              after.bytes / 1e6);
  return after.resident <= bound ? 0 : 1;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return fulcrum::Main();
}
