#include "common/tensor/model_file.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

std::string Path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

TEST(ModelFileTest, RoundTripAndCorruption) {
  ModelFile m{{4, 3, 2}, 42, {1.5f, -2.0f, 0.25f, 7.0f}};
  const std::string path = Path("model.bin");
  ASSERT_TRUE(WriteModelFile(path, m).ok());
  auto read = ReadModelFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->layers, m.layers);
  EXPECT_EQ(read->version, 42);
  EXPECT_EQ(read->params, m.params);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = bytes;
  flipped.back() ^= 1;
  std::ofstream(path, std::ios::binary) << flipped;
  EXPECT_EQ(ReadModelFile(path).status().code(), absl::StatusCode::kDataLoss);
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 2);
  EXPECT_EQ(ReadModelFile(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadModelFile(Path("absent.bin")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fulcrum
