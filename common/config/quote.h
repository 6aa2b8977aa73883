// How an error quotes what a user sent: at most 64 characters of it, and
// its size when longer (a 5 MB field came back whole in an error before).
#ifndef FULCRUM_COMMON_CONFIG_QUOTE_H_
#define FULCRUM_COMMON_CONFIG_QUOTE_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fulcrum {

inline constexpr size_t kQuoteChars = 64;

inline std::string Quote(absl::string_view s) {
  if (s.size() <= kQuoteChars) return absl::StrCat("'", s, "'");
  return absl::StrCat("'", s.substr(0, kQuoteChars), "...' (", s.size(),
                      " bytes)");
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONFIG_QUOTE_H_
