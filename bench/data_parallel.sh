#!/usr/bin/env bash
# One rank's planned peak for LLaMA-7B, 13B and 65B (zoo shapes, seq 1024,
# batch 1 per rank, bf16, recompute every=1, --device cuda) on 1, 8 and 64
# ranks, ZeRO stages 0-3, AdamW (f32 masters) and LOMO (bf16 weights, no
# masters), beside the ZeRO paper's model-state formulas (Rajbhandari et al.
# 2020, mixed-precision Adam: 2+2+12 bytes per parameter; LOMO: 2 bytes of
# weights) and DeepSpeed's estimator (estimate_zero2/zero3_model_states_
# mem_needs without offload: 4P + 16P/N, and 4 x largest layer + 18P/N),
# and the step estimate with the collectives overlapped (on cuda's copy
# stream) beside what the same calls take in order (compute + collectives).
# The table of docs/distributed.md and issue #26's note. Needs a build;
# writes the graphs (weights not written) under ${TMPDIR:-/tmp}.
#   bench/data_parallel.sh [MODEL...]   (default llama2-7b llama2-13b llama-65b)
set -euo pipefail
cd "$(dirname "$0")/.."
headroom=${HEADROOM:-build/tools/headroom}
dir="${TMPDIR:-/tmp}/headroom-dp"
mkdir -p "$dir"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(llama2-7b llama2-13b llama-65b)
printf '| model | optimizer | ranks | zero | headroom peak / rank | sharded / whole state | collectives / step (Psi) | step estimate: overlapped (in order) | ZeRO paper (model states) | DeepSpeed estimator | report time |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for model in "${models[@]}"; do
  [ -f "$dir/$model.onnx" ] ||
    "$headroom" zoo "$model" --seq 1024 --weights none -o "$dir/$model.onnx" >/dev/null
  for opt in adamw lomo; do
    flags="--optimizer $opt --precision bf16"
    [ "$opt" = lomo ] && flags="$flags --master-weights none"
    for ranks in 1 8 64; do
      for zero in 0 1 2 3; do
        [ "$ranks" = 1 ] && [ "$zero" != 0 ] && continue
        dp=""
        [ "$ranks" != 1 ] && dp="--ranks $ranks --zero $zero"
        start=$(date +%s.%N)
        # shellcheck disable=SC2086
        json=$("$headroom" report "$dir/$model.onnx" --batch "$ranks" $flags $dp \
                 --recompute every=1 --device cuda --json)
        end=$(date +%s.%N)
        /usr/bin/python3 - "$model" "$opt" "$ranks" "$zero" "$start" "$end" "$json" <<'PY'
import json, sys
model, opt, ranks, zero, start, end, text = sys.argv[1:]
ranks, zero = int(ranks), int(zero)
r = json.loads(text)
d = r["data_parallel"]
P = r["tensors"]["trainable"]["values"]
def g(n):
    return "%.2f GiB" % (n / (1 << 30))
if opt == "adamw":
    paper = [16 * P, 4 * P + 12 * P / ranks, 2 * P + 14 * P / ranks, 16 * P / ranks][zero]
    ds = {1: 4 * P + 16 * P / ranks, 2: 4 * P + 16 * P / ranks}.get(zero)
    if zero == 3:  # its largest layer: the embedding, vocab x d
        d_model = {"llama2-7b": 4096, "llama2-13b": 5120, "llama-65b": 8192}[model]
        ds = 4 * 32000 * d_model + 18 * P / ranks
    ds = g(ds) if ds else "-"
else:
    paper = [4 * P, 4 * P, 2 * P + 2 * P / ranks, 4 * P / ranks][zero]
    ds = "-"
e = r["step_estimate"]
print("| %s | %s | %d | %d | %s | %s / %s | %s (%.2f) | %.2f s (%.2f s) | %s | %s | %.2f s |" % (
    model, opt, ranks, zero, g(r["peak_bytes"]), g(d["shard_bytes"]),
    g(d["shard_whole_bytes"]), g(d["collective_bytes"]), d["collective_psi"],
    e["seconds"], e["compute_seconds"] + e["collective_seconds"],
    g(paper), ds, float(end) - float(start)))
PY
      done
    done
  done
done
