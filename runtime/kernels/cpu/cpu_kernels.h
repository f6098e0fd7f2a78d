// CPU forward and backward kernels of the layer kinds of GPT-2 and the
// Llama family. fp32, row-major,
// OpenMP across cores, OpenBLAS for the matrix products. Every reduction runs
// in a fixed order, so results are bitwise repeatable for a given thread count.
//
// Gradient conventions: weight and bias gradients accumulate (+=) so micro-
// batches add up; activation gradients are noted per kernel.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/kernels/cuda/llama_body.h"

namespace zerod::cpu {

// out[N,OC] = inp[N,C] @ w[C,OC] + bias[OC]; bias may be null. Weights are
// stored [in, out], as Hugging Face's GPT-2 Conv1D does.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int C, int OC);
// dinp = dout @ w^T (overwritten), dw += inp^T @ dout, dbias += column sums
// of dout; each skipped when null (dw: a frozen weight).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int C, int OC);

inline constexpr float kLayerNormEps = 1e-5f;
// out = (x - mean) / sqrt(var + eps) * w + b per row of C; saves mean and rstd.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int C);
// dinp += ..., dw += ..., db += ... (dw and db both null for a frozen LayerNorm).
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C);

// Causal multi-head self-attention. qkv is [B,T,3C] (q, k, v blocks of C),
// out is [B,T,C] with heads side by side, and stats [B,NH,T,2] what the
// backward needs of the forward's softmax: each query row's largest score
// and the reciprocal of its sum of exponentials, from which it recomputes
// the probabilities with the forward's bits. Both take query rows in
// blocks of attention_block_rows(T) (all T rows up to T = 2048), through a
// [2, block_rows, T] scratch per OpenMP thread: attention_scratch_floats.
void attention_forward(float* out, float* stats, float* scratch, const float* qkv, int B, int T, int C, int NH);
// dqkv overwritten. The probabilities are rounded to `rounded`'s values
// (kF32: none) before use, as a 16-bit job's saved activations are.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* stats, float* scratch, int B,
                        int T, int C, int NH, DType rounded);
int attention_block_rows(int T);
int64_t attention_scratch_floats(int T, int threads);
int64_t attention_scratch_floats(int T);  // at omp_get_max_threads()
// The same with blocks of `block_rows` (tests take several blocks at small T).
void attention_forward(float* out, float* stats, float* scratch, const float* qkv, int B, int T, int C, int NH,
                       int block_rows);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* stats, float* scratch, int B,
                        int T, int C, int NH, DType rounded, int block_rows);

// RMSNorm: out = x / sqrt(mean(x²) + eps) * w per row of C; saves the
// reciprocal root. Backward: dinp += ..., dw += ... (dw null: frozen).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int C, float eps);
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int C);

// SwiGLU: inp is [N, 2F], each row gate then up; out [N, F] =
// silu(gate) * up. dinp [N, 2F] overwritten.
void swiglu_forward(float* out, const float* inp, int64_t N, int F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int F);

// Grouped-query attention's input: qkv is [N, (NH + 2 KV) hd] (N = B T
// rows, position n % T), out [N, 3C] with C = NH hd, q and k turned by
// the rotary `table` [T, hd/2, 2] (model/rope.h), each key and value head
// repeated for its NH / KV query heads (cuda/llama_body.h). Backward:
// dqkv [N, (NH + 2 KV) hd] overwritten from dout [N, 3C].
using cuda::RopeShape;
void rope_forward(float* out, const float* qkv, const float* table, const RopeShape& s, int64_t N);
void rope_backward(float* dqkv, const float* dout, const float* table, const RopeShape& s, int64_t N);

// GELU, tanh approximation. gelu_backward may run in place (dinp == dout).
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// out = a + b.
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// Columns [c0, c0 + n) of N rows `ld` apart: out [N, n] = x's; y's += t [N, n].
void take_columns(float* out, const float* x, int64_t ld, int64_t c0, int64_t N, int n);
void add_columns(float* y, int64_t ld, int64_t c0, const float* t, int64_t N, int n);
// x[i] *= a.
void scale(float* x, float a, int64_t n);
// Kernels::dropout's mask and scale; y may be x.
void dropout(float* y, const float* x, int64_t n, float p, uint64_t seed);

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] (wpe null: no positions, a
// Llama's).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] where dwpe
// is not null.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C);

// Fused softmax + cross-entropy over `rows` rows of V logits: writes each
// row's loss (-log p[target]) to losses and, when dloss != 0, replaces the
// logits with their gradient (softmax - onehot) * dloss. A row whose target
// is -1 (left out by a loss mask) has loss 0 and a zero gradient.
void softmax_cross_entropy(float* logits, double* losses, const int32_t* targets, int64_t rows, int V, float dloss);

// The LM head, whose weights are the token embedding wte [V, C]:
// logits[r, v] = inp[r * inp_stride + :] . wte[v, :] for `rows` rows.
void classifier_logits(float* logits, const float* inp, int64_t inp_stride, const float* wte, int64_t rows, int C,
                       int V);

// The head's forward and backward fused, `chunk_rows` rows at a time so the
// full [N, V] logits never exist: each chunk's logits (rounded to `act`),
// its softmax cross-entropy (losses[r]), then dinp = dlogits @ wte
// (overwritten) and dwte += dlogits^T @ inp, with dlogits = (softmax -
// onehot) * dloss.
// The operands (`void*`) are of the kernel table's operand type (fp32 for
// these, the CPU's); logits rows are KernelMemory::logits_stride(V) apart.
struct ClassifierArgs {
  const void* inp;         // [N, C]
  const void* wte;         // [V, C]
  const int32_t* targets;  // [N]
  int64_t N;
  int C, V;
  float dloss;
  // The CPU rounds its fp32 logits to `act`; a table whose operands are of
  // that type has nothing to round.
  DType act;
  void* logits;            // chunk_rows rows of logits scratch
  int64_t chunk_rows;
  double* losses;          // [N]
  void* dinp;              // [N, C]
  float* dwte;             // [V, C]; null: wte is frozen
};
void classifier_forward_backward(const ClassifierArgs& a);

// x[0] + x[1] + ... in that order.
double sum(const double* x, int64_t n);

// Sum of squares in double, in an order that gives the same bits for any
// thread count and on the GPU (a block of kSquaresLanes threads a chunk).
// Chunk [lo, hi) = [c kSquaresChunk, min(lo + kSquaresChunk, n)) has
// kSquaresLanes lanes: lane t sums (double)x[i] * x[i], from 0.0, over
// i = lo + t, lo + t + kSquaresLanes, ... < hi; then, for stride =
// kSquaresLanes / 2, ..., 1, lane[t] += lane[t + stride] for t < stride,
// and lane[0] is the chunk's partial. The partials sum the same way.
inline constexpr int64_t kSquaresChunk = int64_t{1} << 16;
inline constexpr int kSquaresLanes = 256;
// The chunks of n elements.
inline constexpr int64_t squares_chunks(int64_t n) { return (n + kSquaresChunk - 1) / kSquaresChunk; }
double sum_squares(const float* x, int64_t n);
// One such sum to take: of x[0, n), into *out.
struct SquaresOf {
  const float* x;
  int64_t n;
  double* out;
};
// x[0] + ... + x[n - 1] in the partials' order above (kSquaresLanes lanes,
// then their tree): the order of the GPU table's sum.
double sum_in_lanes(const double* x, int64_t n);

}  // namespace zerod::cpu
