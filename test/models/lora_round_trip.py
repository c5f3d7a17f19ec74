#!/opt/t215/bin/python
"""The round trip of docs/lora.md, checked: a Hugging Face model exported to
ONNX, LoRA adapters trained by headroom, loaded back by PEFT.

    headroom train test/models/dynamo/llama.onnx --data test/models/dynamo/llama.train.npz \\
        --batch 4 --steps 3 --optimizer adamw --lr 1e-2 \\
        --lora 'rank=4,alpha=8,targets=q_proj;v_proj' --save-adapter /tmp/adapter
    /opt/t215/bin/python test/models/lora_round_trip.py /tmp/adapter

test/models/dynamo/llama.onnx is transformers' LlamaForCausalLM (the config
of test/models/dynamo/make_dynamo_models.py) behind a module whose forward
returns model(input_ids=, labels=).loss, exported with torch.onnx.export(...,
dynamo=True, optimize=False). This script builds the same module, loads the
ONNX file's initializers into it by name (every parameter must be there),
wraps it with peft.PeftModel.from_pretrained(module, ADAPTER_DIR) and prints
the loss of the first batch (the first 4 samples) with the adapters, and
merged (merge_and_unload). `headroom train ... --lora-init ADAPTER_DIR
--steps 1 --optimizer sgd --lr 1e-30` prints the loss headroom computes for
the same batch with the same adapters.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from peft import PeftModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "dynamo"))
import make_dynamo_models as mdm  # noqa: E402


def main():
    adapter = sys.argv[1]
    torch.manual_seed(0)
    module, _ = mdm.llama()
    path = os.path.join(HERE, "dynamo", "llama.onnx")
    mp = onnx.load(path, load_external_data=True)
    weights = {t.name: numpy_helper.to_array(t) for t in mp.graph.initializer}
    state = module.state_dict()
    for name, value in state.items():
        if name in weights:
            state[name] = torch.from_numpy(weights[name].copy())
        else:
            assert "rotary" in name or "inv_freq" in name, name  # buffers
    module.load_state_dict(state)
    module.train()
    data = dict(np.load(os.path.join(HERE, "dynamo", "llama.train.npz")))
    batch = [torch.from_numpy(data[n][:4]) for n in ("input_ids", "labels")]
    peft_model = PeftModel.from_pretrained(module, adapter)
    with torch.no_grad():
        print("PEFT with headroom's adapters (%s): loss %.6f" %
              (adapter, float(peft_model(*batch))))
        print("merged by PEFT: loss %.6f" %
              float(peft_model.merge_and_unload()(*batch)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
