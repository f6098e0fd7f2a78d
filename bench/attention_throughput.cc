// Causal attention alone on the GPU, forward and backward, through the
// CUDA table as training calls it (cuDNN's fused attention where the build
// and cuDNN take the shape, the table's own kernels else; a refusal is said
// on stderr), bf16, timed by the stream's events: the best of ten after a
// warm-up. bench/gpu/torch_sdpa.py times PyTorch's scaled_dot_product_attention
// at the same shapes; gpu_check.sh's bench section runs both in one call.
//
//   build/bench/attention_throughput [B T C NH KV ...]   (default gpt2 at B 16
//   and T 1024, gpt2-xl at B 8, gpt2 at B 4 and T 4096, Llama-3.2-1B's 32
//   query heads over 8 at B 8 and T 2048, B 4 and T 4096, B 1 and T 8192)
//
// TFLOP/s counts a causal pass's products as half of the full ones:
// forward 2 B NH T^2 hs, backward 2.5 times that.
//
// Each shape again packed: documents of log-normal lengths (median 250
// tokens, sigma 0.6, as instruction sets run; a fixed seed) laid into its
// sequences, each query kept to its document; "packed / whole" is the
// packed pass's time over the unpacked one's at the same tokens (goal:
// within 1.10); its TFLOP/s counts the unpacked pass's products, a rate of
// tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/kernels/kernels.h"

namespace zerod {
namespace {

struct Shape {
  int B, T, C, NH, KV;
};

// Each token's position in its document: documents of log-normal lengths
// in turn, cut at a sequence's end.
std::vector<int32_t> packed_positions(int B, int T) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> length(std::log(250.0), 0.6);
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T;) {
      const int n = std::clamp(static_cast<int>(length(rng)), 1, T - t);
      for (int i = 0; i < n; ++i) pos.push_back(i);
      t += n;
    }
  }
  return pos;
}

absl::Status run(const std::vector<Shape>& shapes) {
  if (cuda_device_count() == 0) {
    return absl::FailedPreconditionError("attention_throughput needs a CUDA device; none here");
  }
  ZEROD_ASSIGN_OR_RETURN(auto d, open_device("cuda"));
  ZEROD_ASSIGN_OR_RETURN(auto k, kernels_for(*d, DType::kBF16));
  Stream& s = d->compute_stream();
  std::printf("%s: causal attention, bf16, best of 10; packed: documents of a median 250 tokens\n",
              d->description().c_str());
  std::printf("%4s %6s %6s %4s %4s %4s %-6s %12s %12s %12s %12s %14s\n", "B", "T", "C", "NH", "KV", "hs", "",
              "forward ms", "TFLOP/s", "backward ms", "TFLOP/s", "packed / whole");
  for (const Shape& sh : shapes) {
    const int64_t N = int64_t(sh.B) * sh.T, W = sh.C + 2 * int64_t(sh.KV) * (sh.C / sh.NH);
    const auto bytes = [](int64_t n) { return static_cast<uint64_t>(n) * 2; };
    ZEROD_ASSIGN_OR_RETURN(Buffer qkv, d->allocate(bytes(N * W), Category::kActivations));
    ZEROD_ASSIGN_OR_RETURN(Buffer out, d->allocate(bytes(N * sh.C), Category::kActivations));
    ZEROD_ASSIGN_OR_RETURN(Buffer dout, d->allocate(bytes(N * sh.C), Category::kActivations));
    ZEROD_ASSIGN_OR_RETURN(Buffer dqkv, d->allocate(bytes(N * W), Category::kWorkspace));
    ZEROD_ASSIGN_OR_RETURN(Buffer lse, d->allocate(uint64_t(N) * sh.NH * 4, Category::kActivations));
    ZEROD_ASSIGN_OR_RETURN(Buffer scratch,
                           d->allocate(k->attention_scratch_floats(sh.B, sh.T, sh.C, sh.NH) * 4, Category::kWorkspace));
    ZEROD_ASSIGN_OR_RETURN(Buffer positions, d->allocate(uint64_t(N) * 4, Category::kActivations));
    const std::vector<int32_t> pos = packed_positions(sh.B, sh.T);
    ZEROD_RETURN_IF_ERROR(
        d->write_from_host(s, positions.data(), positions.bytes(), [&](void* p, uint64_t at, uint64_t n) {
          std::memcpy(p, reinterpret_cast<const char*>(pos.data()) + at, n);
          return absl::OkStatus();
        }));
    // Every element 0x3c3c (bf16, about 0.0115): scores near zero, the rows near uniform.
    d->memset(s, qkv.data(), 0x3c, qkv.bytes());
    d->memset(s, dout.data(), 0x3c, dout.bytes());
    double whole = 0;
    for (const int32_t* p : {static_cast<const int32_t*>(nullptr), positions.ptr<const int32_t>()}) {
      const auto forward = [&] {
        k->attention_forward(s, out.data(), lse.ptr<float>(), scratch.ptr<float>(), qkv.data(), sh.B, sh.T, sh.C, sh.NH,
                             sh.KV, p);
      };
      const auto backward = [&] {
        k->attention_backward(s, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.ptr<float>(),
                              scratch.ptr<float>(), sh.B, sh.T, sh.C, sh.NH, sh.KV, DType::kF32, p);
      };
      ZEROD_ASSIGN_OR_RETURN(const double fwd, bench::best_device_ms(*d, forward, 10));
      ZEROD_ASSIGN_OR_RETURN(const double bwd, bench::best_device_ms(*d, backward, 10));
      const double flops = 2.0 * sh.B * sh.NH * double(sh.T) * sh.T * (sh.C / sh.NH);
      std::printf("%4d %6d %6d %4d %4d %4d %-6s %12.3f %12.1f %12.3f %12.1f", sh.B, sh.T, sh.C, sh.NH, sh.KV,
                  sh.C / sh.NH, p ? "packed" : "whole", fwd, flops / fwd / 1e9, bwd, 2.5 * flops / bwd / 1e9);
      if (p) {
        std::printf(" %14.3f\n", (fwd + bwd) / whole);
      } else {
        whole = fwd + bwd;
        std::printf("\n");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace zerod

int main(int argc, char** argv) {
  std::vector<zerod::Shape> shapes;
  if (argc > 1 && (argc - 1) % 5 != 0) {
    std::fprintf(stderr, "usage: attention_throughput [B T C NH KV ...]\n");
    return 2;
  }
  for (int i = 1; i + 4 < argc; i += 5) {
    int v[5];
    for (int j = 0; j < 5; ++j) v[j] = std::atoi(argv[i + j]);
    if (std::any_of(v, v + 5, [](int x) { return x < 1; }) || v[2] % v[3] != 0 || v[3] % v[4] != 0) {
      std::fprintf(stderr,
                   "attention_throughput: B, T, C, NH and KV must be positive, NH must divide C and KV divide NH\n");
      return 2;
    }
    shapes.push_back({v[0], v[1], v[2], v[3], v[4]});
  }
  if (shapes.empty()) {
    shapes = {{16, 1024, 768, 12, 12}, {8, 1024, 1600, 25, 25}, {4, 4096, 768, 12, 12},
              {8, 2048, 2048, 32, 8},  {4, 4096, 2048, 32, 8},  {1, 8192, 2048, 32, 8}};
  }
  const absl::Status st = zerod::run(shapes);
  if (!st.ok()) {
    std::fprintf(stderr, "attention_throughput: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
