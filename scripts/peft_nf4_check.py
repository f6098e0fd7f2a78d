"""zerod's QLoRA files over a base held in NF4 by bitsandbytes, read by
transformers, bitsandbytes and PEFT themselves: the 4-bit base directory
(a bitsandbytes 4-bit model, loaded as such) with the adapter zerod
exported (PeftModel.from_pretrained), and that base's weights dequantized
into an fp32 model with the same adapter, each against the merged model
zerod exported (export --merge), on the same tokens. The fp32 comparison is
exact to rounding; the 4-bit model computes in its compute dtype (bf16),
which bounds how close it can come.

    python3 scripts/peft_nf4_check.py BNB_DIR ADAPTER_DIR MERGED_DIR
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import bitsandbytes.functional as F
import torch
from bitsandbytes.functional import QuantState
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

bnb_dir, adapter_dir, merged_dir = sys.argv[1:4]


def dequantized_state(path):
    """The 4-bit model's tensors, each linear layer dequantized to fp32."""
    held = load_file(os.path.join(path, "model.safetensors"))
    out = {}
    for name, t in held.items():
        if ".weight." in name:
            continue  # a quantized weight's state
        if t.dtype == torch.uint8:
            parts = {k[len(name) + 1:]: v for k, v in held.items() if k.startswith(name + ".")}
            state = QuantState.from_dict(parts, device=torch.device("cpu"))
            state.dtype = torch.float32
            out[name] = F.dequantize_4bit(t, state)
        else:
            out[name] = t.float()
    return out


with torch.no_grad():
    quantized = AutoModelForCausalLM.from_pretrained(bnb_dir, device_map="cpu").eval()
    fp32 = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(bnb_dir), dtype=torch.float32).eval()
    fp32.config.quantization_config = None
    fp32.load_state_dict(dequantized_state(bnb_dir))
    torch.manual_seed(0)
    ids = torch.randint(0, quantized.config.vocab_size, (2, min(32, quantized.config.max_position_embeddings)))
    plain = fp32(ids).logits
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()(ids).logits
    exact = PeftModel.from_pretrained(fp32, adapter_dir).eval()(ids).logits
    in_4bit = PeftModel.from_pretrained(quantized, adapter_dir).eval()(ids).logits.float()
scale = merged.abs().max().item()
err, err4 = (exact - merged).abs().max().item(), (in_4bit - merged).abs().max().item()
moved = (exact - plain).abs().max().item()
print(f"PEFT over the dequantized base against zerod's merged model: max |diff| {err:.3g} of {scale:.3g}; "
      f"over the 4-bit model (bf16 compute): {err4:.3g}; the adapter moves the logits by {moved:.3g}")
sys.exit(0 if err <= 1e-4 * scale and err4 <= 0.05 * scale and moved > 10 * err4 else 1)
