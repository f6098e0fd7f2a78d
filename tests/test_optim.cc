// Adam/AdamW against a double-precision reference, the learning-rate schedules
// against DeepSpeed's formulas re-derived here, and the fp16 loss scaler
// against a small re-implementation of DeepSpeed's DynamicLossScaler rule.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/engine/loss_scaler.h"
#include "runtime/kernels/ops/adam.h"
#include "runtime/optim/lr_schedule.h"

namespace zerod {
namespace {

// ================================================================ Adam

void adam_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamHyper& h, float lr, int64_t step,
               float grad_scale, bool decay) {
  AdamTensor t{p, m, v, g};
  t.n = n;
  adam_update(t, make_adam_step(h, lr, step, grad_scale, decay));
}

// PyTorch's AdamW (decoupled) and Adam (L2 added to the gradient), in double.
struct RefAdam {
  std::vector<double> p, m, v;

  void step(const std::vector<float>& grads, const AdamHyper& h, double lr, int64_t t, double grad_scale, bool decay) {
    const double b1 = h.beta1, b2 = h.beta2, eps = h.eps;
    const double wd = decay ? h.weight_decay : 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = static_cast<double>(grads[i]) * grad_scale;
      if (!h.decoupled) g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = h.bias_correction ? 1 - std::pow(b1, static_cast<double>(t)) : 1.0;
      const double bc2 = h.bias_correction ? 1 - std::pow(b2, static_cast<double>(t)) : 1.0;
      const double mhat_step = lr / bc1;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      const double shrink = h.decoupled ? 1 - lr * wd : 1.0;
      p[i] = p[i] * shrink - mhat_step * m[i] / denom;
    }
  }
};

void run_adam_vs_reference(bool decoupled, bool decay, bool bias_correction = true) {
  constexpr int kN = 1000, kSteps = 10;
  constexpr float kLr = 1e-2f, kGradScale = 0.125f;
  AdamHyper h;
  h.beta1 = 0.9f;
  h.beta2 = 0.99f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.decoupled = decoupled;
  h.bias_correction = bias_correction;

  std::mt19937 rng(decoupled * 2 + decay + 17);
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  std::normal_distribution<float> gauss(0.0f, 8.0f);
  std::vector<float> p(kN), m(kN, 0.0f), v(kN, 0.0f), g(kN);
  // |p| >= 0.5 so that relative errors stay meaningful after 10 steps of lr 1e-2.
  for (float& x : p) x = (rng() & 1 ? 1.0f : -1.0f) * mag(rng);
  RefAdam ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(kN, 0.0), std::vector<double>(kN, 0.0)};

  double max_g = 0;
  for (int t = 1; t <= kSteps; ++t) {
    for (float& x : g) {
      x = gauss(rng);
      max_g = std::max(max_g, std::fabs(static_cast<double>(x)) * kGradScale);
    }
    adam_step(p.data(), g.data(), m.data(), v.data(), kN, h, kLr, t, kGradScale, decay);
    ref.step(g, h, kLr, t, kGradScale, decay);
  }
  // Tolerance: fp32 arithmetic over 10 steps; max relative error of the
  // parameters and of v (a sum of positive terms) 1e-5; m can cancel to 0,
  // so its error is measured against the largest gradient.
  double err_p = 0, err_v = 0, err_m = 0;
  for (int i = 0; i < kN; ++i) {
    err_p = std::max(err_p, std::fabs(p[i] - ref.p[i]) / std::fabs(ref.p[i]));
    err_v = std::max(err_v, std::fabs(v[i] - ref.v[i]) / ref.v[i]);
    err_m = std::max(err_m, std::fabs(m[i] - ref.m[i]) / max_g);
  }
  EXPECT_LT(err_p, 1e-5);
  EXPECT_LT(err_v, 1e-5);
  EXPECT_LT(err_m, 1e-5);
  // The parameters really moved (so the comparison checks something).
  double moved = 0;
  for (int i = 0; i < kN; ++i) moved = std::max(moved, std::fabs(ref.p[i]));
  EXPECT_GT(moved, 0.0);
}

