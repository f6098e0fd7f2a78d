// Errors are values: absl::Status / absl::StatusOr cross every module boundary.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ZEROD_CONCAT_INNER_(a, b) a##b
#define ZEROD_CONCAT_(a, b) ZEROD_CONCAT_INNER_(a, b)

#define ZEROD_RETURN_IF_ERROR(expr)          \
  do {                                       \
    absl::Status zerod_status_ = (expr);     \
    if (!zerod_status_.ok()) return zerod_status_; \
  } while (0)

#define ZEROD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

// ZEROD_ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define ZEROD_ASSIGN_OR_RETURN(lhs, expr) \
  ZEROD_ASSIGN_OR_RETURN_IMPL_(ZEROD_CONCAT_(zerod_statusor_, __LINE__), lhs, expr)
