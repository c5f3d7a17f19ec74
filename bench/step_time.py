#!/usr/bin/python3
"""Training step time: headroom's CPU executor against PyTorch on the same model.

Run with Debian's interpreter (torch 1.13, onnx, numpy), from anywhere:

    /usr/bin/python3 bench/step_time.py [--out /tmp/step_time.json]
        [--models gpt,lenet] [--threads 1,2] [--large] [--steps 40] [--repeats 3]

For every (model, batch, threads) it measures

  headroom  `build/tools/headroom train MODEL.onnx --batch B --data D.npz
            --steps N --optimizer sgd --lr 0.05 --disable-dropout --log L.jsonl`
            with OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=T; per-step time = median
            of the deltas of the log's cumulative "seconds", steps 1..WARMUP
            skipped (the compile before step 1 is never counted).
  torch     the same module rebuilt as test/models/make_references.py does
            (make_models.py class + every ONNX initializer loaded by name),
            train mode, every Dropout p=0, torch.optim.SGD(lr=0.05,
            foreach=False), torch.set_num_threads(T); per-step time = median
            over N-WARMUP timed iterations (after WARMUP untimed ones) of
            zero_grad + forward (loss inside forward) + backward + step,
            measured with time.perf_counter.

Both see the same data: a generated npz of 64*B samples (same names, dtypes
and trailing shapes as the graph inputs; token ids in [0, 64), labels in
[0, 10), float inputs ~ N(0, 1)), batches taken in order.  As an equal-work
check the per-step losses of the two runs are compared: step 1 (same weights,
same batch) should agree to ~1e-6; later steps drift apart slowly as float
rounding differences compound through training (max difference reported).

Each measurement is repeated --repeats times (headroom and torch interleaved)
and the minimum of the medians is reported, which discards runs disturbed by
other load on the machine.  The table is printed and written as JSON to --out.
"""
import argparse
import collections
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "test", "models")
HEADROOM = os.path.join(ROOT, "build", "tools", "headroom")

# Importing make_references must not leave __pycache__ in test/models.
sys.dont_write_bytecode = True
sys.path.insert(0, MODELS_DIR)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402

import make_references  # noqa: E402  (load_from_onnx, disable_dropout)

LR = 0.05
WARMUP = 3
SAMPLES_PER_BATCH = 64  # the generated data set has 64*B samples
# Integer graph inputs: exclusive upper bound of the generated values.
INT_RANGE = {"input_ids": 64, "targets": 64, "y": 10}
BATCHES = {"gpt": [16], "lenet": [32]}
LARGE_BATCHES = {"gpt": [64], "lenet": [128]}


def graph_inputs(onnx_path):
    """[(name, numpy dtype, trailing dims)] of the data inputs (not initializers)."""
    mp = onnx.load(onnx_path, load_external_data=False)
    inits = {i.name for i in mp.graph.initializer}
    elem = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64}
    out = []
    for vi in mp.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        out.append((vi.name, elem[tt.elem_type], [d.dim_value for d in tt.shape.dim][1:]))
    return out


