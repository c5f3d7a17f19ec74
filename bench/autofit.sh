#!/usr/bin/env bash
# Auto-fit on the zoo models (docs/autofit.md): the winner of
# `headroom report --memory-budget SIZE --allow-optimizer lomo` for
# llama-7B (batch 8, seq 512) at 80/40/24/16 GiB and gpt2-124M (batch 8,
# seq 1024) at 8/4 GiB, from AdamW, for the cuda target; its peak, the
# candidates compiled, and the search time.
set -euo pipefail
cd "$(dirname "$0")/.."
headroom=build/tools/headroom
dir="${TMPDIR:-/tmp}/headroom-recompute"
mkdir -p "$dir"
[ -f "$dir/gpt2.onnx" ] || "$headroom" zoo gpt2 --weights none -o "$dir/gpt2.onnx" >/dev/null
[ -f "$dir/llama.onnx" ] || "$headroom" zoo llama --weights none -o "$dir/llama.onnx" >/dev/null
printf '| model | budget | winner | peak | candidates | search |\n|---|---|---|---|---|---|\n'
for run in "llama 80GiB" "llama 40GiB" "llama 24GiB" "llama 16GiB" "gpt2 8GiB" "gpt2 4GiB"; do
  set -- $run
  json=$("$headroom" report "$dir/$1.onnx" --batch 8 --device cuda --optimizer adamw \
         --memory-budget "$2" --allow-optimizer lomo --json)
  /usr/bin/python3 - "$1" "$2" "$json" <<'PY'
import json, sys
model, budget, text = sys.argv[1:4]
r = json.loads(text)
print("| %s | %s | %s | %.2f GiB | %d | %.2f s |" % (
    model, budget, r["winner"], r["report"]["peak_bytes"] / 2**30,
    len(r["candidates"]), r["search_seconds"]))
PY
done
