#include "worker/model/backend_bag_index.h"

#include <vector>

namespace fulcrum {

BackendBagIndex::BackendBagIndex(Backend* backend, int64_t max_bags)
    : backend_(backend) {
  if (backend_->HostAccessible()) return;
  for (int32_t*& p : device_) p = backend_->AllocateIndices(max_bags + 1);
}

BackendBagIndex::~BackendBagIndex() {
  for (int32_t* p : device_) {
    if (p != nullptr) backend_->FreeIndices(p);
  }
}

void BackendBagIndex::Place(const BagIndex& index, EmbeddingMlp::Batch* b) {
  const std::vector<int32_t>* maps[4] = {&index.bag_offsets, &index.bag_rows,
                                         &index.row_offsets, &index.row_bags};
  const int32_t* placed[4];
  for (int m = 0; m < 4; ++m) {
    if (backend_->HostAccessible()) {
      placed[m] = maps[m]->data();
    } else {
      backend_->CopyIndicesToDevice(maps[m]->data(), device_[m],
                                    static_cast<int64_t>(maps[m]->size()));
      placed[m] = device_[m];
    }
  }
  b->rows = index.rows();
  b->bag_offsets = placed[0];
  b->bag_rows = placed[1];
  b->row_offsets = placed[2];
  b->row_bags = placed[3];
}

}  // namespace fulcrum
