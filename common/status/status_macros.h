// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Debian's Abseil 20220623 ships none.
#ifndef FULCRUM_COMMON_STATUS_STATUS_MACROS_H_
#define FULCRUM_COMMON_STATUS_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FULCRUM_CONCAT_INNER_(a, b) a##b
#define FULCRUM_CONCAT_(a, b) FULCRUM_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status fulcrum_status_ = (expr);           \
    if (!fulcrum_status_.ok()) return fulcrum_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` assigns the value of an
// absl::StatusOr<T> or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr)                                            \
  FULCRUM_ASSIGN_OR_RETURN_IMPL_(FULCRUM_CONCAT_(fulcrum_sor_, __LINE__), lhs, \
                                 expr)

#define FULCRUM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // FULCRUM_COMMON_STATUS_STATUS_MACROS_H_
