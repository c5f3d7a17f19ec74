#!/bin/bash
# The CUDA backend on a GPU machine, in one run:
#
#   bench/gpu.sh [--steps N] [--batch B] [--seq S] [--skip-tests] [--prebuilt DIR]
#
#  1. configures and builds headroom and the GPU suite (Release, sm_90,
#     ninja -j16) in $BUILD (default build-gpu), timed;
#  2. runs the GPU suite (test/gpu: every CUDA kernel against the CPU, the
#     ONNX node tests on the CUDA executor, the test models trained on CUDA
#     against the CPU, device memory measured against the plan);
#  3. trains zoo gpt2-124M (12 layers, d 768, seq 1024, vocab 50257; AdamW
#     lr 1e-3, fp32 with TF32 off) with `headroom train --device cuda` and
#     with PyTorch eager on the same ONNX graph and weights
#     (bench/onnx_torch.py), then bf16 (headroom --precision bf16 against
#     torch.autocast bf16), and prints tokens/s, peak device memory
#     (torch.cuda.max_memory_allocated against headroom's allocation and
#     planned peak) and their ratios; then bf16 again with --attention
#     unfused: fused attention's step time and planned peak against it.
#
# Results go under $OUT (default bench-gpu-out): build.log, gputests.log,
# headroom_*.jsonl, torch_*.json, and gpu.json with every figure.
#
# Needs: nvcc (CUDA 13), cmake, ninja, python3 with torch, onnx and numpy,
# and headroom's build dependencies (scripts/setup installs them on Debian).
# Where those dependencies cannot be installed (this workplace's device
# machine), run bench/gpu-bundle.sh here first, carry .gpu-bundle, and pass
# --prebuilt .gpu-bundle: step 1 then unpacks the binaries built here.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/bench-gpu-out}
BUILD=${BUILD:-$root/build-gpu}
steps=30 batch=8 seq=1024 tests=1 prebuilt=
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --seq) seq=$2; shift 2 ;;
  --skip-tests) tests=0; shift ;;
  --prebuilt) prebuilt=$2; shift 2 ;;
  *) echo "bench/gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
  tee "$OUT/gpu.txt" || { echo "bench/gpu.sh: no GPU (nvidia-smi failed)" >&2; exit 1; }

echo "== build"
start=$(date +%s.%N)
if [ -n "$prebuilt" ]; then
  unpacked=$(mktemp -d)
  xz -dc "$prebuilt/bundle.tar.xz" | tar -C "$unpacked" -xf -
  export LD_LIBRARY_PATH="$unpacked/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  [ -d "$unpacked/node" ] && export HEADROOM_ONNX_NODE_TESTS="$unpacked/node"
  export HEADROOM_SOURCE_DIR="$root"
  headroom=$unpacked/bin/headroom
  gputests=$unpacked/bin/headroom_gputests
  echo "prebuilt binaries from $prebuilt" >"$OUT/build.log"
else
  cmake -S "$root" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1
  ninja -C "$BUILD" -j16 headroom headroom_gputests >>"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
  headroom=$BUILD/tools/headroom
  gputests=$BUILD/test/headroom_gputests
fi
build_s=$(python3 -c "import time,sys; print(round(time.time() - float(sys.argv[1]), 1))" "$start")
echo "ready in ${build_s} s"

if [ $tests = 1 ]; then
  echo "== test/gpu"
  set +e
  "$gputests" >"$OUT/gputests.log" 2>&1
  gpu_rc=$?
  set -e
  grep -E "^\[  (PASSED|FAILED)|tests? ran|\[ (gpu memory|cuda kernels)" "$OUT/gputests.log" || true
else
  gpu_rc=skipped
fi

echo "== zoo gpt2-124M, seq $seq, batch $batch, $steps steps"
model=${TMPDIR:-/tmp}/gpt2_124m.onnx
"$headroom" zoo gpt2 --seq "$seq" -o "$model"
python3 - "$model" "$OUT/tokens.npz" "$batch" "$steps" "$seq" <<'EOF'
import sys, numpy as np
model, out, batch, steps, seq = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
rng = np.random.default_rng(0)
ids = rng.integers(0, 50257, size=(batch * steps, seq + 1), dtype=np.int64)
np.savez(out, input_ids=ids[:, :-1], targets=ids[:, 1:])
EOF

