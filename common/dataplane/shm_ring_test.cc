// ShmRing between threads over one buffer (processes share it the same
// way): order, wrap-around, waits for room and for data, close, the
// bounds on every wait, and a ring whose peer wrote nonsense.
#include "common/dataplane/shm_ring.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "fulcrum/v1/parameter_server.pb.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

struct Buffer {
  explicit Buffer(int64_t capacity)
      : bytes(static_cast<size_t>(ShmRing::Bytes(capacity))) {}
  // 64-aligned, zeroed, as a fresh segment's pages are.
  std::vector<char> storage = std::vector<char>(1 << 20);
  size_t bytes;
  char* base() {
    const auto p = reinterpret_cast<uintptr_t>(storage.data());
    return storage.data() + ((64 - p % 64) % 64);
  }
};

v1::StreamRequest PushOf(int64_t step, int32_t partition) {
  v1::StreamRequest r;
  r.mutable_push()->set_step(step);
  r.mutable_push()->set_partition(partition);
  return r;
}

const auto kNever = [] { return false; };

TEST(ShmRingTest, MessagesArriveInOrderAcrossTheWrap) {
  Buffer b(256);
  ShmRing producer(b.base(), static_cast<int64_t>(b.bytes));
  ShmRing consumer(b.base(), static_cast<int64_t>(b.bytes));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  // Many more bytes than the ring holds: positions wrap many times, and
  // records of odd sizes straddle the end.
  for (int i = 0; i < 500; ++i) {
    v1::StreamRequest m = PushOf(i, i % 7);
    m.mutable_push()->set_indices(std::string(static_cast<size_t>(i % 37), 'x'));
    ASSERT_TRUE(producer.Write(m, deadline, kNever).ok());
    v1::StreamRequest got;
    absl::StatusOr<bool> r = consumer.Read(&got, deadline, kNever);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(*r);
    EXPECT_EQ(got.push().step(), i);
    EXPECT_EQ(got.push().partition(), i % 7);
    EXPECT_EQ(got.push().indices().size(), static_cast<size_t>(i % 37));
  }
}

