#!/usr/bin/env bash
# Times ONNX import (+ canonicalize) of the test models and of a 7B-parameter
# Llama graph with external, sparse weights. Prints one line per model: the
# best of 5 wall-clock runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/tools/headroom
[ -x "$bin" ] || scripts/build
work=${TMPDIR:-/tmp}/headroom-bench
mkdir -p "$work"
if [ ! -f "$work/llama7b.onnx" ]; then
  /usr/bin/python3 bench/make_external_llama.py -o "$work/llama7b.onnx" >/dev/null
fi
best() { # best-of-5 seconds for a command
  local best=999
  for _ in 1 2 3 4 5; do
    local s e
    s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N)
    best=$(echo "$e - $s" | bc -l | awk -v b="$best" '{print ($1 < b) ? $1 : b}')
  done
  printf '%.3f' "$best"
}
for m in test/models/{mlp,lenet,gpt,llama}.onnx "$work/llama7b.onnx"; do
  printf '%-40s import+canonicalize %ss\n' "$(basename "$m")" \
    "$(best "$bin" opt "$m" --batch 8 --passes=canonicalize -o /dev/null)"
done
