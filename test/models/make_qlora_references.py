#!/opt/t215/bin/python
"""QLoRA as PEFT + bitsandbytes train it, for headroom's e2e tests
Qlora.QuantizesAsBitsandbytes and Qlora.MatchesPeftWithBitsandbytes.

Run with PyTorch 2.x, PyPI's peft and bitsandbytes (the venv of the
developers' guide plus `pip install --no-deps peft accelerate safetensors
huggingface_hub bitsandbytes`):

    /opt/t215/bin/python test/models/make_qlora_references.py

The module, its weights (llama.onnx's initializers) and batches are
make_lora_references.py's. Every nn.Linear but the output head becomes
bitsandbytes.nn.Linear4bit (quant_type nf4, compress_statistics=True,
compute_dtype float32), quantized from the same weights on this CPU, as
transformers' load_in_4bit does; PEFT then adds the adapters of
make_lora_references.py (r=4, alpha 8, wq and wv, its llama.lora_init/
values) and torch.optim.AdamW (lr 1e-2, weight decay 0.01) trains them.

One substitution: bitsandbytes' CPU build quantizes the absmaxes (the
"double quantization", quantize_blockwise with blocksize 256) through a
lookup table that maps values below ~3e-5 of a block's maximum to the wrong
code, so its CUDA kernel's quantizer (kQuantizeBlockwise: x * (1 / absmax),
the nearest code by dQuantize's binary search and midpoint rule) is patched
in, as make_int8_references.py does for the 8-bit optimizer. The 4-bit codes
are bitsandbytes' own (its CPU quantize_4bit).

Writes llama.ref.qlora.npz (per quantized weight W: W.codes, W.absmax,
W.nested_absmax, W.nested_offset as bitsandbytes stores them, and the
trained adapters by headroom's state names) and llama.ref.qlora.json
(per-step losses, how many absmax codes the unpatched CPU quantizer gives
differently).
"""
import collections
import copy
import json
import os
import sys

import numpy as np
import torch

import bitsandbytes as bnb
import bitsandbytes.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_lora_references as ml  # noqa: E402
import make_references as mr  # noqa: E402
from make_int8_references import quantize_2d  # noqa: E402

from peft import PeftModel  # noqa: E402

UNPATCHED = F.quantize_blockwise
DIFFERENT = {"codes": 0, "of": 0}


def quantize_blockwise_like_cuda(A, code=None, absmax=None, out=None,
                                 blocksize=4096, nested=False):
    """bitsandbytes' quantize_blockwise with kQuantizeBlockwise's codes."""
    q, state = UNPATCHED(A, code=code, absmax=absmax, out=out,
                         blocksize=blocksize, nested=nested)
    flat = A.reshape(-1).float()
    n = flat.numel()
    inv = 1.0 / state.absmax.float()
    x = flat * inv.repeat_interleave(blocksize)[:n]
    c = quantize_2d(x, state.code.float(), True).to(torch.uint8)
    DIFFERENT["codes"] += int((c != q.reshape(-1)).sum())
    DIFFERENT["of"] += n
    return c.reshape(q.shape), state


def quantized_model(base):
    """`base` with every nn.Linear but the output head as Linear4bit."""
    model = copy.deepcopy(base)
    linears = [(name, m) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)]
    quantized = {}
    for name, lin in linears:
        if name == "output":  # the head stays as it is, as load_in_4bit does
            continue
        q = bnb.nn.Linear4bit(lin.in_features, lin.out_features,
                              bias=lin.bias is not None,
                              compute_dtype=torch.float32,
                              compress_statistics=True, quant_type="nf4")
        q.weight = bnb.nn.Params4bit(lin.weight.data.clone(),
                                     requires_grad=False,
                                     compress_statistics=True,
                                     quant_type="nf4").to("cpu")
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, q)
        st = q.weight.quant_state
        w = name + ".weight"
        quantized[w + ".codes"] = q.weight.data.reshape(-1).numpy().copy()
        quantized[w + ".absmax"] = st.absmax.reshape(-1).numpy().copy()
        quantized[w + ".nested_absmax"] = st.state2.absmax.numpy().copy()
        quantized[w + ".nested_offset"] = np.array(
            [float(st.offset)], dtype=np.float32)
    return model, quantized


def make():
    F.quantize_blockwise = quantize_blockwise_like_cuda
    base, names, data = ml.base_model()
    model, quantized = quantized_model(base)
    model = PeftModel.from_pretrained(model, os.path.join(HERE, "llama.lora_init"),
                                      is_trainable=True)
    losses, trained = ml.train_adapters(model, data, names)
    out = collections.OrderedDict(quantized)
    out.update(trained)
    mr.save_npz(os.path.join(HERE, "llama.ref.qlora.npz"), out)
    import peft
    ref = {"torch": torch.__version__, "peft": peft.__version__,
           "bitsandbytes": bnb.__version__, "lora_config": ml.CONFIG,
           "adamw": ml.ADAMW, "losses": losses,
           "quantized": sorted(k[:-len(".codes")] for k in quantized
                               if k.endswith(".codes")),
           "cpu_lut_absmax_codes_different": DIFFERENT,
           "note": __doc__.split("\n\n")[2].replace("\n", " ")}
    with open(os.path.join(HERE, "llama.ref.qlora.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print("llama qlora", losses, DIFFERENT)


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make()
