// Causal attention, forward and backward, as the operation graphs cuDNN's
// runtime fusion engine runs as fused (flash) attention: the matrix
// products, pointwise operations and row reductions that cuDNN's frontend
// lowers scaled dot-product attention to for backends before 9.21 (whose
// own SDPA operation takes no causal mask). Plain C++: cudnn_sdpa.cc hands
// each tensor and operation to cuDNN's backend API, and
// tests/test_sdpa_graph.cc runs the graphs on the CPU against the CPU
// kernel and checks every tensor handed over against the buffers it names.
//
// The model's layouts are handed over as strided views: query head h at
// position t is qkv[b, t, h hs + d], key and value head j qkv[b, t, C + j hs
// + d] and qkv[b, t, C + (KV + j) hs + d] ([B, T, W], W = C + 2 KV hs), the
// output and its gradient out[b, t, h hs + d] ([B, T, C]), the gradients
// dqkv as qkv, and the row statistic lse[b, h, t] ([B, NH, T], fp32) is the
// CUDA table's own (attention_plan.h): max + log(sum of exp) of the scaled
// scores, so either path's forward serves either's backward. Grouped-query
// attention (KV < NH) as cuDNN's frontend lowers it: the products broadcast
// a key and value head over its NH / KV query heads (head h reads h /
// (NH / KV)), and the backward's dK and dV of every query head, virtual,
// are summed into their key and value heads by a reduction.
//
// Packed sequences (SdpaShape::packed) keep each query to its own
// document: a handed-over int32 row of each token's document's first
// position, doc_start[b, t] ([B, 1, T, 1], sequences doc_stride() apart),
// masks the scores of keys before it as the causal mask does those after
// the query (row >= col and col >= doc_start): an index compared with a
// tensor read from memory, then a select. Whether cuDNN's engines take a
// tensor of a value a row there (its frontend's padding mask reads one a
// sequence) is a GPU's to say; where none does, the table's own attention
// runs. Masked scores become the lowest float rather than -inf in packed
// graphs, as the frontend's masks do: a tile of a row whose keys are all
// another document's then keeps a finite running maximum.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace zerod::cuda {

enum class SdpaType : uint8_t { kF32, kBF16, kF16, kI32, kBool };

using SdpaDims = std::array<int64_t, 4>;

struct SdpaTensor {
  int64_t uid;
  SdpaDims dims, strides;
  SdpaType type;
  bool is_virtual = false;  // lives inside the fused kernels only
  bool by_value = false;    // a host scalar handed over at execution
};

enum class SdpaOpKind : uint8_t { kMatmul, kPointwise, kReduction, kReshape };
enum class SdpaMode : uint8_t {
  kNone,  // matmul, reshape
  kMul,
  kSub,
  kDiv,
  kAdd,
  kExp,
  kLog,
  kGenIndex,      // each element's index along `axis`
  kCmpGe,         // x >= b
  kBinarySelect,  // t ? x : b
  kMax,           // reductions over the last dimension
  kSum,
};

struct SdpaOp {
  SdpaOpKind kind;
  SdpaMode mode;
  std::vector<int64_t> in;  // uids: matmul A, B; pointwise x[, b[, t]]; reduction, reshape x
  int64_t out;
  int64_t axis = -1;                  // kGenIndex
  SdpaType compute = SdpaType::kF32;  // kCmpGe computes in kBool
};

// The tensors handed over at execution, by uid (the rest are virtual).
enum SdpaUid : int64_t {
  kSdpaQ = 1,
  kSdpaK,  // as K^T: [B, KV, hs, T]
  kSdpaV,  // forward: [B, KV, T, hs]; backward: V^T, [B, KV, hs, T]
  kSdpaO,
  kSdpaLse,
  kSdpaDO,
  kSdpaDQ,
  kSdpaDK,
  kSdpaDV,
  kSdpaRowDot,  // backward: sum over d of dO O, fp32 [B, NH, T] (the caller's scratch)
  kSdpaScale,   // 1 / sqrt(hs)
  kSdpaNegInf,  // what masked scores become: -inf, or the lowest float in packed graphs
  kSdpaOne,
  kSdpaDocStart,  // packed: int32 [B, 1, T, 1], each token's document's first row in its sequence
  kSdpaFirstVirtual = 100,
};

struct SdpaGraph {
  std::vector<SdpaTensor> tensors;
  std::vector<SdpaOp> ops;
};

// B sequences of T, width C in NH query heads and KV key and value heads,
// operands of type io (bf16 or fp16); a call takes `heads` query heads (0:
// all; else whole groups of NH / KV), fewer than NH only for one sequence
// (B 1); `packed`: documents within sequences (kSdpaDocStart).
struct SdpaShape {
  int B, T, C, NH, KV;
  SdpaType io;
  int heads = 0;
  bool packed = false;
  int hs() const { return C / NH; }
  int group() const { return NH / KV; }
  int64_t width() const { return C + 2 * int64_t(KV) * hs(); }  // a row of qkv
  int call_heads() const { return heads > 0 ? heads : NH; }
  // Elements between sequences' document starts: T rounded up to 4, so
  // that a part's starts are 16-byte aligned as every handed-over tensor.
  int64_t doc_stride() const { return (int64_t(T) + 3) / 4 * 4; }
  int call_kv_heads() const { return call_heads() / group(); }
};

SdpaGraph sdpa_forward_graph(const SdpaShape& s);
SdpaGraph sdpa_backward_graph(const SdpaShape& s);

// Where a handed-over tensor starts in its buffer, in elements: k and v
// are C and C + KV hs into qkv (and their gradients into dqkv), the rest
// at 0.
int64_t sdpa_offset(const SdpaShape& s, int64_t uid);

// A call may take a part of a shape: the sequences [b, b + n), or the query
// heads [h, h + m) of one sequence (whole groups, with their key and value
// heads); the graph of {n, T, C, NH, KV, io, m} on each
// model buffer advanced by sdpa_part_offset(s, uid, b, h) elements of its
// own type (lse fp32, doc starts int32; not the caller's row sums, each
// call's own).
int64_t sdpa_part_offset(const SdpaShape& s, int64_t uid, int b, int h);

// The part one call takes: all of the shape where fits(B, NH); else the
// most sequences, a divisor n of B with fits(n, NH); else the most heads of
// one sequence, a divisor m of NH, a multiple of `group`, with fits(1, m);
// {0, 0} where not even one group fits. cuDNN's workspace grows with the
// sequences and heads, so a shape whose engines all want more than
// attention's scratch may still run fused a part at a time.
struct SdpaSplit {
  int sequences, heads;
};
template <class Fits>
SdpaSplit sdpa_split(int B, int NH, int group, Fits fits) {
  for (int n = B; n >= 1; --n) {
    if (B % n == 0 && fits(n, NH)) return {n, NH};
  }
  for (int m = NH - group; m >= group; m -= group) {
    if (NH % m == 0 && fits(1, m)) return {1, m};
  }
  return {0, 0};
}

}  // namespace zerod::cuda
