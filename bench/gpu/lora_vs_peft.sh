#!/usr/bin/env bash
# zerod's QLoRA and LoRA of Llama-3.1-8B's shape (random weights) on one GPU
# against Hugging Face transformers + PEFT (+ bitsandbytes' NF4 base with
# double quantization for QLoRA; ../shared/anchors/llama_anchor.py --mode
# qlora|lora --ckpt), alternated in the same call: r 16 on all seven
# products, T = 2048, gradient checkpointing, the same micro-batch B, the
# base held on the GPU by both (zerod uncapped at stage 0). One JSON line a
# run in OUT/lora_vs_peft.jsonl and the table in OUT/lora_vs_peft.txt:
# tokens/s (zerod's steps after the first, their tokens over their time;
# the anchor's timed steps after its warm-up), GPU peak (zerod: the sum of
# its accountant's per-category peaks, a bound on its total; the anchor:
# torch's max_memory_allocated) and zerod's ratio to the anchor. The goals
# (issue 70): QLoRA >= 2.0x, LoRA >= 1.5x, peak no higher.
#   bench/gpu/lora_vs_peft.sh BUILD_DIR OUT [ROUNDS] [SECONDS_PER_RUN] [B]
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$1 out=$2 rounds=${3:-2} limit=${4:-150} B=${5:-1}
mkdir -p "$out"
log=$out/lora_vs_peft.jsonl
: >"$log"
for round in $(seq 1 "$rounds"); do
  for mode in qlora lora; do
    quant=$([ "$mode" = qlora ] && echo nf4 || echo none)
    # Text data and no sample: nothing but training steps after the last one.
    run=$(timeout "$limit" "$build/cmd/zero-worker" --config examples/llama-3.1-8b-qlora.json --log-format json \
      --set run.gpu_memory_limit=null --set 'zero_optimization={"stage":0}' \
      --set "model.lora.base_quant=\"$quant\"" --set train_batch_size=$B --set train_micro_batch_size_per_gpu=$B \
      --set run.sample.tokens=0 --set run.steps=6 --set steps_per_print=1 2>"$out/zerod-$mode-$round.err")
    steps=$(grep '"step"' <<<"$run" | paste -sd,)
    summary=$(grep '"summary"' <<<"$run" | tail -1)
    echo "{\"round\":$round,\"mode\":\"$mode\",\"impl\":\"zerod\",\"B\":$B,\"steps\":[${steps}],\"summary\":${summary:-null}}" >>"$log"
    peft=$(timeout "$limit" python3 "${ZEROD_ANCHORS:-../shared/anchors}/llama_anchor.py" --shape llama-3.1-8b --mode "$mode" --ckpt \
      --batch "$B" --seq 2048 --rank 16 2>"$out/peft-$mode-$round.err" | tail -1)
    echo "{\"round\":$round,\"mode\":\"$mode\",\"impl\":\"peft\",\"B\":$B,\"result\":${peft:-null}}" >>"$log"
  done
done
python3 - "$log" >"$out/lora_vs_peft.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'round':>5} {'mode':>6} {'zerod tok/s':>12} {'GiB':>6} {'peft tok/s':>11} {'GiB':>6} {'ratio':>6}")
for z, p in zip(rows[0::2], rows[1::2]):
    s = z["steps"]
    span = s[-1]["elapsed_s"] - s[0]["elapsed_s"] if len(s) > 1 else 0
    ztok = round(z["B"] * 2048 * (len(s) - 1) / span) if span > 0 else None
    zgib = sum(z["summary"]["memory_peak"]["gpu"].values()) / 2**30 if z["summary"] else None
    r = p["result"] or {}
    ptok, pgib = r.get("tokens_per_s"), r.get("peak_gib")
    ratio = f"{ztok / ptok:.2f}" if ztok and ptok else "-"
    zg = f"{zgib:.2f}" if zgib else "-"
    print(f"{z['round']:>5} {z['mode']:>6} {ztok or '-':>12} {zg:>6} {ptok or '-':>11} {pgib or '-':>6} {ratio:>6}")
PY
cat "$out/lora_vs_peft.txt"
