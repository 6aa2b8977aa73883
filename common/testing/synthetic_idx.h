// Writes a small, learnable IDX dataset (train-* and t10k-* files) for tests
// that must not depend on the real Fashion-MNIST files.
#ifndef FULCRUM_COMMON_TESTING_SYNTHETIC_IDX_H_
#define FULCRUM_COMMON_TESTING_SYNTHETIC_IDX_H_

#include <cstdint>
#include <map>
#include <string>

namespace fulcrum::testing {

// Class c images are noise plus a bright band whose position depends on c.
// Creates `dir` if needed. Returns false on an I/O error.
bool WriteSyntheticIdx(const std::string& dir, int64_t train, int64_t test,
                       int side, int classes, uint64_t seed);

// The directory of a synthetic dataset written once per test process under
// $TEST_TMPDIR/<name> (later calls return the same path).
std::string SyntheticDataset(const std::string& name, int64_t train,
                             int64_t test, int side, int classes,
                             uint64_t seed);

}  // namespace fulcrum::testing

#endif  // FULCRUM_COMMON_TESTING_SYNTHETIC_IDX_H_
