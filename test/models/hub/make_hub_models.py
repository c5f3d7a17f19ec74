#!/usr/bin/python3
"""Models made with torchvision's and transformers' own classes, exported as
users export them, with PyTorch training references.

Run with Debian's interpreter and these pinned versions:

    apt-get install python3-torch python3-torchvision python3-onnx  # 1.13.0, 0.14.1, 1.12.0
    /usr/bin/python3 -m pip install --break-system-packages transformers==4.36.2
    /usr/bin/python3 test/models/hub/make_hub_models.py [--outdir DIR] [names...]

Every model is a small configuration of the library's class (seed 0), wrapped
so that forward(inputs..., labels) returns the loss (the libraries' own loss
where they compute one: `labels=` for transformers), with every dropout
probability 0 (headroom's random numbers cannot equal torch's), exported by
torch.onnx.export(opset_version=17, training=TrainingMode.TRAINING,
do_constant_folding=False) with a dynamic batch axis.

For every model <name> this writes:

  <name>.onnx         the training graph (initializer names = state_dict names)
  <name>.train.npz    16 samples, keyed by graph input name
  <name>.ref.npz      parameters (and BatchNorm buffers) after 2 steps of
                      torch.optim.SGD(lr=LR) on batches of 8 in order, train mode
  <name>.ref.json     the per-step losses, versions, configuration

test/e2e/TrainingTest.cpp (HubModels) trains each <name>.onnx with headroom
the same way and compares. The tests never run this script; the outputs are
committed.
"""
import argparse
import collections
import copy
import io
import json
import os
import sys
import zipfile

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torchvision
import transformers

OPSET = 17
BATCH = 8
SAMPLES = 16
STEPS = 2
LR = 0.05
HERE = os.path.dirname(os.path.abspath(__file__))

VERSIONS = {"torch": "1.13", "torchvision": "0.14", "transformers": "4.36.2"}


class ImageClassifier(nn.Module):
    """logits = model(pixels); the loss is cross-entropy against labels."""

    def __init__(self, model, hf=False):
        super().__init__()
        self.model = model
        self.hf = hf

    def forward(self, pixel_values, labels):
        if self.hf:
            return self.model(pixel_values=pixel_values, labels=labels).loss
        return nn.functional.cross_entropy(self.model(pixel_values), labels)


class HfLoss(nn.Module):
    """A transformers model's own loss: model(**inputs, labels=labels).loss."""

    def __init__(self, model, input_names):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *args):
        kw = dict(zip(self.input_names, args[:-1]))
        return self.model(**kw, labels=args[-1]).loss


def images(rng, channels=3, size=32, classes=10):
    return collections.OrderedDict([
        ("pixel_values", rng.standard_normal((SAMPLES, channels, size, size)).astype(np.float32)),
        ("labels", rng.integers(0, classes, size=(SAMPLES,)).astype(np.int64)),
    ])


def tokens(rng, vocab, seq):
    # Ids from 2 up: BERT's and BART's embeddings have a padding_idx (0, 1),
    # whose row torch never updates; ONNX cannot say so (torch.onnx warns),
    # and headroom trains every row a batch reaches.
    return collections.OrderedDict([
        ("input_ids", rng.integers(2, vocab, size=(SAMPLES, seq)).astype(np.int64)),
        ("labels", rng.integers(2, vocab, size=(SAMPLES, seq)).astype(np.int64)),
    ])


def resnet():
    # transformers' ResNet (the architecture of microsoft/resnet-50 at a tiny
    # width): BatchNorm, residual adds, max pooling, global average pooling.
    cfg = transformers.ResNetConfig(num_channels=3, embedding_size=8,
                                    hidden_sizes=[8, 16], depths=[1, 1],
                                    layer_type="basic", num_labels=10)
    return ImageClassifier(transformers.ResNetForImageClassification(cfg), hf=True), images


def mobilenet_v2():
    # torchvision's MobileNetV2: ReLU6 exports as Clip, depthwise convolution.
    m = torchvision.models.MobileNetV2(num_classes=10, width_mult=0.25,
                                       inverted_residual_setting=[
                                           [1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 1, 2]],
                                       dropout=0.0)
    return ImageClassifier(m), images


def vit():
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                             num_heads=2, hidden_dim=32, mlp_dim=64,
                                             num_classes=10, dropout=0.0,
                                             attention_dropout=0.0)
    return ImageClassifier(m), images


