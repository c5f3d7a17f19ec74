#!/usr/bin/env python3
"""Writes a damaged copy of a file, for the tests of readers that must refuse
what they cannot trust.

    damage.py SRC DST flip OFFSET   # one byte XOR 0xff; OFFSET < 0 counts from the end
    damage.py SRC DST truncate N    # the first N bytes (N < 0: all but the last -N)
"""
import sys


def main():
    src, dst, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with open(src, "rb") as f:
        data = bytearray(f.read())
    if mode == "flip":
        data[n] ^= 0xFF
    elif mode == "truncate":
        data = data[:n]
    else:
        sys.exit("damage.py: unknown mode " + mode)
    with open(dst, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
