// A decoder's forward and backward (GPT-2's, or the Llama family's:
// gpt_config.h) on any Device, one explicit pass per layer:
// every kernel goes through the device's table on its compute stream, and
// the host waits for the stream only to read the loss or the logits.
//
// Activations for backward live in a store of the activation dtype (fp32, or
// bf16/fp16 under mixed precision, where every activation is rounded to that
// type as it is produced). With activation checkpointing the store keeps only
// each block's input and backward recomputes the block. The kernels take
// the table's operands (kernels.h): the GPU's are of the activation dtype,
// so its ops read the store in place; the CPU's are fp32, onto which a
// 16-bit store is unpacked.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/memory_plan.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/weights.h"

namespace zerod {

class Gpt {
 public:
  // Buffers are sized for micro-batches of up to B sequences of T tokens,
  // on `device`, whose table `kernels` is; both outlive the model. With
  // `checkpoints_on_host`, a GPU keeps the checkpointed block inputs in host
  // memory (pinned on a CUDA GPU), which its kernels read and write in place
  // (DeepSpeed's cpu_checkpointing); elsewhere they are there already.
  // With `lora`, the weights a pass is given carry adapters of those
  // settings (weights.h's LayerWeights::lora), whose activations it keeps.
  // `passes`: how many training passes may be enqueued before the host
  // reads their losses (enqueue_forward_backward). `packed`: training
  // passes may be given packed sequences' positions. `layer_major`: steps
  // of up to `passes` micro-batches may run layer by layer
  // (enqueue_layer_major; with checkpointing only), each micro-batch
  // keeping its own block inputs and residual gradient.
  static absl::StatusOr<std::unique_ptr<Gpt>> create(const GptConfig& config, int B, int T, DType act_dtype,
                                                     bool checkpointing, Device& device, Kernels& kernels,
                                                     bool checkpoints_on_host = false, const LoraConfig* lora = nullptr,
                                                     int passes = 1, bool packed = false, bool layer_major = false);
  ~Gpt();
  // The buffers create() allocates for these arguments, on plan's device.
  static void plan(const GptConfig& config, int B, int T, DType act_dtype, bool checkpointing, bool checkpoints_on_host,
                   const KernelMemory& kernels, MemoryPlan& plan, const LoraConfig* lora = nullptr, int passes = 1,
                   bool packed = false, bool layer_major = false);

  const GptLayout& layout() const { return layout_; }
  int max_seq() const { return T_; }
  // Tokens a pass holds (B * T of a forward_logits call at most).
  int64_t max_tokens() const { return int64_t(B_) * T_; }

  // One micro-batch (token ids in host memory): forward, loss, backward.
  // Adds grad_scale * d(mean loss) to the sink's gradients. Returns the mean
  // loss over B*T tokens, or the first failure of the weight source, the
  // gradient sink or the device, at which it stops. With LoRA dropout, the
  // adapters' masks are drawn from `dropout_seed` (the same seed, the same
  // masks); a pass of forward_logits drops nothing. `positions` (a model
  // made `packed`; null: none): packed sequences, each token's position
  // in its document [B*T], host memory, a document starting at each 0: a
  // token attends only to its document's tokens, and its rotary or learned
  // position is its position in the document.
  absl::StatusOr<double> forward_backward(WeightSource& w, GradSink& grads, const int32_t* inputs,
                                          const int32_t* targets, int B, int T, float grad_scale,
                                          uint64_t dropout_seed = 0, const int32_t* positions = nullptr);
  // forward_backward's work enqueued on the compute stream, the host waiting
  // for nothing: as pass `pass` (below create()'s `passes`), which keeps
  // its loss and its host copy of the inputs' order apart from the other
  // passes'. `inputs` and `targets` must stay as they are, and pass_loss()
  // is its mean loss, once the stream has passed it. On a failure it waits
  // for what it enqueued.
  absl::Status enqueue_forward_backward(WeightSource& w, GradSink& grads, const int32_t* inputs, const int32_t* targets,
                                        int B, int T, float grad_scale, uint64_t dropout_seed, int pass,
                                        const int32_t* positions = nullptr);
  double pass_loss(int pass) const;

