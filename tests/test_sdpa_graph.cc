// The attention graphs handed to cuDNN (runtime/kernels/cuda/sdpa_graph.h),
// checked without a GPU: an interpreter runs each operation as cuDNN's
// backend documents it (strided views, broadcasting, a product's operand
// of fewer heads shared by consecutive ones, reductions over the last
// dimension or over groups of heads, reshapes as other views of the same
// bytes) on the model's
// buffers, against the CPU attention kernel; every handed-over view covers
// its buffer exactly; and, where the build has cuDNN, cuDNN itself takes
// every tensor, operation and graph (all it checks before a GPU is needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/kernels/cuda/sdpa_graph.h"
#include "runtime/kernels/kernels.h"
#include "tests/float_compare.h"
#include "tests/packed_positions.h"
#ifdef ZEROD_WITH_CUDNN
#include "runtime/kernels/cuda/cudnn_sdpa.h"
#endif

namespace zerod {
namespace {

using cuda::SdpaDims;
using cuda::SdpaGraph;
using cuda::SdpaMode;
using cuda::SdpaOp;
using cuda::SdpaOpKind;
using cuda::SdpaShape;
using cuda::SdpaTensor;
using cuda::SdpaType;

int64_t numel(const SdpaDims& d) { return d[0] * d[1] * d[2] * d[3]; }

// The index of element i (row-major over dims) in each dimension.
SdpaDims index_of(int64_t i, const SdpaDims& d) {
  SdpaDims x;
  for (int k = 3; k >= 0; --k) {
    x[k] = i % d[k];
    i /= d[k];
  }
  return x;
}

int64_t offset(const SdpaDims& x, const SdpaDims& strides) {
  return x[0] * strides[0] + x[1] * strides[1] + x[2] * strides[2] + x[3] * strides[3];
}

// Runs a graph: each tensor's values row-major over its dims (handed-over
// ones read from and written to their buffers through their strides).
// `round`: virtual tensors of a 16-bit type hold that type's values, as on
// the GPU; else everything stays fp32, the graph's exact arithmetic.
class Interpreter {
 public:
  Interpreter(const SdpaGraph& g, bool round) : g_(g), round_(round) {
    for (const SdpaTensor& t : g.tensors) tensors_[t.uid] = &t;
  }

  void bind(int64_t uid, float* buffer) { buffers_[uid] = buffer; }
  void scalar(int64_t uid, float v) { values_[uid] = {v}; }

  void run() {
    for (const SdpaOp& op : g_.ops) {
      std::vector<float> out;
      const SdpaTensor& y = tensor(op.out);
      switch (op.kind) {
        case SdpaOpKind::kMatmul:
          out = matmul(op, y);
          break;
        case SdpaOpKind::kPointwise:
          out = pointwise(op, y);
          break;
        case SdpaOpKind::kReduction:
          out = reduce(op, y);
          break;
        case SdpaOpKind::kReshape:
          out = reshape(op, y);
          break;
      }
      if (round_ && y.is_virtual && (y.type == SdpaType::kBF16 || y.type == SdpaType::kF16)) {
        round_to(y.type == SdpaType::kBF16 ? DType::kBF16 : DType::kF16, out.data(), out.size());
      }
      ASSERT_FALSE(values_.count(op.out)) << "tensor " << op.out << " written twice";
      if (!y.is_virtual) {
        ASSERT_TRUE(buffers_.count(op.out)) << "no buffer for tensor " << op.out;
        for (int64_t i = 0; i < numel(y.dims); ++i) buffers_[op.out][offset(index_of(i, y.dims), y.strides)] = out[i];
      }
      values_[op.out] = std::move(out);
    }
  }

 private:
  // A tensor's values: computed, a scalar, or read from its buffer.
  const std::vector<float>& at(int64_t uid) {
    if (auto it = values_.find(uid); it != values_.end()) return it->second;
    const SdpaTensor& t = tensor(uid);
    EXPECT_FALSE(t.is_virtual) << "tensor " << uid << " read before it is written";
    EXPECT_TRUE(buffers_.count(uid)) << "no buffer for tensor " << uid;
    std::vector<float>& v = values_[uid];
    v.resize(numel(t.dims));
    for (int64_t i = 0; i < numel(t.dims); ++i) v[i] = buffers_[uid][offset(index_of(i, t.dims), t.strides)];
    return v;
  }
  // Element x of a tensor of dims `of` from tensor uid, broadcasting its dims of 1.
  float broadcast(int64_t uid, const SdpaDims& x, const SdpaDims& of) {
    const SdpaTensor& t = tensor(uid);
    const std::vector<float>& v = at(uid);
    int64_t i = 0;
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(t.dims[k] == 1 || t.dims[k] == of[k]) << "tensor " << uid << " dim " << k;
      i = i * t.dims[k] + (t.dims[k] == 1 ? 0 : x[k]);
    }
    return v[i];
  }

