#!/usr/bin/python3
"""Generate the small ONNX test models used by headroom's importer tests.

Run with Debian's interpreter (needs torch, onnx, numpy):

    /usr/bin/python3 test/models/make_models.py [--outdir DIR] [--quiet]

For every model <name> this writes, next to this script (or into --outdir):

  <name>.onnx           forward + loss graph, exported with opset 17 in
                        TrainingMode.TRAINING, no constant folding, symbolic
                        batch dimension 'batch' on every input, one output 'loss'
                        (scalar mean loss computed inside forward).
  <name>.inputs.npz     one batch (B=4) of inputs, keyed by graph input name.
  <name>.expected.json  {"batch", "eval_loss", "train_loss_dropout_off", "inputs",
                         "parameters", "initializers", ...}; eval_loss is the
                        PyTorch loss on that batch with model.eval() (dropout off,
                        BatchNorm uses running statistics) and the exact
                        parameter/buffer values that were written into the .onnx
                        file; train_loss_dropout_off is the same with model.train()
                        but every Dropout p=0 (BatchNorm on batch statistics).

Note: torch.onnx.export traces forward once in train mode, which updates the
BatchNorm running statistics; the .onnx file holds the post-trace values, and
the expected losses are computed from exactly those values.

The output is deterministic: seeds are reset before each model is built and
each data batch is drawn from its own fixed numpy seed.
"""
import argparse
import collections
import copy
import hashlib
import io
import json
import math
import os
import re
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17
BATCH = 4

# --------------------------------------------------------------------------
# 1. MLP
# --------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x, y):
        h = F.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        logits = self.fc3(h)
        return F.cross_entropy(logits, y)


# --------------------------------------------------------------------------
# 2. LeNet
# --------------------------------------------------------------------------


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.bn1 = nn.BatchNorm2d(6)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool2 = nn.AvgPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(400, 64)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x, y):
        h = self.pool1(F.relu(self.bn1(self.conv1(x))))
        h = self.pool2(F.relu(self.conv2(h)))
        h = self.flatten(h)
        h = self.drop(F.relu(self.fc1(h)))
        logits = self.fc2(h)
        return F.cross_entropy(logits, y)


# --------------------------------------------------------------------------
# 3. GPT-2 style causal LM
# --------------------------------------------------------------------------

SEQ = 16
VOCAB = 64
D_MODEL = 32
N_HEAD = 2
N_LAYER = 2


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        hd = C // self.n_head
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # B, nh, T, hd
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        # Causal mask built inside forward so it is not an initializer.
        mask = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T)
        att = att.masked_fill(mask == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v  # B, nh, T, hd
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class GPTBlock(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = GPTMLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=VOCAB, block_size=SEQ, d=D_MODEL, n_head=N_HEAD,
                 n_layer=N_LAYER, dropout=0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block_size, d)
        self.h = nn.ModuleList([GPTBlock(d, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, targets):
        b, t = input_ids.size()
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# --------------------------------------------------------------------------
# 4. Llama style causal LM (RMSNorm, RoPE, SwiGLU, no biases)
# --------------------------------------------------------------------------

LLAMA_HIDDEN = 64


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.size(-1) // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, d, n_head, rope_base=10000.0):
        super().__init__()
        self.n_head = n_head
        self.rope_base = rope_base
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, T, C = x.size()
        hd = C // self.n_head
        q = self.wq(x).view(B, T, self.n_head, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_head, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_head, hd).transpose(1, 2)
        # RoPE (rotate-half formulation), cos/sin computed in forward.
        inv_freq = 1.0 / (self.rope_base ** (
            torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd))
        t = torch.arange(T, dtype=torch.float32, device=x.device)
        freqs = t.unsqueeze(1) * inv_freq.unsqueeze(0)  # T, hd/2
        emb = torch.cat((freqs, freqs), dim=-1)  # T, hd
        cos = emb.cos().view(1, 1, T, hd)
        sin = emb.sin().view(1, 1, T, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T)
        att = att.masked_fill(mask == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.wo(y)


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, hidden):
        super().__init__()
        self.attention_norm = RMSNorm(d)
        self.attention = LlamaAttention(d, n_head)
        self.ffn_norm = RMSNorm(d)
        self.feed_forward = SwiGLU(d, hidden)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        x = x + self.feed_forward(self.ffn_norm(x))
        return x


class Llama(nn.Module):
    def __init__(self, vocab=VOCAB, d=D_MODEL, n_head=N_HEAD, n_layer=N_LAYER,
                 hidden=LLAMA_HIDDEN):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, n_head, hidden) for _ in range(n_layer)])
        self.norm = RMSNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, targets):
        x = self.tok_embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        logits = self.output(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# --------------------------------------------------------------------------
# Model table and data
# --------------------------------------------------------------------------


def mlp_data(rng):
    return collections.OrderedDict([
        ("x", rng.standard_normal((BATCH, 16)).astype(np.float32)),
        ("y", rng.integers(0, 10, size=(BATCH,), dtype=np.int64)),
    ])


def lenet_data(rng):
    return collections.OrderedDict([
        ("x", rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)),
        ("y", rng.integers(0, 10, size=(BATCH,), dtype=np.int64)),
    ])


