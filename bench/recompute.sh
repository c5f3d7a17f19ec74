#!/usr/bin/env bash
# Activation recomputation on the zoo models (docs/recompute.md): for each
# policy, the activations kept at the loss, the planned peak and the
# recomputed FLOPs, from `headroom report` (fp32), next to the papers'
# figures; then the time of the whole frontier (`--recompute sweep`).
#   bench/recompute.sh [--attention fused|unfused]
#                             gpt2-124M (batch 8, seq 1024, sgd) and
#                             llama-7B (batch 8, seq 512, lomo); the
#                             attention flag is passed to every report
#                             (docs/recompute.md's tables: unfused)
# Needs a build (scripts/build); writes the graphs (weights not written) under
# ${TMPDIR:-/tmp}/headroom-recompute.
set -euo pipefail
cd "$(dirname "$0")/.."
headroom=build/tools/headroom
attention=()
[ "${1:-}" = "--attention" ] && attention=(--attention "$2")
dir="${TMPDIR:-/tmp}/headroom-recompute"
mkdir -p "$dir"
[ -f "$dir/gpt2.onnx" ] || "$headroom" zoo gpt2 --weights none -o "$dir/gpt2.onnx" >/dev/null
[ -f "$dir/llama.onnx" ] || "$headroom" zoo llama --weights none -o "$dir/llama.onnx" >/dev/null

table() { # model optimizer
  printf '\n%s, batch 8, --optimizer %s\n\n' "$1" "$2"
  printf '| --recompute | kept at the loss | of none | peak | recomputed FLOPs | report time |\n|---|---|---|---|---|---|\n'
  for policy in none selective sqrt every=1 every=2 all; do
    start=$(date +%s.%N)
    json=$("$headroom" report "$dir/$1.onnx" --batch 8 --optimizer "$2" --recompute "$policy" "${attention[@]}" --json)
    end=$(date +%s.%N)
    /usr/bin/python3 - "$policy" "$start" "$end" "$json" "$dir/$1.$2.none" <<'PY'
import json, os, sys
policy, start, end, text, base = sys.argv[1:6]
r = json.loads(text)
kept = r["saved_activations_bytes"]
if policy == "none":
    open(base, "w").write(str(kept))
none = int(open(base).read())
extra = r["recompute_flops"] / (r["step_flops"] - r["recompute_flops"])
print("| %s | %.2f GiB | %.1f%% | %.2f GiB | +%.1f%% | %.2f s |" % (
    policy, kept / 2**30, 100 * kept / none, r["peak_bytes"] / 2**30,
    100 * extra, float(end) - float(start)))
PY
  done
}
table gpt2 sgd
table llama lomo
table llama adamw

printf '\nThe frontier (every candidate compiled):\n'
for m in "gpt2 sgd" "llama lomo"; do
  set -- $m
  start=$(date +%s.%N)
  "$headroom" report "$dir/$1.onnx" --batch 8 --optimizer "$2" --recompute sweep "${attention[@]}" --svg "$dir/$1.$2.sweep.svg" >/dev/null
  end=$(date +%s.%N)
  /usr/bin/python3 -c "import sys; print('  %s %s: %.2f s (%s)' % (sys.argv[1], sys.argv[2], float(sys.argv[4]) - float(sys.argv[3]), sys.argv[5]))" "$1" "$2" "$start" "$end" "$dir/$1.$2.sweep.svg"
done

# Korthikanti et al. 2022, per layer, 16-bit activations with dropout:
# s b h (34 + 5 a s / h) bytes, and s b h 34 with selective recomputation.
/usr/bin/python3 - <<'PY'
for name, s, b, h, a, L in (("gpt2-124M", 1024, 8, 768, 12, 12),
                            ("llama-7B", 512, 8, 4096, 32, 32)):
    full = s * b * h * (34 + 5 * a * s / h) * L
    sel = s * b * h * 34 * L
    print("Korthikanti (16-bit, all %d layers) %s: none %.2f GiB, selective %.2f GiB (%.0f%%)"
          % (L, name, full / 2**30, sel / 2**30, 100 * sel / full))
PY
