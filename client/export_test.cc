#include "client/export.h"

#include "gtest/gtest.h"

namespace fulcrum {
namespace {

v1::ExportChunk SpecChunk() {
  v1::ExportChunk c;
  v1::JobSpec* spec = c.mutable_spec();
  spec->mutable_model()->add_layers(64);
  spec->mutable_model()->add_layers(8);
  spec->set_shards(2);
  spec->set_partition_bytes(1024);
  c.set_shard(-1);
  return c;
}

// Every partition of the layout whole, at `version`, valued by element.
std::vector<v1::ExportChunk> Chunks(int64_t version, int skip = -1) {
  const ParameterLayout layout = *ParameterLayout::ForMlp({64, 8}, 2, 1024);
  std::vector<v1::ExportChunk> out;
  for (const Partition& p : layout.partitions()) {
    if (p.id == skip) continue;
    v1::ExportChunk c;
    c.set_shard(p.shard);
    c.mutable_params()->set_partition(p.id);
    c.mutable_params()->set_version(version);
    std::vector<float> values(p.size);
    for (int64_t i = 0; i < p.size; ++i) values[i] = p.offset + i;
    c.mutable_params()->set_data(values.data(), values.size() * 4);
    out.push_back(std::move(c));
  }
  return out;
}

TEST(ModelAssemblerTest, AssemblesTheFlatVectorFromEveryShard) {
  ModelAssembler a;
  ASSERT_TRUE(a.Add(SpecChunk()).ok());
  for (const v1::ExportChunk& c : Chunks(7)) ASSERT_TRUE(a.Add(c).ok());
  absl::StatusOr<ModelFile> model = a.Finish();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->version, 7);
  EXPECT_EQ(model->layers, (std::vector<int32_t>{64, 8}));
  ASSERT_EQ(model->params.size(), 64u * 8 + 8);
  for (size_t i = 0; i < model->params.size(); ++i)
    ASSERT_EQ(model->params[i], static_cast<float>(i));
}

TEST(ModelAssemblerTest, RefusesMissingMixedOrForeignChunks) {
  ModelAssembler early;
  EXPECT_EQ(early.Add(Chunks(1)[0]).code(), absl::StatusCode::kInvalidArgument);
  ModelAssembler missing;
  ASSERT_TRUE(missing.Add(SpecChunk()).ok());
  for (const v1::ExportChunk& c : Chunks(1, 0)) ASSERT_TRUE(missing.Add(c).ok());
  EXPECT_EQ(missing.Finish().status().code(), absl::StatusCode::kDataLoss);
  ModelAssembler mixed;
  ASSERT_TRUE(mixed.Add(SpecChunk()).ok());
  std::vector<v1::ExportChunk> chunks = Chunks(1);
  chunks.back().mutable_params()->set_version(2);
  for (const v1::ExportChunk& c : chunks) ASSERT_TRUE(mixed.Add(c).ok());
  EXPECT_EQ(mixed.Finish().status().code(),
            absl::StatusCode::kFailedPrecondition);
  ModelAssembler foreign;
  ASSERT_TRUE(foreign.Add(SpecChunk()).ok());
  v1::ExportChunk bad = Chunks(1)[0];
  bad.mutable_params()->set_partition(99);
  EXPECT_EQ(foreign.Add(bad).code(), absl::StatusCode::kDataLoss);
}

// An ssp (or async) job's partitions apply pushes as they arrive: after a
// worker was killed mid-step their versions differ, and the job that ended
// is exported anyway (it was refused: "the shards are at different
// versions"), at the newest version. A sync job's stay refused.
TEST(ModelAssemblerTest, AnSspJobsPartitionsMayDifferInVersion) {
  ModelAssembler ssp;
  v1::ExportChunk spec = SpecChunk();
  spec.mutable_spec()->mutable_consistency()->set_mode("ssp");
  ASSERT_TRUE(ssp.Add(spec).ok());
  std::vector<v1::ExportChunk> chunks = Chunks(40);
  chunks.back().mutable_params()->set_version(41);
  for (const v1::ExportChunk& c : chunks) ASSERT_TRUE(ssp.Add(c).ok());
  absl::StatusOr<ModelFile> model = ssp.Finish();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->version, 41);

  ModelAssembler sync;
  spec.mutable_spec()->mutable_consistency()->set_mode("sync");
  ASSERT_TRUE(sync.Add(spec).ok());
  for (const v1::ExportChunk& c : chunks) ASSERT_TRUE(sync.Add(c).ok());
  absl::Status refused = sync.Finish().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("40 to 41"), std::string::npos) << refused;
}

TEST(ModelAssemblerTest, CollectsEveryShardsEmbeddingRows) {
  ModelAssembler a;
  v1::ExportChunk spec = SpecChunk();
  v1::EmbeddingTableSpec* t = spec.mutable_spec()->add_embeddings();
  t->set_name("user");
  t->set_dim(2);
  spec.mutable_spec()->add_embeddings()->set_name("item");
  spec.mutable_spec()->mutable_embeddings(1)->set_dim(3);
  ASSERT_TRUE(a.Add(spec).ok());
  for (const v1::ExportChunk& c : Chunks(7)) ASSERT_TRUE(a.Add(c).ok());
  auto page = [](int shard, std::vector<uint64_t> ids, float base,
                 const std::string& table = "user", int dim = 2) {
    v1::ExportChunk c;
    c.set_shard(shard);
    c.mutable_rows()->set_table(table);
    c.mutable_rows()->set_dim(dim);
    std::vector<float> v;
    for (size_t i = 0; i < ids.size() * dim; ++i) v.push_back(base + i);
    c.mutable_rows()->set_ids(ids.data(), ids.size() * 8);
    c.mutable_rows()->set_values(v.data(), v.size() * 4);
    return c;
  };
  ASSERT_TRUE(a.Add(page(0, {10, 12}, 0)).ok());
  ASSERT_TRUE(a.Add(page(1, {11}, 100)).ok());
  ASSERT_TRUE(a.Finish().ok());
  ASSERT_EQ(a.tables().size(), 2u);
  EXPECT_EQ(a.tables()[0].ids, (std::vector<uint64_t>{10, 12, 11}));
  EXPECT_EQ(a.tables()[0].values, (std::vector<float>{0, 1, 2, 3, 100, 101}));
  EXPECT_TRUE(a.tables()[1].ids.empty()) << "a table with no rows is listed";
  EXPECT_EQ(a.Add(page(0, {1}, 0, "nope")).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(a.Add(page(0, {1}, 0, "user", 3)).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace fulcrum
