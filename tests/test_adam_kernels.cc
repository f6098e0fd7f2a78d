// The vectorized optimizer kernels against plain scalar loops written here:
// fp32-state AdamW bit for bit on every instruction set this machine has
// (each forced in turn), the dynamic quantization maps against their
// definition, and 8-bit AdamW bit for bit against a scalar loop and within
// stated bounds of fp32 AdamW.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/cpu_isa.h"
#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/quant_map.h"

namespace zerod {
namespace {

// ------------------------------------------------------------ references

// The update documented on AdamStep, one element at a time; fma exactly
// where the documentation says (the kernels are built without contraction).
void ref_adam_element(const AdamStep& s, float g, float& p, float& m, float& v) {
  g = std::fma(s.l2, p, g * s.grad_scale);
  m = std::fma(s.beta1, m, s.one_minus_beta1 * g);
  v = std::fma(s.beta2, v, (s.one_minus_beta2 * g) * g);
  const float denom = std::fma(std::sqrt(v), s.inv_sqrt_bc2, s.eps);
  p = std::fma(s.neg_step_size, m / denom, p * s.shrink);
}

float grad_value(const std::vector<uint16_t>& g16, const std::vector<float>& g32, DType t, size_t i) {
  if (t == DType::kBF16) return bf16_to_float(g16[i]);
  if (t == DType::kF16) return f16_to_float(g16[i]);
  return g32[i];
}

uint16_t to_half(DType t, float x) { return t == DType::kBF16 ? float_to_bf16(x) : float_to_f16(x); }

// Nearest code by the map's thresholds, found by binary search.
uint8_t ref_quantize(const QuantMap& q, float x) {
  const float a = std::fabs(x);
  int t = static_cast<int>(std::lower_bound(q.thr.begin(), q.thr.begin() + q.num_mag, a) - q.thr.begin());
  if (!q.is_signed) return static_cast<uint8_t>(t);
  if (x < 0) return static_cast<uint8_t>(q.zero - std::min(t, q.max_neg_mag));
  return static_cast<uint8_t>(q.zero + t);
}

// 8-bit AdamW one block at a time: dequantize, update, new absmax, requantize.
void ref_adam8bit(const AdamStep& s, std::vector<float>& p, const std::vector<float>& g, std::vector<uint8_t>& mq,
                  std::vector<uint8_t>& vq, std::vector<float>& m_abs, std::vector<float>& v_abs) {
  const QuantMap& qm = signed_dynamic_map();
  const QuantMap& qv = unsigned_dynamic_map();
  const size_t n = p.size();
  for (size_t b = 0; b * 256 < n; ++b) {
    const size_t lo = b * 256, hi = std::min(n, lo + 256);
    std::vector<float> m(hi - lo), v(hi - lo);
    float mmax = 0, vmax = 0;
    for (size_t i = lo; i < hi; ++i) {
      float mi = qm.code[mq[i]] * m_abs[b], vi = qv.code[vq[i]] * v_abs[b];
      ref_adam_element(s, g[i], p[i], mi, vi);
      m[i - lo] = mi;
      v[i - lo] = vi;
      mmax = std::max(mmax, std::fabs(mi));
      vmax = std::max(vmax, vi);
    }
    m_abs[b] = mmax;
    v_abs[b] = vmax;
    const float rm = mmax > 0 ? 1.0f / mmax : 0.0f, rv = vmax > 0 ? 1.0f / vmax : 0.0f;
    for (size_t i = lo; i < hi; ++i) {
      mq[i] = ref_quantize(qm, m[i - lo] * rm);
      vq[i] = ref_quantize(qv, v[i - lo] * rv);
    }
  }
}

AdamHyper test_hyper(bool decoupled) {
  AdamHyper h;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.decoupled = decoupled;
  return h;
}

// ------------------------------------------------------------ fp32 AdamW

TEST(CpuIsa, ScalarIsAlwaysThereAndTheBestIsUsed) {
  const std::vector<CpuIsa>& isas = supported_cpu_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), CpuIsa::kScalar);
  EXPECT_EQ(best_cpu_isa(), isas.back());
  std::string names;
  for (CpuIsa i : isas) names += std::string(cpu_isa_name(i)) + " ";
  std::printf("instruction sets under test: %s\n", names.c_str());
}