TEST(Adam, AdamWMatchesReference) { run_adam_vs_reference(/*decoupled=*/true, /*decay=*/true); }
TEST(Adam, AdamWNoDecayMatchesReference) { run_adam_vs_reference(true, false); }
TEST(Adam, AdamL2MatchesReference) { run_adam_vs_reference(false, true); }
TEST(Adam, AdamL2NoDecayMatchesReference) { run_adam_vs_reference(false, false); }
// DeepSpeed's bias_correction false: m and v as they are.
TEST(Adam, WithoutBiasCorrectionMatchesReference) {
  run_adam_vs_reference(/*decoupled=*/true, /*decay=*/true, /*bias_correction=*/false);
  run_adam_vs_reference(/*decoupled=*/false, /*decay=*/true, /*bias_correction=*/false);
}

// One step by hand: p = 1, g = 2 (scaled by 0.5 -> 1), b1 0.9, b2 0.999, lr 0.1,
// wd 0.5. m = 0.1, v = 0.001, mhat = 1, vhat = 1, update = lr / (1 + eps).
TEST(Adam, FirstStepByHand) {
  AdamHyper h;
  h.weight_decay = 0.5f;
  h.eps = 1e-8f;
  float p = 1.0f, g = 2.0f, m = 0.0f, v = 0.0f;
  adam_step(&p, &g, &m, &v, 1, h, 0.1f, 1, 0.5f, true);
  // AdamW: 1 * (1 - 0.1 * 0.5) - 0.1 * 1 / (1 + 1e-8) = 0.85 (to float precision).
  EXPECT_NEAR(p, 0.85, 1e-6);
  // m and v carry the fp32 rounding of the betas (0.999f - 0.999 is 1.3e-8).
  EXPECT_NEAR(m, 0.1, 1e-7);
  EXPECT_NEAR(v, 0.001, 5e-8);

  // Adam (L2): g = 1 + 0.5 * 1 = 1.5; mhat/sqrt(vhat) = 1 -> p = 1 - 0.1 = 0.9.
  h.decoupled = false;
  p = 1.0f, g = 2.0f, m = 0.0f, v = 0.0f;
  adam_step(&p, &g, &m, &v, 1, h, 0.1f, 1, 0.5f, true);
  EXPECT_NEAR(p, 0.9, 1e-6);
  EXPECT_NEAR(m, 0.15, 1e-7);
}

// eps is added to sqrt(vhat), outside the square root: with eps 0.5 the first
// step of a unit gradient moves by lr / (1 + 0.5).
TEST(Adam, EpsIsAddedAfterTheSquareRoot) {
  AdamHyper h;
  h.eps = 0.5f;
  float p = 0.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  adam_step(&p, &g, &m, &v, 1, h, 0.1f, 1, 1.0f, true);
  EXPECT_NEAR(p, -0.1 / 1.5, 1e-6);  // fp32 rounding of the betas and lr
}

// decay=false must give bit-for-bit the result of weight_decay 0.
TEST(Adam, NoDecayLeavesWeightDecayOutExactly) {
  for (bool decoupled : {true, false}) {
    std::mt19937 rng(5);
    std::normal_distribution<float> gauss;
    constexpr int kN = 257;
    std::vector<float> p0(kN), g(kN);
    for (float& x : p0) x = gauss(rng);
    AdamHyper with_wd, no_wd;
    with_wd.weight_decay = 0.3f;
    no_wd.weight_decay = 0.0f;
    with_wd.decoupled = no_wd.decoupled = decoupled;
    std::vector<float> pa = p0, ma(kN, 0), va(kN, 0), pb = p0, mb(kN, 0), vb(kN, 0);
    for (int t = 1; t <= 3; ++t) {
      for (float& x : g) x = gauss(rng);
      adam_step(pa.data(), g.data(), ma.data(), va.data(), kN, with_wd, 1e-2f, t, 0.5f, /*decay=*/false);
      adam_step(pb.data(), g.data(), mb.data(), vb.data(), kN, no_wd, 1e-2f, t, 0.5f, /*decay=*/true);
    }
    EXPECT_EQ(pa, pb) << "decoupled=" << decoupled;
    EXPECT_EQ(ma, mb);
    EXPECT_EQ(va, vb);
    // And with decay on, the weight decay does change the result.
    std::vector<float> pc = p0, mc(kN, 0), vc(kN, 0);
    for (float& x : g) x = 1.0f;
    adam_step(pc.data(), g.data(), mc.data(), vc.data(), kN, with_wd, 1e-2f, 1, 0.5f, true);
    std::vector<float> pd = p0, md(kN, 0), vd(kN, 0);
    adam_step(pd.data(), g.data(), md.data(), vd.data(), kN, with_wd, 1e-2f, 1, 0.5f, false);
    EXPECT_NE(pc, pd);
  }
}