def lm_data(rng):
    ids = rng.integers(0, VOCAB, size=(BATCH, SEQ + 1), dtype=np.int64)
    return collections.OrderedDict([
        ("input_ids", np.ascontiguousarray(ids[:, :-1])),
        ("targets", np.ascontiguousarray(ids[:, 1:])),
    ])


# name -> (constructor, data fn, numpy seed, notes)
MODELS = collections.OrderedDict([
    ("mlp", (MLP, mlp_data, 1, "no dropout/batchnorm: train-mode loss == eval_loss")),
    ("lenet", (LeNet, lenet_data, 2,
               "train-mode loss differs from eval_loss: BatchNorm uses batch "
               "statistics and Dropout(0.1) is active")),
    ("gpt", (GPT, lm_data, 3, "train-mode loss differs from eval_loss: "
             "attention Dropout(0.1) is active")),
    ("llama", (Llama, lm_data, 4, "no dropout/batchnorm: train-mode loss == eval_loss")),
])


# --------------------------------------------------------------------------
# Export, verification, reporting
# --------------------------------------------------------------------------


def export(name, outdir):
    ctor, data_fn, np_seed, note = MODELS[name]
    torch.manual_seed(0)
    np.random.seed(np_seed)
    model = ctor()
    # Give BatchNorm non-trivial running statistics (deterministically) so that
    # the eval-mode loss actually exercises them.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(0.1 * torch.randn(m.num_features))
                m.running_var.copy_(1.0 + 0.1 * torch.rand(m.num_features))
    rng = np.random.default_rng(np_seed)
    data = data_fn(rng)
    names = list(data.keys())
    args = tuple(torch.from_numpy(a) for a in data.values())

    # Export.  Tracing runs forward once in train mode, which would update the
    # BatchNorm running stats; export a deep copy and take the values written
    # to the file from the copy afterwards, so the file and eval_loss agree.
    model.train()
    export_model = copy.deepcopy(model)
    buf = io.BytesIO()
    torch.manual_seed(0)
    torch.onnx.export(
        export_model, args, buf,
        opset_version=OPSET,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=names,
        output_names=["loss"],
        dynamic_axes={n: {0: "batch"} for n in names},
    )
    onnx_bytes = buf.getvalue()
    path = os.path.join(outdir, name + ".onnx")
    with open(path, "wb") as f:
        f.write(onnx_bytes)

    mp = onnx.load_from_string(onnx_bytes)
    onnx.checker.check_model(mp, full_check=True)

    # Eval-mode loss with exactly the state that went into the file.
    sd = export_model.state_dict()
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in mp.graph.initializer}
    mismatched = []
    for k, arr in inits.items():
        if k in sd:
            if not np.array_equal(sd[k].detach().cpu().numpy(), arr):
                mismatched.append(k)
    model.load_state_dict(sd)
    model.eval()
    with torch.no_grad():
        eval_loss = float(model(*args))
    # Train-mode loss (BatchNorm on batch statistics) with dropout disabled,
    # computed on a throw-away copy (train-mode BatchNorm mutates its stats).
    train_model = copy.deepcopy(model)
    train_model.train()
    for m in train_model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    with torch.no_grad():
        train_loss_dropout_off = float(train_model(*args))

    np.savez(os.path.join(outdir, name + ".inputs.npz"), **data)
    n_params = sum(p.numel() for p in model.parameters())
    expected = collections.OrderedDict([
        ("batch", BATCH),
        ("eval_loss", eval_loss),
        ("eval_loss_note", "PyTorch loss on <name>.inputs.npz with model.eval() "
                           "(dropout off, BatchNorm running stats) and the parameter/"
                           "buffer values stored in <name>.onnx; " + note),
        ("train_loss_dropout_off", train_loss_dropout_off),
        ("train_loss_dropout_off_note", "same batch, model.train() (BatchNorm uses "
                                        "batch statistics) but every Dropout p=0"),
        ("inputs", collections.OrderedDict(
            (k, {"shape": list(v.shape), "dtype": str(v.dtype)}) for k, v in data.items())),
        ("parameters", n_params),
        ("initializers", [i.name for i in mp.graph.initializer]),
    ])
    text = json.dumps(expected, indent=2)
    # Keep short lists of numbers (shapes) on one line.
    text = re.sub(r"\[\s*([0-9,\s]*?)\s*\]",
                  lambda mo: "[" + ", ".join(mo.group(1).replace(",", " ").split()) + "]",
                  text)
    with open(os.path.join(outdir, name + ".expected.json"), "w") as f:
        f.write(text + "\n")
    return mp, len(onnx_bytes), (eval_loss, train_loss_dropout_off), n_params, mismatched


