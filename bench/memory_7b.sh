#!/usr/bin/env bash
# The memory of one training step of a Llama-2-7B-shaped model (zoo llama:
# 32 layers, d 4096, ffn 11008, vocab 32000, seq 512; fp32, batch 8) for each
# optimizer and technique: the table of docs/memory.md and issue #5's note.
# Needs a build (scripts/build); writes the graph (weights not written: a
# sparse side file) under ${TMPDIR:-/tmp}/headroom-7b.
#   bench/memory_7b.sh [--batch N]
set -euo pipefail
cd "$(dirname "$0")/.."
headroom=${HEADROOM:-build/tools/headroom}
dir="${TMPDIR:-/tmp}/headroom-7b"
mkdir -p "$dir"
[ -f "$dir/llama.onnx" ] || "$headroom" zoo llama --weights none -o "$dir/llama.onnx" >/dev/null
batch=8
[ "${1:-}" = "--batch" ] && batch="$2"
printf '| optimizer | params | grad accumulators | optimizer state | activations at peak | gradients, most live at once | peak | passes/step | report time |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for flags in "adamw" "sgd --schedule never" "sgd" "lomo" "lomo --clip-grad-norm 1" \
             "lomo --accum 4" "sgd --accum 4" "adalomo"; do
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  json=$("$headroom" report "$dir/llama.onnx" --batch "$batch" --optimizer $flags --json)
  end=$(date +%s.%N)
  /usr/bin/python3 - "$flags" "$start" "$end" "$json" <<'PY'
import json, sys
flags, start, end, text = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
r = json.loads(text)
b = r["breakdown"]
def g(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.2f %s" % (n / size, unit)
    return "%d B" % n
print("| %s | %s | %s | %s | %s | %s | %s | %d | %.2f s |" % (
    flags, g(b["parameters"]), g(b["gradient_accumulators"]), g(b["optimizer_state"]),
    g(b["activations"]), g(r["gradients_max_live_bytes"]), g(r["peak_bytes"]),
    r["passes_per_step"], end - start))
PY
done
