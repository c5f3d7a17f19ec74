#!/opt/t215/bin/python
"""Models exported by PyTorch 2.15's default (dynamo) ONNX exporter, as users
export them today, with PyTorch training references.

Run with a virtual environment holding these pinned versions (CPU wheels):

    python3 -m venv /opt/t215
    /opt/t215/bin/pip install torch==2.15.0 torchvision==0.29.2 \\
        transformers==5.23.0 onnx==1.23.2 onnxscript==0.7.2 numpy==2.3.5
    /opt/t215/bin/python test/models/dynamo/make_dynamo_models.py [--outdir DIR] [names...]

Every model is a small configuration (seed 0), wrapped so that
forward(inputs..., labels) returns the loss (the libraries' own loss where
they compute one: `labels=` for transformers), with every dropout probability
0 (headroom's random numbers cannot equal torch's). The wrappers name their
arguments, because the dynamo exporter names the graph inputs after forward's
arguments (no input_names is passed). Each is exported in train() mode twice:

    torch.onnx.export(model, args, "<name>.onnx", dynamo=True, optimize=False,
                      dynamic_shapes={arg: {0: torch.export.Dim("batch")}})
    torch.onnx.export(model, args, "<name>.optimized.onnx", dynamo=True)

(the first falls back to static shapes, recorded as "dynamic_batch": false,
where the dynamic batch does not export; llama falls back to
attn_implementation="eager" where the default attention does not export;
t5 falls back to BART: T5's default sdpa attention does not export in
2.15, "Cannot view a tensor with shape [B, 16, 4, 8] and strides
(512, 8, 128, 1) as a tensor with shape (B, 16, 32)" in the exporter's
type promotion pass).
The exporter's own layout is kept: weights in external data files next to
the model, and its metadata (module paths, name scopes, graph signature) on
nodes and values; only the nodes' Python stack traces and FX node texts are
dropped (strip_traces), which halves the committed files.

For every model <name> this writes:

  <name>.onnx, <name>.onnx.data
                 the training graph (optimize=False: initializer names are
                 the state_dict names; tied weights appear once)
  <name>.optimized.onnx, <name>.optimized.onnx.data
                 the default export (optimize=True): parameters constant-folded
                 into the graph, which headroom must refuse to train
  <name>.train.npz
                 16 samples, keyed by graph input name
  <name>.ref.sgd.npz, <name>.ref.adamw.npz
                 parameters and BatchNorm running statistics after 2 steps on
                 batches of 8 in order, train mode, from the values stored in
                 <name>.onnx, with torch.optim.SGD(lr=0.05) and
                 torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0.01)
  <name>.ref.json
                 the per-step losses, versions, configuration, and what the
                 exported file holds (op types, opset, inputs, metadata counts,
                 its loss on the first batch by onnx.reference)

and, for llama, llama.opset23.onnx (+ .data): the same export with
opset_version=23, kept where it succeeds.

torchlib writes train-mode BatchNorm as BatchNormalization without
training_mode (0: normalize by the running statistics, which stay as they
are), so cnn.onnx computes another loss than torch does in train mode; the
references are torch's train mode, and cnn.ref.json also gives the losses
with BatchNorm in eval mode ("losses_batchnorm_eval"), which the file computes.

The tests never run this script; the outputs are committed.
"""
import argparse
import ast
import collections
import copy
import importlib.metadata
import io
import json
import os
import re
import sys
import traceback
import zipfile

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.reference
import torch
import torch.nn as nn
import torchvision
import transformers

BATCH = 8
SAMPLES = 16
STEPS = 2
SGD = collections.OrderedDict([("lr", 0.05)])
ADAMW = collections.OrderedDict([("lr", 1e-3), ("betas", [0.9, 0.999]), ("eps", 1e-8),
                                 ("weight_decay", 0.01)])
HERE = os.path.dirname(os.path.abspath(__file__))
KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
FOLDED = "pkg.onnxscript.optimizer.folded_from"
TRACES = ("pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node")

VERSIONS = collections.OrderedDict(
    (p, importlib.metadata.version(p))
    for p in ("torch", "torchvision", "transformers", "onnx", "onnxscript", "numpy"))


