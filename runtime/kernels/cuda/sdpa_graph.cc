#include "runtime/kernels/cuda/sdpa_graph.h"

namespace zerod::cuda {
namespace {

SdpaDims row_major(const SdpaDims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

class Builder {
 public:
  Builder(SdpaGraph& g, const SdpaShape& s) : g_(g), s_(s) {}

  // The model's buffers as [B, heads, rows, hs] views (rows W or C apart):
  // q's query heads, k's and v's key and value heads.
  void qkv_view(int64_t uid, bool transposed, int64_t H) {
    const int64_t T = s_.T, W = s_.width(), hs = s_.hs();
    add(uid, transposed ? SdpaDims{s_.B, H, hs, T} : SdpaDims{s_.B, H, T, hs},
        transposed ? SdpaDims{T * W, hs, 1, W} : SdpaDims{T * W, hs, W, 1}, s_.io);
  }
  void q_view(int64_t uid) { qkv_view(uid, false, s_.call_heads()); }
  void kv_view(int64_t uid, bool transposed) { qkv_view(uid, transposed, s_.call_kv_heads()); }
  void out_view(int64_t uid) {
    const int64_t T = s_.T, C = s_.C, hs = s_.hs();
    add(uid, {s_.B, s_.call_heads(), T, hs}, {T * C, hs, C, 1}, s_.io);
  }
  void rows(int64_t uid) {  // one fp32 value a query row
    add(uid, rows_dims(), row_major(rows_dims()), SdpaType::kF32);
  }
  // Packed: each token's document's first row, one int32 a token,
  // sequences doc_stride() apart.
  void doc_starts() {
    if (!s_.packed) return;
    const int64_t stride = s_.doc_stride();
    add(kSdpaDocStart, {s_.B, 1, s_.T, 1}, {stride, stride, 1, 1}, SdpaType::kI32);
  }
  void scalar(int64_t uid) { g_.tensors.push_back({uid, {1, 1, 1, 1}, {1, 1, 1, 1}, SdpaType::kF32, false, true}); }

  SdpaDims scores_dims() const { return {s_.B, s_.call_heads(), s_.T, s_.T}; }
  SdpaDims rows_dims() const { return {s_.B, s_.call_heads(), s_.T, 1}; }

  // A virtual tensor.
  int64_t inner(const SdpaDims& dims, SdpaType t = SdpaType::kF32) { return inner(dims, row_major(dims), t); }
  int64_t inner(const SdpaDims& dims, const SdpaDims& strides, SdpaType t = SdpaType::kF32) {
    const int64_t uid = next_++;
    g_.tensors.push_back({uid, dims, strides, t, true, false});
    return uid;
  }

  int64_t op(SdpaOpKind kind, SdpaMode mode, std::vector<int64_t> in, int64_t out, int64_t axis = -1,
             SdpaType compute = SdpaType::kF32) {
    g_.ops.push_back({kind, mode, std::move(in), out, axis, compute});
    return out;
  }
  int64_t matmul(int64_t a, int64_t b, int64_t out) { return op(SdpaOpKind::kMatmul, SdpaMode::kNone, {a, b}, out); }
  int64_t pw(SdpaMode m, std::vector<int64_t> in, int64_t out) {
    return op(SdpaOpKind::kPointwise, m, std::move(in), out);
  }
  int64_t reduce(SdpaMode m, int64_t x, int64_t out) { return op(SdpaOpKind::kReduction, m, {x}, out); }
  int64_t reshape(int64_t x, int64_t out) { return op(SdpaOpKind::kReshape, SdpaMode::kNone, {x}, out); }

  // Scores where the key comes after the query, or (packed) before its
  // document, become -inf.
  int64_t mask(int64_t scores) {
    const int64_t row = index(scores, 2);
    const int64_t masked = select_where(scores, compare_ge(row, index(scores, 3)));
    if (!s_.packed) return masked;
    return select_where(masked, compare_ge(index(masked, 3), kSdpaDocStart));
  }

 private:
  int64_t index(int64_t of, int64_t axis) {
    return op(SdpaOpKind::kPointwise, SdpaMode::kGenIndex, {of}, inner(scores_dims(), SdpaType::kI32), axis);
  }
  int64_t compare_ge(int64_t x, int64_t y) {
    return op(SdpaOpKind::kPointwise, SdpaMode::kCmpGe, {x, y}, inner(scores_dims(), SdpaType::kBool), -1,
              SdpaType::kBool);
  }
  // x where `keep`, else -inf.
  int64_t select_where(int64_t x, int64_t keep) {
    return pw(SdpaMode::kBinarySelect, {x, kSdpaNegInf, keep}, inner(scores_dims()));
  }
  void add(int64_t uid, const SdpaDims& dims, const SdpaDims& strides, SdpaType t) {
    g_.tensors.push_back({uid, dims, strides, t, false, false});
  }

  SdpaGraph& g_;
  const SdpaShape& s_;
  int64_t next_ = kSdpaFirstVirtual;
};

}  // namespace

// O = softmax(scale Q K^T, masked) V; lse = max + log(sum of exp).
SdpaGraph sdpa_forward_graph(const SdpaShape& s) {
  SdpaGraph g;
  Builder b(g, s);
  b.q_view(kSdpaQ);
  b.kv_view(kSdpaK, true);
  b.kv_view(kSdpaV, false);
  b.out_view(kSdpaO);
  b.rows(kSdpaLse);
  b.doc_starts();
  b.scalar(kSdpaScale);
  b.scalar(kSdpaNegInf);
  const SdpaDims S = b.scores_dims(), R = b.rows_dims();
  const int64_t qk = b.matmul(kSdpaQ, kSdpaK, b.inner(S));
  const int64_t scaled = b.mask(b.pw(SdpaMode::kMul, {qk, kSdpaScale}, b.inner(S)));
  const int64_t mx = b.reduce(SdpaMode::kMax, scaled, b.inner(R));
  const int64_t e = b.pw(SdpaMode::kExp, {b.pw(SdpaMode::kSub, {scaled, mx}, b.inner(S))}, b.inner(S));
  const int64_t sum = b.reduce(SdpaMode::kSum, e, b.inner(R));
  b.pw(SdpaMode::kAdd, {mx, b.pw(SdpaMode::kLog, {sum}, b.inner(R))}, kSdpaLse);
  // The probabilities enter the second product in the operands' type.
  const int64_t p = b.pw(SdpaMode::kDiv, {e, sum}, b.inner(S, s.io));
  b.matmul(p, kSdpaV, kSdpaO);
  return g;
}

// P = exp(scale Q K^T - lse) (masked); dV = P^T dO; dP = dO V^T;
// dS = scale P (dP - rowsum(dO O)); dK = dS^T Q; dQ = dS K, written
// directly (no fp32 accumulator across key blocks: the same bits every run).
// Where key and value heads are shared, each query head's dK and dV are
// summed into them.
SdpaGraph sdpa_backward_graph(const SdpaShape& s) {
  SdpaGraph g;
  Builder b(g, s);
  b.q_view(kSdpaQ);
  b.kv_view(kSdpaK, true);
  b.kv_view(kSdpaV, true);
  b.out_view(kSdpaO);
  b.rows(kSdpaLse);
  b.out_view(kSdpaDO);
  b.q_view(kSdpaDQ);
  b.kv_view(kSdpaDK, false);
  b.kv_view(kSdpaDV, false);
  b.rows(kSdpaRowDot);
  b.doc_starts();
  b.scalar(kSdpaScale);
  b.scalar(kSdpaNegInf);
  b.scalar(kSdpaOne);
  const SdpaDims S = b.scores_dims(), R = b.rows_dims();
  const int64_t B = s.B, H = s.call_heads(), KV = s.call_kv_heads(), T = s.T, hs = s.hs();
  // A product into dK or dV: through every query head's, summed, where
  // their heads are shared.
  const auto into_shared = [&](int64_t a, int64_t x, int64_t out) {
    if (KV == H) return b.matmul(a, x, out);
    return b.reduce(SdpaMode::kSum, b.matmul(a, x, b.inner({B, H, T, hs}, s.io)), out);
  };
  // rowsum(dO O), kept in fp32 for the fused kernel.
  const int64_t dot = b.pw(SdpaMode::kMul, {kSdpaDO, kSdpaO}, b.inner({B, H, T, hs}, {H * T * hs, T * hs, H * hs, 1}));
  b.pw(SdpaMode::kMul, {b.reduce(SdpaMode::kSum, dot, b.inner(R)), kSdpaOne}, kSdpaRowDot);
  // The probabilities again, from the statistic.
  const int64_t qk = b.matmul(kSdpaQ, kSdpaK, b.inner(S));
  const int64_t scaled = b.pw(SdpaMode::kMul, {qk, kSdpaScale}, b.inner(S));
  const int64_t p = b.pw(SdpaMode::kExp, {b.mask(b.pw(SdpaMode::kSub, {scaled, kSdpaLse}, b.inner(S)))}, b.inner(S));
  // Transposed views of [T, T] matrices, in the operands' type.
  const SdpaDims transposed{H * T * T, T * T, 1, T};
  into_shared(b.reshape(p, b.inner(S, transposed, s.io)), kSdpaDO, kSdpaDV);
  const int64_t dp = b.matmul(kSdpaDO, kSdpaV, b.inner(S));
  const int64_t ds =
      b.pw(SdpaMode::kMul,
           {b.pw(SdpaMode::kMul, {b.pw(SdpaMode::kSub, {dp, kSdpaRowDot}, b.inner(S)), p}, b.inner(S)), kSdpaScale},
           b.inner(S));
  into_shared(b.reshape(ds, b.inner(S, transposed, s.io)), kSdpaQ, kSdpaDK);
  // K as [B, KV, T, hs] again, for dQ = dS K.
  const int64_t W = s.width();
  b.matmul(ds, b.reshape(kSdpaK, b.inner({B, KV, T, hs}, {T * W, hs, W, 1})), kSdpaDQ);
  return g;
}

int64_t sdpa_offset(const SdpaShape& s, int64_t uid) {
  switch (uid) {
    case kSdpaK:
    case kSdpaDK:
      return s.C;
    case kSdpaV:
    case kSdpaDV:
      return s.C + int64_t(s.KV) * s.hs();
    default:
      return 0;
  }
}

int64_t sdpa_part_offset(const SdpaShape& s, int64_t uid, int b, int h) {
  const int64_t rows = int64_t(b) * s.T, head = int64_t(h) * s.hs();
  switch (uid) {
    case kSdpaQ:
    case kSdpaDQ:
      return rows * s.width() + head;
    case kSdpaK:
    case kSdpaV:
    case kSdpaDK:
    case kSdpaDV:
      return rows * s.width() + int64_t(h / s.group()) * s.hs();
    case kSdpaO:
    case kSdpaDO:
      return rows * s.C + head;
    case kSdpaLse:
      return (int64_t(b) * s.NH + h) * s.T;
    case kSdpaDocStart:
      return int64_t(b) * s.doc_stride();
    default:
      return 0;
  }
}

}  // namespace zerod::cuda
