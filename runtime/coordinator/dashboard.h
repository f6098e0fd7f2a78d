// What zerod's dashboard page shows, as the JSON its script fetches: the
// jobs (state, progress, held-out loss, ETA, restarts, first failure) and
// one job's series of loss (and held-out loss), tokens/s and memory by tier. The page itself is dashboard.html,
// compiled in; its charts are drawn by Debian's Chart.js, which zerod serves.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/coordinator/supervisor.h"

namespace zerod {

// Seconds left at the pace of the running attempt's recorded steps; none
// for a job not running or without two steps of its attempt yet.
std::optional<double> eta_seconds(const v1::Job& job, const std::vector<Supervisor::Point>& series);

// One job's row.
nlohmann::json job_json(const v1::Job& job, const std::vector<Supervisor::Point>& series);

// The row and its series, one array a figure ("memory": one a tier;
// "eval": the held-out set's evaluations, their steps and losses).
nlohmann::json series_json(const v1::Job& job, const std::vector<Supervisor::Point>& series,
                           const std::vector<Supervisor::EvalPoint>& evals);

// The page (dashboard.html).
extern const char kDashboardHtml[];

}  // namespace zerod