class TokenLoss(nn.Module):
    """A transformers model's own loss: model(input_ids=, labels=).loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


class MaskedTokenLoss(nn.Module):
    """model(input_ids=, attention_mask=, labels=).loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          labels=labels).loss


class ImageClassifier(nn.Module):
    """Cross-entropy of model(pixel_values) against labels."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values, labels):
        return nn.functional.cross_entropy(self.model(pixel_values), labels)


class LstmTagger(nn.Module):
    """Embedding -> LSTM -> Linear, cross-entropy over every position."""

    def __init__(self, vocab=32, dim=16, hidden=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids, labels):
        h, _ = self.lstm(self.embed(input_ids))
        logits = self.head(h)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           labels.reshape(-1))


def images(rng, channels=3, size=32, classes=10):
    return collections.OrderedDict([
        ("pixel_values", rng.standard_normal((SAMPLES, channels, size, size)).astype(np.float32)),
        ("labels", rng.integers(0, classes, size=(SAMPLES,)).astype(np.int64)),
    ])


def tokens(rng, vocab, seq, low=2):
    # Ids from 2 up: BERT's and BART's embeddings have a padding_idx (0, 1),
    # whose row torch never updates; ONNX cannot say so, and headroom trains
    # every row a batch reaches.
    return collections.OrderedDict([
        ("input_ids", rng.integers(low, vocab, size=(SAMPLES, seq)).astype(np.int64)),
        ("labels", rng.integers(low, vocab, size=(SAMPLES, seq)).astype(np.int64)),
    ])


def padded_tokens(rng, vocab, seq):
    # Every other row ends in 1..seq/2 padding positions: attention_mask 0,
    # label -100 (ignored by the loss).
    d = tokens(rng, vocab, seq)
    mask = np.ones((SAMPLES, seq), np.int64)
    for r in range(1, SAMPLES, 2):
        mask[r, seq - int(rng.integers(1, seq // 2 + 1)):] = 0
    labels = np.where(mask == 1, d["labels"], -100).astype(np.int64)
    return collections.OrderedDict([
        ("input_ids", d["input_ids"]), ("attention_mask", mask), ("labels", labels)])


def gpt2(attn=None):
    cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2,
                                  n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, summary_first_dropout=0.0)
    return TokenLoss(transformers.GPT2LMHeadModel(cfg)), lambda rng: tokens(rng, 128, 16)


def llama(attn=None):
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   attention_dropout=0.0,
                                   **({"attn_implementation": attn} if attn else {}))
    return TokenLoss(transformers.LlamaForCausalLM(cfg)), lambda rng: tokens(rng, 128, 16)


def bert(attn=None):
    cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    m = transformers.BertForMaskedLM(cfg)
    return MaskedTokenLoss(m), lambda rng: padded_tokens(rng, 128, 16)


def t5(attn=None):
    # The decoder inputs are derived from the labels (shift_tokens_right).
    cfg = transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                                decoder_start_token_id=0, pad_token_id=0)
    m = transformers.T5ForConditionalGeneration(cfg)
    return TokenLoss(m), lambda rng: tokens(rng, 128, 16)


def bart(attn=None):
    cfg = transformers.BartConfig(vocab_size=128, d_model=32, encoder_layers=1,
                                  decoder_layers=1, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=32,
                                  dropout=0.0, attention_dropout=0.0,
                                  activation_dropout=0.0)
    m = transformers.BartForConditionalGeneration(cfg)
    return TokenLoss(m), lambda rng: tokens(rng, 128, 16)


def vit(attn=None):
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                             num_heads=2, hidden_dim=32, mlp_dim=64,
                                             num_classes=10, dropout=0.0,
                                             attention_dropout=0.0)
    return ImageClassifier(m), images


def cnn(attn=None):
    # torchvision's MobileNetV2 at a tiny width: BatchNorm (train mode, so the
    # running statistics move), ReLU6, depthwise convolution, residual adds.
    m = torchvision.models.MobileNetV2(num_classes=10, width_mult=0.25,
                                       inverted_residual_setting=[
                                           [1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 1, 2]],
                                       dropout=0.0)
    return ImageClassifier(m), images


def lstm(attn=None):
    return LstmTagger(), lambda rng: tokens(rng, 32, 12, low=0)


MODELS = collections.OrderedDict([
    ("gpt2", gpt2), ("llama", llama), ("bert", bert), ("t5", t5), ("vit", vit),
    ("cnn", cnn), ("lstm", lstm),
])
# Tried when the first export of the model fails.
FALLBACK = {"t5": ("bart", bart)}


def save_npz(path, arrays):
    """An npz with fixed timestamps, so the output is deterministic."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k, v in arrays.items():
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(v), allow_pickle=False)
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())