  // Over [B, H] batches; an operand of H / g heads serves each run of g
  // consecutive heads (grouped-query attention).
  std::vector<float> matmul(const SdpaOp& op, const SdpaTensor& y) {
    const SdpaTensor &a = tensor(op.in[0]), &b = tensor(op.in[1]);
    EXPECT_EQ(a.dims[3], b.dims[2]) << "inner dimensions of the product into " << op.out;
    EXPECT_EQ(y.dims[2], a.dims[2]) << op.out;
    EXPECT_EQ(y.dims[3], b.dims[3]) << op.out;
    const int64_t H = y.dims[1];
    for (const SdpaTensor* x : {&a, &b}) {
      EXPECT_EQ(x->dims[0], y.dims[0]) << op.out;
      EXPECT_TRUE(x->dims[1] > 0 && H % x->dims[1] == 0) << "heads of the product into " << op.out;
    }
    const std::vector<float>&va = at(op.in[0]), &vb = at(op.in[1]);
    const int64_t M = y.dims[2], N = y.dims[3], K = a.dims[3];
    const auto batch = [&](const SdpaTensor& x, int64_t bh) { return bh / H * x.dims[1] + bh % H / (H / x.dims[1]); };
    std::vector<float> out(numel(y.dims));
    for (int64_t bh = 0; bh < y.dims[0] * H; ++bh) {
      const int64_t ba = batch(a, bh), bb = batch(b, bh);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0.0;
          for (int64_t k = 0; k < K; ++k) acc += double(va[(ba * M + m) * K + k]) * vb[(bb * K + k) * N + n];
          out[(bh * M + m) * N + n] = static_cast<float>(acc);
        }
      }
    }
    return out;
  }

  std::vector<float> pointwise(const SdpaOp& op, const SdpaTensor& y) {
    std::vector<float> out(numel(y.dims));
    for (int64_t i = 0; i < numel(y.dims); ++i) {
      const SdpaDims x = index_of(i, y.dims);
      const auto in = [&](size_t k) { return broadcast(op.in[k], x, y.dims); };
      float& o = out[i];
      switch (op.mode) {
        case SdpaMode::kMul:
          o = in(0) * in(1);
          break;
        case SdpaMode::kSub:
          o = in(0) - in(1);
          break;
        case SdpaMode::kDiv:
          o = in(0) / in(1);
          break;
        case SdpaMode::kAdd:
          o = in(0) + in(1);
          break;
        case SdpaMode::kExp:
          o = std::exp(in(0));
          break;
        case SdpaMode::kLog:
          o = std::log(in(0));
          break;
        case SdpaMode::kGenIndex:
          o = static_cast<float>(x[op.axis]);
          break;
        case SdpaMode::kCmpGe:
          o = in(0) >= in(1) ? 1.0f : 0.0f;
          break;
        case SdpaMode::kBinarySelect:
          o = in(2) != 0.0f ? in(0) : in(1);
          break;
        default:
          ADD_FAILURE() << "not a pointwise mode";
      }
    }
    return out;
  }

  // Each dimension of y is x's, or 1 (reduced over), or x's over a whole
  // number g (each run of g consecutive indices reduced: heads into the
  // key and value heads they share).
  std::vector<float> reduce(const SdpaOp& op, const SdpaTensor& y) {
    const SdpaTensor& x = tensor(op.in[0]);
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(y.dims[k] > 0 && x.dims[k] % y.dims[k] == 0) << "dim " << k << " of " << op.out;
    }
    const std::vector<float>& v = at(op.in[0]);
    std::vector<double> acc(numel(y.dims), op.mode == SdpaMode::kMax ? -INFINITY : 0.0);
    for (int64_t i = 0; i < numel(x.dims); ++i) {
      const SdpaDims xi = index_of(i, x.dims);
      int64_t r = 0;
      for (int k = 0; k < 4; ++k) r = r * y.dims[k] + xi[k] / (x.dims[k] / y.dims[k]);
      acc[r] = op.mode == SdpaMode::kMax ? std::max(acc[r], double(v[i])) : acc[r] + v[i];
    }
    return {acc.begin(), acc.end()};
  }

  // The same bytes seen through y's dims and strides.
  std::vector<float> reshape(const SdpaOp& op, const SdpaTensor& y) {
    const SdpaTensor& x = tensor(op.in[0]);
    EXPECT_EQ(numel(x.dims), numel(y.dims)) << op.out;
    const std::vector<float>& v = at(op.in[0]);
    std::map<int64_t, float> bytes;
    for (int64_t i = 0; i < numel(x.dims); ++i) bytes[offset(index_of(i, x.dims), x.strides)] = v[i];
    std::vector<float> out(numel(y.dims));
    for (int64_t i = 0; i < numel(y.dims); ++i) {
      const auto it = bytes.find(offset(index_of(i, y.dims), y.strides));
      EXPECT_NE(it, bytes.end()) << "tensor " << op.out << " views what " << op.in[0] << " does not hold";
      out[i] = it == bytes.end() ? 0.0f : it->second;
    }
    return out;
  }

  const SdpaTensor& tensor(int64_t uid) const { return *tensors_.at(uid); }

  const SdpaGraph& g_;
  bool round_;
  std::map<int64_t, const SdpaTensor*> tensors_;
  std::map<int64_t, float*> buffers_;
  std::map<int64_t, std::vector<float>> values_;
};

