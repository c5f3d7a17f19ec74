#!/bin/bash
# headroom against PyTorch and ONNX Runtime training on the CPU: step time and
# peak RSS on the same ONNX graphs and weights (bench/peers.py says how).
#   bench/peers.sh [--models mlp,gpt,...] [--threads 1,2] [--steps 20] [--repeats 3] [--out F.json]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$root/build/tools/headroom" ] || "$root/scripts/build"
exec /usr/bin/python3 "$root/bench/peers.py" "$@"
