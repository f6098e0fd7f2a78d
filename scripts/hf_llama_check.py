#!/usr/bin/env python3
"""Check that a model directory loads in transformers and reproduces reference logits.

    python3 scripts/hf_llama_check.py MODEL_DIR EXPECTED_JSON [--tolerance 1e-4]

EXPECTED_JSON is an expected.json from scripts/hf_llama_fixtures.py (tokens,
targets, logits, loss). Used to confirm that a checkpoint exported by zerod is
readable by Hugging Face with the same numbers. Exits 0 when the max abs logit
difference is within tolerance * max |expected logit|, else 1.
"""
import argparse
import json
import os
import sys

# A local directory: never ask the Hub about it (offline machines retry for a minute).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("expected_json")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()
    transformers.utils.logging.disable_progress_bar()

    with open(args.expected_json) as f:
        exp = json.load(f)
    b, s, v = exp["batch"], exp["seq"], exp["vocab"]
    tokens = torch.tensor(exp["tokens"]).view(b, s)
    targets = torch.tensor(exp["targets"]).view(-1)
    want = torch.tensor(exp["logits"], dtype=torch.float32).view(b, s, v)

    model = AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        got = model(input_ids=tokens).logits.float()
    if got.shape != want.shape:
        print(f"logits shape {list(got.shape)} != expected {list(want.shape)}")
        return 1

    diff = (got - want).abs().max().item()
    scale = want.abs().max().item()
    loss = F.cross_entropy(got.view(-1, v).double(), targets).item()
    print(f"max |logit diff| {diff:.3e} (max |logit| {scale:.3e}, rel {diff / scale:.3e})")
    print(f"loss {loss:.9f} expected {exp['loss']:.9f} diff {abs(loss - exp['loss']):.3e}")
    ok = diff <= args.tolerance * scale
    print("OK" if ok else f"FAIL: above tolerance {args.tolerance}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
