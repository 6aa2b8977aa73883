// Small jobs and pushes for the shard core's unit tests.
#ifndef FULCRUM_SERVER_PS_TESTING_TEST_JOBS_H_
#define FULCRUM_SERVER_PS_TESTING_TEST_JOBS_H_

#include <map>
#include <string>
#include <vector>

#include "common/config/job_spec.h"
#include "gtest/gtest.h"
#include "server/ps/job_shard.h"
#include "server/ps/worker_stream.h"

namespace fulcrum::testing {

// A tiny job: 4 -> 2 MLP (10 parameters), one shard, 1 KiB chunks.
inline JobInit TinyJob(std::vector<std::string> workers,
                const std::string& opt = "sgd") {
  JobInit init;
  init.job_id = "job-1";
  init.spec.set_name("tiny");
  init.spec.mutable_model()->set_type("mlp");
  init.spec.mutable_model()->add_layers(4);
  init.spec.mutable_model()->add_layers(2);
  init.spec.mutable_dataset()->set_dir("/nowhere");
  init.spec.mutable_optimizer()->set_type(opt);
  init.spec.mutable_optimizer()->set_lr(0.5);
  if (opt == "momentum") init.spec.mutable_optimizer()->set_momentum(0.9);
  init.spec.set_chunk_bytes(1024);
  ApplyDefaults(&init.spec);
  init.workers = std::move(workers);
  return init;
}

inline std::vector<float> ReadAll(JobShard& job, int64_t* version = nullptr) {
  std::vector<float> out(job.PartitionSize(0));
  int64_t v;
  bool stop;
  EXPECT_TRUE(job.Read(0, 0, out.size(), out.data(), &v, &stop).ok());
  if (version != nullptr) *version = v;
  return out;
}

inline PushChunk Chunk(int64_t step, const std::vector<float>& g, int64_t samples) {
  PushChunk c;
  c.step = step;
  c.samples = samples;
  c.data = Payload(g.data(), g.size() * 4);
  return c;
}

inline bool Completed(const absl::StatusOr<PushOutcome>& r) {
  return r.ok() && *r == PushOutcome::kCompleted;
}

// A job whose single shard holds several partitions (64 -> 8 MLP, 1 KiB
// partitions).
inline JobInit MultiPartitionJob(std::vector<std::string> workers,
                          const std::string& opt = "momentum") {
  JobInit init = TinyJob(std::move(workers), opt);
  init.spec.mutable_model()->clear_layers();
  init.spec.mutable_model()->add_layers(64);
  init.spec.mutable_model()->add_layers(8);
  init.spec.set_partition_bytes(1024);
  return init;
}

inline std::vector<float> ReadPartition(JobShard& job, int32_t id,
                                 int64_t* version = nullptr) {
  std::vector<float> out(job.PartitionSize(id));
  int64_t v;
  bool stop;
  EXPECT_TRUE(job.Read(id, 0, out.size(), out.data(), &v, &stop).ok());
  if (version != nullptr) *version = v;
  return out;
}

inline PushChunk PartChunk(int32_t id, int64_t step, const std::vector<float>& g,
                    int64_t samples, int64_t generation, int64_t range_end) {
  PushChunk c = Chunk(step, g, samples);
  c.partition = id;
  c.generation = generation;
  c.range = {7, range_end - 10, range_end};
  return c;
}

// Records what a stream sends.
class RecordingWriter : public ParamsWriter {
 public:
  ParamsRoom Reserve(int32_t, int64_t, int64_t count,
                     WireEncoding) override {
    buffer_.resize(count);
    return {reinterpret_cast<char*>(buffer_.data()), WireEncoding::kFp32};
  }
  bool Send(const ParamsHeader& h) override {
    sent.push_back(h);
    return true;
  }
  // Partitions sent whole at `clock`, in the order they completed.
  std::vector<int32_t> WholeAt(int64_t clock, const JobShard& job) const {
    std::map<int32_t, int64_t> got;
    std::vector<int32_t> order;
    for (const ParamsHeader& h : sent) {
      if (h.clock != clock) continue;
      got[h.partition] += h.count;
      if (got[h.partition] == job.PartitionSize(h.partition))
        order.push_back(h.partition);
    }
    return order;
  }
  std::vector<ParamsHeader> sent;

 private:
  std::vector<float> buffer_;
};

// A directory for a test's files under Bazel's TEST_TMPDIR.
inline std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

}  // namespace fulcrum::testing

#endif  // FULCRUM_SERVER_PS_TESTING_TEST_JOBS_H_
