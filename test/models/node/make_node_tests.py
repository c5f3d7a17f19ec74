#!/usr/bin/env python3
"""Regenerate test/models/node/: ONNX backend node tests for op versions
introduced after opset 17.

Debian's libonnx-testdata ships ONNX 1.12's node tests (opsets <= 17).
headroom links ONNX 1.19.1 and accepts opsets 13..24, so this script uses
ONNX 1.19.1's own test-case generators (onnx.backend.test.case.node, the
code behind `python -m onnx.backend.test.cmd_tools generate-data`) to write
the newer tests in the same layout:

    <test_name>/model.onnx
    <test_name>/test_data_set_0/input_K.pb, output_K.pb

Requirements (pinned; the data depends on the generator version):

    python3 -m venv /opt/onnx119
    /opt/onnx119/bin/pip install onnx==1.19.1 numpy

Run (from anywhere):

    /opt/onnx119/bin/python test/models/node/make_node_tests.py

It deletes every subdirectory of the folder this script lives in and writes
the selected tests afresh.  Output is deterministic: ONNX's generators seed
numpy (np.random.seed(0)) before every export function, cases are written in
name order, and protobuf serialisation is stable.

Selection rule (a test is kept when all of these hold):
  * it is a node test from onnx.backend.test.case.node, not a
    function-expanded variant (`*_expanded*`: those decompose the op into
    many other ops, e.g. Bernoulli, NegativeLogLikelihoodLoss, AffineGrid);
  * EITHER the model's default-domain opset is >= 18 and at least one node
    whose op is in OPS below has, at that opset, a schema whose
    since_version > 17 (the op was introduced or changed after opset 17),
    OR some node is IsNaN or IsInf (kept at any opset);
  * no graph input, output, initializer or value_info, and no tensor
    attribute or Cast/CastLike `to` attribute, uses a float8 / float4 /
    int4 / uint4 / string / complex element type;
  * every graph input and output is a plain tensor (no sequence, optional
    or map types);
  * the test's files (model.onnx plus .pb files) total <= 200 KB.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings

PINNED_ONNX = "1.19.1"

OPS = frozenset(
    """
    ReduceMean ReduceMax ReduceMin ReduceProd ReduceSum ReduceL1 ReduceL2
    ReduceLogSum ReduceLogSumExp ReduceSumSquare Split Pad Cast CastLike
    AveragePool ScatterND ScatterElements Gelu GroupNormalization
    LayerNormalization IsNaN IsInf Mish Attention RMSNormalization
    RotaryEmbedding Squeeze Unsqueeze Reshape Transpose Flatten Identity Shape
    Size Constant ConstantOfShape Equal Where Softmax
    """.split()
)
ALWAYS_OPS = frozenset({"IsNaN", "IsInf"})
MIN_OPSET = 18
MAX_DIR_BYTES = 200 * 1024

# Element types headroom does not handle (TensorProto.DataType names).
BAD_TYPE_NAMES = frozenset(
    {
        "STRING",
        "COMPLEX64",
        "COMPLEX128",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "FLOAT8E8M0",
        "FLOAT4E2M1",
        "INT4",
        "UINT4",
        "INT2",
        "UINT2",
    }
)


def main() -> int:
    import numpy as np
    import onnx
    import onnx.defs
    from onnx import TensorProto, numpy_helper

    if onnx.__version__ != PINNED_ONNX:
        print(
            f"error: need onnx=={PINNED_ONNX}, found {onnx.__version__} "
            f"({sys.executable})",
            file=sys.stderr,
        )
        return 1

    bad_types = {
        getattr(TensorProto, n) for n in BAD_TYPE_NAMES if hasattr(TensorProto, n)
    }

    def default_opset(model: onnx.ModelProto) -> int | None:
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                return o.version
        return None

    def default_nodes(model: onnx.ModelProto):
        return [n for n in model.graph.node if n.domain in ("", "ai.onnx")]

    def qualifies(model: onnx.ModelProto) -> bool:
        opset = default_opset(model)
        nodes = default_nodes(model)
        if any(n.op_type in ALWAYS_OPS for n in nodes):
            return True
        if opset is None or opset < MIN_OPSET:
            return False
        for n in nodes:
            if n.op_type not in OPS:
                continue
            schema = onnx.defs.get_schema(n.op_type, opset, "")
            if schema.since_version > 17:
                return True
        return False

    def why_skip_types(model: onnx.ModelProto) -> str | None:
        g = model.graph
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            t = vi.type
            if not t.HasField("tensor_type"):
                return f"{vi.name}: non-tensor type"
            if t.tensor_type.elem_type in bad_types:
                return f"{vi.name}: {TensorProto.DataType.Name(t.tensor_type.elem_type)}"
        for init in g.initializer:
            if init.data_type in bad_types:
                return f"{init.name}: {TensorProto.DataType.Name(init.data_type)}"
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in bad_types:
                    return f"{n.op_type}.{a.name}: {TensorProto.DataType.Name(a.t.data_type)}"
                if n.op_type in ("Cast", "CastLike") and a.name == "to" and a.i in bad_types:
                    return f"{n.op_type}.to: {TensorProto.DataType.Name(a.i)}"
        return None

    def to_tensor(value, name: str) -> TensorProto:
        if isinstance(value, TensorProto):
            return value
        return numpy_helper.from_array(np.asarray(value), name)

    def serialize(case) -> dict[str, bytes]:
        """Files as cmd_tools generate-data writes them (tensor-only tests)."""
        files = {"model.onnx": case.model.SerializeToString()}
        g = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            d = f"test_data_set_{i}"
            for j, v in enumerate(inputs):
                files[f"{d}/input_{j}.pb"] = to_tensor(v, g.input[j].name).SerializeToString()
            for j, v in enumerate(outputs):
                files[f"{d}/output_{j}.pb"] = to_tensor(v, g.output[j].name).SerializeToString()
        return files

    warnings.filterwarnings("ignore")
    import onnx.backend.test.case.node as node_test

    cases = sorted(node_test.collect_testcases(None), key=lambda c: c.name)

    out_dir = os.path.dirname(os.path.abspath(__file__))
    for entry in sorted(os.listdir(out_dir)):
        p = os.path.join(out_dir, entry)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)

    kept: list[tuple[str, int]] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for case in cases:
        if case.kind != "node" or "_expanded" in case.name:
            continue
        if not qualifies(case.model):
            continue
        assert case.name not in seen, case.name
        seen.add(case.name)
        reason = why_skip_types(case.model)
        if reason:
            skipped.append((case.name, reason))
            continue
        files = serialize(case)
        size = sum(len(b) for b in files.values())
        if size > MAX_DIR_BYTES:
            skipped.append((case.name, f"{size} bytes > {MAX_DIR_BYTES}"))
            continue
        for rel, data in sorted(files.items()):
            path = os.path.join(out_dir, case.name, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        kept.append((case.name, size))

    for name, size in kept:
        print(f"kept    {name} ({size} bytes)")
    for name, reason in skipped:
        print(f"skipped {name}: {reason}")
    total = sum(s for _, s in kept)
    print(f"{len(kept)} tests kept, {len(skipped)} skipped, {total} bytes written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
