#include "server/ps/embedding/embedding_tables.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/config/embedding_spec.h"
#include "common/embedding/placement.h"
#include "common/status/status_macros.h"

namespace fulcrum {
namespace {

constexpr size_t kMaxLog = 1 << 16;

std::string Short(std::string_view s) {
  return std::string(s.substr(0, 64));
}

// ssp(0) runs as sync (JobShard's ModeOf).
bool SyncJob(const v1::JobSpec& spec) {
  const v1::ConsistencySpec& c = spec.consistency();
  return !(c.mode() == "async" || (c.mode() == "ssp" && c.staleness() > 0));
}

}  // namespace

EmbeddingTables::EmbeddingTables(const v1::JobSpec& spec, int shard,
                                 int shards, Env* env, int members,
                                 int64_t generation)
    : shard_(shard),
      shards_(shards),
      chunk_bytes_(spec.chunk_bytes()),
      full_every_(std::max(1, spec.checkpoint().full_every())),
      sync_(SyncJob(spec)),
      cuts_(spec.checkpoint().every_steps(), sync_,
            spec.embeddings_size(), members, generation) {
  for (const v1::EmbeddingTableSpec& t : spec.embeddings()) {
    tables_.push_back(std::make_unique<EmbeddingTable>(
        t, spec.seed(), RowsPerShard(t, shards), env, sync_));
    staleness_.push_back(t.has_staleness() ? t.staleness() : -1);
    clocks_.push_back(t.has_staleness() ? std::make_unique<ClockTable>(
                                              members, 1, generation)
                                        : nullptr);
  }
}

EmbeddingTables::Saved EmbeddingTables::Save(int64_t step) {
  Saved out;
  // The rows of the steps before the cut first (outside save_mu_: a
  // restore must not wait behind it).
  out.late = cuts_.WaitForRows(step, rows_wait_);
  absl::MutexLock lock(&save_mu_);
  const absl::StatusOr<int64_t> cut = cuts_.OpenForCopy(step);
  if (!cut.ok()) {
    out.skip = cut.status();
    return out;
  }
  const bool full = need_full_ || full_base_ < 0 ||
                    saves_since_full_ + 1 >= full_every_;
  if (full) {
    out.base = step;
    pending_full_ = step;
    need_full_ = false;
    saves_since_full_ = 0;
  } else {
    out.base = full_base_;
    ++saves_since_full_;
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    out.blobs.emplace_back(
        -1 - static_cast<int32_t>(i),
        SaveTable(*tables_[i], full ? -1 : full_base_, *cut));
  }
  cuts_.Copied(step);
  return out;
}

void EmbeddingTables::Written(int64_t step, bool ok) {
  absl::MutexLock lock(&save_mu_);
  if (step != pending_full_) return;
  pending_full_ = -1;
  if (ok) {
    full_base_ = step;
  } else {
    need_full_ = true;  // the rows it cleared are in no file
  }
}

absl::StatusOr<std::vector<SavedRows>> EmbeddingTables::Resolve(
    std::vector<SavedRows> saved, const BlobReader& read) const {
  std::map<int64_t, std::vector<SavedRows>> bases;  // by step
  for (SavedRows& rows : saved) {
    if (rows.base_step < 0) continue;
    const int64_t b = rows.base_step;
    if (!bases.count(b)) {
      absl::StatusOr<std::vector<std::pair<int32_t, std::string>>> blobs =
          read(b);
      absl::StatusOr<std::vector<SavedRows>> decoded =
          blobs.ok() ? Decode(*blobs) : blobs.status();
      if (!decoded.ok()) {
        return absl::DataLossError(absl::StrCat(
            "the tables' full save of step ", b, ", which a differential "
            "needs: ", decoded.status().message()));
      }
      bases[b] = *std::move(decoded);
    }
    const std::vector<SavedRows>& base = bases[b];
    const auto it = std::find_if(base.begin(), base.end(), [&](const SavedRows& s) {
      return s.table == rows.table;
    });
    if (it == base.end()) {
      return absl::DataLossError(absl::StrCat("step ", b, " holds no table '",
                                              Short(rows.table), "'"));
    }
    ASSIGN_OR_RETURN(rows, ApplyDifferential(*it, rows));
  }
  return saved;
}

absl::StatusOr<std::vector<SavedRows>> EmbeddingTables::Decode(
    const std::vector<std::pair<int32_t, std::string>>& blobs) const {
  std::vector<SavedRows> out(tables_.size());
  std::vector<bool> seen(tables_.size(), false);
  for (const auto& [key, blob] : blobs) {
    if (key >= 0) continue;  // a dense partition's
    const int64_t i = -1 - static_cast<int64_t>(key);
    if (i >= static_cast<int64_t>(tables_.size()) || seen[i]) {
      return absl::DataLossError(
          absl::StrCat("checkpoint holds table key ", key, " (the job has ",
                       tables_.size(), " tables, each once)"));
    }
    ASSIGN_OR_RETURN(out[i], DecodeTable(blob, *tables_[i]));
    seen[i] = true;
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (!seen[i]) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint has no rows of table '", tables_[i]->name(), "'"));
    }
  }
  return out;
}

