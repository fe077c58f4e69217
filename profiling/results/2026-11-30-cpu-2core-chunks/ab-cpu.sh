#!/bin/bash
# Side-by-side: the CPU backend before (e1952f6) and after the chunked parallel step, alternating, one
# epoch of the full training set each (batch 256, lr 0.2, seed 1, R=1), 3 rounds.
set -e
old=$1 new=$2 out=$3
mkdir -p "$out"
printf "| round | binary | s/epoch | examples/s |\n|---|---|---|---|\n"
for round in 1 2 3; do
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    rm -f "$out/$which-$round.jsonl"
    "$bin" --backend cpu --epochs 1 --quiet --metrics "$out/$which-$round.jsonl" >/dev/null
    python3 -c "import json,sys;r=json.loads(open(sys.argv[1]).read());print(f\"| $round | $which | {r['epoch_seconds']:.2f} | {r['examples_per_second']:.0f} |\")" "$out/$which-$round.jsonl"
  done
done