struct Attention {
  std::vector<float> out, lse, dqkv;
};

// The CPU kernel's attention, its statistics as the GPU's log-sum-exp;
// pos: packed sequences' positions (the CPU runs each document alone).
Attention cpu_attention(const std::vector<float>& qkv, const std::vector<float>& dout, const SdpaShape& s,
                        const std::vector<int32_t>* pos = nullptr) {
  const int64_t N = int64_t(s.B) * s.T, rows = N * s.NH;
  Attention a{std::vector<float>(N * s.C), std::vector<float>(rows), std::vector<float>(N * s.width())};
  std::vector<float> stats(rows * 2), scratch(cpu::attention_scratch_floats(s.T));
  const int32_t* p = pos ? pos->data() : nullptr;
  cpu::attention_forward(a.out.data(), stats.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.KV, p);
  cpu::attention_backward(a.dqkv.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), s.B, s.T, s.C, s.NH,
                          s.KV, DType::kF32, p);
  for (int64_t r = 0; r < rows; ++r) a.lse[r] = stats[2 * r] - std::log(stats[2 * r + 1]);
  return a;
}

// The graphs on the model's buffers, a part a call (sdpa_part_offset):
// all of the shape unless `split` says otherwise. A packed shape reads its
// document starts from positions `pos`, as the CUDA table hands them over
// (first_key of each token).
Attention graph_attention(const std::vector<float>& qkv, const std::vector<float>& dout, const SdpaShape& s, bool round,
                          cuda::SdpaSplit split = {0, 0}, const std::vector<int32_t>* pos = nullptr) {
  if (split.sequences == 0) split = {s.B, s.NH};
  const int64_t N = int64_t(s.B) * s.T;
  Attention a{std::vector<float>(N * s.C, 7.0f), std::vector<float>(N * s.NH, 7.0f),
              std::vector<float>(N * s.width(), 7.0f)};
  std::vector<float> q = qkv, dy = dout;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs()));
  SdpaShape part = s;
  part.B = split.sequences;
  part.heads = split.heads == s.NH ? 0 : split.heads;
  std::vector<float> row_dot(int64_t(part.B) * part.call_heads() * s.T);
  // Each sequence's starts doc_stride() apart, the rest never read (NaN).
  std::vector<float> starts(s.B * s.doc_stride(), NAN);
  for (int64_t i = 0; pos && i < N; ++i) {
    starts[i / s.T * s.doc_stride() + i % s.T] = float(cuda::first_key(pos->data() + i / s.T * s.T, i % s.T));
  }
  for (const bool backward : {false, true}) {
    const SdpaGraph g = backward ? cuda::sdpa_backward_graph(part) : cuda::sdpa_forward_graph(part);
    for (int b = 0; b < s.B; b += split.sequences) {
      for (int h = 0; h < s.NH; h += split.heads) {
        Interpreter x(g, round);
        const auto bind = [&](int64_t uid, float* buffer) {
          x.bind(uid, buffer + cuda::sdpa_offset(s, uid) + cuda::sdpa_part_offset(s, uid, b, h));
        };
        for (int64_t uid : {cuda::kSdpaQ, cuda::kSdpaK, cuda::kSdpaV}) bind(uid, q.data());
        bind(cuda::kSdpaO, a.out.data());
        bind(cuda::kSdpaLse, a.lse.data());
        if (s.packed) bind(cuda::kSdpaDocStart, starts.data());
        x.scalar(cuda::kSdpaScale, scale);
        x.scalar(cuda::kSdpaNegInf, s.packed ? std::numeric_limits<float>::lowest() : -INFINITY);  // as CudnnSdpa::run
        if (backward) {
          for (int64_t uid : {cuda::kSdpaDQ, cuda::kSdpaDK, cuda::kSdpaDV}) bind(uid, a.dqkv.data());
          bind(cuda::kSdpaDO, dy.data());
          x.bind(cuda::kSdpaRowDot, row_dot.data());
          x.scalar(cuda::kSdpaOne, 1.0f);
        }
        x.run();
      }
    }
  }
  return a;
}

