// Fuzzing the data plane's inputs: pushes (random and mutated valid
// chunks) and hellos, bounded in count and time. A rejected one has a
// status with a message and changes no value or version; nothing crashes.
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/ps/parameter_shard.h"
#include "server/ps/testing/test_jobs.h"
#include "server/ps/worker_stream.h"

namespace fulcrum {
namespace {

using testing::MultiPartitionJob;

// Every partition's values and version.
struct Snapshot {
  std::vector<std::vector<float>> values;
  std::vector<int64_t> versions;
  bool operator==(const Snapshot& o) const {
    return values == o.values && versions == o.versions;
  }
};

Snapshot Take(JobShard& job) {
  Snapshot s;
  for (int32_t id : job.partition_ids()) {
    int64_t version = 0;
    s.values.push_back(testing::ReadPartition(job, id, &version));
    s.versions.push_back(version);
  }
  return s;
}

class NullWriter : public ParamsWriter {
 public:
  ParamsRoom Reserve(int32_t, int64_t, int64_t count,
                     WireEncoding) override {
    buffer_.resize(count);
    return {reinterpret_cast<char*>(buffer_.data()), WireEncoding::kFp32};
  }
  bool Send(const ParamsHeader&) override { return true; }

 private:
  std::vector<float> buffer_;
};

TEST(PushFuzzTest, MutatedPushesAreRejectedWithAMessageAndChangeNothing) {
  for (const char* mode : {"sync", "async"}) {
    JobInit init = MultiPartitionJob({"a", "b"}, "momentum");
    init.spec.mutable_consistency()->set_mode(mode);
    auto created = JobShard::Create(init);
    ASSERT_TRUE(created.ok()) << created.status();
    JobShard& job = **created;
    const std::vector<int32_t> ids = job.partition_ids();
    ASSERT_GT(ids.size(), 1u);
    std::mt19937_64 rng(7);
    auto below = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
    const int64_t specials[] = {-1,
                                0,
                                1,
                                64,
                                int64_t{1} << 32,
                                (int64_t{1} << 32) + 1,
                                int64_t{1} << 62,
                                std::numeric_limits<int64_t>::max(),
                                std::numeric_limits<int64_t>::min()};
    auto special = [&] { return specials[below(std::size(specials))]; };
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int rejected = 0, accepted = 0, runs = 0;
    std::vector<char> data;
    for (; runs < 3000 && std::chrono::steady_clock::now() < deadline;
         ++runs) {
      // A valid chunk of a random partition at the member's step, then
      // mutations of its fields.
      const int member = static_cast<int>(below(2));
      PushChunk c;
      c.partition = ids[below(ids.size())];
      const int64_t size = job.PartitionSize(c.partition);
      c.offset = 0;
      c.samples = 1 + static_cast<int64_t>(below(64));
      Snapshot before = Take(job);
      c.step = before.versions[0];
      c.generation = 1;
      int64_t elems = std::min(size, job.chunk_elems());
      const int mutations = static_cast<int>(below(4));
      for (int m = 0; m < mutations; ++m) {
        switch (below(9)) {
          case 0: c.partition = static_cast<int32_t>(special()); break;
          case 1: c.offset = below(2) ? special() : static_cast<int64_t>(below(size + 5)); break;
          case 2: c.samples = special(); break;
          case 3: c.step = below(2) ? special() : c.step + 1; break;
          case 4: c.generation = special(); break;
          case 5: elems = below(2) ? 0 : static_cast<int64_t>(below(elems + 3)); break;
          case 6: c.range = {special(), special(), special()}; break;
          case 7: c.stop = true; break;
          default: break;  // a value made non-finite below
        }
      }
      data.assign(4 * std::max<int64_t>(elems, 0), 0);
      for (int64_t i = 0; i < elems; ++i) {
        const float v = static_cast<float>(static_cast<int64_t>(below(2001)) - 1000) / 1000.0f;
        std::memcpy(data.data() + 4 * i, &v, 4);
      }
      if (elems > 0 && below(8) == 0) {
        const float bad = below(2) ? std::nanf("") : INFINITY;
        std::memcpy(data.data() + 4 * below(elems), &bad, 4);
      }
      if (below(16) == 0) data.push_back(1);  // not a whole float
      c.data = Payload(data.data(), data.size());
      absl::StatusOr<PushOutcome> r = job.Push(member, c);
      if (r.ok()) {
        ++accepted;
        continue;
      }
      ++rejected;
      EXPECT_FALSE(r.status().message().empty()) << r.status();
      EXPECT_LE(r.status().message().size(), 512u) << r.status();
      EXPECT_TRUE(Take(job) == before)
          << mode << ": a rejected push changed the shard: " << r.status();
    }
    EXPECT_GT(runs, 300) << mode;
    EXPECT_GT(accepted, 20) << mode;
    EXPECT_GT(rejected, 100) << mode;
  }
}

TEST(PushFuzzTest, RandomHellosAreRefusedWithAMessageAndChangeNothing) {
  ParameterShard shard;
  ASSERT_TRUE(shard.InitJob(MultiPartitionJob({"a", "b"}, "sgd")).ok());
  std::shared_ptr<JobShard> job = *shard.Find("job-1");
  const std::vector<std::string> ids = {"job-1", "job-2", "", "a", "b",
                                        std::string(10000, 'j'), "job-1\0x"};
  const std::vector<std::string> workers = {"a", "b", "c", "", "A",
                                            std::string(5000, 'w')};
  std::mt19937 rng(11);
  NullWriter writer;
  WorkerStream::Options o;
  o.step_timeout = absl::Milliseconds(100);
  int refused = 0;
  for (int i = 0; i < 500; ++i) {
    StreamHello hello{ids[rng() % ids.size()], workers[rng() % workers.size()],
                      static_cast<int64_t>(rng() % 5) - 1};
    const Snapshot before = Take(*job);
    absl::StatusOr<std::unique_ptr<WorkerStream>> s =
        WorkerStream::Open(shard, hello, o, &writer);
    const bool valid = hello.job_id == "job-1" && hello.generation == 1 &&
                       (hello.worker_id == "a" || hello.worker_id == "b");
    EXPECT_EQ(s.ok(), valid) << hello.job_id.substr(0, 10) << " "
                             << hello.worker_id.substr(0, 10) << " "
                             << hello.generation << " " << s.status();
    if (!s.ok()) {
      ++refused;
      EXPECT_FALSE(s.status().message().empty());
      EXPECT_LE(s.status().message().size(), 512u) << s.status();
    }
    EXPECT_EQ(job->generation(), 1);
    EXPECT_EQ(job->workers(), (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(Take(*job) == before);
  }
  EXPECT_GT(refused, 300);
}

}  // namespace
}  // namespace fulcrum
