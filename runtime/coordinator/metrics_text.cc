#include "runtime/coordinator/metrics_text.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerod {
namespace {

// A sample's value: integers as integers, others with round-trip digits.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  absl::StrAppend(&out, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ", number(v), "\n");
}

constexpr v1::JobState kStates[] = {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED};

}  // namespace

std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void RequestStats::record(std::string_view method, std::string_view code, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{std::string(method), std::string(code)}];
  Latency& l = latency_[std::string(method)];
  for (size_t i = 0; i < kBuckets.size(); ++i) l.le[i] += seconds <= kBuckets[i];
  ++l.count;
  l.sum += seconds;
}

void RequestStats::render(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  family(out, "zerod_requests_total", "counter", "Requests zerod served, by method (gRPC) or path (HTTP) and outcome.");
  for (const auto& [key, n] : counts_) {
    sample(out, "zerod_requests_total",
           absl::StrCat("method=\"", label_value(key.first), "\",code=\"", label_value(key.second), "\""),
           static_cast<double>(n));
  }
  family(out, "zerod_request_duration_seconds", "histogram", "Time zerod took to answer a request, by method or path.");
  for (const auto& [method, l] : latency_) {
    const std::string m = absl::StrCat("method=\"", label_value(method), "\"");
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      sample(out, "zerod_request_duration_seconds_bucket", absl::StrCat(m, ",le=\"", kBuckets[i], "\""),
             static_cast<double>(l.le[i]));
    }
    sample(out, "zerod_request_duration_seconds_bucket", absl::StrCat(m, ",le=\"+Inf\""), static_cast<double>(l.count));
    sample(out, "zerod_request_duration_seconds_sum", m, l.sum);
    sample(out, "zerod_request_duration_seconds_count", m, static_cast<double>(l.count));
  }
}

std::string metrics_text(const std::vector<Supervisor::JobMetrics>& jobs, const RequestStats& stats) {
  std::string out;
  family(out, "zerod_jobs", "gauge", "Jobs zerod knows, by state.");
  for (v1::JobState s : kStates) {
    const auto n = std::count_if(jobs.begin(), jobs.end(), [&](const auto& j) { return j.job.state() == s; });
    sample(out, "zerod_jobs", absl::StrCat("state=\"", v1::JobState_Name(s), "\""), static_cast<double>(n));
  }
  const auto job_label = [](const Supervisor::JobMetrics& j) {
    return absl::StrCat("job=\"", label_value(j.job.id()), "\"");
  };
  family(out, "zerod_job_state", "gauge", "1 for the job's state, 0 for the others.");
  for (const auto& j : jobs) {
    for (v1::JobState s : kStates) {
      sample(out, "zerod_job_state", absl::StrCat(job_label(j), ",state=\"", v1::JobState_Name(s), "\""),
             j.job.state() == s);
    }
  }
  // The latest progress the job's rank 0 reported.
  const struct {
    const char* name;
    const char* help;
    double (*value)(const v1::Progress&);
  } progress[] = {
      {"zerod_job_step", "Optimizer steps the job has finished.",
       [](const v1::Progress& p) { return double(p.step()); }},
      {"zerod_job_total_steps", "Optimizer steps the job is to train.",
       [](const v1::Progress& p) { return double(p.total_steps()); }},
      {"zerod_job_loss", "The loss of the job's latest step.", [](const v1::Progress& p) { return p.loss(); }},
      {"zerod_job_tokens_per_second", "Tokens a second the job trains, over its attempt so far.",
       [](const v1::Progress& p) { return p.tokens_per_s(); }},
  };
  for (const auto& f : progress) {
    family(out, f.name, "gauge", f.help);
    for (const auto& j : jobs) {
      if (j.job.progress().step() > 0) sample(out, f.name, job_label(j), f.value(j.job.progress()));
    }
  }
  // The held-out set's (data.eval), once evaluated.
  family(out, "zerod_job_eval_loss", "gauge", "The job's latest held-out loss (data.eval).");
  for (const auto& j : jobs) {
    if (j.job.progress().has_eval_loss())
      sample(out, "zerod_job_eval_loss", job_label(j), j.job.progress().eval_loss());
  }
  family(out, "zerod_job_best_eval_loss", "gauge", "The job's lowest held-out loss so far.");
  for (const auto& j : jobs) {
    if (j.job.progress().has_eval_loss()) {
      sample(out, "zerod_job_best_eval_loss", job_label(j), j.job.progress().best_eval_loss());
    }
  }
  family(out, "zerod_job_memory_bytes", "gauge", "Bytes a running job's ranks hold, summed, by tier.");
  for (const auto& j : jobs) {
    if (j.job.state() != v1::RUNNING) continue;
    for (int t = 0; t < kNumTiers; ++t) {
      sample(out, "zerod_job_memory_bytes",
             absl::StrCat(job_label(j), ",tier=\"", tier_name(static_cast<Tier>(t)), "\""),
             static_cast<double>(j.memory[t]));
    }
  }
  family(out, "zerod_job_restarts_total", "counter", "Attempts of the job after its first.");
  for (const auto& j : jobs) {
    sample(out, "zerod_job_restarts_total", job_label(j), std::max(0, j.job.attempts_size() - 1));
  }
  family(out, "zerod_job_heartbeat_age_seconds", "gauge",
         "Seconds since the most silent rank of a running job was heard.");
  for (const auto& j : jobs) {
    if (j.heartbeat_age_s >= 0) sample(out, "zerod_job_heartbeat_age_seconds", job_label(j), j.heartbeat_age_s);
  }
  stats.render(out);
  return out;
}

}  // namespace zerod
