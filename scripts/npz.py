"""Write NumPy .npy/.npz files with the standard library only.

headroom's scripts and tests use this so that they need no NumPy: the demo
generates its data with it and the command-line tests build deliberately
broken data files with it.
"""
import struct
import zipfile

# numpy descr, struct format char
DTYPES = {
    "f32": ("<f4", "f"),
    "f64": ("<f8", "d"),
    "i64": ("<i8", "q"),
    "i32": ("<i4", "i"),
    "u8": ("|u1", "B"),
    "bool": ("|b1", "?"),
}


def npy_bytes(dtype, shape, values):
    """The bytes of a .npy file holding `values` (flat, C order)."""
    descr, fmt = DTYPES[dtype]
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    out = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
    return out + struct.pack("<%d%s" % (len(values), fmt), *values)


def write_npz(path, arrays):
    """arrays: {name: (dtype, shape, flat values)}; written deterministically."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, (dtype, shape, values) in sorted(arrays.items()):
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, npy_bytes(dtype, shape, values))
