#!/usr/bin/env bash
# zerod training on one GPU against PyTorch (torch.compile, bf16 autocast,
# fused AdamW, SDPA) training the same architecture at the same batch,
# alternated in the same call: gpt2 at B = 16 and gpt2-xl at B = 8, T =
# 1024, gpt2 at B = 4, T = 4096 (as many tokens a step), through
# bench/gpu/torch_gpt2.py; Llama-3.2-1B's shape (random weights) at B = 8,
# T = 2048 and at B = 1, T = 8192, and Qwen2.5-1.5B's at B = 8, T = 2048,
# against Hugging Face transformers' own model classes
# (../shared/anchors/llama_anchor.py --mode full --compile). One JSON line
# per run in OUT/train_vs_torch.jsonl, and the table in
# OUT/train_vs_torch.txt (tokens/s, MFU = (6N + 6LCT) tokens/s over 989
# TFLOP/s for both, and zerod's ratio to PyTorch in the same round; zerod's
# figure is its steps after the first, their tokens over their time (the
# step events' elapsed_s: each event's tokens_per_s counts the first step
# too), PyTorch's the mean of its timed steps after three warm-up ones).
#   bench/gpu/train_vs_torch.sh BUILD_DIR OUT [ROUNDS] [SECONDS_PER_RUN] [SHAPES]
# (SHAPES: those of gpt2, gpt2-xl, gpt2-4k, llama-1b, llama-1b-8k and
# qwen-1.5b to run, comma-separated; all by default)
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$1 out=$2 rounds=${3:-2} limit=${4:-150} only=${5:-}
mkdir -p "$out"
log=$out/train_vs_torch.jsonl
: >"$log"
# name preset L C H B T zerod-steps [the anchor's shape, for the Llama family]
shapes=("gpt2 gpt2 12 768 12 16 1024 6" "gpt2-xl gpt2-xl 48 1600 25 8 1024 3" "gpt2-4k gpt2 12 768 12 4 4096 6"
  "llama-1b llama-3.2-1b 16 2048 32 8 2048 4 llama-3.2-1b" "llama-1b-8k llama-3.2-1b 16 2048 32 1 8192 4 llama-3.2-1b"
  "qwen-1.5b qwen2.5-1.5b 28 1536 12 8 2048 4 qwen2.5-1.5b")
for round in $(seq 1 "$rounds"); do
  for shape in "${shapes[@]}"; do
    read -r name preset L C H B T steps anchor <<<"$shape"
    [ -z "$only" ] || [[ ",$only," == *",$name,"* ]] || continue
    # Text data and no sample: nothing but training steps after the last one.
    steps_json=$(timeout "$limit" "$build/cmd/zero-worker" --config examples/gpu_gpt2.json --log-format json \
      --set "model.preset=\"$preset\"" --set model.block_size=$T --set data.seq_len=$T \
      --set train_batch_size=$B --set train_micro_batch_size_per_gpu=$B \
      --set data.kind='"text"' --set data.path='"docs/*.md"' --set run.sample.tokens=0 \
      --set run.steps=$steps --set steps_per_print=1 2>"$out/zerod-$name-$round.err" | grep '"step"' | paste -sd,)
    echo "{\"round\":$round,\"shape\":\"$name\",\"impl\":\"zerod\",\"L\":$L,\"C\":$C,\"B\":$B,\"T\":$T,\"steps\":[${steps_json}]}" >>"$log"
    if [ -n "$anchor" ]; then
      torch=$(timeout "$limit" python3 "${ZEROD_ANCHORS:-../shared/anchors}/llama_anchor.py" --shape "$anchor" --mode full --batch "$B" \
        --seq "$T" --compile 2>"$out/torch-$name-$round.err" | tail -1)
    else
      torch=$(timeout "$limit" python3 bench/gpu/torch_gpt2.py --layers "$L" --width "$C" --heads "$H" --batch "$B" \
        --seq "$T" --compile 2>"$out/torch-$name-$round.err" | tail -1)
    fi
    echo "{\"round\":$round,\"shape\":\"$name\",\"impl\":\"pytorch-compile\",\"L\":$L,\"C\":$C,\"B\":$B,\"result\":${torch:-null}}" >>"$log"
  done
done
python3 - "$log" >"$out/train_vs_torch.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak = 989e12
def mfu(n, L, C, T, tok): return (6 * n + 6 * L * C * T) * tok / peak
print(f"{'round':>5} {'shape':>11} {'zerod tok/s':>12} {'MFU':>6} {'torch tok/s':>12} {'MFU':>6} {'ratio':>6}")
for z, t in zip(rows[0::2], rows[1::2]):
    # zerod: its steps after the first (the warm-up), tokens over time.
    s = z["steps"]
    span = s[-1]["elapsed_s"] - s[0]["elapsed_s"] if len(s) > 1 else 0
    tr = t["result"] or {}
    T = z["T"]
    ztok, ttok = (round(z["B"] * T * (len(s) - 1) / span) if span > 0 else None), tr.get("tokens_per_s")
    n = tr.get("params")
    zm = f"{mfu(n, z['L'], z['C'], T, ztok):.3f}" if ztok and n else "-"
    tm = f"{mfu(n, z['L'], z['C'], T, ttok):.3f}" if ttok and n else "-"
    ratio = f"{ztok / ttok:.3f}" if ztok and ttok else "-"
    print(f"{z['round']:>5} {z['shape']:>11} {ztok or '-':>12} {zm:>6} {ttok or '-':>12} {tm:>6} {ratio:>6}")
PY
cat "$out/train_vs_torch.txt"