// Sizes cover: shorter than one vector, odd tails for 8 and 16 lanes, and
// several OpenMP tiles; offsets make every array unaligned.
constexpr int64_t kSizes[] = {1, 7, 15, 16, 17, 100, 1000, 16384 * 2 + 29};

TEST(AdamKernel, EveryIsaMatchesTheScalarLoopBitwise) {
  for (CpuIsa isa : supported_cpu_isas()) {
    for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType pt : {DType::kF32, DType::kBF16, DType::kF16}) {  // kF32: no 16-bit copy
        for (bool decoupled : {true, false}) {
          for (int64_t n : kSizes) {
            SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " grad " + dtype_name(gt) + " copy " + dtype_name(pt) +
                         " n " + std::to_string(n) + (decoupled ? " AdamW" : " Adam"));
            std::mt19937 rng(static_cast<uint32_t>(n * 7 + int(gt) * 3 + int(pt)));
            std::normal_distribution<float> gauss(0.0f, 1.0f);
            const int64_t off = 3;  // elements: nothing is 16- or 64-byte aligned
            std::vector<float> p(n + off), m(n + off, 0), v(n + off, 0), g32(n + off);
            std::vector<uint16_t> g16(n + off), p16(n + off, 0);
            for (float& x : p) x = gauss(rng);
            std::vector<float> rp = p, rm = m, rv = v;
            const AdamHyper h = test_hyper(decoupled);
            for (int step = 1; step <= 3; ++step) {
              for (int64_t i = 0; i < n + off; ++i) {
                g32[i] = gauss(rng) * 100.0f;
                g16[i] = to_half(gt == DType::kF32 ? DType::kBF16 : gt, g32[i]);
              }
              const AdamStep s = make_adam_step(h, 1e-2f, step, 0.03f, step != 2);
              AdamTensor t{p.data() + off, m.data() + off, v.data() + off,
                           gt == DType::kF32 ? static_cast<const void*>(g32.data() + off) : g16.data() + off};
              t.grad_type = gt;
              t.param16 = pt == DType::kF32 ? nullptr : p16.data() + off;
              t.param16_type = pt;
              t.n = n;
              adam_update(t, s, isa);
              for (int64_t i = off; i < n + off; ++i)
                ref_adam_element(s, grad_value(g16, g32, gt, i), rp[i], rm[i], rv[i]);
            }
            ASSERT_EQ(0, std::memcmp(p.data(), rp.data(), p.size() * 4));
            ASSERT_EQ(0, std::memcmp(m.data(), rm.data(), m.size() * 4));
            ASSERT_EQ(0, std::memcmp(v.data(), rv.data(), v.size() * 4));
            for (int64_t i = 0; i < n + off; ++i) {
              const uint16_t want = (pt == DType::kF32 || i < off) ? 0 : to_half(pt, rp[i]);
              ASSERT_EQ(p16[i], want) << i;
            }
          }
        }
      }
    }
  }
}

// The vector 16-bit stores round like the scalar conversions, including at
// the edges: ties, subnormals, overflow to inf.
TEST(AdamKernel, SixteenBitCopiesRoundLikeTheScalarConversions) {
  std::vector<float> edge = {0.0f,     -0.0f,         1.0f,           65504.0f, 65520.0f,
                             70000.0f, -1e30f,        1e-8f,          -6.1e-5f, 5.96e-8f,
                             2.98e-8f, 1.0009765625f, 1.00048828125f, 3.0e-39f, 1.17549435e-38f};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7f7fffffu);
  for (int i = 0; i < 4000; ++i) {
    uint32_t u = bits(rng) | (i & 1 ? 0x80000000u : 0u);
    float f;
    std::memcpy(&f, &u, 4);
    edge.push_back(f);
  }
  const int64_t n = static_cast<int64_t>(edge.size());
  // A step that leaves p exactly as it is: lr 0, so p*1 + (-0)*x = p.
  const AdamStep s = make_adam_step(AdamHyper{}, 0.0f, 1, 1.0f, false);
  for (CpuIsa isa : supported_cpu_isas()) {
    for (DType pt : {DType::kBF16, DType::kF16}) {
      std::vector<float> p = edge, m(n, 0), v(n, 0), g(n, 1.0f);
      std::vector<uint16_t> p16(n);
      AdamTensor t{p.data(), m.data(), v.data(), g.data()};
      t.param16 = p16.data();
      t.param16_type = pt;
      t.n = n;
      adam_update(t, s, isa);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(p[i], edge[i]);
        ASSERT_EQ(p16[i], to_half(pt, edge[i])) << cpu_isa_name(isa) << " " << dtype_name(pt) << " " << edge[i];
      }
    }
  }
}

