#!/usr/bin/env bash
# Re-record the CPU GPT ground-truth traces in this folder (one run per sub-folder).
#
#   PYTHON   python with torch installed (default /work/torchenv/bin/python; torch 2.13.0+cpu was used)
#   CAPTURE  capture script (default ../shared/tools/capture_gpt_traces.py, relative to repo root)
#   MAX_LOAD wait while the 1-minute load average is above this (default 1.5)
#   WARM_MB  MiB of memory to touch once before recording (default 4096; 0 = skip). On the VM these
#            traces were recorded on, the first touch of never-used guest memory is ~10x slower
#            (host-side faults), and steps flip between a fast and a slow mode (+40..90 ms/step in
#            log_softmax, nll_loss_backward, head matmul). The warm-up reduces the slow steps but
#            does not remove them. See README.md "Noise".
#
# Usage: tests/data/cpu-gpt/record.sh [run-name ...]   (no names = all runs)
# Runs are recorded sequentially; an existing non-empty run folder makes the capture script fail,
# so delete a folder before re-recording it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-/work/torchenv/bin/python}"
CAPTURE="${CAPTURE:-../shared/tools/capture_gpt_traces.py}"
MAX_LOAD="${MAX_LOAD:-1.5}"

# Base configuration; every variant changes exactly one knob.
BASE=(--layers 4 --hidden 256 --heads 4 --seq 128 --vocab 4096 --micro-batch 4 --microbatches 1
      --dp 1 --threads 1 --warmup 2 --steps 5)

declare -A KNOB=(
  [base]=""
  [base_repeat]=""
  [layers8]="--layers 8"
  [hidden512]="--hidden 512"
  [ffn2048]="--ffn 2048"
  [mb2]="--microbatches 2"
  [mb4]="--microbatches 4"
  [dp2]="--dp 2"
  [seq256]="--seq 256"
  [microbatch8]="--micro-batch 8"
)
ORDER=(base layers8 hidden512 ffn2048 mb2 mb4 dp2 seq256 microbatch8 base_repeat)

wait_for_quiet() {
  local tries=0
  while :; do
    local load
    load="$(cut -d' ' -f1 /proc/loadavg)"
    if awk -v l="$load" -v m="$MAX_LOAD" 'BEGIN{exit !(l <= m)}'; then
      echo "load $load <= $MAX_LOAD"
      return
    fi
    tries=$((tries + 1))
    if [ "$tries" -gt 8 ]; then
      echo "load still $load after $tries checks; recording anyway" >&2
      return
    fi
    echo "load $load > $MAX_LOAD, waiting 45 s" >&2
    sleep 45
  done
}

warm_memory() {
  [ "${WARM_MB:-4096}" -gt 0 ] || return 0
  echo "touching ${WARM_MB:-4096} MiB once to warm the VM's memory"
  "$PYTHON" -c "import sys, torch; torch.ones(int(sys.argv[1]) * 2**18).sum()" "${WARM_MB:-4096}"
}

warm_memory
names=("$@")
[ "${#names[@]}" -gt 0 ] || names=("${ORDER[@]}")
for name in "${names[@]}"; do
  [ -v "KNOB[$name]" ] || { echo "unknown run: $name" >&2; exit 2; }
  wait_for_quiet
  # Later flags override earlier ones (argparse), so the knob is appended after BASE.
  # shellcheck disable=SC2086
  echo "+ $PYTHON $CAPTURE --out $HERE/$name ${BASE[*]} ${KNOB[$name]}"
  # shellcheck disable=SC2086
  "$PYTHON" "$CAPTURE" --out "$HERE/$name" "${BASE[@]}" ${KNOB[$name]} 2>&1 | grep -v '^USDT:' || true
  [ -s "$HERE/$name/config.json" ] || { echo "run $name failed" >&2; exit 1; }
  sleep 5
done
