"""zerod's LoRA files read by Hugging Face PEFT itself (run by gpu_check.sh,
where transformers and peft are installed), GPT-2's or a Llama's: the
exported base with the exported adapter (PeftModel.from_pretrained) against
the exported merged model (export --merge), on the same tokens.

    python3 scripts/peft_check.py BASE_DIR ADAPTER_DIR MERGED_DIR
"""
import os
import sys

# Local directories: never ask the Hub about them.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

base_dir, adapter_dir, merged_dir = sys.argv[1:4]
torch.manual_seed(0)


def model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


with torch.no_grad():
    base = model(base_dir)
    positions = getattr(base.config, "n_positions", None) or base.config.max_position_embeddings
    ids = torch.randint(0, base.config.vocab_size, (2, min(32, positions)))
    plain = base(ids).logits
    adapted = PeftModel.from_pretrained(base, adapter_dir).eval()(ids).logits
    merged = model(merged_dir)(ids).logits
err = (adapted - merged).abs().max().item()
scale = merged.abs().max().item()
moved = (adapted - plain).abs().max().item()
print(f"PEFT's adapted logits against zerod's merged model: max |diff| {err:.3g} of {scale:.3g}; "
      f"the adapter moves them by {moved:.3g}")
sys.exit(0 if err <= 1e-4 * scale and moved > 100 * err else 1)
