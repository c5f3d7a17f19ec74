#!/opt/t215/bin/python
"""A Llama-2-7B-shaped file as torch 2.15's default exporter writes it, for
import-time figures (docs/import.md), without 27 GB of weights: the model is
built on the meta device and exported with dynamo=True, optimize=False; every
initializer is then written as external data of a sparse file, with the
exporter's metadata kept.

    /opt/t215/bin/python bench/make_dynamo_llama7b.py OUT.onnx [LAYERS]

(a venv with torch 2.15 and transformers 5, as test/models/dynamo/
make_dynamo_models.py says; ~6 minutes and ~3 GB of memory on a 2-core VM).
"""
import sys, os, torch, transformers, onnx
import onnx_ir as ir
out = sys.argv[1]
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 32
cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                               num_hidden_layers=layers, num_attention_heads=32,
                               num_key_value_heads=32, max_position_embeddings=4096)
class HfLoss(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.model = m
    def forward(self, input_ids, labels): return self.model(input_ids=input_ids, labels=labels).loss
with torch.device("meta"):
    m = HfLoss(transformers.LlamaForCausalLM(cfg))
m.train()
ids = torch.zeros((1, 512), dtype=torch.int64, device="meta")
prog = torch.onnx.export(m, (ids, ids), dynamo=True, optimize=False)
model = prog.model
inits = list(model.graph.initializers.values())
meta = {}
for v in inits:
    meta[v.name] = (v.dtype, [int(d) for d in v.shape], dict(v.metadata_props))
    v.const_value = None
model.graph.initializers.clear()
proto = ir.serde.serialize_model(model)
data = os.path.basename(out) + ".data"
offset = 0
sizes = {ir.DataType.FLOAT: 4, ir.DataType.INT64: 8, ir.DataType.BFLOAT16: 2}
for name, (dt, shape, md) in meta.items():
    t = onnx.TensorProto(name=name, data_type=int(dt), dims=shape)
    t.data_location = onnx.TensorProto.EXTERNAL
    n = 1
    for d in shape: n *= d
    length = n * sizes[dt]
    for k, val in (("location", data), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add(); e.key, e.value = k, val
    proto.graph.initializer.append(t)
    vi = proto.graph.value_info.add(); vi.name = name
    vi.type.tensor_type.elem_type = int(dt)
    for d in shape: vi.type.tensor_type.shape.dim.add().dim_value = d
    for k, val in md.items():
        p = vi.metadata_props.add(); p.key, p.value = k, val
    offset += (length + 4095) // 4096 * 4096
with open(out, "wb") as f:
    f.write(proto.SerializeToString())
with open(os.path.join(os.path.dirname(out) or ".", data), "wb") as f:
    f.truncate(offset)
print("wrote", out, len(meta), "initializers,", offset / 2**30, "GiB sparse,", len(proto.graph.node), "nodes, opset", [o.version for o in proto.opset_import])
