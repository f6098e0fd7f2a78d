// Prometheus' text exposition format (0.0.4) read as its description has
// it, independently of zerod's writer: HELP and TYPE lines, samples with
// escaped label values, the families' rules (a TYPE before its samples,
// once; a family's lines together; no series twice; a histogram's buckets
// cumulative, up to +Inf, which equals its _count).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace zerod::testing {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromPage {
  std::map<std::string, std::string> type;  // by family
  std::vector<PromSample> samples;
  std::string error;  // the first breach of the format; "" when none

  // The one sample of `name` whose labels include `labels`; NaN when none
  // (or more than one) matches.
  double value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    double found = NAN;
    int n = 0;
    for (const PromSample& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : labels) all = all && s.labels.count(k) && s.labels.at(k) == v;
      if (all) found = s.value, ++n;
    }
    return n == 1 ? found : NAN;
  }
  int count(const std::string& name) const {
    int n = 0;
    for (const PromSample& s : samples) n += s.name == name;
    return n;
  }
};

inline PromPage parse_prometheus(const std::string& text) {
  PromPage page;
  auto fail = [&](const std::string& why, const std::string& line) {
    if (page.error.empty()) page.error = why + ": " + line;
  };
  auto is_name = [](const std::string& s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == ':')) return false;
    for (char c : s) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) return false;
    }
    return true;
  };
  std::set<std::string> closed;  // families whose lines have ended
  std::string current;           // the family of the lines being read
  std::set<std::string> series;
  if (!text.empty() && text.back() != '\n') fail("the page does not end with a newline", "");
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    std::string family;
    if (line[0] == '#') {
      const size_t sp1 = line.find(' ', 2), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
      const std::string kind = line.substr(2, sp1 == std::string::npos ? std::string::npos : sp1 - 2);
      if (kind != "HELP" && kind != "TYPE") continue;  // a comment
      if (line.rfind("# ", 0) != 0 || sp1 == std::string::npos) {
        fail("a malformed " + kind + " line", line);
        continue;
      }
      family = line.substr(sp1 + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp1 - 1);
      if (!is_name(family)) fail("a bad family name", line);
      if (kind == "TYPE") {
        const std::string t = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
        if (t != "counter" && t != "gauge" && t != "histogram" && t != "summary" && t != "untyped") {
          fail("an unknown type", line);
        }
        if (page.type.count(family)) fail("a second TYPE", line);
        page.type[family] = t;
      }
    } else {
      PromSample s;
      size_t i = 0;
      while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
      s.name = line.substr(0, i);
      if (!is_name(s.name)) fail("a bad metric name", line);
      if (i < line.size() && line[i] == '{') {
        ++i;
        while (i < line.size() && line[i] != '}') {
          const size_t eq = line.find('=', i);
          if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
            fail("a bad label", line);
            break;
          }
          const std::string key = line.substr(i, eq - i);
          if (!is_name(key) || key.find(':') != std::string::npos) fail("a bad label name", line);
          std::string v;
          size_t j = eq + 2;
          for (; j < line.size() && line[j] != '"'; ++j) {
            if (line[j] == '\\' && j + 1 < line.size()) {
              const char e = line[++j];
              if (e == 'n') {
                v += '\n';
              } else if (e == '\\' || e == '"') {
                v += e;
              } else {
                fail("a bad escape", line);
              }
            } else {
              v += line[j];
            }
          }
          if (j >= line.size()) {
            fail("an unterminated label value", line);
            break;
          }
          if (s.labels.count(key)) fail("a label twice", line);
          s.labels[key] = v;
          i = j + 1;
          if (i < line.size() && line[i] == ',') ++i;
        }
        if (i >= line.size() || line[i] != '}') fail("unterminated labels", line);
        ++i;
      }
      if (i >= line.size() || line[i] != ' ') {
        fail("no value", line);
        continue;
      }
      std::string value = line.substr(i + 1);
      if (const size_t sp = value.find(' '); sp != std::string::npos) value = value.substr(0, sp);  // a timestamp
      if (value == "+Inf") {
        s.value = INFINITY;
      } else if (value == "-Inf") {
        s.value = -INFINITY;
      } else if (value == "NaN") {
        s.value = NAN;
      } else {
        char* stop = nullptr;
        s.value = std::strtod(value.c_str(), &stop);
        if (value.empty() || *stop) fail("a bad value", line);
      }
      family = s.name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string sfx = suffix;
        const std::string base =
            s.name.size() > sfx.size() && s.name.ends_with(sfx) ? s.name.substr(0, s.name.size() - sfx.size()) : "";
        if (!base.empty() && page.type.count(base) && page.type[base] == "histogram") family = base;
      }
      if (!page.type.count(family)) fail("a sample before its TYPE", line);
      std::string key = s.name;
      for (const auto& [k, v] : s.labels) key += "\x01" + k + "=" + v;
      if (!series.insert(key).second) fail("a series twice", line);
      page.samples.push_back(s);
    }
    if (family != current) {
      if (closed.count(family)) fail("a family's lines apart", line);
      if (!current.empty()) closed.insert(current);
      current = family;
    }
  }
  // Histograms: cumulative buckets ending at +Inf, which is the count.
  for (const auto& [family, t] : page.type) {
    if (t != "histogram") continue;
    std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // by the other labels
    for (const PromSample& s : page.samples) {
      if (s.name != family + "_bucket") continue;
      std::map<std::string, std::string> rest = s.labels;
      if (!rest.count("le")) {
        fail("a bucket without le", s.name);
        continue;
      }
      const double le = rest["le"] == "+Inf" ? INFINITY : std::strtod(rest["le"].c_str(), nullptr);
      rest.erase("le");
      std::string key;
      for (const auto& [k, v] : rest) key += k + "=" + v + ",";
      buckets[key].push_back({le, s.value});
    }
    for (auto& [key, b] : buckets) {
      for (size_t i = 1; i < b.size(); ++i) {
        if (!(b[i].first > b[i - 1].first) || b[i].second < b[i - 1].second) fail("buckets out of order", key);
      }
      if (b.empty() || !std::isinf(b.back().first)) fail("no +Inf bucket", key);
    }
  }
  return page;
}

}  // namespace zerod::testing
