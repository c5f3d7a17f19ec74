"""Checks relations between the figures of `headroom report --json` outputs.

    check_report.py EXPR FILE...

EXPR is a Python expression over r[0], r[1], ... (the parsed reports, in the
order given) and b[i] (r[i]["breakdown"]); it must be true. On failure the
expression and the reports are printed, so the test log says what broke.
"""
import json
import sys

expr = sys.argv[1]
r = [json.load(open(path)) for path in sys.argv[2:]]
b = [x.get("breakdown", {}) for x in r]
if not eval(expr, {"r": r, "b": b}):
    print("false: " + expr)
    for path, x in zip(sys.argv[2:], r):
        print(path + ": " + json.dumps(x, sort_keys=True))
    sys.exit(1)
