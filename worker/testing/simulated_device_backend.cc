#include "worker/testing/simulated_device_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

bool Overlap(const float* a, int64_t an, const float* b, int64_t bn) {
  return a < b + bn && b < a + an;
}

}  // namespace

SimulatedDeviceBackend::~SimulatedDeviceBackend() = default;

float* SimulatedDeviceBackend::Allocate(int64_t n) {
  auto owned = std::make_unique<float[]>(std::max<int64_t>(n, 1));
  // Device memory starts as garbage, not zeros: reading it unset shows.
  std::fill(owned.get(), owned.get() + std::max<int64_t>(n, 1), 1e30f);
  float* p = owned.get();
  memory_[p] = std::move(owned);
  return p;
}

void SimulatedDeviceBackend::Free(float* p) { memory_.erase(p); }

void SimulatedDeviceBackend::Race(const std::string& what) {
  if (status_.ok()) status_ = absl::InternalError(absl::StrCat("race: ", what));
}

void SimulatedDeviceBackend::Reads(const float* p, int64_t n,
                                   const char* what) {
  for (const ToDevice& c : to_device_) {
    if (Overlap(p, n, c.device, c.n)) {
      Race(absl::StrCat(what, " reads device memory a copy to the device "
                              "has not finished writing"));
    }
  }
}

void SimulatedDeviceBackend::Writes(const float* p, int64_t n,
                                    const char* what) {
  Reads(p, n, what);
  for (const ToHost& c : to_host_) {
    if (Overlap(p, n, c.device, static_cast<int64_t>(c.data.size()))) {
      Race(absl::StrCat(what, " overwrites device memory a copy to the host "
                              "has not finished reading"));
    }
  }
}

void SimulatedDeviceBackend::CopyToDevice(const float* host, float* device,
                                          int64_t n) {
  Writes(device, n, "CopyToDevice");
  std::memcpy(device, host, n * sizeof(float));
}

void SimulatedDeviceBackend::CopyToHost(const float* device, float* host,
                                        int64_t n) {
  Reads(device, n, "CopyToHost");
  std::memcpy(host, device, n * sizeof(float));
}

int SimulatedDeviceBackend::CopyToHostAsync(const float* device, float* host,
                                            int64_t n) {
  Reads(device, n, "CopyToHostAsync");
  ++async_to_host_;
  const int ticket = next_ticket_++;
  to_host_.push_back({ticket, device, host, std::vector<float>(device, device + n)});
  return ticket;
}

void SimulatedDeviceBackend::WaitCopy(int ticket) {
  auto it = std::find_if(to_host_.begin(), to_host_.end(),
                         [&](const ToHost& c) { return c.ticket == ticket; });
  if (it == to_host_.end()) {
    // Landed already (Synchronize), or never issued.
    if (ticket < 0 || ticket >= next_ticket_)
      Race(absl::StrCat("WaitCopy(", ticket, ") of a copy never issued"));
    return;
  }
  std::copy(it->data.begin(), it->data.end(), it->host);
  to_host_.erase(it);
}

void SimulatedDeviceBackend::CopyToDeviceAsync(const float* host,
                                               float* device, int64_t n) {
  // Ordered after the compute queued so far, and after earlier copies on
  // the same stream: nothing to check until later compute.
  ++async_to_device_;
  to_device_.push_back({host, device, n});
}

void SimulatedDeviceBackend::ComputeWaitsForCopies() {
  for (const ToDevice& c : to_device_)
    std::memcpy(c.device, c.host, c.n * sizeof(float));
  to_device_.clear();
}

void SimulatedDeviceBackend::Synchronize() {
  ComputeWaitsForCopies();
  for (const ToHost& c : to_host_)
    std::copy(c.data.begin(), c.data.end(), c.host);
  to_host_.clear();
}