// In fp32 the graphs are the CPU kernel's attention; with the GPU's 16-bit
// probabilities (rounded before the second product and dV, dK; and each
// query head's dK and dV before their sum), within what bf16's 8 bits of
// mantissa allow. Multi-head, and grouped-query with key and value heads
// shared by two and by four query heads.
TEST(SdpaGraph, RunsAsTheCpuAttentionOnTheModelsBuffers) {
  // T not a multiple of anything.
  for (const SdpaShape& s : {SdpaShape{2, 13, 24, 3, 3, SdpaType::kBF16}, SdpaShape{2, 13, 24, 4, 2, SdpaType::kBF16},
                             SdpaShape{1, 13, 32, 4, 1, SdpaType::kF16}}) {
    const int64_t N = int64_t(s.B) * s.T;
    const auto qkv = testing::randn(N * s.width(), 81), dout = testing::randn(N * s.C, 82);
    const Attention want = cpu_attention(qkv, dout, s);
    for (bool round : {false, true}) {
      SCOPED_TRACE(::testing::Message() << s.NH << " heads over " << s.KV << (round ? ", 16-bit" : ", fp32"));
      const Attention got = graph_attention(qkv, dout, s, round);
      const float rel = round ? 1e-2f : 1e-5f;
      testing::expect_close(got.out, want.out, rel, "out");
      testing::expect_close(got.lse, want.lse, 1e-5f, "lse");
      testing::expect_close(got.dqkv, want.dqkv, rel, "dqkv");
    }
  }
}

// Packed sequences (documents of 1, 3, 5 and 13 in turn, cut at a
// sequence's end): the graphs with the document mask are the CPU's
// documents run as sequences of their own, in fp32 and 16-bit, multi-head
// and grouped-query; without the mask (attention crossing documents) they
// are not; and where each sequence is one document they are the unpacked
// graphs' bits (masked scores the lowest float instead of -inf, both 0
// once exponentiated).
TEST(SdpaGraph, PackedGraphsKeepEachQueryToItsDocumentAsTheCpu) {
  for (SdpaShape s : {SdpaShape{2, 13, 24, 3, 3, SdpaType::kBF16}, SdpaShape{3, 16, 24, 4, 2, SdpaType::kF16}}) {
    const std::vector<int32_t> pos = testing::packed_positions(s.B, s.T, {1, 3, 5, 13});
    const int64_t N = int64_t(s.B) * s.T;
    const auto qkv = testing::randn(N * s.width(), 85), dout = testing::randn(N * s.C, 86);
    const Attention want = cpu_attention(qkv, dout, s, &pos);
    for (bool round : {false, true}) {
      SCOPED_TRACE(::testing::Message() << s.NH << " heads over " << s.KV << (round ? ", 16-bit" : ", fp32"));
      s.packed = true;
      const Attention got = graph_attention(qkv, dout, s, round, {0, 0}, &pos);
      const float rel = round ? 1e-2f : 1e-5f;
      testing::expect_close(got.out, want.out, rel, "out");
      testing::expect_close(got.lse, want.lse, 1e-5f, "lse");
      testing::expect_close(got.dqkv, want.dqkv, rel, "dqkv");
      s.packed = false;
      const Attention crossing = graph_attention(qkv, dout, s, round);
      EXPECT_GT(testing::max_rel_diff(crossing.out, want.out), 0.1f);
      EXPECT_GT(testing::max_rel_diff(crossing.dqkv, want.dqkv), 0.1f);
      s.packed = true;
      const std::vector<int32_t> whole = testing::packed_positions(s.B, s.T, {s.T});
      const Attention one = graph_attention(qkv, dout, s, round, {0, 0}, &whole);
      EXPECT_EQ(testing::bits(one.out), testing::bits(crossing.out));
      EXPECT_EQ(testing::bits(one.lse), testing::bits(crossing.lse));
      EXPECT_EQ(testing::bits(one.dqkv), testing::bits(crossing.dqkv));
    }
  }
}

