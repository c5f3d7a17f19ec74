#!/opt/t215/bin/python
"""LoRA as Hugging Face PEFT trains it, for headroom's e2e test
Lora.MatchesPeft, and a check that headroom's saved adapters load in PEFT.

Run with PyTorch 2.x and PyPI's peft (the venv of the developers' guide plus
`pip install --no-deps peft accelerate safetensors huggingface_hub`):

    /opt/t215/bin/python test/models/make_lora_references.py
    /opt/t215/bin/python test/models/make_lora_references.py --check DIR [--merged M.onnx]

The module, its weights (the initializers of llama.onnx) and the batches are
make_references.py's (dropout off, batch 8, STEPS steps over llama.train.npz
in order). PEFT wraps it with LoraConfig(r=4, lora_alpha=8, lora_dropout=0,
target_modules=["wq", "wv"]) from torch.manual_seed(0): its initial adapters
(A kaiming-uniform, B zeros) are saved with save_pretrained as
llama.lora_init/ (headroom starts from them with --lora-init), then
torch.optim.AdamW (lr 1e-2, weight decay 0.01) trains the adapters only.
Writes llama.ref.lora.npz (the trained adapters, by headroom's state names:
PEFT's keys less `base_model.model.`) and llama.ref.lora.json (per-step
losses).

--check DIR loads a headroom --save-adapter folder into the same model with
PeftModel.from_pretrained and prints the loss of the first batch (and, with
--merged, the loss of headroom's merged --save model without PEFT).
"""
import argparse
import collections
import copy
import json
import os
import sys

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_references as mr  # noqa: E402

CONFIG = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["wq", "wv"])
ADAMW = dict(lr=1e-2, weight_decay=0.01)
PREFIX = "base_model.model."


def base_model():
    base, _, _, names, _ = mr.load_from_onnx("llama",
                                             os.path.join(HERE, "llama.onnx"))
    mr.disable_dropout(base)
    data = dict(np.load(os.path.join(HERE, "llama.train.npz")))
    return base, names, data


def first_loss(model, data, names):
    model.train()
    with torch.no_grad():
        return float(model(*mr.batch(data, names, 0)))


def train_adapters(model, data, names):
    """STEPS AdamW steps on the trainable parameters (the adapters); the
    losses, and the trained adapters by headroom's state names."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, foreach=False, **ADAMW)
    losses = []
    model.train()
    for s in range(mr.STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(*mr.batch(data, names, s))
        loss.backward()
        losses.append(float(loss.detach()))
        opt.step()
    trained = collections.OrderedDict()
    for k, v in model.state_dict().items():
        if "lora_" in k:
            name = k[len(PREFIX):] if k.startswith(PREFIX) else k
            trained[name.replace(".default", "")] = v.detach().numpy().copy()
    return losses, trained


def make():
    base, names, data = base_model()
    torch.manual_seed(0)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(**CONFIG))
    init_dir = os.path.join(HERE, "llama.lora_init")
    model.save_pretrained(init_dir)
    os.remove(os.path.join(init_dir, "README.md"))  # PEFT's model card
    losses, trained = train_adapters(model, data, names)
    mr.save_npz(os.path.join(HERE, "llama.ref.lora.npz"), trained)
    import peft
    ref = {"torch": torch.__version__, "peft": peft.__version__,
           "lora_config": CONFIG, "adamw": ADAMW, "losses": losses,
           "note": __doc__.split("\n\n")[2].replace("\n", " ")}
    with open(os.path.join(HERE, "llama.ref.lora.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print("llama lora", losses)


def check(folder, merged):
    base, names, data = base_model()
    model = PeftModel.from_pretrained(copy.deepcopy(base), folder)
    print("PEFT loads %s: %d adapter tensors; first-batch loss %.6f" % (
        folder, len(load_file(os.path.join(folder, "adapter_model.safetensors"))),
        first_loss(model, data, names)))
    print("the same merged by PEFT (merge_and_unload): %.6f" %
          first_loss(model.merge_and_unload(), data, names))
    if merged:
        m, _, _, _, _ = mr.load_from_onnx("llama", merged)
        mr.disable_dropout(m)
        print("headroom's merged model %s: %.6f" % (merged,
                                                    first_loss(m, data, names)))


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--check")
    ap.add_argument("--merged")
    a = ap.parse_args()
    if a.check:
        check(a.check, a.merged)
    else:
        make()


if __name__ == "__main__":
    main()