// ------------------------------------------------------------ maps

// The definition in decimal, in double: the midpoints of n + 1 points in
// [0.1, 1] per decade, times 10^(d-6), with both signs (signed) or not, plus
// 0 and 1.
std::vector<double> decimal_map(bool is_signed) {
  std::vector<double> v = {0.0, 1.0};
  for (int d = 0; d < 7; ++d) {
    const int n = is_signed ? 1 << d : 2 << d;
    for (int k = 0; k < n; ++k) {
      const double mid = (0.1 + 0.9 * k / n + 0.1 + 0.9 * (k + 1) / n) / 2 * std::pow(10.0, d - 6);
      v.push_back(mid);
      if (is_signed) v.push_back(-mid);
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

void expect_codes_match_definition(bool is_signed) {
  const std::array<float, 256> c = dynamic_map_values(is_signed);
  const std::vector<double> want = decimal_map(is_signed);
  ASSERT_EQ(want.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(c[i], want[i], 1.2e-7 * std::fabs(want[i])) << i;  // 1 ulp
}

TEST(QuantMap, SignedMapFollowsTheDefinition) {
  const std::array<float, 256> c = dynamic_map_values(true);
  for (int i = 1; i < 256; ++i) ASSERT_LT(c[i - 1], c[i]) << i;  // 256 distinct, sorted
  EXPECT_GT(c[0], -1.0f);                                        // -1 is not representable
  EXPECT_EQ(c[255], 1.0f);
  EXPECT_EQ(c[127], 0.0f);  // 127 negative values, zero, 127 positive values, 1.0
  // Decade i (values in (0.1, 1) * 10^(i-6)) holds 2^i values per sign.
  for (int i = 0; i < 7; ++i) {
    const double lo = 0.1 * std::pow(10.0, i - 6), hi = std::pow(10.0, i - 6);
    const int count = static_cast<int>(std::count_if(c.begin(), c.end(), [&](float x) { return x > lo && x < hi; }));
    EXPECT_EQ(count, 1 << i) << "decade " << i;
  }
  for (int k = 1; k <= 127; ++k) EXPECT_EQ(c[127 - k], -c[127 + k]);
  // Known values: the smallest is 1e-6 * midpoint(0.1, 1); the largest below
  // 1.0 the top midpoint of 65 points, 1 - 0.9 / 128.
  EXPECT_FLOAT_EQ(c[128], 0.55e-6f);
  EXPECT_FLOAT_EQ(c[254], 1.0f - 0.9f / 128.0f);
  expect_codes_match_definition(true);
}

TEST(QuantMap, UnsignedMapFollowsTheDefinition) {
  const std::array<float, 256> c = dynamic_map_values(false);
  for (int i = 1; i < 256; ++i) ASSERT_LT(c[i - 1], c[i]) << i;
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_EQ(c[255], 1.0f);
  for (int i = 0; i < 7; ++i) {
    const double lo = 0.1 * std::pow(10.0, i - 6), hi = std::pow(10.0, i - 6);
    const int count = static_cast<int>(std::count_if(c.begin(), c.end(), [&](float x) { return x > lo && x < hi; }));
    EXPECT_EQ(count, 2 << i) << "decade " << i;
  }
  EXPECT_FLOAT_EQ(c[1], 0.325e-6f);  // 1e-6 * midpoint(0.1, 0.55)
  EXPECT_FLOAT_EQ(c[254], 1.0f - 0.9f / 256.0f);
  expect_codes_match_definition(false);
}

// Values spread over every decade, with a block-leading 1.0 (so each block's
// absmax is 1 and the codes are of x itself) or random block scales.
std::vector<float> spread_values(int64_t n, bool is_signed, uint32_t seed, bool unit_absmax) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> expo(-8.0, 0.0), scale(-3.0, 3.0);
  std::vector<float> x(n);
  double block_scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 256 == 0) block_scale = unit_absmax ? 1.0 : std::pow(10.0, scale(rng));
    double a = std::pow(10.0, expo(rng));
    if (is_signed && (rng() & 1)) a = -a;
    x[i] = static_cast<float>(a * block_scale);
    if (unit_absmax && i % 256 == 0) x[i] = 1.0f;
  }
  return x;
}

TEST(QuantMap, QuantizesToTheNearestCode) {
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    const int64_t n = 256 * 400 + 77;
    const std::vector<float> x = spread_values(n, is_signed, 11, /*unit_absmax=*/true);
    std::vector<uint8_t> codes(n);
    std::vector<float> absmax(quant_blocks(n));
    quantize_blockwise(q, x.data(), n, codes.data(), absmax.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(codes[i], ref_quantize(q, x[i])) << x[i];
      // No code is nearer, beyond the rounding of the fp32 midpoints.
      const double d = std::fabs(double(x[i]) - q.code[codes[i]]);
      double best = 1e9;
      for (int k = 0; k < 256; ++k) best = std::min(best, std::fabs(double(x[i]) - q.code[k]));
      ASSERT_LE(d - best, 1e-7 * std::fabs(x[i]) + 1e-30) << x[i];
      // Sign kept: a value never lands on a code of the other sign.
      ASSERT_GE(double(q.code[codes[i]]) * x[i], 0.0) << x[i];
    }
  }
}