// ================================================================ LR schedules

// DeepSpeed (deepspeed/runtime/lr_schedules.py), re-derived: warmup steps are
// floored at 2; the warmup fraction is log(it+1)/log(W) or it/W.
double ref_frac(int64_t w_steps, WarmupType type, int64_t it) {
  const double w = static_cast<double>(std::max<int64_t>(2, w_steps));
  return type == WarmupType::kLog ? std::log(it + 1.0) / std::log(w) : it / w;
}

double ref_warmup_lr(double lo, double hi, int64_t w_steps, WarmupType type, int64_t it) {
  const int64_t w = std::max<int64_t>(2, w_steps);
  return it < w ? lo + (hi - lo) * ref_frac(w_steps, type, it) : hi;
}

double ref_warmup_decay_lr(double lo, double hi, int64_t w_steps, int64_t total, WarmupType type, int64_t it) {
  const int64_t w = std::max<int64_t>(2, w_steps);
  if (it < w) return lo + (hi - lo) * ref_frac(w_steps, type, it);
  const double gamma = std::max(0.0, double(total - it) / std::max(1.0, double(total - w)));
  return lo + (hi - lo) * gamma;
}

double ref_warmup_cosine_lr(double base, double wmin, double cmin, int64_t w_steps, int64_t total, WarmupType type,
                            int64_t it) {
  const int64_t w = std::max<int64_t>(2, w_steps);
  if (it < w) return base * (wmin + (1 - wmin) * ref_frac(w_steps, type, it));
  const double real_step = double(it - w + 1), real_total = double(total - w);
  const double c = (1 + std::cos(M_PI * real_step / real_total)) / 2;
  return base * std::max(0.0, cmin + (1 - cmin) * c);
}

SchedulerConfig sched(SchedulerType type, double lo, double hi, int64_t w, int64_t total, WarmupType wt) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_min_lr = lo;
  s.warmup_max_lr = hi;
  s.warmup_num_steps = w;
  s.total_num_steps = total;
  s.warmup_type = wt;
  return s;
}

constexpr double kLrTol = 1e-12;  // double arithmetic, values around 1e-3

std::vector<int64_t> probe_iterations(int64_t w, int64_t total) {
  return {0, 1, 2, w / 2, w - 1, w, w + 1, (w + total) / 2, total - 1, total, total + 5, total + 100};
}

TEST(LrSchedule, NoneReturnsBaseLr) {
  SchedulerConfig s;
  for (int64_t it : {0, 1, 1000, 1000000}) EXPECT_EQ(lr_at(s, 3e-4, it), 3e-4);
}

TEST(LrSchedule, WarmupLRMatchesDeepSpeed) {
  for (WarmupType wt : {WarmupType::kLog, WarmupType::kLinear}) {
    for (int64_t w : {0, 1, 2, 10, 1000}) {
      const SchedulerConfig s = sched(SchedulerType::kWarmupLR, 1e-5, 1e-3, w, 0, wt);
      for (int64_t it : probe_iterations(std::max<int64_t>(w, 2), 3000)) {
        EXPECT_NEAR(lr_at(s, 5.0, it), ref_warmup_lr(1e-5, 1e-3, w, wt, it), kLrTol)
            << "W=" << w << " it=" << it << " linear=" << (wt == WarmupType::kLinear);
      }
    }
  }
}

