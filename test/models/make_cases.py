#!/usr/bin/python3
"""Write the small hand-built ONNX files the importer's tests need.

Each file exercises one path of `compiler/OnnxImport.cpp` that the PyTorch
exports in this folder do not: an operator headroom does not support, a
foreign domain, an opset outside the supported range, a graph without a
loss, an ONNX function op that must be expanded, and weights stored as
external data. Run with Debian's python (onnx 1.12):

    /usr/bin/python3 test/models/make_cases.py

The outputs are committed; tests never run this script.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")


def model(nodes, inputs, outputs, inits=(), opset=17, name="case"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="headroom-cases")
    m.ir_version = 8
    return m


def save(m, name, check=True):
    if check:
        onnx.checker.check_model(m)
    path = os.path.join(OUT, name)
    onnx.save(m, path)
    print(name, os.path.getsize(path), "bytes")


def x_input(dims=("batch", 4)):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))


def loss_output():
    return helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])


def weight(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def main():
    os.makedirs(OUT, exist_ok=True)
    # Hardmax is a real ONNX op with no function body: unsupported.
    save(model([helper.make_node("Hardmax", ["x"], ["h"], name="hardmax0"),
                helper.make_node("ReduceSum", ["h"], ["loss"], keepdims=0)],
               [x_input()], [loss_output()]), "unsupported_op.onnx")
    # An onnxruntime contrib op: a domain headroom does not know.
    m = model([helper.make_node("FusedGemm", ["x", "x"], ["g"], name="fused",
                                domain="com.microsoft"),
               helper.make_node("ReduceSum", ["g"], ["loss"], keepdims=0)],
              [x_input((4, 4))], [loss_output()])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    save(m, "foreign_domain.onnx", check=False)
    # Opset 9 predates the semantics headroom implements.
    save(model([helper.make_node("ReduceSum", ["x"], ["loss"], keepdims=0)],
               [x_input()], [loss_output()], opset=9), "opset9.onnx")
    # Outputs logits only: nothing to train.
    save(model([helper.make_node("MatMul", ["x", "w"], ["logits"])],
               [x_input()],
               [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
               [weight("w", (4, 3), 1)]), "no_loss.onnx")
    # MeanVarianceNormalization is an ONNX function op that headroom does not
    # list as a primitive: the importer expands it into its body.
    save(model([helper.make_node("MatMul", ["x", "w"], ["y"]),
                helper.make_node("MeanVarianceNormalization", ["y"], ["n"], axes=[0]),
                helper.make_node("Mul", ["n", "n"], ["sq"]),
                helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0)],
               [x_input()], [loss_output()], [weight("w", (4, 3), 2)]),
         "function_op.onnx")
    # A weight whose external data names a file outside the model's folder
    # (ONNX's CVE-2024-27318): refused before anything is read. Also a seed
    # for the importer's fuzz corpus.
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 3])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../../../../etc/passwd"), ("offset", "0"),
                 ("length", "48")):
        e = w.external_data.add()
        e.key, e.value = k, v
    save(model([helper.make_node("MatMul", ["x", "w"], ["y"]),
                helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
               [x_input()], [loss_output()], [w]),
         "external_escape.onnx", check=False)
    # A tiny Llama with its weights in a side file, written by the benchmark
    # generator (which never materializes the weights).
    subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "bench",
                                                 "make_external_llama.py"),
                    "--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32",
                    "--vocab", "32", "--seq", "8",
                    "-o", os.path.join(OUT, "external_llama.onnx")], check=True)


if __name__ == "__main__":
    main()