// The rounding edges against the decimal definition: each lies within
// kEdgeTolerance of a step (plus fp32 rounding) from the midpoint of its two
// codes, so the rule is round-to-nearest but for values that close to a
// midpoint.
TEST(QuantMap, EdgesLieAtTheMidpointsWithinTheTolerance) {
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    const std::vector<double> want = decimal_map(is_signed);
    for (int32_t t = 0; t + 1 < q.num_mag; ++t) {
      const double lo = want[q.zero + t], hi = want[q.zero + t + 1];
      const double slack = QuantMap::kEdgeTolerance * (hi - lo) + 2.4e-7 * hi;  // 2 ulps
      EXPECT_NEAR(q.thr[t], (lo + hi) / 2, slack) << (is_signed ? "signed " : "unsigned ") << t;
    }
  }
}

// Every edge, its fp32 neighbours and every code, of both signs, against
// the binary search over the edges, on every instruction set.
TEST(QuantMap, QuantizesEveryThresholdAndItsNeighbours) {
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    std::vector<float> x;
    for (int32_t t = 0; t + 1 < q.num_mag; ++t) {
      for (float v : {q.thr[t], std::nextafter(q.thr[t], 0.0f), std::nextafter(q.thr[t], 2.0f)}) x.push_back(v);
    }
    for (float c : q.code) x.push_back(c);
    if (is_signed) {
      for (size_t i = 0, n = x.size(); i < n; ++i) x.push_back(-x[i]);
    } else {
      for (float& v : x) v = std::fabs(v);
    }
    // A 1.0 leads every block, so each block's absmax is 1 and x is quantized as it is.
    std::vector<float> blocks;
    for (size_t i = 0; i < x.size(); ++i) {
      if (blocks.size() % 256 == 0) blocks.push_back(1.0f);
      blocks.push_back(x[i]);
    }
    const int64_t n = static_cast<int64_t>(blocks.size());
    for (CpuIsa isa : supported_cpu_isas()) {
      std::vector<uint8_t> codes(n);
      std::vector<float> absmax(quant_blocks(n));
      quantize_blockwise(q, blocks.data(), n, codes.data(), absmax.data(), isa);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(codes[i], ref_quantize(q, blocks[i])) << cpu_isa_name(isa) << " " << blocks[i];
      }
    }
  }
}

