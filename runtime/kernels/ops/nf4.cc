#include "runtime/kernels/ops/nf4.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zerod {
namespace {

// The quantile of N(0, 1) at p, to double precision: bisection on the
// complementary error function, which <cmath> has (its inverse it has not).
double normal_quantile(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// n evenly spaced fp32 values from a to b as torch.linspace makes them: the
// first half counted up from a and the rest down from b.
std::vector<float> spaced(float a, float b, int n) {
  const float step = (b - a) / static_cast<float>(n - 1);
  std::vector<float> p(n);
  for (int i = 0; i < n; ++i)
    p[i] = i < n / 2 ? a + static_cast<float>(i) * step : b - static_cast<float>(n - 1 - i) * step;
  return p;
}

// QLoRA's construction: 8 positive quantiles at probabilities from delta to
// 1/2 (1/2 itself left out), 7 negative ones likewise, and 0, scaled by the
// largest; delta = (1 - 1/(2*15) + 1 - 1/(2*16)) / 2 puts the extreme values
// midway between what 15 and 16 evenly spaced quantiles would give.
// Probabilities and the scaling in fp32, the quantiles in double: built so,
// the values are the published table's bit for bit (tests/test_nf4.cc).
std::array<float, 16> build_values() {
  const float delta = 0.9677083f;
  std::array<float, 16> v{};
  int k = 0;
  const std::vector<float> pos = spaced(delta, 0.5f, 9), neg = spaced(delta, 0.5f, 8);
  for (int i = 0; i < 8; ++i) v[k++] = static_cast<float>(normal_quantile(pos[i]));
  for (int i = 0; i < 7; ++i) v[k++] = -static_cast<float>(normal_quantile(neg[i]));
  v[k] = 0.0f;
  std::sort(v.begin(), v.end());
  const float top = v[15];
  for (float& x : v) x /= top;
  return v;
}

// Edges between neighbouring values: a normalized weight takes the code of
// how many edges lie below it.
std::array<float, 15> build_edges() {
  const std::array<float, 16>& v = nf4_values();
  std::array<float, 15> e{};
  for (int k = 0; k < 15; ++k) e[k] = (v[k] + v[k + 1]) * 0.5f;
  return e;
}

// bitsandbytes' signed dynamic map (create_dynamic_map) as torch computes
// it in fp32: for each decade 10^(k - 6), k = 0..6, the midpoints of 2^k + 1
// evenly spaced values from 0.1 to 1 times the decade's scale, and their
// negatives; then 0 and 1, ascending.
Nf4AbsmaxMap build_absmax_map() {
  std::vector<float> v = {0.0f, 1.0f};
  for (int k = 0; k <= 6; ++k) {
    const std::vector<float> edges = spaced(0.1f, 1.0f, (1 << k) + 1);
    const float scale = static_cast<float>(std::pow(10.0, k - 6));
    for (size_t j = 0; j + 1 < edges.size(); ++j) {
      const float mid = (edges[j] + edges[j + 1]) / 2.0f;
      v.push_back(scale * mid);
      v.push_back(-scale * mid);
    }
  }
  std::sort(v.begin(), v.end());
  Nf4AbsmaxMap m;
  std::copy(v.begin(), v.end(), m.v);
  return m;
}

// The code of the map value nearest y (a tie to the lower).
uint8_t nearest_absmax_code(float y) {
  static const std::array<float, 255> edges = [] {
    std::array<float, 255> e{};
    const Nf4AbsmaxMap& m = nf4_absmax_map();
    for (int k = 0; k < 255; ++k) e[k] = (m.v[k] + m.v[k + 1]) * 0.5f;
    return e;
  }();
  return static_cast<uint8_t>(std::lower_bound(edges.begin(), edges.end(), y) - edges.begin());
}

uint8_t nearest_code(float y) {
  static const std::array<float, 15> edges = build_edges();
  return static_cast<uint8_t>(std::lower_bound(edges.begin(), edges.end(), y) - edges.begin());
}

// Block `block`'s absmax of the n weights x(i).
template <class At>
float block_absmax(const At& x, int64_t n, int64_t block) {
  const int64_t first = block * kNf4Block, last = std::min(n, first + kNf4Block);
  float a = 0;
  for (int64_t i = first; i < last; ++i) a = std::max(a, std::fabs(x(i)));
  return a;
}

// nf4_quantize of the weights x(i).
template <class At>
void quantize(const At& x, const Nf4Tensor& t) {
  const Nf4Sizes z = nf4_sizes(t.n);
  double sum = 0;
  for (int64_t b = 0; b < z.blocks; ++b) sum += block_absmax(x, t.n, b);
  *t.offset = z.blocks ? static_cast<float>(sum / static_cast<double>(z.blocks)) : 0.0f;
  std::copy_n(nf4_absmax_map().v, kNf4MapValues, t.map);
  // A group of blocks at a time: their absmax values recomputed into scratch
  // of fixed size, coded with the exact ones and double-quantized.
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < z.groups; ++g) {
    float centred[kQuantBlock];
    const int64_t b0 = g * kQuantBlock, nb = std::min(kQuantBlock, z.blocks - b0);
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t b = b0 + j;
      const float a = block_absmax(x, t.n, b);
      centred[j] = a - *t.offset;
      const int64_t first = b * kNf4Block, last = std::min(t.n, first + kNf4Block);
      for (int64_t i = first; i < last; i += 2) {
        const uint8_t hi = a > 0 ? nearest_code(x(i) / a) : kNf4Zero;
        const uint8_t lo = i + 1 < last ? (a > 0 ? nearest_code(x(i + 1) / a) : kNf4Zero) : 0;
        t.codes[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
      }
    }
    // The group's centred absmax values over their largest, each to its
    // nearest map value, as bitsandbytes' quantize_blockwise.
    float top = 0;
    for (int64_t j = 0; j < nb; ++j) top = std::max(top, std::fabs(centred[j]));
    t.group_absmax[g] = top;
    const float inverse = top > 0 ? 1.0f / top : 0.0f;
    for (int64_t j = 0; j < nb; ++j) t.absmax_codes[b0 + j] = nearest_absmax_code(centred[j] * inverse);
  }
}

}  // namespace

