#!/usr/bin/env bash
# kill -9 of one rank of a data-parallel run, then --resume: the job must
# stop within 60 s (mpirun names the lost rank), and the resumed run must
# save the bytes of a run never interrupted.
#   kill-rank.sh DIR RANK HEADROOM-TRAIN-ARGS...
set -uo pipefail
dir=$1 rank=$2
shift 2
rm -rf "$dir" && mkdir -p "$dir"
mpirun -np 2 headroom train "$@" --save "$dir/whole.onnx" >/dev/null 2>&1 ||
  { echo "the uninterrupted run failed"; exit 1; }
start=$(date +%s)
mpirun -np 2 headroom train "$@" --checkpoint "$dir/ck" --checkpoint-every 1 \
  --save "$dir/resumed.onnx" >"$dir/killed.log" 2>&1 &
job=$!
# Once a few steps are checkpointed, the rank's process is killed.
for _ in $(seq 600); do
  grep -qs '"step":[3-9]' "$dir/ck/checkpoint.hrm" && break
  sleep 0.05
done
for p in $(pgrep -f "headroom train"); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
      grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
    kill -9 "$p"
  fi
done
wait "$job"
status=$?
echo "the job stopped with status $status after $(( $(date +%s) - start )) s"
grep -m1 -o "process rank $rank .* exited on signal 9" "$dir/killed.log"
grep -o '"step":[0-9]*' "$dir/ck/checkpoint.hrm"
# (Into a file: mpirun does not survive a reader that stops early.)
mpirun -np 2 headroom train "$@" --checkpoint "$dir/ck" --checkpoint-every 1 \
  --resume "$dir/ck" --save "$dir/resumed.onnx" >"$dir/resumed.log" 2>&1 ||
  { echo "the resumed run failed:"; tail -5 "$dir/resumed.log"; }
grep -m1 resuming "$dir/resumed.log"
cmp "$dir/whole.onnx" "$dir/resumed.onnx" && echo "resumed: the same bytes"