TEST(QuantMap, RoundTripErrorIsWithinHalfTheSpacing) {
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    const int64_t n = 256 * 300 + 5;
    const std::vector<float> x = spread_values(n, is_signed, 12, /*unit_absmax=*/false);
    std::vector<uint8_t> codes(n);
    std::vector<float> absmax(quant_blocks(n)), back(n);
    quantize_blockwise(q, x.data(), n, codes.data(), absmax.data());
    dequantize_blockwise(q, codes.data(), absmax.data(), n, back.data());
    for (int64_t i = 0; i < n; ++i) {
      const double a = absmax[i / 256], xn = x[i] / a;
      // Half the gap between the two codes around x (normalised), times
      // absmax; below the smallest signed code (-1 is absent) the distance to it.
      const auto hi = std::upper_bound(q.code.begin(), q.code.end(), static_cast<float>(xn));
      const double bound = hi == q.code.end() ? 0 : hi == q.code.begin() ? *hi - xn : (*hi - *(hi - 1)) / 2;
      ASSERT_LE(std::fabs(back[i] - double(x[i])), bound * a * (1 + 1e-6) + 1e-6 * std::fabs(x[i]))
          << x[i] << " absmax " << a;
    }
  }
}

TEST(QuantMap, EveryIsaQuantizesAlike) {
  for (bool is_signed : {true, false}) {
    const QuantMap& q = is_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    const int64_t n = 256 * 70 + 201;
    const std::vector<float> x = spread_values(n, is_signed, 13, false);
    std::vector<uint8_t> want(n);
    std::vector<float> want_abs(quant_blocks(n)), want_back(n);
    quantize_blockwise(q, x.data(), n, want.data(), want_abs.data(), CpuIsa::kScalar);
    dequantize_blockwise(q, want.data(), want_abs.data(), n, want_back.data(), CpuIsa::kScalar);
    for (CpuIsa isa : supported_cpu_isas()) {
      std::vector<uint8_t> got(n);
      std::vector<float> got_abs(quant_blocks(n)), got_back(n);
      quantize_blockwise(q, x.data(), n, got.data(), got_abs.data(), isa);
      dequantize_blockwise(q, got.data(), got_abs.data(), n, got_back.data(), isa);
      EXPECT_EQ(got, want) << cpu_isa_name(isa);
      EXPECT_EQ(got_abs, want_abs) << cpu_isa_name(isa);
      EXPECT_EQ(0, std::memcmp(got_back.data(), want_back.data(), n * 4)) << cpu_isa_name(isa);
    }
  }
}

// ------------------------------------------------------------ 8-bit AdamW

TEST(Adam8bit, EveryIsaMatchesTheScalarLoopBitwise) {
  for (CpuIsa isa : supported_cpu_isas()) {
    for (DType gt : {DType::kF32, DType::kBF16}) {
      for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{4096 + 77}, int64_t{256 * 64 * 2 + 300}}) {
        SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " n " + std::to_string(n) + " grad " + dtype_name(gt));
        std::mt19937 rng(static_cast<uint32_t>(n));
        std::normal_distribution<float> gauss(0.0f, 1.0f);
        const int64_t off = 5;
        std::vector<float> p(n + off), g32(n + off);
        std::vector<uint16_t> g16(n + off), p16(n + off);
        for (float& x : p) x = gauss(rng) * 0.1f;
        std::vector<uint8_t> m(n + off), v(n + off);
        std::vector<float> ma(quant_blocks(n)), va(quant_blocks(n));
        Adam8bitTensor t{
            p.data() + off, m.data() + off,
            v.data() + off, ma.data(),
            va.data(),      gt == DType::kF32 ? static_cast<const void*>(g32.data() + off) : g16.data() + off};
        t.grad_type = gt;
        t.param16 = p16.data() + off;
        t.n = n;
        adam8bit_zero_states(t);
        std::vector<float> rp(p.begin() + off, p.end()), rma = ma, rva = va, rg(n);
        std::vector<uint8_t> rm(m.begin() + off, m.end()), rv(v.begin() + off, v.end());
        for (int step = 1; step <= 4; ++step) {
          for (int64_t i = 0; i < n + off; ++i) {
            g32[i] = gauss(rng) * 0.01f;
            g16[i] = float_to_bf16(g32[i]);
          }
          for (int64_t i = 0; i < n; ++i) rg[i] = grad_value(g16, g32, gt, i + off);
          const AdamStep s = make_adam_step(test_hyper(true), 1e-3f, step, 1.0f, true);
          adam8bit_update(t, s, isa);
          ref_adam8bit(s, rp, rg, rm, rv, rma, rva);
        }
        ASSERT_EQ(0, std::memcmp(p.data() + off, rp.data(), n * 4));
        ASSERT_TRUE(std::equal(rm.begin(), rm.end(), m.begin() + off));
        ASSERT_TRUE(std::equal(rv.begin(), rv.end(), v.begin() + off));
        ASSERT_EQ(ma, rma);
        ASSERT_EQ(va, rva);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p16[i + off], float_to_bf16(rp[i]));
      }
    }
  }
}

