// Causal attention, forward and backward, as the operation graphs cuDNN's
// runtime fusion engine runs as fused (flash) attention: the matrix
// products, pointwise operations and row reductions that cuDNN's frontend
// lowers scaled dot-product attention to for backends before 9.21 (whose
// own SDPA operation takes no causal mask). Plain C++: cudnn_sdpa.cc hands
// each tensor and operation to cuDNN's backend API, and
// tests/test_sdpa_graph.cc runs the graphs on the CPU against the CPU
// kernel and checks every tensor handed over against the buffers it names.
//
// The model's layouts are handed over as strided views: q, k and v of head
// h at position t are qkv[b, t, {0, 1, 2} C + h hs + d] ([B, T, 3C]), the
// output and its gradient out[b, t, h hs + d] ([B, T, C]), the gradients
// dqkv as qkv, and the row statistic lse[b, h, t] ([B, NH, T], fp32) is the
// CUDA table's own (attention_plan.h): max + log(sum of exp) of the scaled
// scores, so either path's forward serves either's backward.
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
  int64_t axis = -1;                   // kGenIndex
  SdpaType compute = SdpaType::kF32;   // kCmpGe computes in kBool
};

// The tensors handed over at execution, by uid (the rest are virtual).
enum SdpaUid : int64_t {
  kSdpaQ = 1,
  kSdpaK,  // as K^T: [B, NH, hs, T]
  kSdpaV,  // forward: [B, NH, T, hs]; backward: V^T, [B, NH, hs, T]
  kSdpaO,
  kSdpaLse,
  kSdpaDO,
  kSdpaDQ,
  kSdpaDK,
  kSdpaDV,
  kSdpaRowDot,  // backward: sum over d of dO O, fp32 [B, NH, T] (the caller's scratch)
  kSdpaScale,   // 1 / sqrt(hs)
  kSdpaNegInf,  // what masked scores become
  kSdpaOne,
  kSdpaFirstVirtual = 100,
};

struct SdpaGraph {
  std::vector<SdpaTensor> tensors;
  std::vector<SdpaOp> ops;
};

// B sequences of T, width C in NH heads, operands of type io (bf16 or fp16).
struct SdpaShape {
  int B, T, C, NH;
  SdpaType io;
  int hs() const { return C / NH; }
};

SdpaGraph sdpa_forward_graph(const SdpaShape& s);
SdpaGraph sdpa_backward_graph(const SdpaShape& s);

// Where a handed-over tensor starts in its buffer, in elements: k and v
// are C and 2C into qkv (and their gradients into dqkv), the rest at 0.
int64_t sdpa_offset(const SdpaShape& s, int64_t uid);

}  // namespace zerod::cuda
