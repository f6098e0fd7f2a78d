// What the load benchmarks (coordinator_load, http_load) share: a state
// directory with the token's file, the demo job they load zerod beside, and
// what they keep of each client (its latencies by kind of call, its errors
// and the first of them).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/zerod.pb.h"

namespace zerod::bench {

// A fresh directory under the temporary one holding `token` in its file,
// removed at the end; mpirun may run as root.
class BenchDir {
 public:
  BenchDir(const std::string& prefix, const std::string& token)
      : path_((std::filesystem::temp_directory_path() / absl::StrCat(prefix, getpid())).string()) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    std::filesystem::create_directories(path_);
    std::ofstream(token_file()) << token;
  }
  ~BenchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string token_file() const { return path_ + "/token"; }

 private:
  std::string path_;
};

// examples/demo.json as 2 ranks (ZEROD_SOURCE_DIR from the build).
inline v1::SubmitJobRequest demo_request() {
  v1::SubmitJobRequest req;
  std::ifstream demo(ZEROD_SOURCE_DIR "/examples/demo.json");
  req.set_config_json(std::string(std::istreambuf_iterator<char>(demo), {}));
  req.set_world_size(2);
  return req;
}

struct Samples {
  std::vector<double> ms[3];  // by kind of call
  int64_t errors = 0;
  std::string first_error;
};

// The p-th quantile (0..1) of `v`, nearest rank; 0 when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// Every client's samples as one.
inline Samples merge(const std::vector<Samples>& all) {
  Samples m;
  for (const Samples& s : all) {
    for (int k = 0; k < 3; ++k) m.ms[k].insert(m.ms[k].end(), s.ms[k].begin(), s.ms[k].end());
    m.errors += s.errors;
    if (m.first_error.empty()) m.first_error = s.first_error;
  }
  return m;
}

}  // namespace zerod::bench
