#!/usr/bin/python3
"""Generate PyTorch training references for headroom's end-to-end tests.

Run with Debian's interpreter (torch 1.13, onnx 1.12, numpy):

    /usr/bin/python3 test/models/make_references.py [--outdir DIR] [--quiet] [models...]

The committed models <name>.onnx (mlp, lenet, gpt, llama, written by
make_models.py) are NOT re-exported.  Instead the same PyTorch module is
rebuilt from the class definitions in make_models.py and every parameter and
buffer is overwritten with the initializer of the same name read from
<name>.onnx (ONNX initializer names are the state_dict names).  The script
fails if any initializer is left unused, any parameter has no initializer, or
a shape/dtype differs.

For every model <name> this writes (next to this script, or into --outdir):

  <name>.train.npz         the training set: 32 samples, keyed by graph input
                           name, same dtypes / trailing shapes as the graph
                           inputs.
  <name>.ref.grads.npz     gradients (keys = parameter names) of the loss of
                           the first batch (samples [0, 8)) at the initial
                           weights, model in train mode.
  <name>.ref.<config>.npz  weights after training (keys = parameter names, plus
                           BatchNorm running_mean / running_var buffers).
  <name>.ref.json          per-step losses, hyperparameters, notes.

Training: batch 8, step s uses samples [s*8, (s+1)*8) in order, 4 steps (one
pass over the data).  The loss of step s is the loss of the forward pass on
batch s before the update of step s.  Every nn.Dropout has p set to 0
(headroom's RNG cannot match torch's), recorded as "dropout_disabled": true.
BatchNorm runs in train mode (batch statistics; running stats updated with
momentum 0.1 and the unbiased batch variance, as torch does).

Gradient accumulation (configs with accum K > 1: sgd_accum, sgd_clip_accum,
K = 4): step s still uses samples [s*8, (s+1)*8), split in order into K
micro-batches of 8/K = 2 rows, micro-batch j = rows [s*8 + 2j, s*8 + 2j + 2).
For each micro-batch: loss_j = model(micro-batch); (loss_j / K).backward(), so
the gradients accumulate (sum) in .grad.  Then (if the config clips) the
accumulated gradients are clipped with clip_grad_norm_ (grad_norms[s] = its
return value), one optimizer step is taken and the gradients are reset.
losses[s] = float64 mean of the K micro-batch losses.  Train-mode BatchNorm
therefore sees micro-batches of 2 rows (batch statistics and 4 running-stat
updates per step), which is what accumulation really does; final_batch_losses
are still evaluated on full batches of 8.

AdaLomo (configs adalomo, adalomo_wd): Lv et al. 2023, "AdaLomo: Low-memory
Optimization with Adaptive Learning Rate", implemented below (class AdaLomo)
after lomo_optim/adalomo.py of github.com/OpenLMLab/LOMO; the exact update is in
OPTIMIZER_NOTES["AdaLomo"].  It is applied after a full backward pass; each
parameter's update depends only on its own gradient (and no parameter is
shared), so this equals the authors' update fused into the backward pass.

The tests never run this script; the outputs are committed.  The output is
deterministic (npz archives are written with fixed zip timestamps).
"""
import argparse
import collections
import copy
import hashlib
import io
import json
import math
import os
import sys
import zipfile

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # keep test/models free of __pycache__
import make_models  # noqa: E402  (class definitions and model table)

SAMPLES = 32
BATCH = 8
STEPS = 4
SEED = 0

ADALOMO_DEFAULTS = collections.OrderedDict([
    ("eps", (1e-30, 1e-3)), ("clip_threshold", 1.0), ("decay_rate", -0.8),
    ("scale_parameter", True)])