// A shape run a part a call, as the CUDA table does where cuDNN's
// workspace for all of it is past attention's scratch, is bitwise the
// shape run at once: each part's views are the whole's, moved (a part of
// grouped-query heads takes whole groups; a packed part its sequences'
// document starts).
TEST(SdpaGraph, PartsOfAShapeAreTheWholeCall) {
  SdpaShape packed{4, 13, 48, 8, 2, SdpaType::kBF16};
  packed.packed = true;
  for (const auto& [s, splits] :
       {std::pair(SdpaShape{4, 11, 24, 4, 4, SdpaType::kBF16},
                  std::vector<cuda::SdpaSplit>{{2, 4}, {1, 4}, {1, 2}, {1, 1}}),
        std::pair(SdpaShape{2, 11, 48, 8, 2, SdpaType::kBF16}, std::vector<cuda::SdpaSplit>{{1, 8}, {1, 4}}),
        std::pair(packed, std::vector<cuda::SdpaSplit>{{2, 8}, {1, 8}, {1, 4}})}) {
    const int64_t N = int64_t(s.B) * s.T;
    const std::vector<int32_t> pos = testing::packed_positions(s.B, s.T, {2, 5, 12});
    const std::vector<int32_t>* p = s.packed ? &pos : nullptr;
    const auto qkv = testing::randn(N * s.width(), 83), dout = testing::randn(N * s.C, 84);
    const Attention whole = graph_attention(qkv, dout, s, true, {0, 0}, p);
    for (const cuda::SdpaSplit split : splits) {
      SCOPED_TRACE(::testing::Message() << s.NH << " heads over " << s.KV << (s.packed ? ", packed, " : ", ")
                                        << split.sequences << " sequences of " << split.heads << " heads a call");
      const Attention parts = graph_attention(qkv, dout, s, true, split, p);
      EXPECT_EQ(testing::bits(parts.out), testing::bits(whole.out));
      EXPECT_EQ(testing::bits(parts.lse), testing::bits(whole.lse));
      EXPECT_EQ(testing::bits(parts.dqkv), testing::bits(whole.dqkv));
    }
  }
}

// The part a call takes: all of it first, then the most sequences (a
// divisor of B), then the most heads of one sequence (a divisor of NH, in
// whole groups of query heads that share a key and value head); none
// where one group does not fit.
TEST(SdpaGraph, APartIsTheLargestThatFits) {
  // Fits where the part's sequences times heads are at most `most`.
  const auto within = [](int most) { return [most](int n, int m) { return n * m <= most; }; };
  const auto split = [](int B, int NH, auto fits, int group = 1) {
    const cuda::SdpaSplit p = cuda::sdpa_split(B, NH, group, fits);
    return std::pair(p.sequences, p.heads);
  };
  EXPECT_EQ(split(8, 4, within(32)), std::pair(8, 4));
  EXPECT_EQ(split(8, 4, within(31)), std::pair(4, 4));
  EXPECT_EQ(split(6, 2, within(11)), std::pair(3, 2));
  EXPECT_EQ(split(7, 1, within(6)), std::pair(1, 1));
  EXPECT_EQ(split(2, 32, within(31)), std::pair(1, 16));
  EXPECT_EQ(split(1, 24, within(7)), std::pair(1, 6));
  EXPECT_EQ(split(4, 8, within(0)), std::pair(0, 0));
  EXPECT_EQ(split(1, 32, within(31), 4), std::pair(1, 16));
  EXPECT_EQ(split(1, 32, within(7), 4), std::pair(1, 4));
  EXPECT_EQ(split(1, 12, within(5), 6), std::pair(0, 0));
  EXPECT_EQ(split(1, 24, within(11), 4), std::pair(1, 8));
  std::vector<std::pair<int, int>> tried;
  split(4, 6, [&](int n, int m) {
    tried.emplace_back(n, m);
    return m <= 2;
  });
  EXPECT_EQ(tried, (std::vector<std::pair<int, int>>{{4, 6}, {2, 6}, {1, 6}, {1, 3}, {1, 2}}));
}