  // A step's micro-batches layer by layer, on a model made `layer_major`:
  // each layer's weights are asked for once going up and once coming down
  // (a source that gathers or uploads them does so once a step, not once
  // a micro-batch), and every micro-batch's block runs on them in turn.
  // The sink's layer(l) and layer_done(l) are called once a step, the
  // layer's gradients of every micro-batch added in between, micro-batch
  // 0 first: each gradient is the sum micro-batch-major passes give, in
  // their order, except a tied head's (GPT-2's wte), whose head parts
  // come before its embedding parts. Micro-batch j is pass j (pass_loss);
  // B, T and grad_scale as enqueue_forward_backward's, the host waiting
  // for nothing.
  struct MicroBatch {
    const int32_t *inputs, *targets;
    const int32_t* positions = nullptr;
    uint64_t dropout_seed = 0;
  };
  absl::Status enqueue_layer_major(WeightSource& w, GradSink& grads, const std::vector<MicroBatch>& batches, int B,
                                   int T, float grad_scale);

  // Forward only, the loss: the sum over the B*T tokens of -log p(target)
  // (a target of -1 counts 0), as a training pass computes it but with no
  // dropout. `positions` as forward_backward's. Enqueued work done when it
  // returns.
  absl::StatusOr<double> loss_sum(WeightSource& w, const int32_t* inputs, const int32_t* targets, int B, int T,
                                  const int32_t* positions = nullptr);

  // Forward only, into host memory: logits [B*T, V], or [B, V] for the last
  // position of each sequence when last_only. B * T at most max_tokens(),
  // T at most max_seq().
  absl::Status forward_logits(WeightSource& w, const int32_t* tokens, int B, int T, float* logits, bool last_only);

 private:
  struct Impl;
  struct ModelBuffer;
  // What allocate() allocates and plan() states, from the same arguments,
  // for a table of operands `op_type` (a plan's: the table kernels_for
  // makes for act_dtype).
  static std::vector<ModelBuffer> buffer_specs(const GptConfig& c, int B, int T, DType act_dtype, bool checkpointing,
                                               bool checkpoints_on_host, const LoraConfig* lora, int passes,
                                               bool packed, bool layer_major, const PlanDevice& device,
                                               const KernelMemory& k, DType op_type);
  Gpt(const GptConfig& config, int B, int T, DType act_dtype, bool checkpointing, bool checkpoints_on_host,
      const LoraConfig* lora, int passes, bool packed, bool layer_major, Device& device, Kernels& kernels);
  absl::Status allocate();
  // The work of enqueue_forward_backward and forward_logits, enqueued on
  // the stream.
  absl::Status enqueue_pass(WeightSource& w, GradSink& grads, const int32_t* inputs, const int32_t* targets, int B,
                            int T, float grad_scale, uint64_t dropout_seed, int pass, const int32_t* positions);
  absl::Status enqueue_layers(WeightSource& w, GradSink& grads, const std::vector<MicroBatch>& batches, int B, int T,
                              float grad_scale);
  absl::Status enqueue_logits(WeightSource& w, const int32_t* tokens, int B, int T, float* logits, bool last_only);
  absl::Status enqueue_loss(WeightSource& w, const int32_t* inputs, const int32_t* targets, int B, int T,
                            const int32_t* positions);
  // Why a pass of B x T tokens does not fit the model (`what` names the
  // pass), or OK.
  absl::Status check_pass(const char* what, int B, int T) const;

  GptLayout layout_;
  int B_, T_;
  DType act_dtype_;
  bool checkpointing_;
  bool checkpoints_on_host_;
  std::optional<LoraConfig> lora_;
  int passes_;
  bool packed_;
  bool layer_major_;
  Device& device_;
  Kernels& kernels_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zerod
