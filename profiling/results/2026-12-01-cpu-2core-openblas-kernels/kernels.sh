#!/usr/bin/env bash
# Side by side: one full epoch (60,000 examples, batch 256, lr 0.2, one replica) with each choice of
# OpenBLAS kernels, three rounds, alternating; then the source text's experiment with the kernels
# lenet-train chooses by itself. Usage: kernels.sh LENET_TRAIN OUTDIR
set -euo pipefail
train=$1 out=$2
mkdir -p "$out"
kernels() {  # KERNELS CMD...: CMD with OPENBLAS_CORETYPE=KERNELS, or unset for "auto"
  local k=$1
  shift
  if [[ $k == auto ]]; then env -u OPENBLAS_CORETYPE "$@"; else env OPENBLAS_CORETYPE="$k" "$@"; fi
}
for k in Prescott auto Haswell; do echo "$k: $(kernels $k "$train" --version)"; done
for round in 1 2 3; do
  for k in Prescott auto Haswell; do
    kernels $k "$train" --backend cpu --epochs 1 --quiet --metrics "$out/epoch-$k-$round.jsonl" 2>&1 |
      sed "s/^/round $round $k: /"
  done
done
kernels auto "$train" --backend cpu --metrics "$out/cpu-r1-10epochs.jsonl" 2>&1 | tee "$out/cpu-r1-10epochs.log"