run_headroom() { # precision tag [attention]
  tag=$1${2:+_$2}
  "$headroom" train "$model" --data "$OUT/tokens.npz" --batch "$batch" \
    --steps "$steps" --optimizer adamw --lr 1e-3 --device cuda \
    --precision "$1" --attention "${2:-fused}" \
    --log "$OUT/headroom_$tag.jsonl" >"$OUT/headroom_$tag.txt" 2>&1
  "$headroom" report "$model" --batch "$batch" --optimizer adamw \
    --device cuda --precision "$1" --attention "${2:-fused}" \
    --json >"$OUT/report_$tag.json"
}
run_torch() { # dtype tag
  python3 "$root/bench/onnx_torch.py" "$model" --data "$OUT/tokens.npz" \
    --batch "$batch" --steps "$steps" --optimizer adamw --lr 1e-3 \
    --dtype "$1" --json "$OUT/torch_$1.json"
}
for p in fp32 bf16; do
  run_headroom $p
  run_torch $p
done
# Fused attention (the default above) against the unfused graph, bf16.
run_headroom bf16 unfused

python3 - "$OUT" "$batch" "$seq" "$build_s" "$gpu_rc" <<'EOF'
import json, statistics, sys
out, batch, seq, build_s, gpu_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
tokens = batch * seq
rows, figures = [], {"build_seconds": build_s, "gputests_exit": gpu_rc}
for p in ("fp32", "bf16"):
    log = [json.loads(l) for l in open(f"{out}/headroom_{p}.jsonl")]
    secs = [r["seconds"] for r in log]
    deltas = [b - a for a, b in zip(secs, secs[1:])][2:]
    h_step = statistics.median(deltas)
    report = json.load(open(f"{out}/report_{p}.json"))
    t = json.load(open(f"{out}/torch_{p}.json"))
    figures[p] = {
        "headroom_step_s": h_step, "headroom_tokens_s": tokens / h_step,
        "headroom_planned_peak": report["peak_bytes"],
        "torch_step_s": t["step_seconds"], "torch_tokens_s": t["tokens_per_second"],
        "torch_max_memory_allocated": t["max_memory_allocated"],
        "speed_ratio": (tokens / h_step) / t["tokens_per_second"],
        "memory_ratio": report["peak_bytes"] / t["max_memory_allocated"],
        "first_losses": {"headroom": [r["loss"] for r in log[:3]], "torch": t["losses"][:3]},
    }
    f = figures[p]
    rows.append(f"{p}: headroom {f['headroom_tokens_s']:.0f} tok/s, torch {f['torch_tokens_s']:.0f} tok/s "
                f"(x{f['speed_ratio']:.2f}); peak headroom {f['headroom_planned_peak']/2**30:.2f} GiB planned, "
                f"torch {f['torch_max_memory_allocated']/2**30:.2f} GiB (x{f['memory_ratio']:.2f})")
def step_s(tag):
    secs = [json.loads(l)["seconds"] for l in open(f"{out}/headroom_{tag}.jsonl")]
    return statistics.median([b - a for a, b in zip(secs, secs[1:])][2:])
a = {"fused_step_s": step_s("bf16"), "unfused_step_s": step_s("bf16_unfused"),
     "fused_peak": json.load(open(f"{out}/report_bf16.json"))["peak_bytes"],
     "unfused_peak": json.load(open(f"{out}/report_bf16_unfused.json"))["peak_bytes"],
     "fused_losses": [json.loads(l)["loss"] for l in open(f"{out}/headroom_bf16.jsonl")][:3],
     "unfused_losses": [json.loads(l)["loss"] for l in open(f"{out}/headroom_bf16_unfused.jsonl")][:3]}
figures["attention_bf16"] = a
rows.append(f"attention (bf16): fused {a['fused_step_s']*1e3:.1f} ms/step, unfused "
            f"{a['unfused_step_s']*1e3:.1f} ms/step; planned peak {a['fused_peak']/2**30:.2f} "
            f"vs {a['unfused_peak']/2**30:.2f} GiB")
json.dump(figures, open(f"{out}/gpu.json", "w"), indent=1)
print("\n".join(rows))
EOF