def make_data(onnx_path, samples, seed):
    rng = np.random.default_rng(seed)
    data = collections.OrderedDict()
    for name, dtype, dims in graph_inputs(onnx_path):
        shape = [samples] + dims
        if dtype == np.float32:
            data[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            if name not in INT_RANGE:
                raise SystemExit("no value range known for integer input %r" % name)
            data[name] = rng.integers(0, INT_RANGE[name], size=shape, dtype=np.int64)
    return data


def run_headroom(headroom, onnx_path, npz, batch, steps, threads, tmpdir):
    log = os.path.join(tmpdir, "log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    cmd = [headroom, "train", onnx_path, "--batch", str(batch), "--data", npz,
           "--steps", str(steps), "--optimizer", "sgd", "--lr", str(LR),
           "--disable-dropout", "--log", log]
    p = subprocess.run(cmd, env=env, cwd=tmpdir, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit("headroom failed (%d): %s\n%s" % (p.returncode, " ".join(cmd),
                                                           p.stderr[-2000:]))
    with open(log) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    if len(recs) != steps:
        raise SystemExit("headroom log has %d lines, expected %d" % (len(recs), steps))
    secs = [r["seconds"] for r in recs]
    deltas = [b - a for a, b in zip(secs[WARMUP - 1:], secs[WARMUP:])]  # steps WARMUP+1..N
    return statistics.median(deltas), [r["loss"] for r in recs]


def build_torch(name):
    onnx_path = os.path.join(MODELS_DIR, name + ".onnx")
    model, _mp, _inits, names, _ = make_references.load_from_onnx(name, onnx_path)
    make_references.disable_dropout(model)
    model.train()
    return model, names


def run_torch(base, names, data, batch, steps, threads):
    torch.set_num_threads(threads)
    model = copy.deepcopy(base)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=False)
    tensors = [torch.from_numpy(data[n]) for n in names]
    times, losses = [], []
    for s in range(steps):
        args = tuple(t[s * batch:(s + 1) * batch] for t in tensors)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(*args)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        losses.append(float(loss))
    return statistics.median(times[WARMUP:]), losses


def cpu_busy(interval=1.0):
    """Fraction of all CPUs busy over `interval` seconds (we sleep meanwhile, so
    this is other processes' load)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(interval)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_for_quiet(max_busy):
    """Wait (up to 10 minutes) until other processes use < max_busy of the CPUs."""
    if max_busy <= 0:
        return None
    deadline = time.time() + 600
    while True:
        b = cpu_busy()
        if b < max_busy or time.time() > deadline:
            return b
        time.sleep(2)


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, universal_newlines=True).stdout.strip()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/step_time.json")
    ap.add_argument("--headroom", default=HEADROOM,
                    help="the headroom binary (default build/tools/headroom; pass a "
                         "copy if someone may rebuild while this runs)")
    ap.add_argument("--models", default="gpt,lenet")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--large", action="store_true",
                    help="also measure the larger batches (gpt 64, lenet 128)")
    ap.add_argument("--steps", type=int, default=40,
                    help="steps per run (the first %d are warm-up)" % WARMUP)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quiet-below", type=float, default=0.0,
                    help="before each repeat wait (up to 10 min) until other "
                         "processes use less than this fraction of all CPUs, "
                         "e.g. 0.1 (0: do not wait)")
    a = ap.parse_args()
    if a.steps <= WARMUP + 1:
        raise SystemExit("--steps must be > %d" % (WARMUP + 1))
    if a.steps > SAMPLES_PER_BATCH:
        raise SystemExit("--steps must be <= %d (one pass over the data)" % SAMPLES_PER_BATCH)
    if not os.access(a.headroom, os.X_OK):
        raise SystemExit("%s not built: ninja -C build headroom" % a.headroom)
    models = a.models.split(",")
    threads = [int(t) for t in a.threads.split(",")]

    rows = []
    with tempfile.TemporaryDirectory(prefix="step_time.") as tmpdir:
        for name in models:
            onnx_path = os.path.join(MODELS_DIR, name + ".onnx")
            base, names = build_torch(name)
            batches = BATCHES[name] + (LARGE_BATCHES[name] if a.large else [])
            for batch in batches:
                data = make_data(onnx_path, SAMPLES_PER_BATCH * batch, seed=batch)
                assert list(data) == names, (list(data), names)
                npz = os.path.join(tmpdir, "%s.b%d.npz" % (name, batch))
                np.savez(npz, **data)
                for t in threads:
                    hr, th, busy = [], [], []
                    for _ in range(a.repeats):
                        busy.append(wait_for_quiet(a.quiet_below))
                        h, hl = run_headroom(a.headroom, onnx_path, npz, batch, a.steps,
                                             t, tmpdir)
                        p, pl = run_torch(base, names, data, batch, a.steps, t)
                        hr.append(h)
                        th.append(p)
                    dloss = max(abs(x - y) for x, y in zip(hl, pl))
                    dloss1 = abs(hl[0] - pl[0])
                    row = collections.OrderedDict([
                        ("model", name), ("batch", batch), ("threads", t),
                        ("headroom_ms", 1e3 * min(hr)), ("torch_ms", 1e3 * min(th)),
                        ("ratio", min(hr) / min(th)),
                        ("headroom_ms_runs", [1e3 * v for v in hr]),
                        ("torch_ms_runs", [1e3 * v for v in th]),
                        ("other_cpu_busy_before", busy),
                        ("step1_loss_diff", dloss1),
                        ("max_loss_diff", dloss),
                    ])
                    rows.append(row)
                    print("  %s B=%d T=%d  headroom %s ms  torch %s ms  (|dloss| step 1 %.2g, max %.2g)"
                          % (name, batch, t, " ".join("%.3f" % (1e3 * v) for v in hr),
                             " ".join("%.3f" % (1e3 * v) for v in th), dloss1, dloss),
                          file=sys.stderr, flush=True)

    hdr = "%-6s %6s %7s %12s %10s %9s %8s %8s" % (
        "model", "batch", "threads", "headroom ms", "torch ms", "hr/torch", "dloss@1",
        "dlossmax")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print("%-6s %6d %7d %12.3f %10.3f %9.2f %8.1e %8.1e" % (
            r["model"], r["batch"], r["threads"], r["headroom_ms"], r["torch_ms"],
            r["ratio"], r["step1_loss_diff"], r["max_loss_diff"]))
    result = collections.OrderedDict([
        ("headroom", a.headroom), ("commit", git_commit()),
        ("torch_version", torch.__version__),
        ("steps", a.steps), ("warmup", WARMUP), ("repeats", a.repeats),
        ("statistic", "min over repeats of the median per-step time after warm-up"),
        ("optimizer", "sgd lr=%g, dropout disabled" % LR),
        ("loadavg_end", os.getloadavg()),
        ("rows", rows),
    ])
    with open(a.out, "w") as f:
        f.write(json.dumps(result, indent=2) + "\n")
    print("wrote %s" % a.out)


if __name__ == "__main__":
    sys.exit(main())
