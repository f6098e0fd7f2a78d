// Rotary position embeddings (Su et al. 2021) as transformers' Llama
// computes them: inv_freq[i] = theta^(-2i/hd) for i < hd/2 (Llama 3's
// rope_scaling applied), angle = position * inv_freq[i] in fp32, and its
// cosine and sine. Dimension i of a head turns with dimension i + hd/2
// (rotate_half, the layout of Hugging Face's checkpoints).
#pragma once

#include <vector>

#include "runtime/model/gpt_config.h"

namespace zerod {

// The frequencies of a head of c, hd/2 of them.
std::vector<float> rope_inv_freq(const GptConfig& c);
// [positions, hd/2, 2]: the cosine and sine of each position's angles,
// what the kernels' rope_forward reads.
std::vector<float> rope_table(const GptConfig& c, int positions);

}  // namespace zerod
