"""Checks a model headroom saved with onnxruntime: runs it on the first batch
of a data file and compares the loss with the first loss headroom logged for
the same model and batch. Exit status 0 when they agree within 1e-5 relative."""
import json
import sys

import numpy as np
import onnxruntime as ort

model, data, log, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
arrays = np.load(data)
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
feeds = {i.name: arrays[i.name][:batch] for i in sess.get_inputs()}
(loss,) = sess.run(["loss"], feeds)
logged = json.loads(open(log).readline())["loss"]
print("onnxruntime loss %.6f, headroom loss %.6f" % (loss, logged))
sys.exit(0 if abs(loss - logged) <= 1e-5 * max(1.0, abs(logged)) else 1)