void SimulatedDeviceBackend::GemmStrided(bool trans_a, bool trans_b, int m,
                                         int n, int k, float alpha,
                                         const float* a, int lda,
                                         const float* b, int ldb, float beta,
                                         float* c, int ldc) {
  // What a strided matrix spans: (rows - 1) strides and a last row.
  auto span = [](int rows, int cols, int ld) {
    return int64_t{rows - 1} * ld + cols;
  };
  Reads(a, trans_a ? span(k, m, lda) : span(m, k, lda), "Gemm");
  Reads(b, trans_b ? span(n, k, ldb) : span(k, n, ldb), "Gemm");
  Writes(c, span(m, n, ldc), "Gemm");
  cpu_.GemmStrided(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
}

void SimulatedDeviceBackend::AddBias(int rows, int cols, const float* bias,
                                     float* x) {
  Reads(bias, cols, "AddBias");
  Writes(x, int64_t{rows} * cols, "AddBias");
  cpu_.AddBias(rows, cols, bias, x);
}

void SimulatedDeviceBackend::BiasGrad(int rows, int cols, const float* dy,
                                      float* db) {
  Reads(dy, int64_t{rows} * cols, "BiasGrad");
  Writes(db, cols, "BiasGrad");
  cpu_.BiasGrad(rows, cols, dy, db);
}

void SimulatedDeviceBackend::Relu(int64_t n, float* x) {
  Writes(x, n, "Relu");
  cpu_.Relu(n, x);
}

void SimulatedDeviceBackend::ReluGrad(int64_t n, const float* y, float* dy) {
  Reads(y, n, "ReluGrad");
  Writes(dy, n, "ReluGrad");
  cpu_.ReluGrad(n, y, dy);
}

double SimulatedDeviceBackend::SoftmaxCrossEntropy(int rows, int cols,
                                                   const float* logits,
                                                   const int32_t* labels,
                                                   float scale,
                                                   float* dlogits) {
  Reads(logits, int64_t{rows} * cols, "SoftmaxCrossEntropy");
  Writes(dlogits, int64_t{rows} * cols, "SoftmaxCrossEntropy");
  return cpu_.SoftmaxCrossEntropy(rows, cols, logits, labels, scale, dlogits);
}

int64_t SimulatedDeviceBackend::CountCorrect(int rows, int cols,
                                             const float* logits,
                                             const int32_t* labels) {
  Reads(logits, int64_t{rows} * cols, "CountCorrect");
  return cpu_.CountCorrect(rows, cols, logits, labels);
}

int32_t* SimulatedDeviceBackend::AllocateIndices(int64_t n) {
  auto owned = std::make_unique<int32_t[]>(std::max<int64_t>(n, 1));
  std::fill(owned.get(), owned.get() + std::max<int64_t>(n, 1), -1);
  int32_t* p = owned.get();
  index_memory_[p] = std::move(owned);
  return p;
}

void SimulatedDeviceBackend::FreeIndices(int32_t* p) {
  index_memory_.erase(p);
}

void SimulatedDeviceBackend::CopyIndicesToDevice(const int32_t* host,
                                                 int32_t* device, int64_t n) {
  std::memcpy(device, host, n * sizeof(int32_t));
}

void SimulatedDeviceBackend::SegmentSum(int segments, int dim,
                                        const int32_t* offsets,
                                        const int32_t* index, const float* src,
                                        float* out) {
  int64_t rows = 0;  // the extent of src this call reads
  for (int32_t j = 0; j < offsets[segments]; ++j)
    rows = std::max<int64_t>(rows, int64_t{index[j]} + 1);
  Reads(src, rows * dim, "SegmentSum");
  Writes(out, int64_t{segments} * dim, "SegmentSum");
  cpu_.SegmentSum(segments, dim, offsets, index, src, out);
}

double SimulatedDeviceBackend::SigmoidCrossEntropy(int n, const float* logits,
                                                   const float* labels,
                                                   float scale,
                                                   float* dlogits) {
  Reads(logits, n, "SigmoidCrossEntropy");
  if (dlogits != nullptr) Writes(dlogits, n, "SigmoidCrossEntropy");
  return cpu_.SigmoidCrossEntropy(n, logits, labels, scale, dlogits);
}

void SimulatedDeviceBackend::PairDots(int batch, int n, int dim,
                                      const float* rows, const float* last,
                                      float* out) {
  Reads(rows, int64_t{batch} * (n - 1) * dim, "PairDots");
  Reads(last, int64_t{batch} * dim, "PairDots");
  Writes(out, int64_t{batch} * n * (n - 1) / 2, "PairDots");
  cpu_.PairDots(batch, n, dim, rows, last, out);
}

void SimulatedDeviceBackend::PairDotsGrad(int batch, int n, int dim,
                                          const float* rows, const float* last,
                                          const float* dout, float* d_rows,
                                          float* d_last) {
  Reads(dout, int64_t{batch} * n * (n - 1) / 2, "PairDotsGrad");
  Writes(d_rows, int64_t{batch} * (n - 1) * dim, "PairDotsGrad");
  Writes(d_last, int64_t{batch} * dim, "PairDotsGrad");
  cpu_.PairDotsGrad(batch, n, dim, rows, last, dout, d_rows, d_last);
}

}  // namespace fulcrum
