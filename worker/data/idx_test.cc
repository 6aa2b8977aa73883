#include "worker/data/idx.h"

#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

void Put32(std::string* s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    s->push_back(static_cast<char>(v >> shift));
}

std::string ImagesFile(uint32_t count, uint32_t rows, uint32_t cols) {
  std::string s;
  Put32(&s, 0x803);
  Put32(&s, count);
  Put32(&s, rows);
  Put32(&s, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i)
    s.push_back(static_cast<char>(i % 251));
  return s;
}

std::string LabelsFile(uint32_t count) {
  std::string s;
  Put32(&s, 0x801);
  Put32(&s, count);
  for (uint32_t i = 0; i < count; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}

void WriteGz(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), data.size()),
            static_cast<int>(data.size()));
  gzclose(f);
}

void WritePlain(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

TEST(IdxTest, ReadsGzipAndPlainSplits) {
  const std::string dir = TempDir() + "/idx_ok";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  WriteGz(dir + "/train-images-idx3-ubyte.gz", ImagesFile(12, 3, 2));
  WriteGz(dir + "/train-labels-idx1-ubyte.gz", LabelsFile(12));
  WritePlain(dir + "/t10k-images-idx3-ubyte", ImagesFile(5, 3, 2));
  WritePlain(dir + "/t10k-labels-idx1-ubyte", LabelsFile(5));
  auto train = LoadIdxSplit(dir, "train", 0, 10);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->images.count, 12);
  EXPECT_EQ(train->images.rows, 3);
  EXPECT_EQ(train->images.cols, 2);
  ASSERT_EQ(train->images.pixels.size(), 72u);
  EXPECT_EQ(train->images.pixels[71], 71);
  EXPECT_EQ(train->labels[11], 1);
  auto limited = LoadIdxSplit(dir, "train", 4, 10);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->images.count, 4);
  EXPECT_EQ(limited->labels.size(), 4u);
  auto test = LoadIdxSplit(dir, "t10k", 0, 10);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->images.count, 5);
  // Labels 0..9 do not fit a 5-class model.
  auto narrow = LoadIdxSplit(dir, "train", 0, 5);
  EXPECT_EQ(narrow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.status().message().find("label 5"), std::string::npos);
}

TEST(IdxTest, DetectsCorruptFiles) {
  const std::string dir = TempDir() + "/idx_bad";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  // Truncated pixel data.
  std::string truncated = ImagesFile(10, 4, 4);
  truncated.resize(truncated.size() - 7);
  WriteGz(dir + "/a.gz", truncated);
  auto r = ReadIdxImages(dir + "/a.gz");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("a.gz"), std::string::npos);
  // Wrong magic (a labels file read as images).
  WriteGz(dir + "/b.gz", LabelsFile(3));
  r = ReadIdxImages(dir + "/b.gz");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  // A corrupted gzip stream.
  std::string gz_bytes;
  {
    WriteGz(dir + "/c.gz", ImagesFile(50, 8, 8));
    FILE* f = std::fopen((dir + "/c.gz").c_str(), "r+b");
    std::fseek(f, 40, SEEK_SET);
    const char junk[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                           9, 10, 11, 12, 13, 14, 15, 16};
    std::fwrite(junk, 1, sizeof(junk), f);
    std::fclose(f);
  }
  r = ReadIdxImages(dir + "/c.gz");
  EXPECT_FALSE(r.ok());
  // Missing file; mismatched counts.
  EXPECT_EQ(ReadIdxImages(dir + "/missing").status().code(),
            absl::StatusCode::kNotFound);
  WriteGz(dir + "/train-images-idx3-ubyte.gz", ImagesFile(6, 2, 2));
  WriteGz(dir + "/train-labels-idx1-ubyte.gz", LabelsFile(5));
  EXPECT_EQ(LoadIdxSplit(dir, "train", 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
