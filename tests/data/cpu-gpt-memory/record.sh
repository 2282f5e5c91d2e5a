#!/usr/bin/env bash
# Re-record the memory-profiled CPU GPT traces in this folder (one run per sub-folder).
#
#   PYTHON  python with torch installed (torch 2.13.0+cpu was used)
#
# Usage: tests/data/cpu-gpt-memory/record.sh [run-name ...]   (no names = all runs)
# An existing run folder is replaced.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"

# Base configuration; every variant changes exactly one knob (argparse keeps the last value).
BASE=(--profile-memory --layers 4 --hidden 256 --heads 4 --seq 128 --vocab 4096 --micro-batch 4
      --microbatches 1 --threads 1 --steps 3)

declare -A KNOB=(
  [base]=""
  [layers8]="--layers 8"
  [microbatch8]="--micro-batch 8"
  [seq256]="--seq 256"
)
ORDER=(base layers8 microbatch8 seq256)

names=("$@")
[ "${#names[@]}" -gt 0 ] || names=("${ORDER[@]}")
for name in "${names[@]}"; do
  [ -v "KNOB[$name]" ] || { echo "unknown run: $name" >&2; exit 2; }
  rm -rf "${HERE:?}/$name"
  # shellcheck disable=SC2086
  echo "+ $PYTHON record.py --out $HERE/$name ${BASE[*]} ${KNOB[$name]}"
  # shellcheck disable=SC2086
  "$PYTHON" "$HERE/record.py" --out "$HERE/$name" "${BASE[@]}" ${KNOB[$name]} 2>&1 | grep -v -e '^USDT:' -e 'NumPy' -e '_conversion_method_template' || true
  [ -s "$HERE/$name/config.json" ] || { echo "run $name failed" >&2; exit 1; }
done
