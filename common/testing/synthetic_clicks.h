// Writes small Criteo-format click logs (train.tsv, test.tsv) for tests of
// model embedding_mlp that must not depend on tools/make_ctr_data (Python).
// The label lives only in the ids: 1 iff field 0's category (of 50) is odd,
// with 5% of labels flipped (the rule's own AUC is ~0.95); the 13 counts
// and the other 25 fields (20 categories each) are noise. Only a model that
// learns its embedding rows ranks better than chance.
#ifndef FULCRUM_COMMON_TESTING_SYNTHETIC_CLICKS_H_
#define FULCRUM_COMMON_TESTING_SYNTHETIC_CLICKS_H_

#include <cstdint>
#include <string>

namespace fulcrum::testing {

// Creates `dir` if needed; returns false on an I/O error.
bool WriteSyntheticClicks(const std::string& dir, int64_t train, int64_t test,
                          uint64_t seed);

}  // namespace fulcrum::testing

#endif  // FULCRUM_COMMON_TESTING_SYNTHETIC_CLICKS_H_
