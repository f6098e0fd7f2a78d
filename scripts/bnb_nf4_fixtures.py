#!/usr/bin/env python3
"""Write a Llama fixture held in NF4 as bitsandbytes saves it, for zerod's reader.

Takes tests/fixtures/hf_llama/llama (fp32), rounds its weights to bf16 and
quantizes each linear layer of its decoder layers with bitsandbytes'
quantize_4bit (NF4, blocks of 64, double quantization), storing what
Linear4bit's state dict holds: `<module>.weight` (uint8 codes, [n / 2, 1]),
`.absmax`, `.quant_map`, `.nested_absmax`, `.nested_quant_map` and
`.quant_state.bitsandbytes__nf4` (the state's JSON as bytes). Embeddings,
norms and the head stay bf16, and config.json carries transformers'
quantization_config. Beside it, dequantized.safetensors holds each module's
weights as bitsandbytes dequantizes them, in fp32 ([out, in]), and
originals.safetensors the bf16 weights that were quantized. Regenerate
with:

    pip install torch bitsandbytes safetensors
    python3 scripts/bnb_nf4_fixtures.py tests/fixtures/hf_llama
"""
import copy
import json
import os
import sys

import bitsandbytes
import bitsandbytes.functional as F
import torch
from safetensors.torch import load_file, save_file

LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")

QUANTIZATION_CONFIG = {
    "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True, "llm_int8_enable_fp32_cpu_offload": False,
    "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0,
    "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}


def main(root):
    src, out = os.path.join(root, "llama"), os.path.join(root, "llama_bnb_nf4")
    os.makedirs(out, exist_ok=True)
    weights = load_file(os.path.join(src, "model.safetensors"))
    held, dequantized, originals = {}, {}, {}
    for name, w in sorted(weights.items()):
        w = w.to(torch.bfloat16)
        module = name[: -len(".weight")]
        if not any(module.endswith(m) for m in LINEAR):
            held[name] = w
            continue
        q, state = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
        held[name] = q
        for key, value in state.as_dict(packed=True).items():
            held[f"{name}.{key}"] = value
        as_f32 = copy.copy(state)
        as_f32.dtype = torch.float32
        dequantized[name] = F.dequantize_4bit(q, as_f32)
        originals[name] = w
    save_file(held, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    save_file(dequantized, os.path.join(out, "dequantized.safetensors"))
    save_file(originals, os.path.join(out, "originals.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["dtype"] = "bfloat16"
    config["quantization_config"] = QUANTIZATION_CONFIG
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {out} with bitsandbytes {bitsandbytes.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf_llama")