// Q, K and V (as K^T and V^T too) read each element of their part of qkv
// once and nothing else; O and dO their buffer's; dQ, dK and dV write all
// of dqkv once: the whole shape at once, or its parts together (each
// call's row sums its own, and a packed call's document starts its
// sequences'); multi-head, grouped-query, and packed.
TEST(SdpaGraph, EachHandedOverViewCoversItsBufferOnce) {
  SdpaShape packed{3, 10, 32, 4, 2, SdpaType::kBF16};  // T 10: starts 12 apart
  packed.packed = true;
  for (const auto& [s, split] : {std::pair(SdpaShape{3, 10, 32, 4, 4, SdpaType::kF16}, cuda::SdpaSplit{3, 4}),
                                 std::pair(SdpaShape{3, 10, 32, 4, 4, SdpaType::kF16}, cuda::SdpaSplit{1, 4}),
                                 std::pair(SdpaShape{3, 10, 32, 4, 4, SdpaType::kF16}, cuda::SdpaSplit{1, 2}),
                                 std::pair(SdpaShape{2, 10, 32, 4, 2, SdpaType::kBF16}, cuda::SdpaSplit{2, 4}),
                                 std::pair(SdpaShape{2, 10, 32, 4, 2, SdpaType::kBF16}, cuda::SdpaSplit{1, 2}),
                                 std::pair(packed, cuda::SdpaSplit{3, 4}), std::pair(packed, cuda::SdpaSplit{1, 2})}) {
    const int64_t N = int64_t(s.B) * s.T, C = s.C, QKV = N * s.width();
    SCOPED_TRACE(::testing::Message() << s.NH << " heads over " << s.KV << (s.packed ? ", packed, " : ", ")
                                      << split.sequences << " sequences of " << split.heads << " heads a call");
    SdpaShape part = s;
    part.B = split.sequences;
    part.heads = split.heads == s.NH ? 0 : split.heads;
    const int64_t row_dots = int64_t(part.B) * part.call_heads() * s.T;
    for (const SdpaGraph& g : {cuda::sdpa_forward_graph(part), cuda::sdpa_backward_graph(part)}) {
      // By buffer: 0 qkv, 1 out, 2 dout, 3 dqkv, 4 lse, 5 row dot, 6 doc starts.
      std::map<int64_t, std::vector<int>> hits;
      const std::map<int64_t, std::pair<int, int64_t>> buffer = {{cuda::kSdpaQ, {0, QKV}},
                                                                 {cuda::kSdpaK, {0, QKV}},
                                                                 {cuda::kSdpaV, {0, QKV}},
                                                                 {cuda::kSdpaO, {1, N * C}},
                                                                 {cuda::kSdpaDO, {2, N * C}},
                                                                 {cuda::kSdpaDQ, {3, QKV}},
                                                                 {cuda::kSdpaDK, {3, QKV}},
                                                                 {cuda::kSdpaDV, {3, QKV}},
                                                                 {cuda::kSdpaLse, {4, N * s.NH}},
                                                                 {cuda::kSdpaRowDot, {5, row_dots}},
                                                                 {cuda::kSdpaDocStart, {6, s.B * s.doc_stride()}}};
      const auto starts = std::find_if(g.tensors.begin(), g.tensors.end(),
                                       [](const SdpaTensor& t) { return t.uid == cuda::kSdpaDocStart; });
      ASSERT_EQ(starts != g.tensors.end(), s.packed);
      if (s.packed) EXPECT_EQ(starts->type, SdpaType::kI32);  // what the table writes
      for (int b = 0; b < s.B; b += split.sequences) {
        for (int h = 0; h < s.NH; h += split.heads) {
          hits.erase(5);
          hits.erase(6);
          for (const SdpaTensor& t : g.tensors) {
            if (t.is_virtual || t.by_value) continue;
            ASSERT_TRUE(buffer.count(t.uid)) << t.uid;
            const auto [which, size] = buffer.at(t.uid);
            std::vector<int>& hit = hits[which];
            hit.resize(size);
            const int64_t start = cuda::sdpa_offset(s, t.uid) + cuda::sdpa_part_offset(s, t.uid, b, h);
            for (int64_t i = 0; i < numel(t.dims); ++i) {
              const int64_t at = start + offset(index_of(i, t.dims), t.strides);
              ASSERT_TRUE(at >= 0 && at < size) << "tensor " << t.uid << " element " << i;
              ++hit[at];
            }
          }
          if (hits.count(5)) {
            for (int64_t i = 0; i < row_dots; ++i) ASSERT_EQ(hits[5][i], 1) << "row sum " << i;
          }
          // A call's document starts are its sequences' tokens', each once.
          if (hits.count(6)) {
            for (int64_t i = 0; i < s.B * s.doc_stride(); ++i) {
              const int64_t seq = i / s.doc_stride();
              const bool ours = seq >= b && seq < b + split.sequences && i % s.doc_stride() < s.T;
              ASSERT_EQ(hits[6][i], ours ? 1 : 0) << "document start " << i;
            }
          }
        }
      }
      hits.erase(6);
      for (const auto& [which, hit] : hits) {
        for (size_t i = 0; i < hit.size(); ++i) ASSERT_EQ(hit[i], 1) << "buffer " << which << " element " << i;
      }
    }
  }
}

