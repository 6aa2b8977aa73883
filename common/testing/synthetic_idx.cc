#include "common/testing/synthetic_idx.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace fulcrum::testing {
namespace {

void Put32(std::vector<uint8_t>* s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    s->push_back(static_cast<uint8_t>(v >> shift));
}

bool Write(const std::string& path, const std::vector<uint8_t>& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  return std::fclose(f) == 0 && ok;
}

bool WriteSplit(const std::string& dir, const std::string& prefix, int64_t n,
                int side, int classes, std::mt19937_64& rng) {
  std::vector<uint8_t> images, labels;
  Put32(&images, 0x803);
  Put32(&images, static_cast<uint32_t>(n));
  Put32(&images, side);
  Put32(&images, side);
  Put32(&labels, 0x801);
  Put32(&labels, static_cast<uint32_t>(n));
  std::uniform_int_distribution<int> noise(0, 120), cls(0, classes - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int c = cls(rng);
    labels.push_back(static_cast<uint8_t>(c));
    const int band = c * side / classes;
    for (int r = 0; r < side; ++r) {
      for (int col = 0; col < side; ++col) {
        int v = noise(rng);
        if (r == band || r == band + 1) v += 120;
        images.push_back(static_cast<uint8_t>(v));
      }
    }
  }
  return Write(dir + "/" + prefix + "-images-idx3-ubyte", images) &&
         Write(dir + "/" + prefix + "-labels-idx1-ubyte", labels);
}

}  // namespace

bool WriteSyntheticIdx(const std::string& dir, int64_t train, int64_t test,
                       int side, int classes, uint64_t seed) {
  ::mkdir(dir.c_str(), 0755);
  std::mt19937_64 rng(seed);
  return WriteSplit(dir, "train", train, side, classes, rng) &&
         WriteSplit(dir, "t10k", test, side, classes, rng);
}

std::string SyntheticDataset(const std::string& name, int64_t train,
                             int64_t test, int side, int classes,
                             uint64_t seed) {
  static std::map<std::string, std::string>* written =
      new std::map<std::string, std::string>;
  auto it = written->find(name);
  if (it != written->end()) return it->second;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  if (!WriteSyntheticIdx(dir, train, test, side, classes, seed)) return "";
  return (*written)[name] = dir;
}

}  // namespace fulcrum::testing
