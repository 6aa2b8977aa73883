// The data ledger: per data chunk, the end of the prefix of samples whose
// gradients the parameters include and how many samples that is. Held by
// the partition 0 of a job (under that partition's lock), saved in its
// checkpoint blob, reported to the coordinator, which rebuilds its chunk
// leases from it: what the parameters hold is the only truth about which
// samples were trained (exactly once per epoch).
//
// Thread safety: none; the owner's lock guards it.
#ifndef FULCRUM_SERVER_PS_DATA_LEDGER_H_
#define FULCRUM_SERVER_PS_DATA_LEDGER_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace fulcrum {

// One chunk's entry (see v1.LedgerEntry).
struct LedgerEntry {
  int64_t end = 0;
  int64_t samples = 0;
  bool operator==(const LedgerEntry& o) const {
    return end == o.end && samples == o.samples;
  }
};
using Ledger = std::map<int64_t, LedgerEntry>;  // by chunk

// The samples behind one gradient (chunk < 0: none named).
struct DataRange {
  int64_t chunk = -1, begin = 0, end = 0;
};

class DataLedger {
 public:
  const Ledger& entries() const { return entries_; }
  // Replaces the entries (a restored checkpoint); nothing to undo after.
  void Reset(Ledger entries);

  // Records `range` for good (ssp/async: no step is ever undone).
  void Add(const DataRange& range);
  // Records the ranges of one sync step, undoably: UndoStep() restores the
  // entries as they were before it, until the next ApplyStep.
  void ApplyStep(const std::vector<DataRange>& ranges);
  void UndoStep();

 private:
  Ledger entries_;
  // The last step's changed entries with their earlier values (end -1:
  // absent before).
  std::vector<std::pair<int64_t, LedgerEntry>> undo_;
};

}  // namespace fulcrum

#endif  // FULCRUM_SERVER_PS_DATA_LEDGER_H_