def bert():
    cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    m = transformers.BertForMaskedLM(cfg)
    return HfLoss(m, ["input_ids"]), lambda rng: tokens(rng, 128, 16)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2,
                                  n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0)
    m = transformers.GPT2LMHeadModel(cfg)
    return HfLoss(m, ["input_ids"]), lambda rng: tokens(rng, 128, 16)


def llama():
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32)
    m = transformers.LlamaForCausalLM(cfg)
    return HfLoss(m, ["input_ids"]), lambda rng: tokens(rng, 128, 16)


def t5():
    # The decoder inputs are derived from the labels (shift_tokens_right:
    # ScatterND in the exported graph), as T5 trains.
    cfg = transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                                decoder_start_token_id=0, pad_token_id=0)
    m = transformers.T5ForConditionalGeneration(cfg)
    return HfLoss(m, ["input_ids"]), lambda rng: tokens(rng, 128, 16)


def bart():
    cfg = transformers.BartConfig(vocab_size=128, d_model=32, encoder_layers=1,
                                  decoder_layers=1, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=32,
                                  dropout=0.0, attention_dropout=0.0,
                                  activation_dropout=0.0)
    m = transformers.BartForConditionalGeneration(cfg)
    return HfLoss(m, ["input_ids"]), lambda rng: tokens(rng, 128, 16)


MODELS = collections.OrderedDict([
    ("resnet", resnet), ("mobilenet_v2", mobilenet_v2), ("vit", vit), ("bert", bert),
    ("gpt2", gpt2), ("llama", llama), ("t5", t5), ("bart", bart),
])


def save_npz(path, arrays):
    """An npz with fixed timestamps, so the output is deterministic."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in arrays.items():
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(v), allow_pickle=False)
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())


def make(name, outdir):
    torch.manual_seed(0)
    model, data_fn = MODELS[name]()
    rng = np.random.default_rng(0)
    data = data_fn(rng)
    names = list(data.keys())
    model.train()
    first = tuple(torch.from_numpy(v[:BATCH]) for v in data.values())

    buf = io.BytesIO()
    torch.onnx.export(copy.deepcopy(model), first, buf, opset_version=OPSET,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=names,
                      output_names=["loss"],
                      dynamic_axes={n: {0: "batch"} for n in names})
    mp = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(mp)
    with open(os.path.join(outdir, name + ".onnx"), "wb") as f:
        f.write(buf.getvalue())
    save_npz(os.path.join(outdir, name + ".train.npz"), data)

    # Train from the exported state: initializers are state_dict entries
    # (tracing ran forward once in train mode, which moved the BatchNorm
    # running statistics of the exported copy: the file has those).
    values = {i.name: onnx.numpy_helper.to_array(i) for i in mp.graph.initializer}
    inits = set(values)
    state = model.state_dict()
    with torch.no_grad():
        for k, v in state.items():
            if k in values:
                v.copy_(torch.from_numpy(values[k].copy()))
    params = dict(model.named_parameters())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for s in range(STEPS):
        batch = tuple(torch.from_numpy(v[s * BATCH:(s + 1) * BATCH]) for v in data.values())
        opt.zero_grad()
        loss = model(*batch)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    ref = collections.OrderedDict()
    for k, v in model.state_dict().items():
        if k in inits and (k in params or "running_" in k):
            ref[k] = v.detach().numpy()
    save_npz(os.path.join(outdir, name + ".ref.npz"), ref)
    # Buffers torch exports as initializers (BART's final_logits_bias): a
    # user freezes them (--freeze), as the test does.
    buffers = sorted(k for k in inits if k in state and k not in ref)
    meta = collections.OrderedDict([
        ("batch", BATCH), ("steps", STEPS), ("lr", LR), ("optimizer", "SGD"),
        ("losses", losses), ("versions", VERSIONS),
        ("parameters", sum(p.numel() for p in model.parameters())),
        ("compared", sorted(ref)), ("buffers", buffers),
        ("ops", sorted({n.op_type for n in mp.graph.node})),
    ])
    with open(os.path.join(outdir, name + ".ref.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("%-13s %7d params, %3d nodes, losses %s" % (
        name, meta["parameters"], len(mp.graph.node), ["%.6f" % l for l in losses]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--outdir", default=HERE)
    p.add_argument("names", nargs="*")
    args = p.parse_args()
    for name in args.names or MODELS:
        make(name, args.outdir)


if __name__ == "__main__":
    sys.exit(main())
