#!/usr/bin/env python3
"""Conformance frames: written the way the real Python codec writes them.

    python3 frames.py write DIR    # one DIR/<case>.dssst1 per case
    python3 frames.py check FILE   # decode FILE with the Python codec, compare with the case

`harness/tests/it/conformance.rs` runs `write`, has rlharness decode and re-encode each frame and
requires the same bytes back; `check` proves a frame rlharness wrote decodes in Python to the
same tree.
"""

import math
import os
import struct
import sys

# Tiny arrays: one BLAS thread. OpenBLAS's default (a thread per core that spins between calls)
# cost more CPU than the work itself, beside the harness on a 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dssst1 import BYTES_PER_ELEMENT, Raw, decode, encode  # noqa: E402


def raw(dtype, shape, pattern=b"\x01\x38\x7f\xc0"):
    n = 1
    for d in shape:
        n *= d
    size = n * BYTES_PER_ELEMENT[dtype]
    data = (pattern * (size // len(pattern) + 1))[:size]
    if dtype == "BOOL":
        data = bytes(b & 1 for b in data)
    return Raw(dtype, shape, data)


def cases():
    out = {}
    for dtype in BYTES_PER_ELEMENT:
        out[f"dtype_{dtype.lower()}"] = {"x": raw(dtype, [2, 3]), "meta": {"dtype": dtype}}
    out["scalars"] = {
        "i64": Raw("I64", [], struct.pack("<q", 37), scalar=True),
        "f32": Raw("F32", [], struct.pack("<f", 0.5), scalar=True),
        "bf16": Raw("BF16", [], b"\x80\x3f", scalar=True),
    }
    out["root_tensor"] = raw("F32", [4])
    out["root_scalar"] = Raw("I64", [], struct.pack("<q", -5), scalar=True)
    out["tensors_in_meta"] = {
        "batch": {"input_ids": Raw.of(np.arange(6, dtype="<i8").reshape(2, 3))},
        "meta": {
            "temperature": 1.0,
            "batch_num_tokens": Raw("I64", [], struct.pack("<q", 5), scalar=True),
            "rollout_is_weights": Raw.of(np.array([[1.0, 0.5, 0.25]] * 2, dtype="<f4")),
            "nested": {"deep": [Raw("U8", [1], b"\x07"), "text"]},
        },
    }
    out["tuples"] = {
        "pair": (Raw("F32", [], struct.pack("<f", 0.5), scalar=True), 3),
        "plain": (1, "a", None),
        "empty": (),
        "in_list": [(1, 2), Raw("I8", [1], b"\xff")],
    }
    out["nested_lists"] = {
        "results": [{"x": Raw.of(np.array([9], dtype="<i8")), "text": "hi"}, "plain", [[1, [2]]]],
        "json": {"a": [[], {}, [1.5, -0.0, 1e-06, 1e16, 123456789.125]]},
    }
    out["non_finite"] = {
        "metrics": {"loss": math.nan, "up": math.inf, "down": -math.inf, "ok": 0.25, "none": None},
        "avg_loss": math.nan,
        "logprobs": Raw.of(np.array([[0.0, np.nan, -np.inf]], dtype="<f4")),
        "by_rank": {0: "first", 1: "second"},
    }
    out["empty_placeholder"] = {"prompts": ["What is 2 + 3?", "caf\u00e9 \u65e5\u672c \U0001F600 \"q\" \\ \n\t"]}
    out["empty_list"] = []
    out["empty_tensor"] = {"e": Raw("F32", [0, 4], b"")}
    out["text_escapes"] = {"s": "\x00\x1f\x7f\u2028", "k\u00e9y": Raw("U8", [1], b"\x01")}
    out["big_ints"] = {"a": 2**63 - 1, "b": -(2**63), "c": 2**64 - 1, "t": Raw("U64", [1], b"\xff" * 8)}
    return out


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def normalise(x):
    """A case as it decodes: int dict keys become strings inside JSON subtrees."""
    if isinstance(x, dict):
        return {str(k): normalise(v) for k, v in x.items()}
    if isinstance(x, list):
        return [normalise(v) for v in x]
    if isinstance(x, tuple):
        return tuple(normalise(v) for v in x)
    return x


def main(argv):
    if len(argv) == 3 and argv[1] == "write":
        os.makedirs(argv[2], exist_ok=True)
        for name, root in cases().items():
            frame = encode(root)
            assert same(decode(frame), normalise(root)), name
            with open(os.path.join(argv[2], name + ".dssst1"), "wb") as f:
                f.write(frame)
        return 0
    if len(argv) == 3 and argv[1] == "check":
        name = os.path.basename(argv[2]).rsplit(".", 1)[0]
        with open(argv[2], "rb") as f:
            frame = f.read()
        got = decode(frame)
        want = normalise(cases()[name])
        if not same(got, want):
            print(f"{name}: decoded {got!r}, wanted {want!r}", file=sys.stderr)
            return 1
        if encode(got) != frame:
            print(f"{name}: Python re-encodes other bytes", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
