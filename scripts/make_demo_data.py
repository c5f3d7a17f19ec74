#!/usr/bin/env python3
"""Generate the demo's training data: sequence reversal for the tiny GPT.

Each sample is 16 tokens: 8 random tokens from [2, 64), the separator 1, then
the first 7 of those tokens reversed; the target at each position is the next
token (the 8 random tokens' targets are unpredictable and set to -100, the
ignore_index of the model's cross-entropy, so the loss measures only the
reversal). A model that learned the task drives the loss towards 0.

    python3 scripts/make_demo_data.py OUT.npz [--samples N] [--seed S]

Standard library only (scripts/npz.py).
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npz import write_npz  # noqa: E402

T, HALF, SEP, VOCAB, IGNORE = 16, 8, 1, 64, -100


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ids, targets = [], []
    for _ in range(a.samples):
        seq = [rng.randrange(2, VOCAB) for _ in range(HALF)]
        full = seq + [SEP] + seq[::-1]  # 17 tokens; inputs are the first 16
        ids += full[:T]
        targets += [IGNORE] * (HALF) + full[HALF + 1:T + 1]
    write_npz(a.out, {"input_ids": ("i64", (a.samples, T), ids),
                      "targets": ("i64", (a.samples, T), targets)})


if __name__ == "__main__":
    main()
