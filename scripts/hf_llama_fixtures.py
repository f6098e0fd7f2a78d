#!/usr/bin/env python3
"""Write Hugging Face reference fixtures for tiny random Llama, Mistral and Qwen2 models.

The C++ tests compare zerod's loader, forward and backward against these files,
so CI needs neither torch nor transformers. Regenerate with:

    pip install torch transformers safetensors
    python3 scripts/hf_llama_fixtures.py tests/fixtures/hf_llama

Each OUT_DIR/<model>/ holds config.json, the safetensors weights (qwen2 sharded,
with model.safetensors.index.json) and expected.json: tokens, targets, logits,
the mean cross-entropy loss, and sampled gradients of that loss.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, MistralConfig,
                          Qwen2Config)

BATCH, SEQ, VOCAB = 2, 8, 64
transformers.utils.logging.disable_progress_bar()

COMMON = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
              max_position_embeddings=64, initializer_range=0.1)  # 0.1: logits not tiny

# rope_theta / rope_scaling are the legacy kwargs; transformers 5 folds them
# into rope_parameters, 4.x keeps them as is, so this works with both.
MODELS = {
    "llama": (LlamaConfig, 1, dict(
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "mistral": (MistralConfig, 2, dict(
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        sliding_window=None)),
    "qwen2": (Qwen2Config, 3, dict(
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False)),
}

LAYER_PARAMS = ["input_layernorm.weight", "self_attn.q_proj.weight",
                "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"]
GRAD_NAMES = (["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"]
              + [f"model.layers.{i}.{p}" for i in range(2) for p in LAYER_PARAMS])


def build(cls, seed, extra):
    torch.manual_seed(seed)
    config = cls(**COMMON, **extra)
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager").eval()
    # Default init leaves norms at 1 and biases at 0, which would hide a loader
    # that skips them; perturb both.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def sample_grads(model, seed):
    """Top-3 |grad| plus 3 seeded random flat indices per listed tensor."""
    params = dict(model.named_parameters())  # tied lm_head appears only once
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in GRAD_NAMES:
        if name not in params:
            continue
        g = params[name].grad.detach().reshape(-1)
        top = torch.topk(g.abs(), 3).indices.tolist()
        rest = [i for i in torch.randperm(g.numel(), generator=gen).tolist() if i not in top][:3]
        idx = top + rest
        out[name] = {"shape": list(params[name].shape), "index": idx,
                     "values": [float(g[i]) for i in idx]}
    return out


def logits_of(model, tokens):
    return model(input_ids=tokens).logits


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_root = sys.argv[1]
    for name, (cls, seed, extra) in MODELS.items():
        model = build(cls, seed, extra)
        gen = torch.Generator().manual_seed(1000 + seed)
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)

        logits = logits_of(model, tokens)
        # Loss in double from the fp32 logits; gradients from a plain fp32 backward.
        loss = F.cross_entropy(logits.detach().view(-1, VOCAB).double(), targets.view(-1))
        model.zero_grad()
        F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1)).backward()

        out_dir = os.path.join(out_root, name)
        os.makedirs(out_dir, exist_ok=True)
        # qwen2 is sharded so the C++ loader's index.json path is exercised too.
        shard = "20KB" if name == "qwen2" else "50GB"
        model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=shard)

        expected = {
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "batch": BATCH, "seq": SEQ, "vocab": VOCAB,
            "tokens": tokens.reshape(-1).tolist(),
            "targets": targets.reshape(-1).tolist(),
            "logits": [float(x) for x in logits.detach().reshape(-1)],
            "loss": float(loss),
            "grads": sample_grads(model, 2000 + seed),
        }
        with open(os.path.join(out_dir, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1)
            f.write("\n")

        # Sanity check: what was saved reloads to the same logits.
        with torch.no_grad():
            again = AutoModelForCausalLM.from_pretrained(
                out_dir, dtype=torch.float32, attn_implementation="eager").eval()
            diff = (logits_of(again, tokens) - logits.detach()).abs().max().item()
        if diff != 0.0:
            sys.exit(f"{name}: reloaded logits differ by {diff}")
        print(f"{name}: loss {expected['loss']:.6f}, logits[:5] {expected['logits'][:5]}")


if __name__ == "__main__":
    main()
