// A BagIndex where the backend reads it: the four index maps of an
// EmbeddingMlp::Batch, the host vectors themselves on a host-accessible
// backend, copies in device index buffers otherwise (allocated once, for
// the largest batch).
//
// Ownership: the backend is not owned and must outlive this. Thread safety:
// one thread at a time (the step's).
#ifndef FULCRUM_WORKER_MODEL_BACKEND_BAG_INDEX_H_
#define FULCRUM_WORKER_MODEL_BACKEND_BAG_INDEX_H_

#include <cstdint>

#include "worker/backend/backend.h"
#include "worker/model/bag_index.h"
#include "worker/model/embedding_mlp.h"

namespace fulcrum {

class BackendBagIndex {
 public:
  // Room for indexes of up to `max_bags` bags (and as many rows); a failed
  // allocation shows in backend->status().
  BackendBagIndex(Backend* backend, int64_t max_bags);
  ~BackendBagIndex();
  BackendBagIndex(const BackendBagIndex&) = delete;
  BackendBagIndex& operator=(const BackendBagIndex&) = delete;

  // Sets b->rows and b's four index maps to `index` (at most max_bags
  // bags). On a host-accessible backend they point into `index`, which must
  // then stay unchanged while b is used.
  void Place(const BagIndex& index, EmbeddingMlp::Batch* b);

 private:
  Backend* const backend_;
  int32_t* device_[4] = {};  // bag_offsets, bag_rows, row_offsets, row_bags
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_MODEL_BACKEND_BAG_INDEX_H_
