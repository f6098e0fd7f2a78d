#!/usr/bin/env bash
# Does LoRA learn what full fine-tuning learns? The demo model pre-trained on
# the synthetic task for PRE steps, exported, then fine-tuned for FT more
# steps three ways from that checkpoint: in full, with LoRA (r 16, alpha 32,
# every product), and with LoRA over an NF4 base. Prints each run's final
# loss and its accuracy on the held-out prompts.
#
#   bench/lora_learning.sh [PRE] [FT]      (defaults 1000 and 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
pre=${1:-1000}
ft=${2:-1000}
worker=$PWD/build/cmd/zero-worker
job=$PWD/examples/demo.json
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

# Final loss and accuracy of a run's text output.
result() { awk '/^done:/ {loss = $NF} /^done:/ {for (i = 1; i <= NF; ++i) if ($i == "->") loss = $(i + 1)}
                /synthetic accuracy/ {acc = $NF} END {printf "loss %s, accuracy %s\n", loss, acc}'; }

schedule() {  # the demo's warm-up and decay over n steps
  echo "--set scheduler.params.total_num_steps=$1 --set run.steps=$1"
}

"$worker" --config "$job" $(schedule "$pre") --set run.checkpoint.dir=pre >pre.log
echo "pre-trained, $pre steps: $(result <pre.log)"
"$worker" export --checkpoint pre --out pre-hf >/dev/null
from="--set model.init_from=$dir/pre-hf/model.safetensors --set data.seed=2"
# shellcheck disable=SC2086
"$worker" --config "$job" $(schedule "$ft") $from >full.log
echo "full fine-tune, $ft steps: $(result <full.log)"
lora='model.lora={"r": 16, "alpha": 32, "target_modules": "all-linear"}'
# shellcheck disable=SC2086
"$worker" --config "$job" $(schedule "$ft") $from --set "$lora" >lora.log
echo "LoRA r 16 on every product, $ft steps: $(result <lora.log)"
# shellcheck disable=SC2086
"$worker" --config "$job" $(schedule "$ft") $from --set "$lora" --set model.lora.base_quant=nf4 >qlora.log
echo "LoRA r 16 over an NF4 base, $ft steps: $(result <qlora.log)"