TEST(LrSchedule, WarmupLRSpotValues) {
  // Log warmup: it = 0 gives log(1) = 0 -> min; it = W - 1 gives log(W)/log(W) = 1 -> max.
  SchedulerConfig s = sched(SchedulerType::kWarmupLR, 1e-4, 1e-3, 100, 0, WarmupType::kLog);
  EXPECT_NEAR(lr_at(s, 0, 0), 1e-4, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 99), 1e-3, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 9), 1e-4 + 9e-4 * 0.5, kLrTol);  // log(10)/log(100) = 1/2
  EXPECT_NEAR(lr_at(s, 0, 100), 1e-3, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 100000), 1e-3, kLrTol);
  // Linear: it / W.
  s.warmup_type = WarmupType::kLinear;
  EXPECT_NEAR(lr_at(s, 0, 25), 1e-4 + 9e-4 * 0.25, kLrTol);
  // warmup_num_steps is floored at 2: W = 0 behaves as W = 2.
  s.warmup_num_steps = 0;
  EXPECT_NEAR(lr_at(s, 0, 1), 1e-4 + 9e-4 * 0.5, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 2), 1e-3, kLrTol);
  s.warmup_type = WarmupType::kLog;
  EXPECT_NEAR(lr_at(s, 0, 0), 1e-4, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 1), 1e-3, kLrTol);  // log(2)/log(2)
}

TEST(LrSchedule, WarmupDecayLRMatchesDeepSpeed) {
  for (WarmupType wt : {WarmupType::kLog, WarmupType::kLinear}) {
    for (auto [w, total] : {std::pair<int64_t, int64_t>{10, 110}, {0, 50}, {100, 100}, {100, 101}, {5, 3000}}) {
      const SchedulerConfig s = sched(SchedulerType::kWarmupDecayLR, 2e-5, 1e-3, w, total, wt);
      for (int64_t it : probe_iterations(std::max<int64_t>(w, 2), total)) {
        EXPECT_NEAR(lr_at(s, 5.0, it), ref_warmup_decay_lr(2e-5, 1e-3, w, total, wt, it), kLrTol)
            << "W=" << w << " total=" << total << " it=" << it;
      }
    }
  }
}

TEST(LrSchedule, WarmupDecayLRSpotValues) {
  const SchedulerConfig s = sched(SchedulerType::kWarmupDecayLR, 0.0, 1e-3, 10, 110, WarmupType::kLinear);
  EXPECT_NEAR(lr_at(s, 0, 0), 0.0, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 5), 5e-4, kLrTol);  // 5/10 of warmup
  EXPECT_NEAR(lr_at(s, 0, 9), 9e-4, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 10), 1e-3, kLrTol);   // (110-10)/100
  EXPECT_NEAR(lr_at(s, 0, 60), 5e-4, kLrTol);   // (110-60)/100
  EXPECT_NEAR(lr_at(s, 0, 100), 1e-4, kLrTol);  // (110-100)/100
  EXPECT_NEAR(lr_at(s, 0, 110), 0.0, kLrTol);
  EXPECT_NEAR(lr_at(s, 0, 115), 0.0, kLrTol);  // clamps at min
  const SchedulerConfig s2 = sched(SchedulerType::kWarmupDecayLR, 1e-4, 1e-3, 10, 110, WarmupType::kLinear);
  EXPECT_NEAR(lr_at(s2, 0, 200), 1e-4, kLrTol);  // clamps at warmup_min_lr
}

TEST(LrSchedule, WarmupCosineLRMatchesDeepSpeed) {
  for (WarmupType wt : {WarmupType::kLog, WarmupType::kLinear}) {
    for (auto [w, total] : {std::pair<int64_t, int64_t>{10, 110}, {0, 50}, {100, 101}, {5, 3000}}) {
      for (auto [wmin, cmin] : {std::pair<double, double>{0.0, 1e-4}, {0.1, 0.05}}) {
        SchedulerConfig s = sched(SchedulerType::kWarmupCosineLR, 0, 0, w, total, wt);
        s.warmup_min_ratio = wmin;
        s.cos_min_ratio = cmin;
        for (int64_t it : probe_iterations(std::max<int64_t>(w, 2), total)) {
          EXPECT_NEAR(lr_at(s, 1e-3, it), ref_warmup_cosine_lr(1e-3, wmin, cmin, w, total, wt, it), kLrTol)
              << "W=" << w << " total=" << total << " it=" << it;
        }
      }
    }
  }
}

