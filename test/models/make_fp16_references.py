#!/opt/t215/bin/python
"""fp16 weights without master copies (the LOMO paper's setting) as PyTorch
trains them, for headroom's e2e test
MixedPrecision.Fp16WithoutMasterWeightsMatchesTorch.

Run with PyTorch 2.x (CPU autocast in float16; Debian's torch 1.13 has no
CPU half matmul), e.g. the venv the developers' guide describes:

    /opt/t215/bin/python test/models/make_fp16_references.py [models...]

The module, its weights (the initializers of <name>.onnx) and the batches
are make_references.py's (dropout off, batch 8, STEPS steps over
<name>.train.npz in order). The parameters are rounded to float16 once
(model.half()); every forward runs under torch.autocast("cpu", float16);
the loss is scaled as torch.cuda.amp.GradScaler does (2^16 at the start,
halved on a step whose gradients are not all finite, which then changes no
weight); each parameter is updated in float32 from its float16 gradient and
rounded once: p = half(float(p) - lr * float(g) / scale) -- plain SGD, which
LOMO's fused update equals. Writes <name>.ref.sgd_fp16none.npz (the trained
weights widened to float32, keyed by parameter name) and adds
"sgd_fp16none" (per-step losses and scales) to <name>.ref.fp16.json; and
the same for AdamW on bfloat16 parameters ("adamw_bf16none": autocast in
bfloat16, float32 moments, torch.optim.AdamW's arithmetic in float32 and
the weight rounded once).
"""
import collections
import copy
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_references as mr  # noqa: E402

LR = 0.05
# AdamW on bfloat16 parameters without master copies (torchtune's full
# fine-tune setting): float32 moments, torch.optim.AdamW's arithmetic in
# float32, the weight rounded to bfloat16 once per step.
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def train(base, data, names):
    model = copy.deepcopy(base).half()
    model.train()
    params = list(model.parameters())
    scale, good = 2.0 ** 16, 0
    losses, scales = [], []
    for s in range(mr.STEPS):
        for p in params:
            p.grad = None
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            loss = model(*mr.batch(data, names, s))
        (loss.float() * scale).backward()
        losses.append(float(loss.detach()))
        scales.append(scale)
        total = sum(float(p.grad.float().pow(2).sum()) for p in params)
        if math.isfinite(total) and math.isfinite(float(loss)):
            with torch.no_grad():
                for p in params:
                    p.copy_((p.float() - LR * (p.grad.float() / scale)).half())
            good += 1
            if good == 2000:
                scale, good = scale * 2, 0
        else:
            scale, good = scale / 2, 0
    return model, losses, scales


def train_adamw_bf16(base, data, names):
    model = copy.deepcopy(base).to(torch.bfloat16)
    model.train()
    params = list(model.parameters())
    lr, (b1, b2), eps, wd = (ADAMW["lr"], ADAMW["betas"], ADAMW["eps"],
                             ADAMW["weight_decay"])
    m = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    v = [torch.zeros_like(p, dtype=torch.float32) for p in params]
    losses = []
    for s in range(mr.STEPS):
        for p in params:
            p.grad = None
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = model(*mr.batch(data, names, s))
        loss.float().backward()
        losses.append(float(loss.detach()))
        t = s + 1
        step_size = lr / (1 - b1 ** t)
        sqrt_bc2 = math.sqrt(1 - b2 ** t)
        with torch.no_grad():
            for p, mi, vi in zip(params, m, v):
                d = p.grad.float()
                w = p.float() * (1 - lr * wd)
                mi.mul_(b1).add_(d * (1 - b1))
                vi.mul_(b2).add_((d * d) * (1 - b2))
                denom = vi.sqrt() / sqrt_bc2 + eps
                p.copy_((w - (mi / denom) * step_size).to(torch.bfloat16))
    return model, losses


def make(name):
    base, _, _, names, _ = mr.load_from_onnx(name, os.path.join(HERE, name + ".onnx"))
    mr.disable_dropout(base)
    data = dict(np.load(os.path.join(HERE, name + ".train.npz")))
    model, losses, scales = train(base, data, names)
    weights = collections.OrderedDict(
        (k, p.detach().float().numpy().copy()) for k, p in model.named_parameters())
    mr.save_npz(os.path.join(HERE, name + ".ref.sgd_fp16none.npz"), weights)
    model, adamw_losses = train_adamw_bf16(base, data, names)
    weights = collections.OrderedDict(
        (k, p.detach().float().numpy().copy()) for k, p in model.named_parameters())
    mr.save_npz(os.path.join(HERE, name + ".ref.adamw_bf16none.npz"), weights)
    ref = {"model": name, "torch": torch.__version__, "lr": LR,
           "sgd_fp16none": {"losses": losses, "loss_scales": scales},
           "adamw_bf16none": {"losses": adamw_losses, "hyperparameters": ADAMW},
           "note": __doc__.split("\n\n")[2].replace("\n", " ")}
    with open(os.path.join(HERE, name + ".ref.fp16.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(name, losses)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in sys.argv[1:] or ["mlp", "gpt", "llama"]:
        make(name)


if __name__ == "__main__":
    sys.exit(main())
