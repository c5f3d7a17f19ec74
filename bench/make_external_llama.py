#!/usr/bin/python3
"""Generate a Llama-style causal-LM training graph as ONNX with *external*, sparse weights.

Purpose: a benchmark input for headroom's ONNX import / compile time on a
realistically sized model (default: Llama-2-7B shapes, ~6.7e9 parameters)
without having to download or store 13+ GB of real weights.

The graph mimics what torch.onnx.export produces for a Llama model (opset 17,
default domain only): Linear layers as MatMul against [in, out] initializers,
RMSNorm written out as Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul, SiLU as
Sigmoid*x, causal mask built in-graph, SoftmaxCrossEntropyLoss on top.
Rotary position embeddings are omitted.

Every float initializer is an EXTERNAL tensor pointing into one side file
(OUT.onnx.data) that is created sparse (truncate to size, nothing written),
so it costs ~0 bytes of disk and weights are never materialised in memory.
Reading the weights yields zeros.

Usage (Debian python, onnx 1.12):
    /usr/bin/python3 bench/make_external_llama.py -o /tmp/llama7b/llama7b.onnx
    /usr/bin/python3 bench/make_external_llama.py --layers 2 --d-model 64 \
        --heads 4 --ffn 128 --vocab 100 --seq 16 -o /tmp/llama_tiny/llama.onnx
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ALIGN = 4096


class Builder:
    def __init__(self, data_file):
        self.data_file = data_file  # location, relative to the .onnx file
        self.offset = 0
        self.nodes, self.inits = [], []
        self.n = 0

    def weight(self, name, dims):
        """Register a float32 external initializer; returns its name."""
        t = TensorProto(name=name, dims=dims, data_type=TensorProto.FLOAT,
                        data_location=TensorProto.EXTERNAL)
        length = 4 * int(np.prod(dims))
        for k, v in (("location", self.data_file), ("offset", self.offset), ("length", length)):
            t.external_data.add(key=k, value=str(v))
        self.offset = (self.offset + length + ALIGN - 1) // ALIGN * ALIGN
        self.inits.append(t)
        return name

    def op(self, op_type, inputs, name, **attrs):
        """Add a node with a single output called `name`; returns `name`."""
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name + "/" + op_type, **attrs))
        return name

    def const(self, value, dtype, name=None):
        self.n += 1
        name = name or "const_%d" % self.n
        arr = np.array(value, dtype=dtype)
        return self.op("Constant", [], name, value=numpy_helper.from_array(arr, name))


def build(a, data_file):
    b = Builder(data_file)
    d, h, S = a.d_model, a.heads, a.seq
    hd = d // h
    assert hd * h == d, "d-model must be divisible by heads"
    eps = b.const(1e-5, np.float32, "rms_eps")
    two = b.const(2.0, np.float32, "pow_exp")
    one = b.const(1.0, np.float32, "one")

    def rmsnorm(x, w, p):
        v = b.op("ReduceMean", [b.op("Pow", [x, two], p + ".pow")], p + ".var", axes=[-1], keepdims=1)
        r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [v, eps], p + ".add_eps")], p + ".sqrt")], p + ".rsqrt")
        return b.op("Mul", [b.op("Mul", [x, r], p + ".normed"), b.weight(w, [d])], p + ".out")

    # Causal mask [S, S]: 0 on/below the diagonal, float32 min above (as HF does).
    tri = b.op("Trilu", [b.op("ConstantOfShape", [b.const([S, S], np.int64)], "mask_ones",
                              value=helper.make_tensor("v", TensorProto.BOOL, [1], [True]))],
               "mask_tril", upper=0)
    mask = b.op("Where", [tri, b.const(0.0, np.float32), b.const(np.finfo(np.float32).min, np.float32)],
                "causal_mask")
    split_heads = b.const([0, S, h, hd], np.int64, "shape_split_heads")
    merge_heads = b.const([0, S, d], np.int64, "shape_merge_heads")
    scale = b.const(1.0 / np.sqrt(hd), np.float32, "attn_scale")

    x = b.op("Gather", [b.weight("model.embed_tokens.weight", [a.vocab, d]), "input_ids"], "embed", axis=0)
    for i in range(a.layers):
        p = "model.layers.%d" % i
        y = rmsnorm(x, p + ".input_layernorm.weight", p + ".input_layernorm")

        def proj(inp, nm, shape):
            return b.op("MatMul", [inp, b.weight("%s.%s.weight" % (p, nm), shape)], "%s.%s" % (p, nm))

        def heads(nm):  # [b,s,d] -> [b,h,s,hd]
            r = b.op("Reshape", [proj(y, "self_attn.%s_proj" % nm, [d, d]), split_heads], "%s.%s_4d" % (p, nm))
            return b.op("Transpose", [r], "%s.%s_heads" % (p, nm), perm=[0, 2, 1, 3])

        q, k, v = heads("q"), heads("k"), heads("v")
        kt = b.op("Transpose", [k], p + ".kT", perm=[0, 1, 3, 2])
        s = b.op("Mul", [b.op("MatMul", [q, kt], p + ".qk"), scale], p + ".scaled")
        pr = b.op("Softmax", [b.op("Add", [s, mask], p + ".masked")], p + ".probs", axis=-1)
        o = b.op("Transpose", [b.op("MatMul", [pr, v], p + ".pv")], p + ".pv_t", perm=[0, 2, 1, 3])
        o = b.op("Reshape", [o, merge_heads], p + ".attn_merged")
        x = b.op("Add", [x, proj(o, "self_attn.o_proj", [d, d])], p + ".attn_residual")

        y = rmsnorm(x, p + ".post_attention_layernorm.weight", p + ".post_attention_layernorm")
        g = proj(y, "mlp.gate_proj", [d, a.ffn])
        silu = b.op("Mul", [b.op("Sigmoid", [g], p + ".mlp.sigmoid"), g], p + ".mlp.silu")
        y = b.op("Mul", [silu, proj(y, "mlp.up_proj", [d, a.ffn])], p + ".mlp.act")
        x = b.op("Add", [x, proj(y, "mlp.down_proj", [a.ffn, d])], p + ".mlp_residual")

    x = rmsnorm(x, "model.norm.weight", "model.norm")
    logits = b.op("MatMul", [x, b.weight("lm_head.weight", [d, a.vocab])], "logits")
    flat = b.op("Reshape", [logits, b.const([-1, a.vocab], np.int64)], "logits_2d")
    tflat = b.op("Reshape", ["targets", b.const([-1], np.int64)], "targets_1d")
    b.op("SoftmaxCrossEntropyLoss", [flat, tflat], "loss", reduction="mean")

    ids = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", S])
    graph = helper.make_graph(b.nodes, "llama", [ids("input_ids"), ids("targets")],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="headroom-bench-make_external_llama")
    return model, b.offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()

    out = os.path.abspath(a.output)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    data_name = os.path.basename(out) + ".data"
    model, total = build(a, data_name)
    with open(os.path.join(os.path.dirname(out), data_name), "wb") as f:
        f.truncate(total)  # sparse: no data blocks are written
    with open(out, "wb") as f:
        f.write(model.SerializeToString())
    nparams = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print("wrote %s (%d nodes, %d initializers, %.3e params) + %s (%d bytes, sparse)"
          % (out, len(model.graph.node), len(model.graph.initializer), nparams, data_name, total))


if __name__ == "__main__":
    main()