TEST(LrSchedule, WarmupCosineLRSpotValues) {
  SchedulerConfig s = sched(SchedulerType::kWarmupCosineLR, 0, 0, 10, 110, WarmupType::kLinear);
  s.warmup_min_ratio = 0.0;
  s.cos_min_ratio = 0.0;
  EXPECT_NEAR(lr_at(s, 1e-3, 0), 0.0, kLrTol);
  EXPECT_NEAR(lr_at(s, 1e-3, 5), 5e-4, kLrTol);
  // After warmup: step it - W + 1 of 100: it = 59 is halfway, cos(pi/2) = 0 -> ratio 1/2.
  EXPECT_NEAR(lr_at(s, 1e-3, 59), 5e-4, kLrTol);
  EXPECT_NEAR(lr_at(s, 1e-3, 109), 0.0, kLrTol);  // cos(pi) = -1
  s.warmup_min_ratio = 0.2;
  EXPECT_NEAR(lr_at(s, 1e-3, 0), 2e-4, kLrTol);
  EXPECT_NEAR(lr_at(s, 1e-3, 5), 1e-3 * (0.2 + 0.8 * 0.5), kLrTol);
}

// ================================================================ loss scaler

// DeepSpeed's DynamicLossScaler.update_scale, re-implemented.
class RefScaler {
 public:
  explicit RefScaler(const LossScaleConfig& c)
      : c_(c), scale_(std::pow(2.0, c.initial_scale_power)), h_(c.hysteresis) {}
  double scale() const { return scale_; }
  int hysteresis() const { return h_; }
  // false: the scale would go below the minimum (DeepSpeed raises).
  bool update(bool overflow) {
    if (overflow) {
      if (c_.hysteresis == 1 || h_ == 1) {
        if (scale_ == c_.min_loss_scale) return false;
        scale_ = std::max(scale_ / 2, c_.min_loss_scale);
      } else {
        h_ -= 1;
      }
      last_overflow_ = cur_;
    } else {
      if (c_.consecutive_hysteresis) h_ = c_.hysteresis;
      if ((cur_ - last_overflow_) % c_.loss_scale_window == 0) {
        if (!c_.consecutive_hysteresis) h_ = c_.hysteresis;
        scale_ *= 2;
      }
    }
    cur_ += 1;
    return true;
  }

 private:
  LossScaleConfig c_;
  double scale_;
  int h_;
  int64_t cur_ = 0, last_overflow_ = -1;
};

LossScaleConfig dyn(int64_t window, int hysteresis, bool consecutive, int power = 16, double min_scale = 1) {
  LossScaleConfig c;
  c.loss_scale = 0;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_loss_scale = min_scale;
  return c;
}

// Overflow probability per phase: {number of steps, probability}.
using Phases = std::vector<std::pair<int, double>>;

// Drives LossScaler and the reference with the same random overflow sequence,
// comparing after every update. Returns how often the reference grew, shrank
// and refused (scale already at the minimum).
struct Counts {
  int grows = 0, shrinks = 0, errors = 0;
};

void drive_random(const LossScaleConfig& c, const Phases& phases, uint32_t seed, Counts* counts) {
  LossScaler s(c);
  RefScaler ref(c);
  ASSERT_EQ(s.scale(), ref.scale());
  ASSERT_EQ(s.hysteresis_left(), ref.hysteresis());
  std::mt19937 rng(seed);
  int step = 0;
  for (const auto& [steps, p] : phases) {
    std::bernoulli_distribution overflow(p);
    for (int i = 0; i < steps; ++i, ++step) {
      const bool o = overflow(rng);
      const double before = ref.scale();
      const bool ref_ok = ref.update(o);
      const absl::Status st = s.update(o);
      ASSERT_EQ(st.ok(), ref_ok) << "step " << step << ": " << std::string(st.message());
      ASSERT_EQ(s.scale(), ref.scale()) << "step " << step;
      ASSERT_EQ(s.hysteresis_left(), ref.hysteresis()) << "step " << step;
      counts->grows += ref.scale() > before;
      counts->shrinks += ref.scale() < before;
      counts->errors += !ref_ok;
    }
  }
}