def remove(path):
    for p in (path, path + ".data"):
        if os.path.exists(p):
            os.remove(p)


def size(path):
    return sum(os.path.getsize(p) for p in (path, path + ".data") if os.path.exists(p))


def error_line(e):
    """The first line of the innermost cause, without terminal colours."""
    while e.__cause__ is not None:
        e = e.__cause__
    lines = [l for l in re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines() if l.strip()]
    return "%s: %s" % (type(e).__name__, lines[0] if lines else "")


def onnx_loss(mp, data, names):
    """The file's loss on the first batch (onnx's reference evaluator)."""
    try:
        feeds = {n: data[n][:BATCH] for n in names}
        return float(onnx.reference.ReferenceEvaluator(mp).run(None, feeds)[0])
    except Exception as e:
        return error_line(e)


def export(model, args, path, **kw):
    """torch.onnx.export of a copy (whatever the exporter does to the module
    stays out of the model trained afterwards); partial files are removed on
    failure."""
    remove(path)
    try:
        torch.onnx.export(copy.deepcopy(model), args, path, dynamo=True, **kw)
    except Exception:
        remove(path)
        raise
    strip_traces(path)


def strip_traces(path):
    """Drops the two largest kinds of node metadata, the Python stack trace
    and the FX node text (half of each file; headroom reads neither), and
    keeps everything else the exporter wrote: module paths, name scopes,
    class hierarchy, the graph signature, the external data."""
    mp = onnx.load(path, load_external_data=False)
    for n in mp.graph.node:
        keep = [p for p in n.metadata_props if p.key not in TRACES]
        del n.metadata_props[:]
        n.metadata_props.extend(keep)
    with open(path, "wb") as f:
        f.write(mp.SerializeToString())


def op_types(mp):
    return sorted({(n.op_type if n.domain in ("", "ai.onnx") else n.domain + "::" + n.op_type)
                   for n in mp.graph.node})


def value_metadata(mp):
    """name -> metadata_props of graph values and initializers."""
    meta = collections.defaultdict(dict)
    for v in list(mp.graph.value_info) + list(mp.graph.input) + list(mp.graph.output):
        for p in v.metadata_props:
            meta[v.name][p.key] = p.value
    for t in mp.graph.initializer:
        for p in t.metadata_props:
            meta[t.name][p.key] = p.value
    return meta


def opset(mp):
    return {o.domain: o.version for o in mp.opset_import}.get("", None)


def tied_groups(model):
    """Lists of state_dict names sharing one tensor."""
    groups = collections.defaultdict(list)
    for k, v in model.state_dict(keep_vars=True).items():
        groups[(v.data_ptr(), tuple(v.shape))].append(k)
    return [g for g in groups.values() if len(g) > 1]