#ifdef ZEROD_WITH_CUDNN
// cuDNN's backend takes every tensor, operation and the graph of gpt2's and
// gpt2-xl's attention (heads of 64), of heads of 128, of Llama-3.2-1B's 32
// query heads over 8 (all, and 8 of them at T 8192, a part a call) and of
// Qwen2.5-1.5B's 12 over 2, in bf16 and fp16, and gpt2's and
// Llama-3.2-1B's packed: what it checks before a GPU
// is needed. Whether an engine runs them is scripts/gpu_check.sh's
// (test_cuda_kernels).
TEST(SdpaGraph, CudnnTakesEveryDescriptorOfBothGraphs) {
  for (const SdpaShape& s :
       {SdpaShape{16, 1024, 768, 12, 12, SdpaType::kBF16}, SdpaShape{8, 1024, 1600, 25, 25, SdpaType::kBF16},
        SdpaShape{1, 4096, 2048, 16, 16, SdpaType::kF16}, SdpaShape{8, 2048, 2048, 32, 8, SdpaType::kBF16},
        SdpaShape{1, 8192, 2048, 32, 8, SdpaType::kBF16, 8}, SdpaShape{8, 2048, 1536, 12, 2, SdpaType::kBF16},
        SdpaShape{16, 1024, 768, 12, 12, SdpaType::kBF16, 0, true},
        SdpaShape{8, 2048, 2048, 32, 8, SdpaType::kBF16, 0, true}}) {
    SCOPED_TRACE(::testing::Message() << "B " << s.B << ", T " << s.T << ", C " << s.C << (s.packed ? ", packed" : ""));
    EXPECT_TRUE(cuda::sdpa_check_descriptors(cuda::sdpa_forward_graph(s)).ok())
        << cuda::sdpa_check_descriptors(cuda::sdpa_forward_graph(s));
    EXPECT_TRUE(cuda::sdpa_check_descriptors(cuda::sdpa_backward_graph(s)).ok())
        << cuda::sdpa_check_descriptors(cuda::sdpa_backward_graph(s));
  }
  // Not a check that passes anything: a product whose output has a
  // column too many is refused naming the operation.
  const SdpaShape s{2, 64, 128, 2, 2, SdpaType::kBF16};
  SdpaGraph wide = cuda::sdpa_forward_graph(s);
  for (SdpaTensor& t : wide.tensors) t.dims[3] += t.uid == wide.ops[0].out;
  const absl::Status refused = cuda::sdpa_check_descriptors(wide);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("operation 0"), std::string::npos) << refused;
}
#endif

}  // namespace
}  // namespace zerod