// ~3000 steps per seed; the sequences must exercise both directions of the rule.
void check_config(const LossScaleConfig& c, const Phases& phases, int min_errors = 0) {
  Counts counts;
  for (uint32_t seed : {1u, 2u, 3u}) {
    drive_random(c, phases, seed, &counts);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(counts.grows, 0);
  EXPECT_GT(counts.shrinks, 0);
  EXPECT_GE(counts.errors, min_errors);
}

TEST(LossScaler, MatchesDeepSpeedWindow1000Hysteresis2) {
  // Busy phases (overflows, halvings) and quiet ones (1000-step windows complete).
  check_config(dyn(1000, 2, false), {{500, 0.02}, {1200, 0.0003}, {600, 0.01}, {700, 0.0}});
}

TEST(LossScaler, MatchesDeepSpeedWindow5Hysteresis1) { check_config(dyn(5, 1, false), {{3000, 0.1}}); }

TEST(LossScaler, MatchesDeepSpeedWindow3Hysteresis3Consecutive) { check_config(dyn(3, 3, true), {{3000, 0.4}}); }

TEST(LossScaler, MatchesDeepSpeedWindow3Hysteresis3NotConsecutive) { check_config(dyn(3, 3, false), {{3000, 0.4}}); }

TEST(LossScaler, MatchesDeepSpeedNearTheMinimum) {
  // Starts at 2^2 with min 2: frequent overflows reach the minimum and error.
  check_config(dyn(4, 1, false, 2, 2.0), {{3000, 0.4}}, /*min_errors=*/1);
}

TEST(LossScaler, HysteresisDelaysTheHalving) {
  LossScaler s(dyn(1000, 2, false));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.hysteresis_left(), 2);
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.hysteresis_left(), 1);
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.hysteresis_left(), 1);
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(LossScaler, GrowsExactlyAfterWindowCleanSteps) {
  constexpr int kWindow = 4;
  LossScaler s(dyn(kWindow, 1, false));
  for (int i = 1; i < kWindow; ++i) {
    ASSERT_TRUE(s.update(false).ok());
    EXPECT_EQ(s.scale(), 65536.0) << "clean step " << i;
  }
  ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.scale(), 131072.0);  // the window-th clean step
  // After an overflow (halving), the count restarts from it.
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 65536.0);
  for (int i = 1; i < kWindow; ++i) {
    ASSERT_TRUE(s.update(false).ok());
    EXPECT_EQ(s.scale(), 65536.0) << "clean step " << i << " after the overflow";
  }
  ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.scale(), 131072.0);
}

TEST(LossScaler, GrowthRefillsHysteresis) {
  LossScaler s(dyn(2, 3, false));
  ASSERT_TRUE(s.update(true).ok());
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.hysteresis_left(), 1);
  ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.hysteresis_left(), 1);  // not consecutive: kept until the scale grows
  ASSERT_TRUE(s.update(false).ok());
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.hysteresis_left(), 3);
}

TEST(LossScaler, OverflowAtTheMinimumIsAnError) {
  LossScaler s(dyn(1000, 1, false, /*power=*/0, /*min=*/1));
  EXPECT_EQ(s.scale(), 1.0);
  const absl::Status st = s.update(true);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("min_loss_scale"), std::string::npos) << std::string(st.message());
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScaler, HalvingStopsAtTheMinimum) {
  // 2^2 = 4, min 3: 4 -> max(2, 3) = 3, then an overflow at 3 is an error.
  LossScaler s(dyn(1000, 1, false, 2, 3.0));
  ASSERT_TRUE(s.update(true).ok());
  EXPECT_EQ(s.scale(), 3.0);
  EXPECT_FALSE(s.update(true).ok());
}

TEST(LossScaler, StaticScaleNeverChanges) {
  LossScaleConfig c = dyn(2, 1, false);
  c.loss_scale = 128;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 128.0);
  std::mt19937 rng(9);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(s.update(rng() & 1).ok());
    ASSERT_EQ(s.scale(), 128.0);
  }
}

}  // namespace
}  // namespace zerod