# name -> (optimizer class name, kwargs, clip max_norm or None, accum K)
CONFIGS = collections.OrderedDict([
    ("sgd", ("SGD", dict(lr=0.05), None, 1)),
    ("momentum", ("SGD", dict(lr=0.05, momentum=0.9), None, 1)),
    ("momentum_nesterov", ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True), None, 1)),
    ("adamw", ("AdamW", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.01), None, 1)),
    ("sgd_clip", ("SGD", dict(lr=0.05), 0.5, 1)),
    ("sgd_wd", ("SGD", dict(lr=0.05, weight_decay=0.01), None, 1)),
    ("sgd_accum", ("SGD", dict(lr=0.05), None, 4)),
    ("sgd_clip_accum", ("SGD", dict(lr=0.05), 0.5, 4)),
    ("adalomo", ("AdaLomo", collections.OrderedDict(
        [("lr", 0.01), ("weight_decay", 0.0)] + list(ADALOMO_DEFAULTS.items())), None, 1)),
    ("adalomo_wd", ("AdaLomo", collections.OrderedDict(
        [("lr", 0.01), ("weight_decay", 0.1)] + list(ADALOMO_DEFAULTS.items())), None, 1)),
    # Mixed precision: the forward under torch.autocast("cpu", bfloat16),
    # fp32 master weights (the parameters stay float32).
    ("sgd_bf16", ("SGD", dict(lr=0.05), None, 1)),
    ("adamw_bf16", ("AdamW", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.01), None, 1)),
])
BF16_NOTE = ("configs ending in _bf16: every forward runs under "
             "torch.autocast(device_type='cpu', dtype=torch.bfloat16) (torch 1.13's "
             "CPU op lists: linear/matmul/conv in bf16, the rest in its inputs' type), "
             "parameters and optimizer in float32, backward outside the context")

OPTIMIZER_NOTES = {
    "SGD": "torch.optim.SGD (torch 1.13, foreach=False, dampening=0): "
           "g = grad + weight_decay*p; if momentum: buf = g at the first step, "
           "else buf = momentum*buf + g; g = g + momentum*buf if nesterov else buf; "
           "p -= lr*g",
    "AdamW": "torch.optim.AdamW (torch 1.13, foreach=False, amsgrad=False): "
             "p *= 1 - lr*weight_decay; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
             "p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
    "AdaLomo": "AdaLomo (Lv et al. 2023) as in lomo_optim/adalomo.py (AdaLomo.fuse_update) "
               "of github.com/OpenLMLab/LOMO at commit "
               "45d4bac16c642f101ed00db7244cacf28e5dde15, applied after a full backward; "
               "all math in float32 (torch ops, same operation order as the authors). "
               "Per parameter p with gradient g, step t = 1, 2, ... (t = 1 at the first "
               "update); eps = (eps1, eps2) = (1e-30, 1e-3), clip_threshold = 1.0, "
               "decay_rate = -0.8: beta2t = 1 - t^decay_rate (computed in float64, "
               "so 0 at t = 1); u = g*g + eps1; "
               "if p.ndim > 1 (factored): row (shape p.shape[:-1]) and col (shape "
               "p.shape[:-2] + p.shape[-1:]) start at 0; row = beta2t*row + "
               "(1-beta2t)*mean(u, dim=-1); col = beta2t*col + (1-beta2t)*mean(u, dim=-2); "
               "update = (rsqrt(row / mean(row, dim=-1, keepdim)).unsqueeze(-1) * "
               "rsqrt(col).unsqueeze(-2)) * g; "
               "if p.ndim == 1: v (starts at 0) = beta2t*v + (1-beta2t)*u; update = "
               "rsqrt(v) * g; "
               "then update = update / max(1, rms(update)/clip_threshold) with rms(x) = "
               "norm2(x)/sqrt(numel(x)); lr_t = lr * max(eps2, rms(p)) with p before this "
               "step's update (scale_parameter; lr_t = lr otherwise); weight decay "
               "(decoupled, scaled by lr_t, applied before the update): p = p * (1 - "
               "lr_t*weight_decay); then p = p - lr_t*update. "
               "The authors' code only allocates row/col for 2-D parameters (row [shape[0]], "
               "col [shape[1]]); for ndim > 2 (LeNet's conv weights [O,I,kh,kw]) this "
               "follows Adafactor's generalisation (transformers.optimization.Adafactor): "
               "row over the last dim, col over the second-to-last, both keeping the "
               "leading dims, and mean(row, dim=-1) only over row's last dim, i.e. the "
               "2-D factorisation applied to every trailing [kh,kw] matrix separately "
               "(rms(update) and rms(p) still over the whole tensor). "
               "The authors' loss scaling (loss*2^10, grad/2^10) and its grad-norm pass "
               "are omitted: scaling by a power of two is exact in float32",
}
ACCUM_NOTE = ("configs with \"accum\": K split each batch of %d, in order, into K "
              "micro-batches of %d/K rows (micro-batch j = rows [s*%d + j*%d/K, "
              "s*%d + (j+1)*%d/K) of the dataset); for each: loss_j = forward(micro-batch), "
              "backward of loss_j/K, gradients summed over the K micro-batches; then "
              "clip_grad_norm_ of the summed gradients if the config clips (grad_norms[s] "
              "= its return value), one optimizer step, gradients reset. losses[s] = "
              "float64 mean of the K loss_j; train-mode BatchNorm normalises each "
              "micro-batch with its own statistics and updates the running stats once per "
              "micro-batch (K times per step); final_batch_losses use full batches"
              % ((BATCH,) * 6))
