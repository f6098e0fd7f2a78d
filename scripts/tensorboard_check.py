#!/usr/bin/env python3
"""TensorBoard itself reads zerod's event files: every scalar of every step
against the run's JSON step events, and the held-out losses against its
eval events (zero-worker --log-format json output).

  scripts/tensorboard_check.py EVENT_DIR RUN_OUTPUT [TRAIN_BATCH_SIZE]

Needs the tensorboard package (pip install tensorboard); exits 1 on a
mismatch, naming it."""
import json
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    event_dir, run_output = sys.argv[1], sys.argv[2]
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else None
    events = [json.loads(l) for l in open(run_output) if l.startswith("{")]
    start = next(e for e in events if e["event"] == "start")
    batch = batch or start["train_batch_size"]
    steps = {e["step"] * batch: e for e in events if e["event"] == "step"}
    evals = {e["step"] * batch: e for e in events if e["event"] == "eval"}
    acc = event_accumulator.EventAccumulator(event_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    checks = [("Train/Samples/train_loss", "loss", steps), ("Train/Samples/lr", "lr", steps),
              ("Train/Samples/grad_norm", "grad_norm", steps), ("Train/Samples/tokens_per_s", "tokens_per_s", steps),
              ("Train/Samples/mfu", "mfu", steps)]
    if evals:
        checks += [("Eval/Samples/eval_loss", "loss", evals), ("Eval/Samples/eval_perplexity", "perplexity", evals)]
    bad = 0
    compared = 0
    for tag, key, reported in checks:
        if tag not in tags:
            print(f"missing tag {tag} (TensorBoard found {len(tags)}: {sorted(tags)})")
            bad += 1
            continue
        seen = [(s.step, s.value) for s in acc.Scalars(tag)]
        if len({step for step, _ in seen}) != len(seen):
            print(f"{tag}: a step written twice")
            bad += 1
        for step, value in seen:
            if step in reported and reported[step].get(key) is not None:
                compared += 1
                if value != f32(reported[step][key]):
                    print(f"{tag} at {step}: TensorBoard {value!r}, the step event {reported[step][key]!r}")
                    bad += 1
    print(f"TensorBoard read {len(tags)} tags; {compared} values compared with the step events, {bad} problems")
    sys.exit(1 if bad or not compared else 0)


main()
