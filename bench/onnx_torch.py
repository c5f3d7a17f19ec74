#!/usr/bin/env python3
"""PyTorch eager on an ONNX training graph: the peer headroom is measured against.

    python3 bench/onnx_torch.py MODEL.onnx --data D.npz --batch B --steps N
        [--optimizer adamw|sgd] [--lr LR] [--device cuda|cpu]
        [--dtype fp32|bf16] [--warmup W] [--json OUT.json]

The graph's nodes run one by one as torch ops (OnnxModule below), its float
initializers are nn.Parameters with the file's values, autograd makes the
backward, and torch.optim.AdamW (or SGD) steps them: the same graph and the
same weights headroom trains, with PyTorch's kernels and allocator. The loss
is the graph's only output (headroom's convention). Batches are taken in order
from D.npz (one array per graph input).

Per step it records the loss and the time (CUDA-synchronized), and prints and
writes as JSON: median step seconds over the steps after --warmup, tokens or
samples per second, torch.cuda.max_memory_allocated and the losses.

Supported ops: the ones the zoo's gpt2 and llama graphs and headroom's test
models use (Add ... Where, SoftmaxCrossEntropyLoss); an op outside them is an
error naming it.
"""
import argparse
import contextlib
import json
import statistics
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper


def attrs_of(node):
    out = {}
    for a in node.attribute:
        out[a.name] = onnx.helper.get_attribute_value(a)
        if isinstance(out[a.name], bytes):
            out[a.name] = out[a.name].decode()
    return out


def ints(t):
    return [int(v) for v in t.reshape(-1).tolist()]


DTYPES = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.BOOL: torch.bool,
}


def norm_axis(axis, rank):
    return axis + rank if axis < 0 else axis


