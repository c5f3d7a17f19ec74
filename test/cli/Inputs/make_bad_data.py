"""Writes the data files test/cli/train.test feeds `headroom train` with:
one good .npz for the MLP (x f32[N,16], y i64[N]) and one per defect."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
from npz import write_npz  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
n = 16
x = ("f32", (n, 16), [((i * 7) % 11) / 11.0 for i in range(n * 16)])
y = ("i64", (n,), [i % 10 for i in range(n)])
write_npz(os.path.join(out, "good.npz"), {"x": x, "y": y})
write_npz(os.path.join(out, "missing.npz"), {"x": x})
# Sample 5 holds a NaN: its batch's loss is NaN.
nan_x = list(x[2])
nan_x[5 * 16 + 3] = float("nan")
write_npz(os.path.join(out, "nan.npz"), {"x": ("f32", x[1], nan_x), "y": y})
write_npz(os.path.join(out, "dtype.npz"), {"x": ("f64",) + x[1:], "y": y})
write_npz(os.path.join(out, "trailing.npz"),
          {"x": ("f32", (n, 8), x[2][: n * 8]), "y": y})
write_npz(os.path.join(out, "few.npz"),
          {"x": ("f32", (2, 16), x[2][:32]), "y": ("i64", (2,), y[2][:2])})
write_npz(os.path.join(out, "mismatch.npz"),
          {"x": x, "y": ("i64", (n - 1,), y[2][: n - 1])})
with open(os.path.join(out, "good.npz"), "rb") as f:
    data = f.read()
with open(os.path.join(out, "truncated.npz"), "wb") as f:
    f.write(data[: len(data) // 2])
with open(os.path.join(out, "garbage.npz"), "wb") as f:
    f.write(bytes((i * 37 + 11) % 256 for i in range(1000)))
os.makedirs(os.path.join(out, "folder"), exist_ok=True)
from npz import npy_bytes  # noqa: E402
for name, arr in (("x", x), ("y", y)):
    with open(os.path.join(out, "folder", name + ".npy"), "wb") as f:
        f.write(npy_bytes(*arr))