CLIP_NOTE = ("torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) before each "
             "optimizer step: total_norm = L2 norm of all gradients together "
             "(before clipping, recorded as grad_norms); every gradient is multiplied "
             "by min(1, max_norm / (total_norm + 1e-6))")


# --------------------------------------------------------------------------
# Data sets (deterministic, one numpy seed per model)
# --------------------------------------------------------------------------


def mlp_train(rng):
    x = rng.standard_normal((SAMPLES, 16)).astype(np.float32)
    w = rng.standard_normal((16, 10)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.int64)
    return (collections.OrderedDict([("x", x), ("y", y)]),
            "x ~ N(0,1) [32,16] float32; y = argmax(x @ W) with a fixed random "
            "W [16,10] (numpy default_rng(%d))")


def lenet_train(rng):
    x = rng.standard_normal((SAMPLES, 1, 28, 28)).astype(np.float32)
    # Labels from a fixed rule: the 28x28 image is cut into a 2x5 grid of
    # 14x5-pixel cells (the last 3 columns are ignored) and the label is the
    # index of the cell with the largest mean intensity.
    cells = x[:, 0, :, :25].reshape(SAMPLES, 2, 14, 5, 5).mean(axis=(2, 4))
    y = np.argmax(cells.reshape(SAMPLES, 10), axis=1).astype(np.int64)
    # Make the rule easy to see: brighten the winning cell.
    for i in range(SAMPLES):
        r, c = divmod(int(y[i]), 5)
        x[i, 0, r * 14:(r + 1) * 14, c * 5:(c + 1) * 5] += np.float32(1.0)
    return (collections.OrderedDict([("x", x), ("y", y)]),
            "x ~ N(0,1) [32,1,28,28] float32; label = index (row*5+col) of the "
            "brightest cell of a 2x5 grid of 14x5 cells over columns 0..24, and "
            "that cell is brightened by +1 (numpy default_rng(%d))")


