#!/usr/bin/env python3
"""Regenerate the DSSST1 test vectors that pin the Rust codec to Python's bytes.

Needs `pip install safetensors numpy`. Run from anywhere:
    python3 harness/tests/data/make_vectors.py

Writes, next to this script:
- dssst1_python.safetensors: a frame with the common dtypes, nested dict/list/tuple, a scalar
  and JSON leaves. The `dss` string is `json.dumps` with Python's defaults, as the real codec
  writes it, so the Rust encoder must reproduce the file byte for byte from the decoded tree.
  (The conformance suite under harness/tests/conformance/ covers every dtype.)
- dssst1_python_nan.safetensors: a frame as Python's default `json.dumps` writes it: spaces after
  separators, `NaN`/`Infinity`/`-Infinity`, integer dict keys (which become strings).

The frames are written by the conformance suite's codec (harness/tests/conformance/dssst1.py),
which writes them the way the real Python codec does, with the `safetensors` package.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "conformance"))
from dssst1 import Raw, encode  # noqa: E402


def bf16(bits):
    """numpy has no bfloat16: a tensor of the raw uint16 bit patterns, named BF16."""
    a = np.asarray(bits, dtype="<u2")
    return Raw("BF16", a.shape, a.tobytes())


def tensors(x):
    """`x` with every numpy array (and numpy scalar, a 0-d tensor) made a `Raw` tensor."""
    if isinstance(x, np.generic):
        return Raw.of(np.asarray(x), scalar=True)
    if isinstance(x, np.ndarray):
        return Raw.of(x)
    if isinstance(x, dict):
        return {k: tensors(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(tensors(v) for v in x)
    if isinstance(x, list):
        return [tensors(v) for v in x]
    return x


def main():
    root = {
        "batch": {
            "input_ids": np.arange(6, dtype="<i8").reshape(2, 3),
            "attention_mask": np.array([[1, 1, 0], [1, 1, 1]], dtype="<i8"),
            "old_log_probs": bf16([[0x3F80, 0xBF00, 0x0000], [0x4000, 0x7FC0, 0xFF80]]),
            "flags": np.array([True, False]),
            "bytes": np.array([0, 7, 255], dtype=np.uint8),
            "half": np.array([0.5, -2.0], dtype="<f2"),
            "f32": np.array([[1.5], [-0.25]], dtype="<f4"),
            "f64": np.array([3.0], dtype="<f8"),
            "i32": np.array([-1, 2, 3], dtype="<i4"),
        },
        "meta": {"temperature": 1.0, "drop_position_ids": True, "name": "grpo \u00e9t\u00e9 \"q\""},
        "processing": {"post": ["compute_entropy_and_logprobs"], "loss_fn": None},
        "results": [{"x": np.array([9], dtype="<i8"), "text": "hi"}, "plain"],
        "pair": (np.float32(0.5), 3),
        "empty": np.zeros((0, 4), dtype="<f4"),
    }
    with open(os.path.join(HERE, "dssst1_python.safetensors"), "wb") as f:
        f.write(encode(tensors(root)))

    nan_root = {
        "metrics": {"loss": float("nan"), "up": float("inf"), "down": float("-inf"), "ok": 0.25},
        "by_rank": {0: "first", 1: "second"},
        "logprobs": np.array([[0.0, -1.0]], dtype="<f4"),
    }
    with open(os.path.join(HERE, "dssst1_python_nan.safetensors"), "wb") as f:
        f.write(encode(tensors(nan_root)))


if __name__ == "__main__":
    main()