DTYPE_NAMES = {v: k for k, v in onnx.TensorProto.DataType.items()}


def fmt_type(vi):
    tt = vi.type.tensor_type
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(str(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append("?")
    shape = "[" + ",".join(dims) + "]" if tt.HasField("shape") else "<no shape>"
    return "%s%s" % (DTYPE_NAMES.get(tt.elem_type, tt.elem_type), shape)


def is_static(vi):
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in tt.shape.dim)


def report(name, mp, size, eval_loss, n_params, mismatched):
    g = mp.graph
    print("=" * 72)
    print("%s.onnx  size=%d bytes  opset=%s  params=%d  eval_loss=%.6f  "
          "train_loss_dropout_off=%.6f"
          % (name, size, [(o.domain or "ai.onnx", o.version) for o in mp.opset_import],
             n_params, eval_loss[0], eval_loss[1]))
    ops = collections.Counter(n.op_type for n in g.node)
    print("ops (%d nodes): %s" % (len(g.node),
                                  ", ".join("%s=%d" % kv for kv in sorted(ops.items()))))
    print("inputs : " + ", ".join("%s:%s" % (v.name, fmt_type(v)) for v in g.input))
    print("outputs: " + ", ".join("%s:%s" % (v.name, fmt_type(v)) for v in g.output))
    print("initializers (%d):" % len(g.initializer))
    for i in g.initializer:
        print("  %-45s %-7s %s" % (i.name, DTYPE_NAMES[i.data_type], list(i.dims)))
    if mismatched:
        print("WARNING: initializers differing from state_dict:", mismatched)
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t)
              for n in g.node if n.op_type == "Constant"
              and n.attribute[0].name == "value"}
    for n in g.node:
        if n.op_type in ("Dropout", "BatchNormalization"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            ins = ["const(%s)" % consts[i].tolist() if i in consts else i for i in n.input]
            print("  %s %s inputs=%s outputs=%d attrs=%s"
                  % (n.op_type, n.name, ins, len(n.output), attrs))
    for n in g.node:
        if n.op_type == "SoftmaxCrossEntropyLoss":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            print("  %s attrs=%s" % (n.op_type, attrs))

    # Data-propagating shape inference with batch fixed at BATCH.
    m2 = copy.deepcopy(mp)
    for vi in m2.graph.input:
        d0 = vi.type.tensor_type.shape.dim[0]
        d0.Clear()
        d0.dim_value = BATCH
    inf = onnx.shape_inference.infer_shapes(m2, check_type=True, strict_mode=True,
                                            data_prop=True)
    produced = set()
    for n in inf.graph.node:
        produced.update(o for o in n.output if o)
    vis = {v.name: v for v in inf.graph.value_info}
    missing = sorted(o for o in produced if o not in vis
                     and o not in {x.name for x in inf.graph.output})
    nonstatic = [v for v in list(inf.graph.value_info) + list(inf.graph.output)
                 if not is_static(v)]
    print("shape inference (B=%d, data_prop): %d value_infos, %d node outputs without "
          "value_info, %d non-static" % (BATCH, len(inf.graph.value_info), len(missing),
                                         len(nonstatic)))
    for o in missing:
        print("  no value_info:", o)
    for v in nonstatic:
        print("  non-static:", v.name, fmt_type(v))
    print("outputs after inference: "
          + ", ".join("%s:%s" % (v.name, fmt_type(v)) for v in inf.graph.output))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--outdir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("models", nargs="*", default=list(MODELS))
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    for name in a.models:
        mp, size, eval_loss, n_params, mismatched = export(name, a.outdir)
        if not a.quiet:
            report(name, mp, size, eval_loss, n_params, mismatched)
    if not a.quiet:
        print("=" * 72)
        for name in a.models:
            for ext in (".onnx", ".inputs.npz", ".expected.json"):
                p = os.path.join(a.outdir, name + ext)
                with open(p, "rb") as f:
                    print(hashlib.sha256(f.read()).hexdigest(), os.path.basename(p))


if __name__ == "__main__":
    sys.exit(main())
