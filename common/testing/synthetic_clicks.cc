#include "common/testing/synthetic_clicks.h"

#include <sys/stat.h>

#include <fstream>
#include <random>

namespace fulcrum::testing {
namespace {

bool WriteLines(const std::string& path, int64_t lines, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> c0(0, 49), other(0, 19), count(0, 30);
  std::uniform_real_distribution<double> u(0, 1);
  std::ofstream out(path);
  for (int64_t i = 0; i < lines; ++i) {
    const int c = c0(rng);
    int label = c % 2;
    if (u(rng) < 0.05) label = 1 - label;
    out << label;
    for (int j = 0; j < 13; ++j) out << "\t" << count(rng);
    out << "\t" << std::hex << c;
    for (int f = 1; f < 26; ++f) out << "\t" << other(rng);
    out << std::dec << "\n";
  }
  return static_cast<bool>(out);
}

}  // namespace

bool WriteSyntheticClicks(const std::string& dir, int64_t train, int64_t test,
                          uint64_t seed) {
  mkdir(dir.c_str(), 0755);
  return WriteLines(dir + "/train.tsv", train, seed) &&
         WriteLines(dir + "/test.tsv", test, seed + 1);
}

}  // namespace fulcrum::testing
