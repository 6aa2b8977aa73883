#include "server/ps/data_ledger.h"

#include <algorithm>

namespace fulcrum {

void DataLedger::Reset(Ledger entries) {
  entries_ = std::move(entries);
  undo_.clear();
}

void DataLedger::Add(const DataRange& r) {
  if (r.chunk < 0) return;
  LedgerEntry& e = entries_[r.chunk];
  e.end = std::max(e.end, r.end);
  e.samples += r.end - r.begin;
}

void DataLedger::ApplyStep(const std::vector<DataRange>& ranges) {
  undo_.clear();
  for (const DataRange& r : ranges) {
    if (r.chunk < 0) continue;
    auto it = entries_.find(r.chunk);
    undo_.emplace_back(r.chunk,
                       it == entries_.end() ? LedgerEntry{-1, 0} : it->second);
    Add(r);
  }
}

void DataLedger::UndoStep() {
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
    if (it->second.end < 0) {
      entries_.erase(it->first);
    } else {
      entries_[it->first] = it->second;
    }
  }
  undo_.clear();
}

}  // namespace fulcrum
