#include "runtime/coordinator/dashboard.h"

namespace zerod {

std::optional<double> eta_seconds(const v1::Job& job, const std::vector<Supervisor::Point>& series) {
  if (job.state() != v1::RUNNING || series.empty()) return std::nullopt;
  const Supervisor::Point& last = series.back();
  // The first point of the attempt now running.
  auto first = series.end() - 1;
  while (first != series.begin() && (first - 1)->attempt == last.attempt) --first;
  if (last.step <= first->step || last.unix_ms <= first->unix_ms) return std::nullopt;
  const double steps_per_s =
      static_cast<double>(last.step - first->step) * 1000.0 / static_cast<double>(last.unix_ms - first->unix_ms);
  return static_cast<double>(std::max<int64_t>(0, job.progress().total_steps() - job.progress().step())) / steps_per_s;
}

nlohmann::json job_json(const v1::Job& job, const std::vector<Supervisor::Point>& series) {
  const std::optional<double> eta = eta_seconds(job, series);
  return {
      {"id", job.id()},
      {"name", job.spec().name()},
      {"state", v1::JobState_Name(job.state())},
      {"world_size", job.spec().world_size()},
      {"step", job.progress().step()},
      {"total_steps", job.progress().total_steps()},
      {"loss", job.progress().step() > 0 ? nlohmann::json(job.progress().loss()) : nlohmann::json()},
      {"tokens_per_s", job.progress().step() > 0 ? nlohmann::json(job.progress().tokens_per_s()) : nlohmann::json()},
      {"eval_loss", job.progress().has_eval_loss() ? nlohmann::json(job.progress().eval_loss()) : nlohmann::json()},
      {"best_eval_loss",
       job.progress().has_eval_loss() ? nlohmann::json(job.progress().best_eval_loss()) : nlohmann::json()},
      {"eta_s", eta ? nlohmann::json(*eta) : nlohmann::json()},
      {"attempts", job.attempts_size()},
      {"restarts", std::max(0, job.attempts_size() - 1)},
      {"first_failure", job.first_failure().reason()},
      {"submitted_unix_ms", job.submitted_unix_ms()}};
}

nlohmann::json series_json(const v1::Job& job, const std::vector<Supervisor::Point>& series,
                           const std::vector<Supervisor::EvalPoint>& evals) {
  nlohmann::json s = {{"t_ms", nlohmann::json::array()},         {"attempt", nlohmann::json::array()},
                      {"step", nlohmann::json::array()},         {"loss", nlohmann::json::array()},
                      {"tokens_per_s", nlohmann::json::array()}, {"memory", nlohmann::json::object()}};
  for (int t = 0; t < kNumTiers; ++t) s["memory"][tier_name(static_cast<Tier>(t))] = nlohmann::json::array();
  for (const Supervisor::Point& p : series) {
    s["t_ms"].push_back(p.unix_ms);
    s["attempt"].push_back(p.attempt);
    s["step"].push_back(p.step);
    s["loss"].push_back(p.loss);
    s["tokens_per_s"].push_back(p.tokens_per_s);
    for (int t = 0; t < kNumTiers; ++t) s["memory"][tier_name(static_cast<Tier>(t))].push_back(p.memory[t]);
  }
  s["eval"] = {
      {"attempt", nlohmann::json::array()}, {"step", nlohmann::json::array()}, {"loss", nlohmann::json::array()}};
  for (const Supervisor::EvalPoint& e : evals) {
    s["eval"]["attempt"].push_back(e.attempt);
    s["eval"]["step"].push_back(e.step);
    s["eval"]["loss"].push_back(e.loss);
  }
  return {{"job", job_json(job, series)}, {"series", s}};
}

}  // namespace zerod
