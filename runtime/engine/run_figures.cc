#include "runtime/engine/run_figures.h"

#include "runtime/kernels/cpu/gemm.h"
#include "runtime/telemetry/run_monitor.h"

namespace zerod {

double model_flops_per_token(const Trainer& t) {
  const JobConfig& cfg = t.config();
  const double trained = static_cast<double>(t.num_params());
  const double model = static_cast<double>(t.model_layout().num_params());
  const double all = t.base_weights() ? model + trained : model;
  return 4 * all + 2 * trained + 6.0 * cfg.model.n_layer * cfg.model.n_embd * static_cast<double>(cfg.data.seq_len);
}

double run_peak_flops(const Device& device) {
  return is_cuda_device(device) ? device.peak_flops() : cpu::measure_sgemm_flops();
}

std::vector<std::pair<std::string, double>> StepParts::take(const Profiler& p) {
  std::vector<std::pair<std::string, double>> parts;
  const auto add = [&](const Profiler::Totals& now, Profiler::Totals& before, const std::string& prefix) {
    for (const auto& [name, total] : now) {
      const auto it = before.find(name);
      parts.emplace_back(prefix + tag_name(name), total.ms - (it == before.end() ? 0.0 : it->second.ms));
    }
    before = now;
  };
  add(p.host_totals(), host_, "");
  add(p.device_totals(), device_, "device_");
  return parts;
}

}  // namespace zerod