// bitsandbytes' check: the same gradients into fp32 AdamW and 8-bit AdamW
// on a 1024 x 1024 tensor, the 8-bit parameters reset to the fp32 ones after
// each step so the error measured is that of one step from quantized state.
TEST(Adam8bit, StaysCloseToFp32AdamW) {
  const int64_t n = 1024 * 1024;
  constexpr int kSteps = 50;
  std::mt19937 rng(21);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> p32(n), m32(n, 0), v32(n, 0), g(n);
  for (float& x : p32) x = gauss(rng) * 0.1f;
  std::vector<float> p8 = p32, ma(quant_blocks(n)), va(quant_blocks(n)), mdeq(n), vdeq(n);
  std::vector<uint8_t> m8(n), v8(n);
  Adam8bitTensor t8{p8.data(), m8.data(), v8.data(), ma.data(), va.data(), g.data()};
  t8.n = n;
  adam8bit_zero_states(t8);
  AdamTensor t32{p32.data(), m32.data(), v32.data(), g.data()};
  t32.n = n;
  AdamHyper h;  // PyTorch defaults: betas (0.9, 0.999), eps 1e-8
  h.weight_decay = 0.0f;
  double worst_abs = 0, sum_rel = 0, worst_m = 0, worst_v = 0;
  for (int step = 1; step <= kSteps; ++step) {
    for (float& x : g) x = gauss(rng) * 0.01f;
    const AdamStep s = make_adam_step(h, 1e-3f, step, 1.0f, false);
    adam_update(t32, s);
    adam8bit_update(t8, s);
    double abs_err = 0, rel_err = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = std::fabs(double(p8[i]) - p32[i]);
      abs_err += d;
      rel_err += d / (std::fabs(p32[i]) + 1e-9);
    }
    worst_abs = std::max(worst_abs, abs_err / n);
    sum_rel += rel_err / n;
    // States: mean error relative to the mean magnitude of the fp32 state.
    dequantize_blockwise(signed_dynamic_map(), m8.data(), ma.data(), n, mdeq.data());
    dequantize_blockwise(unsigned_dynamic_map(), v8.data(), va.data(), n, vdeq.data());
    double em = 0, am = 0, ev = 0, av = 0;
    for (int64_t i = 0; i < n; ++i) {
      em += std::fabs(double(mdeq[i]) - m32[i]);
      am += std::fabs(m32[i]);
      ev += std::fabs(double(vdeq[i]) - v32[i]);
      av += v32[i];
    }
    worst_m = std::max(worst_m, em / am);
    worst_v = std::max(worst_v, ev / av);
    p8 = p32;
  }
  std::printf(
      "over %d steps: worst mean |dp| %.3g, average mean relative %.3g; worst state error / mean |state|: "
      "m %.3g, v %.3g\n",
      kSteps, worst_abs, sum_rel / kSteps, worst_m, worst_v);
  // bitsandbytes asserts mean |dp| < 6e-5 each step (measured here: ~6e-6)
  // and mean relative < 1e-3; the relative mean is ruled by the few p near
  // zero (~7e-4 averaged, single steps up to 2.5e-3), so it is bounded
  // averaged over the steps.
  EXPECT_LT(worst_abs, 6e-5);
  EXPECT_LT(sum_rel / kSteps, 1e-3);
  EXPECT_LT(worst_m, 0.03);  // measured ~0.025
  EXPECT_LT(worst_v, 0.02);  // measured ~0.012
}

}  // namespace
}  // namespace zerod