void EmbeddingTables::Restore(const std::vector<SavedRows>& saved,
                              int64_t step) {
  for (size_t i = 0; i < tables_.size() && i < saved.size(); ++i) {
    tables_[i]->Restore(saved[i].ids, saved[i].freq, saved[i].records);
  }
  cuts_.Restored(step);
  absl::MutexLock lock(&save_mu_);
  need_full_ = true;  // the rows' changes since a full save are unknown
}

void EmbeddingTables::Clear() {
  for (auto& t : tables_) t->Clear();
  cuts_.Restored(0);
  absl::MutexLock lock(&save_mu_);
  need_full_ = true;
}

absl::Status EmbeddingTables::Undo(int64_t to) {
  if (!sync_) return absl::OkStatus();
  std::string failed;
  for (auto& t : tables_) {
    if (!t->Undo(to)) absl::StrAppend(&failed, failed.empty() ? "" : ", ", t->name());
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "rows of table(s) ", failed, " were pushed for steps past ", to,
      " that the dense partitions had not reached: they keep those pushes"));
}

void EmbeddingTables::ResetClocks(int members, int64_t clock,
                                  int64_t generation) {
  for (auto& c : clocks_) {
    if (c != nullptr) c->Reset(members, clock, generation);
  }
  cuts_.Reset(members, clock, generation);
}

void EmbeddingTables::End() {
  for (auto& c : clocks_) {
    if (c != nullptr) c->End();
  }
  cuts_.End();
}

EmbeddingTable* EmbeddingTables::Find(std::string_view name) const {
  for (const auto& t : tables_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

absl::Status EmbeddingTables::CheckIds(const EmbeddingTable& t,
                                       absl::Span<const uint64_t> ids,
                                       bool distinct) const {
  const int64_t bytes = static_cast<int64_t>(ids.size()) * t.dim() * 4;
  if (bytes > chunk_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ids: ", ids.size(), " rows of table '", t.name(), "' are ", bytes,
        " bytes, more than chunk_bytes (", chunk_bytes_,
        "): split the request"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const int owner = ShardOfRow(ids[i], shards_);
    if (owner != shard_) {
      return absl::InvalidArgumentError(
          absl::StrCat("ids[", i, "] = ", ids[i], " is held by shard ", owner,
                       ", not shard ", shard_));
    }
  }
  if (distinct) {
    absl::flat_hash_set<uint64_t> seen;
    seen.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!seen.insert(ids[i]).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ids[", i, "] = ", ids[i],
            " repeats an earlier id (sum a batch's rows per id first)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTables::Pull(std::string_view table,
                                   absl::Span<const uint64_t> ids,
                                   std::vector<float>* out,
                                   const RowsRead& read) const {
  int index = -1;
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i]->name() == table) index = static_cast<int>(i);
  }
  if (index < 0) {
    return absl::NotFoundError(
        absl::StrCat("table: the job has no embedding table '", Short(table),
                     "'"));
  }
  const EmbeddingTable* t = tables_[index].get();
  RETURN_IF_ERROR(CheckIds(*t, ids, /*distinct=*/false));
  if (clocks_[index] != nullptr && read.step >= 0) {
    RETURN_IF_ERROR(clocks_[index]
                        ->WaitForRead(read.step, staleness_[index],
                                      read.deadline, read.cancelled,
                                      read.generation)
                        .status());
  }
  out->resize(ids.size() * t->dim());
  t->Pull(ids, out->data());
  return absl::OkStatus();
}

