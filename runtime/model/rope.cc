#include "runtime/model/rope.h"

#include <cmath>

namespace zerod {

std::vector<float> rope_inv_freq(const GptConfig& c) {
  const int hd = c.head_dim();
  std::vector<float> f(hd / 2);
  for (int i = 0; i < hd / 2; ++i) {
    // transformers: 1.0 / (base ** (arange(0, hd, 2).float() / hd)), in fp32.
    f[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * i) / static_cast<float>(hd));
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.factor == 0) return f;
  // Llama 3: long wavelengths slowed by `factor`, short ones kept, those
  // between blended by where the wavelength falls.
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (float& x : f) {
    const double wavelen = 2 * M_PI / x;
    if (wavelen > low_wavelen) {
      x = static_cast<float>(x / s.factor);
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      x = static_cast<float>((1 - smooth) * x / s.factor + smooth * x);
    }
  }
  return f;
}

std::vector<float> rope_table(const GptConfig& c, int positions) {
  const std::vector<float> f = rope_inv_freq(c);
  const int half = static_cast<int>(f.size());
  std::vector<float> t(size_t(positions) * half * 2);
  for (int p = 0; p < positions; ++p) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * f[i];
      t[(size_t(p) * half + i) * 2] = static_cast<float>(std::cos(double(angle)));
      t[(size_t(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(double(angle)));
    }
  }
  return t;
}

}  // namespace zerod