def run_node(op, x, a):
    """The outputs of one ONNX node (a list) for inputs x (None if absent)."""
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):
        f = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
             "Div": torch.div, "Pow": torch.pow}[op]
        if op == "Div" and not x[0].is_floating_point():
            return [torch.div(x[0], x[1], rounding_mode="trunc")]
        if op == "Pow" and not x[1].is_floating_point():
            return [torch.pow(x[0], x[1].to(x[0].dtype))]
        return [f(x[0], x[1])]
    unary = {"Neg": torch.neg, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal,
             "Tanh": torch.tanh, "Sigmoid": torch.sigmoid, "Sin": torch.sin,
             "Cos": torch.cos, "Exp": torch.exp, "Log": torch.log, "Erf": torch.erf,
             "Relu": torch.relu, "Abs": torch.abs, "Identity": lambda v: v}
    if op in unary:
        return [unary[op](x[0])]
    if op == "Cast":
        return [x[0].to(DTYPES[a["to"]])]
    if op == "Concat":
        return [torch.cat([v for v in x if v is not None], dim=a["axis"])]
    if op == "ConstantOfShape":
        value = a.get("value")
        v = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
        t = torch.from_numpy(v.copy()).to(x[0].device)
        return [t.reshape(()).expand(*ints(x[0])).clone()]
    if op == "Gather":
        axis = a.get("axis", 0)
        idx = x[1]
        if axis == 0 and x[0].dim() == 2 and idx.dim() >= 1:
            return [F.embedding(idx, x[0])]
        return [torch.index_select(x[0], axis, idx.reshape(-1)).reshape(
            x[0].shape[:axis] + idx.shape + x[0].shape[axis + 1:])]
    if op == "LayerNormalization":
        axis = norm_axis(a.get("axis", -1), x[0].dim())
        shape = x[0].shape[axis:]
        return [F.layer_norm(x[0], shape, x[1], x[2] if len(x) > 2 else None,
                             a.get("epsilon", 1e-5))]
    if op == "MatMul":
        return [torch.matmul(x[0], x[1])]
    if op == "Gemm":
        A = x[0].t() if a.get("transA", 0) else x[0]
        B = x[1].t() if a.get("transB", 0) else x[1]
        y = a.get("alpha", 1.0) * (A @ B)
        if len(x) > 2 and x[2] is not None:
            y = y + a.get("beta", 1.0) * x[2]
        return [y]
    if op == "Range":
        return [torch.arange(x[0].item(), x[1].item(), x[2].item(),
                             dtype=x[0].dtype, device=x[0].device)]
    if op in ("ReduceMean", "ReduceSum"):
        axes = a.get("axes")
        if axes is None and len(x) > 1 and x[1] is not None:
            axes = ints(x[1])
        keep = bool(a.get("keepdims", 1))
        f = torch.mean if op == "ReduceMean" else torch.sum
        if not axes:
            return [f(x[0]).reshape([1] * x[0].dim() if keep else [])]
        return [f(x[0], dim=axes, keepdim=keep)]
    if op == "Reshape":
        shape = ints(x[1])
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return [x[0].reshape(shape)]
    if op == "Slice":
        starts, ends = ints(x[1]), ints(x[2])
        axes = ints(x[3]) if len(x) > 3 and x[3] is not None else list(range(len(starts)))
        steps = ints(x[4]) if len(x) > 4 and x[4] is not None else [1] * len(starts)
        index = [slice(None)] * x[0].dim()
        for s, e, ax, st in zip(starts, ends, axes, steps):
            if st != 1:
                raise SystemExit("onnx_torch: Slice with step %d" % st)
            index[norm_axis(ax, x[0].dim())] = slice(s, min(e, sys.maxsize))
        return [x[0][tuple(index)]]
    if op == "Softmax":
        return [torch.softmax(x[0], dim=a.get("axis", -1))]
    if op == "LogSoftmax":
        return [torch.log_softmax(x[0], dim=a.get("axis", -1))]
    if op == "Split":
        axis = a.get("axis", 0)
        sizes = ints(x[1]) if len(x) > 1 and x[1] is not None else a.get("split")
        if sizes is None:
            n = a["num_outputs"]
            sizes = [x[0].shape[axis] // n] * n
        return list(torch.split(x[0], sizes, dim=axis))
    if op == "Transpose":
        perm = a.get("perm", list(reversed(range(x[0].dim()))))
        return [x[0].permute(*perm)]
    if op == "Trilu":
        k = int(x[1].item()) if len(x) > 1 and x[1] is not None else 0
        return [torch.triu(x[0], k) if a.get("upper", 1) else torch.tril(x[0], k)]
    if op == "Unsqueeze":
        y = x[0]
        axes = sorted(norm_axis(v, x[0].dim() + len(ints(x[1]))) for v in ints(x[1]))
        for ax in axes:
            y = y.unsqueeze(ax)
        return [y]
    if op == "Squeeze":
        if len(x) > 1 and x[1] is not None:
            y = x[0]
            for ax in sorted((norm_axis(v, x[0].dim()) for v in ints(x[1])), reverse=True):
                y = y.squeeze(ax)
            return [y]
        return [x[0].squeeze()]
    if op == "Where":
        return [torch.where(x[0], x[1], x[2])]
    if op == "Equal":
        return [torch.eq(x[0], x[1])]
    if op == "Dropout":
        ratio = float(x[1].item()) if len(x) > 1 and x[1] is not None else 0.5
        training = bool(x[2].item()) if len(x) > 2 and x[2] is not None else False
        return [F.dropout(x[0], ratio, training)]
    if op == "SoftmaxCrossEntropyLoss":
        kw = {"reduction": a.get("reduction", "mean")}
        if "ignore_index" in a:
            kw["ignore_index"] = a["ignore_index"]
        return [F.cross_entropy(x[0].float(), x[1], **kw)]
    if op == "Shape":
        return [torch.tensor(list(x[0].shape), dtype=torch.int64, device=x[0].device)]
    if op in ("Equal", "Greater", "Less", "LessOrEqual", "GreaterOrEqual"):
        f = {"Equal": torch.eq, "Greater": torch.gt, "Less": torch.lt,
             "LessOrEqual": torch.le, "GreaterOrEqual": torch.ge}[op]
        return [f(x[0], x[1])]
    if op in ("Min", "Max"):
        f = torch.minimum if op == "Min" else torch.maximum
        y = x[0]
        for v in x[1:]:
            y = f(y, v)
        return [y]
    if op == "Clip":
        lo = x[1] if len(x) > 1 and x[1] is not None else None
        hi = x[2] if len(x) > 2 and x[2] is not None else None
        return [torch.clamp(x[0], lo, hi)]
    if op == "Expand":
        shape = ints(x[1])
        rank = max(len(shape), x[0].dim())
        shape = [1] * (rank - len(shape)) + shape
        have = [1] * (rank - x[0].dim()) + list(x[0].shape)
        return [x[0].reshape(have).expand([max(a, b) for a, b in zip(have, shape)])]
    if op == "Tile":
        return [x[0].repeat(*ints(x[1]))]
    if op == "Flatten":
        axis = norm_axis(a.get("axis", 1), x[0].dim())
        return [x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)]
    if op == "Pad":
        pads = ints(x[1])
        rank = x[0].dim()
        torch_pads = []
        for d in reversed(range(rank)):
            torch_pads += [pads[d], pads[d + rank]]
        mode = a.get("mode", "constant")
        value = float(x[2].item()) if len(x) > 2 and x[2] is not None else 0.0
        return [F.pad(x[0], torch_pads, mode=mode, value=value) if mode == "constant"
                else F.pad(x[0], torch_pads, mode={"reflect": "reflect", "edge": "replicate"}[mode])]
    if op == "Conv":
        dims = x[1].dim() - 2
        pads = a.get("pads", [0] * (2 * dims))
        if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise SystemExit("onnx_torch: Conv auto_pad %s" % a["auto_pad"])
        if pads[:dims] != pads[dims:]:
            raise SystemExit("onnx_torch: asymmetric Conv pads")
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
        return [conv(x[0], x[1], x[2] if len(x) > 2 else None,
                     stride=a.get("strides", 1), padding=pads[:dims],
                     dilation=a.get("dilations", 1), groups=a.get("group", 1))]
    if op in ("MaxPool", "AveragePool"):
        k = a["kernel_shape"]
        dims = len(k)
        pads = a.get("pads", [0] * (2 * dims))
        if pads[:dims] != pads[dims:]:
            raise SystemExit("onnx_torch: asymmetric pool pads")
        kw = dict(kernel_size=k, stride=a.get("strides", k), padding=pads[:dims],
                  ceil_mode=bool(a.get("ceil_mode", 0)))
        if op == "MaxPool":
            pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[dims]
            return [pool(x[0], dilation=a.get("dilations", 1), **kw)]
        pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[dims]
        return [pool(x[0], count_include_pad=bool(a.get("count_include_pad", 0)), **kw)]
    if op == "GlobalAveragePool":
        return [x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True)]
    if op == "BatchNormalization":
        training = bool(a.get("training_mode", 0))
        # The running statistics are buffers: updated in place, as torch does.
        y = F.batch_norm(x[0], x[3], x[4], x[1], x[2], training,
                         1 - a.get("momentum", 0.9), a.get("epsilon", 1e-5))
        return [y, x[3], x[4]]
    if op == "ScatterND":
        y = x[0].clone()
        idx = x[1]
        k = idx.shape[-1]
        flat = idx.reshape(-1, k)
        upd = x[2].reshape((flat.shape[0],) + tuple(x[0].shape[k:]))
        y[tuple(flat[:, j] for j in range(k))] = upd
        return [y]
    raise SystemExit("onnx_torch: unsupported op %s" % op)