def train(model, data, names, make_opt, bn_eval=False):
    if bn_eval:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
    opt = make_opt(model.parameters())
    losses = []
    for s in range(STEPS):
        batch = tuple(torch.from_numpy(data[n][s * BATCH:(s + 1) * BATCH]) for n in names)
        opt.zero_grad()
        loss = model(*batch)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def make(name, outdir, notes, fn=None):
    fn = fn or MODELS[name]
    path = os.path.join(outdir, name + ".onnx")
    attn = None
    for attempt in range(2):
        torch.manual_seed(0)
        model, data_fn = fn(attn)
        model.train()
        data = data_fn(np.random.default_rng(0))
        names = list(data.keys())
        first = tuple(torch.from_numpy(data[n][:BATCH]) for n in names)
        batch = torch.export.Dim("batch")
        dynamic = True
        try:
            try:
                export(model, first, path, optimize=False,
                       dynamic_shapes={n: {0: batch} for n in names})
            except Exception as e:
                notes.append("%s: dynamic batch export failed: %s" % (name, error_line(e)))
                traceback.print_exc()
                dynamic = False
                export(model, first, path, optimize=False)
            break
        except Exception as e:
            notes.append("%s%s: export failed: %s" % (
                name, "" if attn is None else " (%s)" % attn, error_line(e)))
            traceback.print_exc()
            if attempt == 0 and name == "llama":
                attn = "eager"
            elif attempt == 0 and name in FALLBACK:
                print("%s failed to export; using %s" % (name, FALLBACK[name][0]))
                return make(FALLBACK[name][0], outdir, notes, FALLBACK[name][1])
            else:
                raise

    mp = onnx.load(path, load_external_data=True)
    onnx.checker.check_model(path)
    inputs = [i.name for i in mp.graph.input]
    assert inputs == names, (inputs, names)
    save_npz(os.path.join(outdir, name + ".train.npz"), data)

    # The default call: optimize=True folds the parameters into constants.
    opt_path = os.path.join(outdir, name + ".optimized.onnx")
    export(model, first, opt_path)
    omp = onnx.load(opt_path, load_external_data=True)
    ometa = value_metadata(omp)
    folded = sum(1 for t in omp.graph.initializer if FOLDED in ometa.get(t.name, {}))
    sources = set()
    for t in omp.graph.initializer:
        if FOLDED in ometa.get(t.name, {}):
            sources.update(ast.literal_eval(ometa[t.name][FOLDED]))

    # Train from the values stored in the file; initializers named as
    # state_dict entries are copied in, the rest (lifted constants,
    # non-persistent buffers) are recorded.
    values = collections.OrderedDict(
        (t.name, onnx.numpy_helper.to_array(t)) for t in mp.graph.initializer)
    state = model.state_dict()
    moved = []
    with torch.no_grad():
        for k, v in state.items():
            if k in values:
                stored = torch.from_numpy(values[k].copy())
                if not torch.equal(stored, v):
                    moved.append(k)
                v.copy_(stored)
    initial = copy.deepcopy(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    compared = sorted(k for k in values if k in params or
                      (k in state and ("running_mean" in k or "running_var" in k)))
    buffers = sorted(k for k in values if k in state and k not in compared)
    others = sorted(k for k in values if k not in state)
    tied = []
    for g in tied_groups(model):
        tied.append(collections.OrderedDict([
            ("names", sorted(g)), ("in_file", sorted(k for k in g if k in values))]))

    meta = value_metadata(mp)
    kinds = collections.Counter(meta.get(k, {}).get(KIND, "none") for k in values)
    other_kinds = collections.OrderedDict(
        (k, meta.get(k, {}).get(KIND, "none")) for k in others)

    # torchlib writes BatchNormalization without training_mode (0: the
    # running statistics normalize) even for a module in train mode; record
    # what the file says and torch's losses with BatchNorm in eval mode.
    bn_modes = sorted({next((a.i for a in n.attribute if a.name == "training_mode"), 0)
                       for n in mp.graph.node if n.op_type == "BatchNormalization"})
    results = collections.OrderedDict()
    bn_eval = collections.OrderedDict()
    for opt_name, make_opt in (
            ("sgd", lambda p: torch.optim.SGD(p, lr=SGD["lr"])),
            ("adamw", lambda p: torch.optim.AdamW(p, lr=ADAMW["lr"],
                                                  betas=tuple(ADAMW["betas"]),
                                                  eps=ADAMW["eps"],
                                                  weight_decay=ADAMW["weight_decay"]))):
        m = copy.deepcopy(initial)
        losses = train(m, data, names, make_opt)
        sd = m.state_dict()
        save_npz(os.path.join(outdir, "%s.ref.%s.npz" % (name, opt_name)),
                 collections.OrderedDict((k, sd[k].detach().numpy()) for k in compared))
        results[opt_name] = losses
        if bn_modes:
            bn_eval[opt_name] = train(copy.deepcopy(initial), data, names, make_opt,
                                      bn_eval=True)

    info = collections.OrderedDict([
        ("model", name), ("batch", BATCH), ("samples", SAMPLES), ("steps", STEPS),
        ("sgd", SGD), ("adamw", ADAMW), ("losses", results),
        ("onnx_loss_first_batch", onnx_loss(mp, data, names)),
        ("versions", VERSIONS),
        ("export", collections.OrderedDict([
            ("call", "torch.onnx.export(model, args, path, dynamo=True, optimize=False%s)"
             % (", dynamic_shapes={input: {0: Dim('batch')}}" if dynamic else "")),
            ("attn_implementation", attn or "default"),
            ("config_attn_implementation",
             getattr(getattr(model, "model", None), "config", None) is not None and
             model.model.config._attn_implementation or None),
            ("dynamic_batch", dynamic)])),
        ("opset", opset(mp)), ("ir_version", mp.ir_version),
        ("opset_import", collections.OrderedDict(
            (o.domain or "ai.onnx", o.version) for o in mp.opset_import)),
        ("inputs", inputs), ("outputs", [o.name for o in mp.graph.output]),
        ("parameters", sum(p.numel() for p in model.parameters())),
        ("compared", compared), ("buffers", buffers),
        ("other_initializers", other_kinds),
        ("tied", tied), ("moved_by_export", sorted(moved)),
        ("initializer_kinds", collections.OrderedDict(sorted(kinds.items()))),
        ("metadata_on", "graph.value_info"),
        ("ops", op_types(mp)), ("nodes", len(mp.graph.node)),
        ("batchnorm_training_mode", bn_modes),
        ("losses_batchnorm_eval", bn_eval),
        ("optimized", collections.OrderedDict([
            ("call", "torch.onnx.export(model, args, path, dynamo=True)"),
            ("opset", opset(omp)), ("initializers", len(omp.graph.initializer)),
            ("folded_from", folded),
            ("folded_parameters", sorted(k for k in sources if k in values)),
            ("missing_initializers", sorted(
                k for k in values if k not in {t.name for t in omp.graph.initializer})),
            ("onnx_loss_first_batch", onnx_loss(omp, data, names)),
            ("initializer_kinds", collections.OrderedDict(sorted(collections.Counter(
                ometa.get(t.name, {}).get(KIND, "none")
                for t in omp.graph.initializer).items()))),
            ("ops", op_types(omp))])),
        ("sizes", collections.OrderedDict([
            ("onnx", os.path.getsize(path)), ("onnx.data", size(path) - os.path.getsize(path)),
            ("optimized.onnx", os.path.getsize(opt_path)),
            ("optimized.onnx.data", size(opt_path) - os.path.getsize(opt_path))])),
    ])

    if name == "llama":
        p23 = os.path.join(outdir, "llama.opset23.onnx")
        try:
            export(model, first, p23, optimize=False, opset_version=23,
                   **({"dynamic_shapes": {n: {0: batch} for n in names}} if dynamic else {}))
            m23 = onnx.load(p23, load_external_data=True)
            onnx.checker.check_model(p23)
            info["opset23"] = collections.OrderedDict([
                ("opset", opset(m23)), ("ir_version", m23.ir_version),
                ("dynamic_batch", dynamic), ("ops", op_types(m23)),
                ("onnx_loss_first_batch", onnx_loss(m23, data, names)),
                ("sizes", collections.OrderedDict([
                    ("onnx", os.path.getsize(p23)),
                    ("onnx.data", size(p23) - os.path.getsize(p23))]))])
        except Exception as e:
            notes.append("llama opset 23: export failed: %s" % error_line(e))
            traceback.print_exc()
            info["opset23"] = error_line(e)

    with open(os.path.join(outdir, name + ".ref.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print("%-6s %6d params, %4d nodes, opset %s, dynamic %s, sgd %s, adamw %s" % (
        name, info["parameters"], len(mp.graph.node), info["opset"], dynamic,
        ["%.6f" % l for l in results["sgd"]], ["%.6f" % l for l in results["adamw"]]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--outdir", default=HERE)
    p.add_argument("names", nargs="*")
    args = p.parse_args()
    notes = []
    for name in args.names or MODELS:
        make(name, args.outdir, notes)
    for n in notes:
        print("NOTE", n)


if __name__ == "__main__":
    sys.exit(main())
