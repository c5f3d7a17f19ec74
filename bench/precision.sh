#!/usr/bin/env bash
# Mixed precision on zoo llama-7B (batch 8, seq 512) for the cuda target
# (native bf16 kernels; the cpu target adds a widening workspace): parameters,
# optimizer state, activations kept at the loss, peak, for fp32 / bf16 with
# fp32 master weights / bf16 without, each optimizer (and AdamW with 8-bit
# moments, `adamw8bit`), with and without --recompute every=1. Figures from
# `headroom report --json` (docs/precision.md).
#   bench/precision.sh [--device cpu|cuda]
set -euo pipefail
cd "$(dirname "$0")/.."
headroom=build/tools/headroom
dir="${TMPDIR:-/tmp}/headroom-recompute"
mkdir -p "$dir"
[ -f "$dir/llama.onnx" ] || "$headroom" zoo llama --weights none -o "$dir/llama.onnx" >/dev/null
device=cuda
[ "${1:-}" = "--device" ] && device="$2"
printf '| optimizer | precision | --recompute | params | optimizer state | kept at the loss | peak |\n|---|---|---|---|---|---|---|\n'
for opt in adamw adamw8bit sgd lomo; do
  for precision in fp32 "bf16 --master-weights fp32" "bf16 --master-weights none"; do
    for recompute in none every=1; do
      flags="--optimizer $opt"
      [ "$opt" = adamw8bit ] && flags="--optimizer adamw --optimizer-state int8"
      # shellcheck disable=SC2086
      json=$("$headroom" report "$dir/llama.onnx" --batch 8 --device "$device" \
             $flags --precision $precision --recompute "$recompute" --json)
      /usr/bin/python3 - "$opt" "$precision" "$recompute" "$json" <<'PY'
import json, sys
opt, precision, recompute, text = sys.argv[1:5]
r = json.loads(text)
b = r["breakdown"]
G = 2 ** 30
print("| %s | %s | %s | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GiB |" % (
    opt, precision.replace(" --master-weights ", ", master "), recompute,
    b["parameters"] / G, b["optimizer_state"] / G,
    r["saved_activations_bytes"] / G, r["peak_bytes"] / G))
PY
    done
  done
done
