#include "worker/data/criteo.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

absl::Status BadLine(const std::string& path, int64_t line,
                     const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("dataset: ", path, ":", line, ": ", what));
}

// About how many lines `f` holds (at most `limit` when > 0), from its size
// and the mean length of its first MiB's lines, plus 10%: reserving that
// keeps the arrays from doubling (and copying) as they grow, which for tens
// of millions of lines would double the load's peak memory. Only what is
// filled is touched; an underestimate only means a late growth. Leaves f
// at its start.
int64_t EstimateLines(std::FILE* f, int64_t limit) {
  if (std::fseek(f, 0, SEEK_END) != 0) return 0;
  const long size = std::ftell(f);
  std::rewind(f);
  if (size <= 0) return 0;
  std::vector<char> head(std::min<long>(size, 1 << 20));
  const size_t got = std::fread(head.data(), 1, head.size(), f);
  std::rewind(f);
  const int64_t lines = std::count(head.begin(), head.begin() + got, '\n');
  if (lines == 0) return 0;
  const int64_t estimate =
      static_cast<int64_t>(1.1 * static_cast<double>(size) /
                           (static_cast<double>(got) / lines)) + 16;
  return limit > 0 ? std::min(limit, estimate) : estimate;
}

}  // namespace

absl::StatusOr<ClickLogs> LoadCriteo(const std::string& path, int64_t limit) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "r"));
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("dataset: cannot open ", path));
  }
  ClickLogs logs;
  const int64_t expect = EstimateLines(f.get(), limit);
  logs.labels.reserve(expect);
  logs.dense.reserve(expect * ClickLogs::kDense);
  logs.cats.reserve(expect * ClickLogs::kFields);
  std::vector<char> buf(1 << 16);
  std::string line;
  int64_t n = 0;
  constexpr int kColumns = 1 + ClickLogs::kDense + ClickLogs::kFields;
  while (limit == 0 || n < limit) {
    line.clear();
    bool any = false;
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), f.get())) {
      any = true;
      line += buf.data();
      if (!line.empty() && line.back() == '\n') break;
      if (line.size() > (1 << 20))
        return BadLine(path, n + 1, "longer than 1 MiB");
    }
    if (!any) break;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++n;
    const char* p = line.data();
    const char* const end = p + line.size();
    int column = 0;
    while (true) {
      const char* tab = p;
      while (tab < end && *tab != '\t') ++tab;
      if (column >= kColumns) {
        return BadLine(path, n, absl::StrCat("more than ", kColumns,
                                             " columns"));
      }
      if (column == 0) {
        if (tab - p != 1 || (*p != '0' && *p != '1'))
          return BadLine(path, n, "column 1 (the label) must be 0 or 1");
        logs.labels.push_back(*p == '1' ? 1.0f : 0.0f);
      } else if (column <= ClickLogs::kDense) {
        double v = 0;
        if (tab > p) {
          auto [q, ec] = std::from_chars(p, tab, v);
          if (ec != std::errc() || q != tab) {
            return BadLine(path, n, absl::StrCat("column ", column + 1,
                                                 " is not a number"));
          }
        }
        logs.dense.push_back(static_cast<float>(std::log1p(std::max(v, 0.0))));
      } else {
        uint64_t c = 0;
        if (tab > p) {
          auto [q, ec] = std::from_chars(p, tab, c, 16);
          if (ec != std::errc() || q != tab || c > 0xFFFFFFFFull) {
            return BadLine(path, n,
                           absl::StrCat("column ", column + 1,
                                        " is not a category (up to 8 hex "
                                        "digits)"));
          }
        }
        logs.cats.push_back(static_cast<uint32_t>(c));
      }
      ++column;
      if (tab == end) break;
      p = tab + 1;
    }
    if (column != kColumns) {
      return BadLine(path, n, absl::StrCat(column, " columns, want ",
                                           kColumns));
    }
  }
  if (std::ferror(f.get()))
    return absl::DataLossError(absl::StrCat("dataset: reading ", path));
  logs.count = n;
  return logs;
}

absl::StatusOr<ClickLogs> LoadCriteoSplit(const std::string& dir, bool train,
                                          int64_t limit) {
  return LoadCriteo(absl::StrCat(dir, train ? "/train.tsv" : "/test.tsv"),
                    limit);
}

}  // namespace fulcrum