TEST(ShmRingTest, ProducerWaitsForRoomAndConsumerForData) {
  Buffer b(256);
  ShmRing producer(b.base(), static_cast<int64_t>(b.bytes));
  ShmRing consumer(b.base(), static_cast<int64_t>(b.bytes));
  constexpr int kMessages = 2000;
  std::thread writer([&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (int i = 0; i < kMessages; ++i)
      ASSERT_TRUE(producer.Write(PushOf(i, 1), deadline, kNever).ok());
    producer.Close();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int next = 0;
  for (;;) {
    v1::StreamRequest got;
    absl::StatusOr<bool> r = consumer.Read(&got, deadline, kNever);
    ASSERT_TRUE(r.ok()) << r.status();
    if (!*r) break;
    ASSERT_EQ(got.push().step(), next);
    ++next;
  }
  writer.join();
  EXPECT_EQ(next, kMessages);  // every message, then the end
}

TEST(ShmRingTest, CloseEndsReadsAfterWhatIsThere) {
  Buffer b(1024);
  ShmRing ring(b.base(), static_cast<int64_t>(b.bytes));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  ASSERT_TRUE(ring.Write(PushOf(1, 0), deadline, kNever).ok());
  ring.Close();
  EXPECT_EQ(ring.Write(PushOf(2, 0), deadline, kNever).code(),
            absl::StatusCode::kFailedPrecondition);
  v1::StreamRequest got;
  EXPECT_EQ(ring.Read(&got, deadline, kNever).value_or(false), true);
  EXPECT_EQ(got.push().step(), 1);
  absl::StatusOr<bool> end = ring.Read(&got, deadline, kNever);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);
}

TEST(ShmRingTest, WaitsEndAtTheDeadlineOrWhenStopped) {
  Buffer b(64);
  ShmRing ring(b.base(), static_cast<int64_t>(b.bytes));
  v1::StreamRequest got;
  const absl::Time start = absl::Now();
  EXPECT_EQ(ring.Read(&got, start + absl::Milliseconds(120), kNever).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(120));

  // Another thread's Wake makes the reader check stop() at once.
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    absl::SleepFor(absl::Milliseconds(30));
    stopped = true;
    ring.Wake();
  });
  const absl::Time before = absl::Now();
  EXPECT_EQ(ring.Read(&got, absl::Now() + absl::Seconds(30),
                      [&] { return stopped.load(); })
                .status()
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  waker.join();

  // A full ring: the writer gives up at its deadline.
  while (ring.Write(PushOf(1, 1), absl::Now(), kNever).ok()) {
  }
  EXPECT_EQ(ring.Write(PushOf(1, 1), absl::Now() + absl::Milliseconds(60), kNever)
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

// One consumer of several rings sleeps on all of them: it learns which one
// has a message (or was closed), and its waits end at the deadline or when
// stopped, as one ring's.
TEST(ShmRingTest, AConsumerOfSeveralRingsWakesForAnyOfThem) {
  Buffer b0(256), b1(256), b2(256);
  ShmRing r0(b0.base(), static_cast<int64_t>(b0.bytes));
  ShmRing r1(b1.base(), static_cast<int64_t>(b1.bytes));
  ShmRing r2(b2.base(), static_cast<int64_t>(b2.bytes));
  ShmRing* rings[] = {&r0, &r1, &r2};
  const absl::Time start = absl::Now();
  absl::StatusOr<int> none =
      ShmRing::AwaitAny(rings, start + absl::Milliseconds(80), kNever);
  if (none.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "this kernel has no futex_waitv (Linux 5.16+): "
                    "the waiting thread sleeps on one ring at a time";
  }
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(80));

  // Another thread writes to the third ring: that one is named, and read.
  std::thread producer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(r2.Write(PushOf(5, 2), absl::Now() + absl::Seconds(5), kNever)
                    .ok());
  });
  absl::StatusOr<int> which =
      ShmRing::AwaitAny(rings, absl::Now() + absl::Seconds(30), kNever);
  producer.join();
  ASSERT_TRUE(which.ok()) << which.status();
  EXPECT_EQ(*which, 2);
  v1::StreamRequest got;
  ASSERT_TRUE(*r2.Read(&got, absl::Now(), kNever));
  EXPECT_EQ(got.push().partition(), 2);

  // A message already there is found without a wait; a closed ring too.
  ASSERT_TRUE(r1.Write(PushOf(6, 1), absl::Now(), kNever).ok());
  EXPECT_EQ(*ShmRing::AwaitAny(rings, absl::Now(), kNever), 1);
  ASSERT_TRUE(*r1.Read(&got, absl::Now(), kNever));
  r0.Close();
  EXPECT_EQ(*ShmRing::AwaitAny(rings, absl::Now(), kNever), 0);

  // Stopped: a Wake of any of them makes it look at stop() at once.
  ShmRing* open[] = {&r1, &r2};
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    absl::SleepFor(absl::Milliseconds(30));
    stopped = true;
    r1.Wake();
  });
  EXPECT_EQ(ShmRing::AwaitAny(open, absl::Now() + absl::Seconds(30),
                              [&] { return stopped.load(); })
                .status()
                .code(),
            absl::StatusCode::kCancelled);
  waker.join();
}

TEST(ShmRingTest, TooLargeAMessageIsRefused) {
  Buffer b(64);
  ShmRing ring(b.base(), static_cast<int64_t>(b.bytes));
  v1::StreamRequest m = PushOf(1, 1);
  m.mutable_push()->set_indices(std::string(200, 'x'));
  EXPECT_EQ(ring.Write(m, absl::Now() + absl::Seconds(1), kNever).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ring.HasMessage());  // nothing half-written
}

TEST(ShmRingTest, WhatNoProducerOfOursWroteIsAnErrorNotARead) {
  Buffer b(256);
  ShmRing ring(b.base(), static_cast<int64_t>(b.bytes));
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  ASSERT_TRUE(ring.Write(PushOf(1, 1), deadline, kNever).ok());
  // The peer claims a record longer than what it published.
  uint32_t huge = 1u << 30;
  std::memcpy(b.base() + ShmRing::kHeaderBytes, &huge, sizeof(huge));
  v1::StreamRequest got;
  EXPECT_EQ(ring.Read(&got, deadline, kNever).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A head far past anything the ring can hold.
  Buffer c(256);
  ShmRing other(c.base(), static_cast<int64_t>(c.bytes));
  const uint64_t far = 1u << 20;
  std::memcpy(c.base(), &far, sizeof(far));  // the header starts with head
  EXPECT_EQ(other.Read(&got, deadline, kNever).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Bytes that do not parse.
  Buffer d(256);
  ShmRing third(d.base(), static_cast<int64_t>(d.bytes));
  ASSERT_TRUE(third.Write(PushOf(1, 1), deadline, kNever).ok());
  std::memset(d.base() + ShmRing::kHeaderBytes + 4, 0xff, 4);
  EXPECT_EQ(third.Read(&got, deadline, kNever).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