class OnnxModule(torch.nn.Module):
    """The graph of an ONNX model as a torch module: float initializers are
    parameters, the others buffers; forward(**inputs) returns the outputs."""

    def __init__(self, model, dtype):
        super().__init__()
        self.graph = model.graph
        self.names = {}
        for i, init in enumerate(self.graph.initializer):
            t = torch.from_numpy(numpy_helper.to_array(init).copy())
            key = "p%d" % i
            self.names[init.name] = key
            if t.is_floating_point() and not init.name.endswith(("running_mean", "running_var")):
                self.register_parameter(key, torch.nn.Parameter(t.to(dtype)))
            else:
                self.register_buffer(key, t)
        self.consts = {}
        for node in self.graph.node:
            if node.op_type == "Constant":
                self.consts[node.output[0]] = numpy_helper.to_array(attrs_of(node)["value"])

    def forward(self, **inputs):
        env = {}
        for name, key in self.names.items():
            env[name] = getattr(self, key)
        device = next(iter(self.parameters())).device
        for name, v in self.consts.items():
            env[name] = torch.from_numpy(v.copy()).to(device)
        env.update(inputs)
        for node in self.graph.node:
            if node.op_type == "Constant":
                continue
            x = [env[n] if n else None for n in node.input]
            outs = run_node(node.op_type, x, attrs_of(node))
            for n, v in zip(node.output, outs):
                if n:
                    env[n] = v
        return [env[o.name] for o in self.graph.output]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--json")
    args = p.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False  # headroom's fp32 is fp32
    torch.backends.cudnn.allow_tf32 = False
    model = onnx.load(args.model)
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    module = OnnxModule(model, torch.float32).to(args.device)
    data = np.load(args.data)
    names = [i.name for i in model.graph.input
             if i.name not in {init.name for init in model.graph.initializer}]
    samples = len(data[names[0]])
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(module.parameters(), lr=args.lr, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(module.parameters(), lr=args.lr)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for s in range(args.steps):
        start = (s * args.batch) % samples
        feed = {n: torch.from_numpy(data[n][start:start + args.batch]).to(args.device)
                for n in names}
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
                    if args.dtype == "bf16" else contextlib.nullcontext())
        with autocast:
            loss = module(**feed)[0]
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    timed = times[args.warmup:] or times
    step = statistics.median(timed)
    tokens = args.batch * int(np.prod(data[names[0]].shape[1:]))
    result = {
        "peer": "pytorch %s eager" % torch.__version__,
        "step_seconds": step,
        "tokens_per_second": tokens / step,
        "max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
        "losses": losses,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