def lm_train(rng):
    T, V = make_models.SEQ, make_models.VOCAB
    # Copy task: the second half of each sequence repeats the first half; the
    # target is the next token (an induction/copy task a causal model learns).
    half = rng.integers(0, V, size=(SAMPLES, T // 2 + 1), dtype=np.int64)
    seq = np.concatenate([half[:, :T // 2], half[:, :T // 2], half[:, T // 2:]], axis=1)
    assert seq.shape == (SAMPLES, T + 1)
    return (collections.OrderedDict([
        ("input_ids", np.ascontiguousarray(seq[:, :-1])),
        ("targets", np.ascontiguousarray(seq[:, 1:])),
    ]), "vocab 64, T=16: s = a ++ a ++ [b] with a 8 random tokens; "
        "input_ids = s[0:16], targets = s[1:17] (next token; positions 8..14 "
        "are copies) (numpy default_rng(%d))")


DATA = {
    "mlp": (mlp_train, 11),
    "lenet": (lenet_train, 12),
    "gpt": (lm_train, 13),
    "llama": (lm_train, 14),
}


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def save_npz(path, arrays):
    """np.savez-compatible archive with fixed timestamps (byte-reproducible)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for k, v in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(v), allow_pickle=False)
            zi = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_STORED
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, buf.getvalue())


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_from_onnx(name, onnx_path):
    """Rebuild the torch module and load every initializer into it by name."""
    ctor = make_models.MODELS[name][0]
    torch.manual_seed(0)
    model = ctor()
    mp = onnx.load(onnx_path)
    inits = collections.OrderedDict(
        (i.name, onnx.numpy_helper.to_array(i)) for i in mp.graph.initializer)
    sd = model.state_dict()
    params = dict(model.named_parameters())
    problems = []
    unused = [k for k in inits if k not in sd]
    if unused:
        problems.append("initializers with no parameter/buffer: %s" % unused)
    missing_params = [k for k in params if k not in inits]
    if missing_params:
        problems.append("parameters with no initializer: %s" % missing_params)
    for k, arr in inits.items():
        if k in sd:
            t = sd[k]
            if tuple(t.shape) != arr.shape or t.numpy().dtype != arr.dtype:
                problems.append("%s: torch %s %s vs onnx %s %s" % (
                    k, tuple(t.shape), t.dtype, arr.shape, arr.dtype))
    if problems:
        raise SystemExit("%s: ONNX -> torch mapping failed:\n  %s"
                         % (name, "\n  ".join(problems)))
    # Buffers absent from the ONNX file keep their constructor value (only
    # BatchNorm's num_batches_tracked; it does not affect the math because
    # BatchNorm momentum is 0.1, not None).
    missing_buffers = [k for k in sd if k not in inits]
    for k in missing_buffers:
        if not k.endswith("num_batches_tracked"):
            raise SystemExit("%s: buffer %s has no initializer" % (name, k))
    with torch.no_grad():
        for k, arr in inits.items():
            sd[k].copy_(torch.from_numpy(arr.copy()))
    # Check the load really went through.
    sd2 = model.state_dict()
    for k, arr in inits.items():
        assert np.array_equal(sd2[k].numpy(), arr), k
    input_names = [i.name for i in mp.graph.input if i.name not in inits]
    return model, mp, inits, input_names, missing_buffers


def disable_dropout(model):
    n = 0
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
            n += 1
    return n


def saved_state(model):
    """Parameters plus BatchNorm running stats, keyed as in state_dict."""
    out = collections.OrderedDict()
    for k, p in model.named_parameters():
        out[k] = p.detach().numpy().copy()
    for mname, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            for b in ("running_mean", "running_var"):
                out["%s.%s" % (mname, b) if mname else b] = getattr(m, b).numpy().copy()
    return out


def batch(data, names, s):
    return tuple(torch.from_numpy(data[n][s * BATCH:(s + 1) * BATCH]) for n in names)


class AdaLomo(torch.optim.Optimizer):
    """AdaLomo (Lv et al. 2023), written for these references after reading
    lomo_optim/adalomo.py (AdaLomo.fuse_update) of github.com/OpenLMLab/LOMO,
    commit 45d4bac16c642f101ed00db7244cacf28e5dde15.

    The authors run this update inside the backward pass (a gradient hook per
    parameter, then p.grad = None).  Here it is an ordinary optimizer applied
    after a full backward; because each parameter's update depends only on its
    own gradient and state, the result is the same.  Loss scaling (loss * 2^10,
    gradients / 2^10 in the authors' code) is left out: it is exact in float32.
    The step count is shared by all parameters and is 1 at the first update
    (the authors increment step_num before the backward that updates).
    """

    def __init__(self, params, lr=1e-3, weight_decay=0.0, eps=(1e-30, 1e-3),
                 clip_threshold=1.0, decay_rate=-0.8, scale_parameter=True):
        defaults = dict(lr=lr, weight_decay=weight_decay, eps=eps,
                        clip_threshold=clip_threshold, decay_rate=decay_rate,
                        scale_parameter=scale_parameter)
        super().__init__(params, defaults)
        self.step_num = 0

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @torch.no_grad()
    def step(self):
        self.step_num += 1
        t = self.step_num
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            eps1, eps2 = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                assert p.dtype == torch.float32
                g = p.grad  # already float32 (the authors upcast to float32)
                state = self.state[p]
                if not state:
                    if p.dim() > 1:
                        # Factored second moment: row over the last dim, col
                        # over the second-to-last (== the authors' [shape[0]] /
                        # [shape[1]] for 2-D; Adafactor's shapes for ndim > 2).
                        state["row"] = torch.zeros(p.shape[:-1], dtype=torch.float32)
                        state["col"] = torch.zeros(p.shape[:-2] + p.shape[-1:],
                                                   dtype=torch.float32)
                    else:
                        state["v"] = torch.zeros_like(p, dtype=torch.float32)
                # beta2t = 1 - t^decay_rate in float64 (0 at t = 1).
                beta2t = 1.0 - math.pow(t, group["decay_rate"])
                u = (g ** 2) + eps1
                if p.dim() > 1:
                    row, col = state["row"], state["col"]
                    row.mul_(beta2t).add_(u.mean(dim=-1), alpha=1.0 - beta2t)
                    col.mul_(beta2t).add_(u.mean(dim=-2), alpha=1.0 - beta2t)
                    r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    c_factor = col.unsqueeze(-2).rsqrt()
                    update = torch.mul(r_factor, c_factor)
                    update.mul_(g)
                else:
                    v = state["v"]
                    v.mul_(beta2t).add_(u, alpha=1.0 - beta2t)
                    update = v.rsqrt().mul_(g)
                # update /= max(1, rms(update) / clip_threshold)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                # lr_t = lr * max(eps2, rms(p)), p before this step's update.
                lr_t = lr
                if group["scale_parameter"]:
                    p_rms = torch.norm(p, 2.0) / math.sqrt(p.numel())
                    lr_t = lr * max(eps2, p_rms)
                # Decoupled weight decay scaled by lr_t, before the update.
                if wd > 0.0:
                    p.mul_(1.0 - lr_t * wd)
                p.add_(update, alpha=-lr_t)


def make_optimizer(opt_name, params, kw):
    if opt_name == "AdaLomo":
        return AdaLomo(params, **kw)
    return getattr(torch.optim, opt_name)(params, foreach=False, **kw)


def micro_batch(data, names, s, j, accum):
    m = BATCH // accum
    lo = s * BATCH + j * m
    return tuple(torch.from_numpy(data[n][lo:lo + m]) for n in names)


def train(base, data, names, config):
    opt_name, kw, clip, accum = CONFIGS[config]
    assert BATCH % accum == 0
    model = copy.deepcopy(base)
    model.train()
    torch.manual_seed(SEED)
    opt = make_optimizer(opt_name, model.parameters(), kw)
    losses, norms = [], []
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        if accum == 1:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16,
                                enabled=config.endswith("_bf16")):
                loss = model(*batch(data, names, s))
            loss.float().backward()
            losses.append(float(loss))
        else:
            micro = []
            for j in range(accum):
                loss = model(*micro_batch(data, names, s, j, accum))
                (loss / accum).backward()  # gradients accumulate in .grad
                micro.append(float(loss))
            losses.append(float(np.mean(np.array(micro, dtype=np.float64))))
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                              max_norm=clip)))
        opt.step()
    return model, losses, norms, batch_losses(model, data, names)


def batch_losses(model, data, names):
    """Loss of every batch at fixed weights (train mode, dropout off), each on a
    throw-away copy because train-mode BatchNorm mutates running stats."""
    out = []
    for s in range(STEPS):
        probe = copy.deepcopy(model)
        probe.train()
        with torch.no_grad():
            out.append(float(probe(*batch(data, names, s))))
    return out


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def make(name, outdir, quiet):
    onnx_path = os.path.join(HERE, name + ".onnx")
    base, mp, inits, names, missing_buffers = load_from_onnx(name, onnx_path)
    n_drop = disable_dropout(base)
    base.train()

    # Sanity check against make_models.py's recorded losses on <name>.inputs.npz.
    exp_path = os.path.join(HERE, name + ".expected.json")
    inp_path = os.path.join(HERE, name + ".inputs.npz")
    check = None
    if os.path.exists(exp_path) and os.path.exists(inp_path):
        with open(exp_path) as f:
            expected = json.load(f)
        inp = np.load(inp_path)
        args = tuple(torch.from_numpy(inp[n]) for n in names)
        probe = copy.deepcopy(base)
        with torch.no_grad():
            tl = float(probe(*args))
            probe = copy.deepcopy(base)
            probe.eval()
            el = float(probe(*args))
        check = (tl, expected["train_loss_dropout_off"], el, expected["eval_loss"])
        if tl != expected["train_loss_dropout_off"] or el != expected["eval_loss"]:
            raise SystemExit("%s: rebuilt module does not reproduce %s: %r"
                             % (name, os.path.basename(exp_path), check))

    data_fn, np_seed = DATA[name]
    data, task = data_fn(np.random.default_rng(np_seed))
    task = task % np_seed
    # Match the graph inputs' names, dtypes and trailing shapes.
    elem = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64}
    assert list(data) == names, (list(data), names)
    for vi in mp.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim][1:]
        a = data[vi.name]
        assert a.dtype == elem[tt.elem_type] and list(a.shape[1:]) == dims \
            and a.shape[0] == SAMPLES, (vi.name, a.dtype, a.shape)
    files = []
    p = os.path.join(outdir, name + ".train.npz")
    save_npz(p, data)
    files.append(p)

    # Gradients of the first batch at the initial weights.
    gm = copy.deepcopy(base)
    torch.manual_seed(SEED)
    gloss = gm(*batch(data, names, 0))
    gloss.backward()
    grads = collections.OrderedDict(
        (k, q.grad.detach().numpy().copy()) for k, q in gm.named_parameters())
    gnorm = float(torch.norm(torch.stack([torch.norm(q.grad) for q in gm.parameters()])))
    p = os.path.join(outdir, name + ".ref.grads.npz")
    save_npz(p, grads)
    files.append(p)

    ref = collections.OrderedDict()
    ref["model"] = name
    ref["onnx"] = name + ".onnx"
    ref["onnx_sha256"] = sha256(onnx_path)
    ref["dataset"] = name + ".train.npz"
    ref["dataset_task"] = task
    ref["samples"] = SAMPLES
    ref["batch"] = BATCH
    ref["steps"] = STEPS
    ref["batch_order"] = ("step s (0-based) uses samples [s*batch, (s+1)*batch) of the "
                          "dataset; losses[s] is the loss of that batch before "
                          "the update of step s")
    ref["dropout_disabled"] = True
    ref["dropout_note"] = ("every nn.Dropout (%d in this model) had p set to 0 for the "
                           "references; headroom must run with dropout disabled" % n_drop)
    ref["mode"] = "train"
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in base.modules())
    if has_bn:
        ref["batchnorm_note"] = (
            "train mode: normalise with the batch mean and biased batch variance; "
            "running_mean = 0.9*running_mean + 0.1*mean, running_var = "
            "0.9*running_var + 0.1*unbiased_var (n/(n-1)); running stats start "
            "from the .onnx initializers and are saved in every <config>.npz; "
            "num_batches_tracked (not an ONNX initializer) is not saved")
    ref["parameters"] = [k for k, _ in base.named_parameters()]
    ref["saved_buffers"] = [k for k in saved_state(base) if k not in grads]
    ref["grads"] = collections.OrderedDict([
        ("file", name + ".ref.grads.npz"),
        ("samples", [0, BATCH]),
        ("loss", float(gloss)),
        ("grad_norm", gnorm),
    ])
    init_losses = batch_losses(base, data, names)
    ref["initial_batch_losses"] = init_losses
    ref["initial_mean_loss"] = float(np.mean(np.array(init_losses, dtype=np.float64)))
    ref["eval_note"] = ("initial_batch_losses / configs.*.final_batch_losses: loss of "
                        "each of the %d batches at the initial / final weights (train "
                        "mode, dropout off, no update); *_mean_loss is their mean "
                        "(float64)" % STEPS)
    # Parameters whose gradient is mathematically zero (e.g. a conv bias that
    # feeds a BatchNorm, which subtracts the batch mean): the stored gradient is
    # rounding noise, and Adam(W) normalises that noise into +-lr sized steps.
    zero = [k for k, v in grads.items() if float(np.abs(v).max()) < 1e-6]
    ref["zero_gradient_parameters"] = zero
    if zero:
        ref["zero_gradient_note"] = (
            "the gradient of these parameters is exactly 0 in exact arithmetic (the "
            "following BatchNorm removes them) and the stored gradient is float32 "
            "rounding noise (|g| < 1e-6); SGD-family results are unaffected (changes "
            "< 1e-8), but AdamW turns the noise into steps of up to lr per step, so "
            "in adamw their final values, and the running_mean of the BatchNorm they "
            "feed, are not reproducible by another implementation: compare them with "
            "atol >= steps*lr or skip them")
        ref["zero_gradient_adalomo_note"] = (
            "the same holds for adalomo and adalomo_wd: AdaLomo normalises the noise "
            "gradient of these parameters to an update of rms up to 1, so they move by "
            "up to lr*max(eps2, rms(p)) per step (lr*rms(p)*steps ~ %.1e here), and so "
            "does the running_mean of the BatchNorm they feed: compare them with a "
            "matching atol or skip them" % max(
                CONFIGS["adalomo"][1]["lr"] * max(1e-3, float(np.sqrt(np.mean(np.square(inits[k].astype(np.float64))))))
                * STEPS for k in zero))
    ref["optimizer_notes"] = OPTIMIZER_NOTES
    ref["clip_note"] = CLIP_NOTE
    ref["accum_note"] = ACCUM_NOTE
    ref["bf16_note"] = BF16_NOTE
    ref["configs"] = collections.OrderedDict()
    summary = {}
    for config, (opt_name, kw, clip, accum) in CONFIGS.items():
        model, losses, norms, final0 = train(base, data, names, config)
        p = os.path.join(outdir, "%s.ref.%s.npz" % (name, config))
        save_npz(p, saved_state(model))
        files.append(p)
        hp = collections.OrderedDict(
            (k, list(v) if isinstance(v, tuple) else v) for k, v in kw.items())
        c = collections.OrderedDict()
        c["file"] = os.path.basename(p)
        c["optimizer"] = opt_name
        c["hyperparameters"] = hp
        if clip is not None:
            c["clip_grad_norm"] = collections.OrderedDict(
                [("max_norm", clip), ("norm_type", 2.0), ("eps", 1e-6)])
        if accum != 1:
            c["accum"] = accum
        c["losses"] = losses
        if clip is not None:
            c["grad_norms"] = norms
        c["final_batch_losses"] = final0
        c["final_mean_loss"] = float(np.mean(np.array(final0, dtype=np.float64)))
        ref["configs"][config] = c
        summary[config] = (losses, norms, final0)
    ref["torch_version"] = torch.__version__
    p = os.path.join(outdir, name + ".ref.json")
    with open(p, "w") as f:
        f.write(json.dumps(ref, indent=2) + "\n")
    files.append(p)

    if not quiet:
        print("=" * 72)
        print("%s: %d initializers mapped to %d parameters + %d buffers; "
              "buffers without initializer: %s; dropout modules zeroed: %d"
              % (name, len(inits), len(ref["parameters"]),
                 len(inits) - len(ref["parameters"]), missing_buffers or "none", n_drop))
        if check:
            print("  inputs.npz check: train_loss_dropout_off %.7f == %.7f, "
                  "eval_loss %.7f == %.7f" % check)
        print("  grads batch0 loss %.6f  grad_norm %.6f  initial_mean_loss %.6f"
              % (float(gloss), gnorm, ref["initial_mean_loss"]))
        for config, (losses, norms, final0) in summary.items():
            print("  %-18s losses %s  final_mean_loss %.6f%s" % (
                config, " ".join("%.6f" % v for v in losses),
                ref["configs"][config]["final_mean_loss"],
                ("  norms " + " ".join("%.4f" % v for v in norms)) if norms else ""))
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--outdir", default=HERE)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("models", nargs="*", default=list(DATA))
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    files = []
    for name in a.models:
        files += make(name, a.outdir, a.quiet)
    if not a.quiet:
        print("=" * 72)
        total = 0
        for p in files:
            total += os.path.getsize(p)
            print("%s %8d %s" % (sha256(p), os.path.getsize(p), os.path.basename(p)))
        print("total %d bytes in %d files" % (total, len(files)))


if __name__ == "__main__":
    sys.exit(main())