const std::array<float, 16>& nf4_values() {
  static const std::array<float, 16> v = build_values();
  return v;
}

const Nf4AbsmaxMap& nf4_absmax_map() {
  static const Nf4AbsmaxMap m = build_absmax_map();
  return m;
}

Nf4Sizes nf4_sizes(int64_t n) {
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  return {(n + 1) / 2, blocks, quant_blocks(blocks)};
}

void nf4_quantize(const float* x, const Nf4Tensor& t) {
  quantize([x](int64_t i) { return x[i]; }, t);
}

void nf4_quantize_transposed(const float* w, int64_t cols, int64_t ld, const Nf4Tensor& t) {
  quantize([=](int64_t i) { return w[(i % cols) * ld + i / cols]; }, t);
}

float nf4_block_absmax(const Nf4Tensor& t, int64_t block) {
  return t.map[t.absmax_codes[block]] * t.group_absmax[block / kQuantBlock] + *t.offset;
}

void nf4_dequantize(const Nf4Tensor& t, float* x) {
  const std::array<float, 16>& v = nf4_values();
  const int64_t blocks = nf4_sizes(t.n).blocks;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    // The block's 16 products once; each weight is then a lookup (the same
    // bits as multiplying it).
    const float a = nf4_block_absmax(t, b);
    float scaled[16];
    for (int k = 0; k < 16; ++k) scaled[k] = v[k] * a;
    const int64_t first = b * kNf4Block, last = std::min(t.n, first + kNf4Block);
    const uint8_t* codes = t.codes + first / 2;
    float* out = x + first;
    int64_t i = 0;
    for (; first + i + 1 < last; i += 2) {
      out[i] = scaled[codes[i / 2] >> 4];
      out[i + 1] = scaled[codes[i / 2] & 15];
    }
    if (first + i < last) out[i] = scaled[codes[i / 2] >> 4];
  }
}

void nf4_dequantize_transposed(const Nf4Tensor& t, int64_t rows, int64_t cols, int64_t ld, float* out) {
  const std::array<float, 16>& v = nf4_values();
  // Tiles of kTile rows, column by column, so that each column's stores are
  // neighbours; a row's absmax changes where its next block starts.
  constexpr int64_t kTile = 16;
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t tile = std::min(kTile, rows - r0);
    float absmax[kTile];
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t j = 0; j < tile; ++j) {
        const int64_t i = (r0 + j) * cols + c;
        if (c == 0 || i % kNf4Block == 0) absmax[j] = nf4_block_absmax(t, i / kNf4Block);
        const uint8_t byte = t.codes[i / 2];
        out[c * ld + r0 + j] = v[i % 2 ? byte & 15 : byte >> 4] * absmax[j];
      }
    }
  }
}

Nf4HostTensor::Nf4HostTensor(int64_t n)
    : codes(nf4_sizes(n).code_bytes),
      absmax_codes(nf4_sizes(n).blocks),
      floats(nf4_sizes(n).groups + 1 + kNf4MapValues) {
  const int64_t groups = nf4_sizes(n).groups;
  t = {codes.data(), absmax_codes.data(), floats.data(), floats.data() + groups, floats.data() + groups + 1, n};
}

void nf4_round_trip(const float* x, int64_t n, float* out) {
  const Nf4HostTensor h(n);
  nf4_quantize(x, h.t);
  nf4_dequantize(h.t, out);
}

}  // namespace zerod
