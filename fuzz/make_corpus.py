#!/usr/bin/env python3
"""Builds the fuzz targets' seed corpora from the project's test files.

    make_corpus.py HEADROOM SOURCE_DIR OUT

OUT/<target>/ gets: onnx_import -- the test models and ONNX's node-test
models; ir_parser -- every chunk of the pass tests' textual IR; npz -- the
test models' .npz archives and the .npy arrays inside them; plan_file and
checkpoint -- plans compiled and checkpoints written by HEADROOM (the
headroom the targets are built with) for the small test models;
safetensors -- PEFT's adapter file of test/models/llama.lora_init. Standard
library only; idempotent.
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile


def put(out, name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def main():
    headroom, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
    models = os.path.join(src, "test", "models")
    dirs = {t: os.path.join(out, t) for t in
            ("onnx_import", "ir_parser", "npz", "plan_file", "checkpoint",
             "safetensors")}
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    onnx = sorted(glob.glob(os.path.join(models, "*.onnx")) +
                  glob.glob(os.path.join(models, "cases", "*.onnx")))
    node = "/usr/share/libonnx-testdata/data/node"
    onnx += sorted(glob.glob(os.path.join(node, "*", "model.onnx")))
    for path in onnx:
        name = os.path.basename(os.path.dirname(path)) + "-" + \
            os.path.basename(path)
        shutil.copy(path, os.path.join(dirs["onnx_import"], name))

    for path in sorted(glob.glob(os.path.join(src, "test", "passes", "*.hr"))):
        with open(path, "rb") as f:
            text = f.read()
        for i, chunk in enumerate(text.split(b"// -----")):
            put(dirs["ir_parser"], "%s-%d.hr" % (os.path.basename(path), i),
                chunk)

    npz = [os.path.join(models, m) for m in ("mlp.train.npz", "mlp.inputs.npz",
                                             "lenet.train.npz", "mlp.ref.sgd.npz")]
    for path in npz:
        base = os.path.basename(path)
        shutil.copy(path, os.path.join(dirs["npz"], base))
        with zipfile.ZipFile(path) as z:
            for entry in z.namelist():
                put(dirs["npz"], base + "-" + entry, z.read(entry))

    # PEFT's own adapter file (test/models/make_lora_references.py).
    shutil.copy(os.path.join(models, "llama.lora_init", "adapter_model.safetensors"),
                os.path.join(dirs["safetensors"], "peft-llama.safetensors"))

    def run(args):
        subprocess.run([headroom] + args, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    plans = [("mlp", ["--optimizer", "adamw"]),
             ("mlp", ["--optimizer", "lomo", "--accum", "2"]),
             ("lenet", ["--optimizer", "momentum", "--precision", "bf16"]),
             ("gpt", ["--recompute", "all", "--precision", "fp16"])]
    for i, (model, flags) in enumerate(plans):
        m = os.path.join(models, model + ".onnx")
        run(["compile", m, "--batch", "4", "-o",
             os.path.join(dirs["plan_file"], "%s-%d.plan" % (model, i))] + flags)
        ck = os.path.join(out, "ck-%d" % i)
        run(["train", m, "--batch", "4", "--steps", "1", "--data",
             os.path.join(models, model + ".train.npz"), "--checkpoint", ck] +
            flags)
        shutil.move(os.path.join(ck, "checkpoint.hrc"),
                    os.path.join(dirs["checkpoint"], "%s-%d.hrc" % (model, i)))
        shutil.rmtree(ck)
    print(" ".join("%s: %d" % (t, len(os.listdir(d)))
                   for t, d in sorted(dirs.items())))


if __name__ == "__main__":
    main()
