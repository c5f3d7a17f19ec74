#!/usr/bin/python3
"""Training step time and peak RSS: headroom against PyTorch and ONNX Runtime
training on the same ONNX graphs and weights (the CPU).

    bench/peers.sh [--models mlp,lenet,gpt,llama,zoo_gpt,zoo_llama]
                   [--threads 1,2] [--steps 20] [--repeats 3] [--out F.json]

Peers (each skipped, with a line saying why, when it is not installed):

  headroom    `headroom train MODEL --data D --batch 8 --steps N --optimizer
              adamw --lr 1e-3 --log L` (OPENBLAS_NUM_THREADS=T); step time =
              median of the log's per-step deltas after 3 warm-up steps.
  torch       bench/onnx_torch.py: the graph's nodes as torch ops (eager),
              the file's initializers as parameters, torch.optim.AdamW, with
              torch.set_num_threads(T): Debian's python3-torch (1.13) through
              /usr/bin/python3, and any other interpreter named by
              PEERS_TORCH_PYTHON (a venv with torch 2.x).
  ort         onnxruntime-training (PEERS_ORT_PYTHON, default /opt/ort/bin/python:
              `/usr/bin/python3 -m venv --system-site-packages /opt/ort &&
              /opt/ort/bin/pip install onnxruntime-training-cpu==1.19.2`):
              generate_artifacts(loss=None, optimizer=AdamW) on the graph,
              then Module/Optimizer steps with intra_op_num_threads=T.

Each (model, threads) runs every peer --repeats times, interleaved (peer A,
B, C, A, B, C, ...), and keeps the fastest median; peak RSS is the largest
maximum resident set (/usr/bin/time -f %M) of those runs. The first-step
losses are printed beside the times: equal work means equal losses.

Models: the test models (test/models/*.onnx with their .train.npz) and a GPT
and a Llama from `headroom zoo` (4 layers, d 256, seq 128, vocab 8192), all at
batch 8.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADROOM = os.path.join(ROOT, "build", "tools", "headroom")
BATCH = 8
WARMUP = 3

# The peers' side, run as a child process in the peer's own interpreter so
# that each is measured alone (RSS included). argv: model data steps threads
# out.json.
ORT_CHILD = r'''
import json, os, statistics, sys, tempfile, time
import numpy as np, onnx
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module, Optimizer
import onnxruntime as ort
model_path, data_path, steps, threads, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
m = onnx.load(model_path)
# ORT's gradients read optional outputs that torch's export omits (Dropout's
# mask, the loss's log_prob, LayerNormalization's mean and inverse std).
wanted = {"Dropout": 2, "SoftmaxCrossEntropyLoss": 2, "LayerNormalization": 3}
for node in m.graph.node:
    for k in range(len(node.output), wanted.get(node.op_type, 0)):
        node.output.append("%s__out%d" % (node.output[0], k))
# Trainable: the float initializers but BatchNorm's running statistics.
params = [i.name for i in m.graph.initializer
          if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
          and not i.name.endswith(("running_mean", "running_var"))]
d = tempfile.mkdtemp()
artifacts.generate_artifacts(m, requires_grad=params, frozen_params=[], loss=None,
                             optimizer=artifacts.OptimType.AdamW, artifact_directory=d)
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
state = CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
module = Module(os.path.join(d, "training_model.onnx"), state, None, device="cpu", session_options=so)
opt = Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
opt.set_learning_rate(1e-3)
module.train()
data = np.load(data_path)
names = module.input_names()
n = len(data[names[0]])
times, losses = [], []
for s in range(steps):
    start = (s * 8) % n
    feed = [data[k][start:start + 8] for k in names]
    t0 = time.perf_counter()
    loss = module(*feed)
    opt.step()
    module.lazy_reset_grad()
    times.append(time.perf_counter() - t0)
    losses.append(float(loss))
json.dump({"step": statistics.median(times[3:]), "losses": losses}, open(out, "w"))
'''


def peak_rss_kib(time_file):
    with open(time_file) as f:
        return int(f.read().strip().splitlines()[-1])


def run_measured(cmd, env):
    with tempfile.NamedTemporaryFile("r", suffix=".time", delete=False) as t:
        tf = t.name
    full = ["/usr/bin/time", "-f", "%M", "-o", tf] + cmd
    r = subprocess.run(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        raise RuntimeError("exit %d: %s" % (r.returncode, lines[-1] if lines else "no output"))
    rss = peak_rss_kib(tf)
    os.unlink(tf)
    return rss


def threads_env(threads):
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def headroom(model, data, steps, threads, work):
    log = os.path.join(work, "h.jsonl")
    rss = run_measured([HEADROOM, "train", model, "--data", data, "--batch", str(BATCH),
                        "--steps", str(steps), "--optimizer", "adamw", "--lr", "1e-3",
                        "--log", log], threads_env(threads))
    rows = [json.loads(l) for l in open(log)]
    secs = [r["seconds"] for r in rows]
    deltas = [b - a for a, b in zip(secs, secs[1:])][WARMUP - 1:]
    return statistics.median(deltas), rss, [r["loss"] for r in rows]


def torch_peer(python):
    def run(model, data, steps, threads, work):
        out = os.path.join(work, "t.json")
        env = threads_env(threads)
        rss = run_measured([python, "-c",
                            "import torch,sys,runpy; torch.set_num_threads(int(sys.argv[1]));"
                            "sys.argv=sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                            str(threads), os.path.join(ROOT, "bench", "onnx_torch.py"), model,
                            "--data", data, "--batch", str(BATCH), "--steps", str(steps),
                            "--warmup", str(WARMUP), "--device", "cpu", "--json", out], env)
        r = json.load(open(out))
        return r["step_seconds"], rss, r["losses"]
    return run


def ort_peer(python):
    def run(model, data, steps, threads, work):
        out = os.path.join(work, "o.json")
        rss = run_measured([python, "-c", ORT_CHILD, model, data, str(steps), str(threads), out],
                           threads_env(threads))
        r = json.load(open(out))
        return r["step"], rss, r["losses"]
    return run


def make_models(work, names):
    models = {}
    for n in names:
        if n.startswith("zoo_"):
            arch = n[4:].replace("gpt", "gpt2")
            path = os.path.join(work, n + ".onnx")
            subprocess.run([HEADROOM, "zoo", arch, "--layers", "4", "--d-model", "256",
                            "--heads", "4", "--ffn", "1024", "--seq", "128", "--vocab", "8192",
                            "-o", path], check=True, capture_output=True)
            data = os.path.join(work, n + ".npz")
            subprocess.run(["/usr/bin/python3", "-c",
                            "import numpy as np,sys; r=np.random.default_rng(0);"
                            "i=r.integers(0,8192,size=(64,129),dtype=np.int64);"
                            "np.savez(sys.argv[1], input_ids=i[:,:-1], targets=i[:,1:])", data],
                           check=True)
            models[n] = (path, data)
        else:
            models[n] = (os.path.join(ROOT, "test", "models", n + ".onnx"),
                         os.path.join(ROOT, "test", "models", n + ".train.npz"))
    return models


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,lenet,gpt,llama,zoo_gpt,zoo_llama")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    peers = {"headroom": headroom}
    for name, python in (("torch 1.13", "/usr/bin/python3"),
                         ("torch (PEERS_TORCH_PYTHON)", os.environ.get("PEERS_TORCH_PYTHON"))):
        if python and subprocess.run([python, "-c", "import torch, onnx"],
                                     capture_output=True).returncode == 0:
            if name.startswith("torch ("):
                v = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
                name = "torch " + v
            peers[name] = torch_peer(python)
        elif python:
            print("peers: %s: no torch and onnx in %s; skipped" % (name, python))
    ort_python = os.environ.get("PEERS_ORT_PYTHON", "/opt/ort/bin/python")
    if os.path.exists(ort_python) and subprocess.run(
            [ort_python, "-c", "import onnxruntime.training"], capture_output=True).returncode == 0:
        v = subprocess.run([ort_python, "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                           capture_output=True, text=True).stdout.strip()
        peers["ort " + v] = ort_peer(ort_python)
    else:
        print("peers: onnxruntime-training not found at %s; skipped" % ort_python)

    work = tempfile.mkdtemp(prefix="peers-")
    models = make_models(work, args.models.split(","))
    results = []
    for name, (model, data) in models.items():
        for threads in map(int, args.threads.split(",")):
            best = {}
            for _ in range(args.repeats):
                for peer, fn in peers.items():
                    try:
                        step, rss, losses = fn(model, data, args.steps, threads, work)
                    except RuntimeError as e:
                        print("peers: %s on %s: %s" % (peer, name, str(e).splitlines()[0]))
                        continue
                    b = best.setdefault(peer, {"step": step, "rss_kib": rss, "loss1": losses[0]})
                    b["step"] = min(b["step"], step)
                    b["rss_kib"] = max(b["rss_kib"], rss)
            results.append({"model": name, "threads": threads, "peers": best})
            fastest = min((v["step"] for k, v in best.items() if k != "headroom"), default=None)
            leanest = min((v["rss_kib"] for k, v in best.items() if k != "headroom"), default=None)
            cells = []
            for peer, v in best.items():
                cells.append("%s %.1f ms %.0f MiB (loss %.4f)" % (
                    peer, v["step"] * 1e3, v["rss_kib"] / 1024, v["loss1"]))
            h = best.get("headroom")
            ratio = ("  headroom/fastest peer: time x%.2f, RSS x%.2f" % (
                h["step"] / fastest, h["rss_kib"] / leanest)) if h and fastest else ""
            print("%-10s %d thr: %s%s" % (name, threads, "; ".join(cells), ratio), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
