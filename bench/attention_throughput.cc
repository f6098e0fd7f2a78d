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
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/kernels/kernels.h"

namespace zerod {
namespace {

struct Shape {
  int B, T, C, NH, KV;
};

absl::Status run(const std::vector<Shape>& shapes) {
  if (cuda_device_count() == 0) {
    return absl::FailedPreconditionError("attention_throughput needs a CUDA device; none here");
  }
  ZEROD_ASSIGN_OR_RETURN(auto d, open_device("cuda"));
  ZEROD_ASSIGN_OR_RETURN(auto k, kernels_for(*d, DType::kBF16));
  Stream& s = d->compute_stream();
  std::printf("%s: causal attention, bf16, best of 10\n", d->description().c_str());
  std::printf("%4s %6s %6s %4s %4s %4s %12s %12s %12s %12s\n", "B", "T", "C", "NH", "KV", "hs", "forward ms", "TFLOP/s",
              "backward ms", "TFLOP/s");
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
    // Every element 0x3c3c (bf16, about 0.0115): scores near zero, the rows near uniform.
    d->memset(s, qkv.data(), 0x3c, qkv.bytes());
    d->memset(s, dout.data(), 0x3c, dout.bytes());
    const auto forward = [&] {
      k->attention_forward(s, out.data(), lse.ptr<float>(), scratch.ptr<float>(), qkv.data(), sh.B, sh.T, sh.C, sh.NH,
                           sh.KV);
    };
    const auto backward = [&] {
      k->attention_backward(s, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.ptr<float>(), scratch.ptr<float>(),
                            sh.B, sh.T, sh.C, sh.NH, sh.KV, DType::kF32);
    };
    ZEROD_ASSIGN_OR_RETURN(const double fwd, bench::best_device_ms(*d, forward, 10));
    ZEROD_ASSIGN_OR_RETURN(const double bwd, bench::best_device_ms(*d, backward, 10));
    const double flops = 2.0 * sh.B * sh.NH * double(sh.T) * sh.T * (sh.C / sh.NH);
    std::printf("%4d %6d %6d %4d %4d %4d %12.3f %12.1f %12.3f %12.1f\n", sh.B, sh.T, sh.C, sh.NH, sh.KV, sh.C / sh.NH,
                fwd, flops / fwd / 1e9, bwd, 2.5 * flops / bwd / 1e9);
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
