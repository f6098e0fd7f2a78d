// A weight source (and, with RecordingSink, a gradient sink) that passes
// to others, records every call, and fails the one named: what a model
// asks of them, in order, and that it stops at the first failure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/model/weights.h"

namespace zerod::testing {

struct Recording : WeightSource {
  WeightSource& w;
  std::string fail;  // e.g. "layer 1", "grad layer_done 1"
  std::vector<std::string> calls;
  Recording(WeightSource& ws, std::string f) : w(ws), fail(std::move(f)) {}

  absl::Status seen(const std::string& call) {
    calls.push_back(call);
    return call == fail ? absl::DataLossError("injected: " + call) : absl::OkStatus();
  }
  DType dtype() const override { return w.dtype(); }
  absl::StatusOr<GlobalWeights> globals() override {
    ZEROD_RETURN_IF_ERROR(seen("globals"));
    return w.globals();
  }
  absl::StatusOr<LayerWeights> layer(int l) override {
    ZEROD_RETURN_IF_ERROR(seen("layer " + std::to_string(l)));
    return w.layer(l);
  }
  absl::Status prefetch(int next, int then) override {
    return seen("prefetch " + std::to_string(next) + " " + std::to_string(then));
  }
  absl::Status end_pass() override { return seen("end_pass"); }
};

struct RecordingSink : GradSink {
  Recording& r;
  GradSink& g;
  RecordingSink(Recording& rec, GradSink& gs) : r(rec), g(gs) {}
  absl::StatusOr<GlobalGrads> globals() override {
    ZEROD_RETURN_IF_ERROR(r.seen("grad globals"));
    return g.globals();
  }
  absl::StatusOr<LayerGrads> layer(int l) override {
    ZEROD_RETURN_IF_ERROR(r.seen("grad layer " + std::to_string(l)));
    return g.layer(l);
  }
  absl::Status layer_done(int l) override { return r.seen("grad layer_done " + std::to_string(l)); }
  absl::Status end_backward() override { return r.seen("grad end_backward"); }
};

}  // namespace zerod::testing
