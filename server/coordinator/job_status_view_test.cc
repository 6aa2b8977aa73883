// CapEpochs: a status lists the newest epochs and sums the rest, so that it
// stays bounded (a job with one-chunk epochs grew by one entry per epoch).
#include "server/coordinator/job_status_view.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

v1::JobStatus WithEpochs(int n) {
  v1::JobStatus s;
  for (int i = 0; i < n; ++i) {
    v1::EpochSamples* e = s.add_epochs();
    e->set_epoch(i);
    e->set_total(10);
    e->set_trained(i == 3 ? 7 : 10);  // one epoch short
  }
  return s;
}

TEST(CapEpochsTest, KeepsTheNewestAndSumsTheRest) {
  v1::JobStatus s = WithEpochs(250);
  CapEpochs(&s);
  ASSERT_EQ(s.epochs_size(), kMaxListedEpochs);
  EXPECT_EQ(s.epochs(0).epoch(), 150);
  EXPECT_EQ(s.epochs(kMaxListedEpochs - 1).epoch(), 249);
  EXPECT_EQ(s.earlier_epochs().count(), 150);
  EXPECT_EQ(s.earlier_epochs().total(), 1500);
  EXPECT_EQ(s.earlier_epochs().trained(), 1497);
  EXPECT_EQ(s.earlier_epochs().exactly_once(), 149);
  // Capping again adds nothing; a short list is left alone.
  CapEpochs(&s);
  EXPECT_EQ(s.earlier_epochs().count(), 150);
  v1::JobStatus few = WithEpochs(5);
  CapEpochs(&few);
  EXPECT_EQ(few.epochs_size(), 5);
  EXPECT_FALSE(few.has_earlier_epochs());
  EXPECT_LT(s.ByteSizeLong(), WithEpochs(250).ByteSizeLong() / 2);
}

}  // namespace
}  // namespace fulcrum
