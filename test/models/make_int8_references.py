#!/opt/t215/bin/python
"""AdamW with 8-bit state as bitsandbytes trains it, for headroom's e2e test
OptimizerState.Int8MatchesBitsandbytes.

Run with PyTorch 2.x and PyPI's bitsandbytes (its CPU build suffices), e.g.
the venv the developers' guide describes plus `pip install --no-deps
bitsandbytes`:

    /opt/t215/bin/python test/models/make_int8_references.py [models...]

The module, its weights (the initializers of <name>.onnx) and the batches
are make_references.py's (dropout off, batch 8, STEPS steps over
<name>.train.npz in order). The optimizer is bitsandbytes' own AdamW8bit
(block-wise 8-bit moments for parameters of min_8bit_size or more elements,
32-bit moments for the rest) with one substitution: its CPU build quantizes
the moments through a 65536-entry lookup table that rounds values below
~3e-5 of a block's absmax to the wrong code, so the quantizer of its CUDA
kernel (kOptimizerStatic8bit2StateBlockwise: quantize_2D's binary search and
midpoint rule, then the first moment's sign rule) replaces it here; that is
the algorithm headroom implements. Writes <name>.ref.adamw8bit.npz (the
trained weights) and <name>.ref.int8.json (per-step losses; the largest
weight difference from the unpatched CPU build and from AdamW with 32-bit
moments, for scale).
"""
import collections
import copy
import json
import os
import sys

import numpy as np
import torch

import bitsandbytes as bnb
import bitsandbytes.backends.cpu.ops as bnb_cpu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_references as mr  # noqa: E402

ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
# bitsandbytes' min_8bit_size per model: its default (4096) for gpt, which
# then quantizes its four 4096-element matrices; 1024 for llama, all of whose
# matrices have 1024 or 2048 elements.
MIN_8BIT = {"gpt": 4096, "llama": 1024}
BLOCK = 256


def quantize_2d(x, code, signed):
    """quantize_2D<SIGNED> of bitsandbytes' csrc/kernels.cu, elementwise."""
    pivot = torch.full(x.shape, 127, dtype=torch.long)
    upper_p = torch.full(x.shape, 255, dtype=torch.long)
    lower_p = torch.zeros(x.shape, dtype=torch.long)
    lower = torch.full(x.shape, -1.0 if signed else 0.0)
    upper = torch.ones(x.shape)
    val = code[pivot]
    for i in (64, 32, 16, 8, 4, 2, 1):
        gt = x > val
        lower_p = torch.where(gt, pivot, lower_p)
        lower = torch.where(gt, val, lower)
        upper_p = torch.where(gt, upper_p, pivot)
        upper = torch.where(gt, upper, val)
        pivot = torch.where(gt, pivot + i, pivot - i)
        val = code[pivot]
    gt = x > val
    up = torch.where(x > (upper + val) * 0.5, upper_p, pivot)
    down = torch.where(x < (lower + val) * 0.5, lower_p, pivot)
    return torch.where(gt, up, down)


def quantize_like_cuda(a, code, absmax_out, out_uint8, blocksize):
    """Replaces bitsandbytes.backends.cpu.ops._quant_blockwise_fp32_direct:
    the block's absmax, the nearest code of value / absmax, and for the
    signed map (the first moment) a code whose sign differs from the
    value's moved one step towards it."""
    flat = a.reshape(-1).float()
    n = flat.numel()
    blocks = (n + blocksize - 1) // blocksize
    padded = torch.zeros(blocks * blocksize)
    padded[:n] = flat
    absmax = padded.abs().reshape(blocks, blocksize).max(dim=1).values
    x = flat / absmax.repeat_interleave(blocksize)[:n]
    signed = bool(code[0] < 0)
    c = quantize_2d(x, code, signed)
    if signed:
        wrong = torch.signbit(code[c]) != torch.signbit(flat)
        c = torch.where(wrong, torch.where(flat > 0, c + 1, c - 1), c) % 256
    out_uint8.copy_(c.to(torch.uint8).reshape(out_uint8.shape))
    absmax_out.copy_(absmax)


def train(base, data, names, make_opt):
    model = copy.deepcopy(base)
    model.train()
    opt = make_opt(model.parameters())
    losses = []
    for s in range(mr.STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(*mr.batch(data, names, s))
        loss.backward()
        losses.append(float(loss))
        opt.step()
    return model, losses


def weights(model):
    return collections.OrderedDict(
        (k, p.detach().float().numpy().copy())
        for k, p in model.named_parameters())


def max_diff(a, b):
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def make(name):
    base, _, _, names, _ = mr.load_from_onnx(name, os.path.join(HERE, name + ".onnx"))
    mr.disable_dropout(base)
    data = dict(np.load(os.path.join(HERE, name + ".train.npz")))
    min_size = MIN_8BIT[name]

    def adamw8bit(params):
        return bnb.optim.AdamW8bit(params, min_8bit_size=min_size, **ADAMW)

    lookup_table = bnb_cpu._quant_blockwise_fp32_direct
    lut_model, _ = train(base, data, names, adamw8bit)
    bnb_cpu._quant_blockwise_fp32_direct = quantize_like_cuda
    try:
        model, losses = train(base, data, names, adamw8bit)
    finally:
        bnb_cpu._quant_blockwise_fp32_direct = lookup_table
    full, _ = train(base, data, names,
                    lambda p: torch.optim.AdamW(p, foreach=False, **ADAMW))
    w = weights(model)
    quantized = [k for k, p in model.named_parameters() if p.numel() >= min_size]
    mr.save_npz(os.path.join(HERE, name + ".ref.adamw8bit.npz"), w)
    ref = {"model": name, "torch": torch.__version__,
           "bitsandbytes": bnb.__version__, "hyperparameters": ADAMW,
           "min_8bit_size": min_size, "quantized": quantized,
           "losses": losses,
           "max_weight_diff_vs_cpu_lookup_table": max_diff(w, weights(lut_model)),
           "max_weight_diff_vs_32bit_adamw": max_diff(w, weights(full)),
           "note": __doc__.split("\n\n")[2].replace("\n", " ")}
    with open(os.path.join(HERE, name + ".ref.int8.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(name, losses, ref["max_weight_diff_vs_cpu_lookup_table"],
          ref["max_weight_diff_vs_32bit_adamw"])


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in sys.argv[1:] or ["gpt", "llama"]:
        make(name)


if __name__ == "__main__":
    sys.exit(main())
