#!/usr/bin/env python3
"""Fused against unfused attention: CPU step time and planned memory.

For each sequence length, writes the zoo GPT-2 (4 layers, d 256, 4 heads,
ffn 1024, vocab 1000; `headroom zoo`), random token data (an .npz written
with the standard library only), and trains it for a few steps with
`--attention fused` and `--attention unfused` in the same run, alternating,
so both see the same machine. Step time is the median of the log's
per-step deltas (the first two skipped); memory is `headroom report`'s
planned peak. Dropout is off (--disable-dropout) so both do the same work.

    bench/attention.py [--seqs 512,1024] [--batch 1] [--steps 8]
                       [--headroom build/tools/headroom] [--threads 2]
"""
import argparse
import io
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import zipfile


def npy_bytes(values, shape):
    """A little-endian int64 .npy file."""
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (%s), }" % dims
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    out = io.BytesIO()
    out.write(b"\x93NUMPY\x01\x00")
    out.write(struct.pack("<H", len(header)))
    out.write(header.encode("latin1"))
    out.write(struct.pack("<%dq" % len(values), *values))
    return out.getvalue()


def write_data(path, samples, seq, vocab, seed):
    rng = random.Random(seed)
    with zipfile.ZipFile(path, "w") as z:
        for name in ("input_ids", "targets"):
            values = [rng.randrange(vocab) for _ in range(samples * seq)]
            z.writestr(name + ".npy", npy_bytes(values, (samples, seq)))


def step_times(log):
    seconds = [json.loads(line)["seconds"] for line in open(log)]
    deltas = [b - a for a, b in zip(seconds, seconds[1:])]
    return deltas[2:] or deltas


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--headroom", default="build/tools/headroom")
    p.add_argument("--seqs", default="512,1024")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", default=str(os.cpu_count() or 1))
    args = p.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS=args.threads,
               OMP_NUM_THREADS=args.threads)
    print("| seq | attention | step time (median) | planned peak |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for seq in (int(s) for s in args.seqs.split(",")):
            model = os.path.join(tmp, "gpt2_%d.onnx" % seq)
            data = os.path.join(tmp, "data_%d.npz" % seq)
            subprocess.run([args.headroom, "zoo", "gpt2", "--layers", "4",
                            "--d-model", "256", "--heads", "4", "--ffn",
                            "1024", "--vocab", "1000", "--seq", str(seq),
                            "-o", model], check=True, stdout=subprocess.DEVNULL)
            write_data(data, args.batch * (args.steps + 1), seq, 1000, seq)
            times = {"fused": [], "unfused": []}
            peaks = {}
            for round_ in range(2):  # alternate: fused, unfused, fused, ...
                for mode in ("fused", "unfused"):
                    log = os.path.join(tmp, "%s_%d_%d.jsonl" % (mode, seq, round_))
                    flags = ["--batch", str(args.batch), "--attention", mode,
                             "--disable-dropout", "--device", "cpu"]
                    subprocess.run([args.headroom, "train", model, "--data", data,
                                    "--steps", str(args.steps), "--log", log] + flags,
                                   check=True, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                    times[mode] += step_times(log)
                    if mode not in peaks:
                        r = subprocess.run([args.headroom, "report", model, "--json"]
                                           + flags, check=True, env=env,
                                           capture_output=True, text=True)
                        peaks[mode] = json.loads(r.stdout)["peak_bytes"]
            for mode in ("fused", "unfused"):
                print("| %d | %s | %.1f ms | %.1f MiB |" % (
                    seq, mode, 1000 * statistics.median(times[mode]),
                    peaks[mode] / 2**20))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
