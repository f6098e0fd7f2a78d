#include "comm/rank_env.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

// Reads a non-negative integer variable; absent leaves `out` as it is.
absl::Status read_int(const char* name, int* out, bool* found) {
  const char* v = std::getenv(name);
  if (!v) return absl::OkStatus();
  int x = 0;
  if (!absl::SimpleAtoi(std::string(v), &x) || x < 0) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", v,
                                                   "' is not a non-negative integer"));
  }
  *out = x;
  *found = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RankInfo> discover_rank() {
  static constexpr const char* kConventions[][4] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
  };
  for (const auto& names : kConventions) {
    RankInfo info;
    bool has_rank = false, has_size = false, has_local = false, has_local_size = false;
    ZEROD_RETURN_IF_ERROR(read_int(names[0], &info.rank, &has_rank));
    ZEROD_RETURN_IF_ERROR(read_int(names[1], &info.world_size, &has_size));
    ZEROD_RETURN_IF_ERROR(read_int(names[2], &info.local_rank, &has_local));
    ZEROD_RETURN_IF_ERROR(read_int(names[3], &info.local_size, &has_local_size));
    if (!has_rank && !has_size) continue;
    if (!has_rank || !has_size) {
      return absl::InvalidArgumentError(absl::StrCat("launcher environment incomplete: ", names[0], " and ",
                                                     names[1], " must both be set"));
    }
    if (info.world_size < 1 || info.rank >= info.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(names[0], "=", info.rank, " is not below ", names[1], "=",
                                                     info.world_size));
    }
    if (!has_local) info.local_rank = info.rank;
    if (!has_local_size || info.local_size < 1) info.local_size = info.world_size;
    return info;
  }
  return RankInfo{};
}

}  // namespace zerod
