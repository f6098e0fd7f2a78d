// The tokenizer tests' corpus: scripts/tokenizer_corpus.py's generator,
// draw for draw, so that the fixture's ids (made from the Python's text)
// apply to these bytes; the tests check the two agree by the CRC-32C the
// fixture records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zerod::testing {

class CorpusRng {  // splitmix64
 public:
  explicit CorpusRng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    s_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = s_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t s_;
};

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

inline std::string tokenizer_corpus(uint64_t seed = 20261128, size_t min_bytes = size_t(1) << 20) {
  static const std::vector<uint32_t> kLatin = [] {
    std::vector<uint32_t> v;
    for (char c = 'a'; c <= 'z'; ++c) v.push_back(uint32_t(c));
    for (uint32_t c : {0xE9u, 0xE8u, 0xE0u, 0xFCu, 0xF6u, 0xF1u, 0xE7u, 0xDFu}) v.push_back(c);
    return v;
  }();
  struct Script {
    uint32_t first, count;
    bool spaced;
  };
  static const Script kScripts[] = {{0x0430, 32, true},  {0x03B1, 25, true},    {0x0627, 36, true},
                                    {0x0915, 37, true},  {0xAC00, 11172, true}, {0x4E00, 512, false},
                                    {0x3041, 83, false}, {0x0E01, 46, false}};
  constexpr int kNumScripts = 8;
  static const char* const kPunct[] = {",", ".",  "!",   "?",  ";",  ":",  "\u2014", "\u2026", "\u00ab", "\u00bb", "(",
                                       ")", "\"", "...", "--", "==", "->", "#",      "$",      "%",      "&",      "*",
                                       "/", "@",  "[",   "]",  "{",  "}",  "|",      "~",      "\u3002", "\u3001"};
  static const char* const kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Ve"};
  static const char* const kSpaces[] = {"  ", "\t", "\u00a0", "\u3000", "\v", "\u0085", "\u2028", "   ", " \t "};

  CorpusRng rng(seed);
  auto word = [&](int script) {
    std::string w;
    if (script < 0) {
      for (uint64_t i = 0, n = 1 + rng.below(9); i < n; ++i) append_utf8(w, kLatin[rng.below(kLatin.size())]);
      if (rng.below(8) == 0) append_utf8(w, 0x0301 + uint32_t(rng.below(8)));
      return w;
    }
    const Script& s = kScripts[script];
    for (uint64_t i = 0, n = 1 + rng.below(s.count > 1000 ? 3 : 6); i < n; ++i) {
      append_utf8(w, s.first + uint32_t(rng.below(s.count)));
      if (s.first == 0x0915 && rng.below(2) == 0) append_utf8(w, 0x093E + uint32_t(rng.below(15)));
    }
    return w;
  };
  std::vector<std::vector<std::string>> lex(kNumScripts + 1);  // [script + 1]
  for (int s = -1; s < kNumScripts; ++s)
    for (int i = 0; i < 300; ++i) lex[s + 1].push_back(word(s));

  std::string out;
  while (out.size() < min_bytes) {
    const int script = rng.below(3) == 0 ? -1 : int(rng.below(kNumScripts + 1)) - 1;
    const bool spaced = script < 0 || kScripts[script].spaced;
    for (uint64_t i = 0, n = 3 + rng.below(13); i < n; ++i) {
      const uint64_t r = rng.below(100);
      const auto& words = lex[script + 1];
      const uint64_t a = rng.below(words.size());
      std::string w = words[(a * rng.below(words.size())) / words.size()];
      if (script < 0 && rng.below(5) == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = char(w[0] - 32);
      if (r < 8) {
        uint64_t limit = 10;
        for (uint64_t k = rng.below(8); k > 0; --k) limit *= 10;
        w = std::to_string(rng.below(limit));
      } else if (r < 12) {
        w = kPunct[rng.below(std::size(kPunct))];
      } else if (r < 14) {
        w.clear();
        append_utf8(w, 0x1F600 + uint32_t(rng.below(80)));
        if (rng.below(3) == 0) {
          append_utf8(w, 0x200D);
          append_utf8(w, 0x1F300 + uint32_t(rng.below(256)));
        }
      } else if (r < 18 && script < 0) {
        w += kContractions[rng.below(std::size(kContractions))];
      }
      std::string sep;
      if (spaced) sep = rng.below(12) == 0 ? kSpaces[rng.below(std::size(kSpaces))] : " ";
      if (i > 0) out += sep;
      out += w;
    }
    const uint64_t end = rng.below(20);
    out += kPunct[rng.below(3) + 1];
    out += end < 12 ? "\n" : end < 14 ? "\r\n" : end < 17 ? "\n\n" : end < 19 ? "  \n" : " ";
  }
  return out;
}

}  // namespace zerod::testing