absl::Status EmbeddingTables::CheckPush(const EmbeddingTable& t,
                                        const RowsPush& push) const {
  if (push.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step must be >= 0, got ", push.step));
  }
  if (push.chunks < 1 || push.chunks > kMaxChunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunks must be in [1, ", kMaxChunks, "], got ", push.chunks));
  }
  if (push.chunk < 0 || push.chunk >= push.chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk must be in [0, chunks), got ", push.chunk, " of ", push.chunks));
  }
  RETURN_IF_ERROR(CheckIds(t, push.ids, /*distinct=*/true));
  const size_t want = push.ids.size() * t.dim() * sizeof(float);
  if (push.gradient_bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradients: ", push.gradient_bytes, " bytes, want ", want, " (",
        push.ids.size(), " ids x dim ", t.dim(), " x 4)"));
  }
  if (!push.counts.empty() && push.counts.size() != push.ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts: ", push.counts.size(), " entries for ",
                     push.ids.size(), " ids (leave it empty for 1 each)"));
  }
  for (size_t i = 0; i < push.ids.size() * t.dim(); ++i) {
    float g;
    std::memcpy(&g, push.gradients + i * sizeof(float), sizeof(g));
    if (!std::isfinite(g)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gradients[", i, "] (row ", i / t.dim(), ", id ",
          push.ids[i / t.dim()], ") is not finite: ", g));
    }
  }
  return absl::OkStatus();
}

bool EmbeddingTables::FirstTime(const std::string& worker, int table,
                                const RowsPush& push, bool* completes) {
  *completes = false;
  absl::MutexLock lock(&log_mu_);
  if (log_.size() >= kMaxLog) {  // forget older generations' entries
    for (auto it = log_.begin(); it != log_.end();) {
      it = it->second.generation < push.generation ? log_.erase(it)
                                                   : std::next(it);
    }
  }
  Received& r = log_[{worker, table}];
  const uint64_t bit = uint64_t{1} << push.chunk;
  if (push.generation != r.generation || push.step > r.step) {
    if (push.generation < r.generation) return false;  // JobShard refuses it
    r = Received{push.generation, push.step, bit};
    *completes = push.chunks == 1;
    return true;
  }
  if (push.step < r.step) return false;  // applied before the newer step
  if (r.chunks & bit) return false;
  r.chunks |= bit;
  *completes = __builtin_popcountll(r.chunks) == push.chunks;
  return true;
}

absl::StatusOr<RowsPushed> EmbeddingTables::Push(const std::string& worker,
                                                 const RowsPush& push,
                                                 int member) {
  int index = -1;
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (tables_[i]->name() == push.table) index = static_cast<int>(i);
  }
  if (index < 0) {
    return absl::NotFoundError(absl::StrCat(
        "table: the job has no embedding table '", Short(push.table), "'"));
  }
  EmbeddingTable& t = *tables_[index];
  RETURN_IF_ERROR(CheckPush(t, push));
  RowsPushed out;
  bool completes = false;
  if (!FirstTime(worker, index, push, &completes)) {
    out.repeat = true;
    return out;
  }
  // The bytes may sit anywhere in a message: copy to aligned floats.
  std::vector<float> g(push.ids.size() * t.dim());
  if (!g.empty()) std::memcpy(g.data(), push.gradients, push.gradient_bytes);
  const EmbeddingTable::Pushed p =
      t.Push(push.ids, g.data(), push.counts, push.step,
             cuts_.ForPush(index, push.step));
  out.applied = p.applied;
  out.pending = p.pending;
  out.completes = completes;
  out.table = index;
  // The step's rows are all in: the member's clock moves (after applying,
  // so a read the clock lets through sees them).
  if (completes && member >= 0 && clocks_[index] != nullptr) {
    clocks_[index]->PartitionDone(member, push.step, push.generation);
  }
  if (completes && member >= 0) {
    out.row_clock_moved =
        cuts_.Done(index, member, push.step, push.generation);
  }
  return out;
}

}  // namespace fulcrum
