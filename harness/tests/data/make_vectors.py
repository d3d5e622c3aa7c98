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

The tree encoder below is an independent implementation of the reference rules (dotted keys,
`__root__`, `__dss_empty__`, `j` for tensor-free containers, `u` for tuples).
"""

import json
import os

import numpy as np
from safetensors import serialize
from safetensors.numpy import _flatten, save

HERE = os.path.dirname(os.path.abspath(__file__))


class BF16:
    """numpy has no bfloat16: carry the raw uint16 bit patterns and name the dtype ourselves."""

    def __init__(self, bits):
        self.bits = np.asarray(bits, dtype="<u2")


def has_tensor(x):
    if isinstance(x, (np.ndarray, BF16, np.generic)):
        return True
    if isinstance(x, dict):
        return any(has_tensor(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(has_tensor(v) for v in x)
    return False


def str_key(k):
    """A key of a dict that holds a tensor: the real codec refuses any but a string (integer
    keys become strings only inside tensor-free `j` subtrees, through JSON)."""
    if not isinstance(k, str):
        raise TypeError(f"a dict that holds a tensor has a non-string key {k!r}")
    return k


def to_tree(x, path, tensors):
    key = path or "__root__"
    if isinstance(x, np.generic):  # a 0-dim scalar
        tensors[key] = np.asarray(x).reshape(1)
        return ["t", key, {"scalar": True}]
    if isinstance(x, (np.ndarray, BF16)):
        tensors[key] = x
        return ["t", key]
    child = lambda k: f"{path}.{k}" if path else str(k)
    if isinstance(x, tuple):
        return ["u", [to_tree(v, child(i), tensors) for i, v in enumerate(x)]]
    if not has_tensor(x):
        return ["j", x]
    if isinstance(x, dict):
        return ["d", [[str_key(k), to_tree(v, child(k), tensors)] for k, v in x.items()]]
    return ["l", [to_tree(v, child(i), tensors) for i, v in enumerate(x)]]


def frame(root, dumps):
    tensors = {}
    tree = to_tree(root, "", tensors)
    if not tensors:
        tensors["__dss_empty__"] = np.zeros(1, dtype=np.uint8)
    metadata = {"dss": dumps({"v": "DSSST1", "tree": tree})}
    plain = {k: v for k, v in tensors.items() if not isinstance(v, BF16)}
    bf16 = {k: v for k, v in tensors.items() if isinstance(v, BF16)}
    if not bf16:
        return save(plain, metadata=metadata)
    keep = []
    specs = _flatten(plain, keep)
    for k, v in _flatten({k: v.bits for k, v in bf16.items()}, keep).items():
        specs[k] = type(v)(dtype="bfloat16", shape=v.shape, data_ptr=v.data_ptr, data_len=v.data_len)
    out = bytes(serialize(specs, metadata=metadata))
    del keep, bf16
    return out


def main():
    root = {
        "batch": {
            "input_ids": np.arange(6, dtype="<i8").reshape(2, 3),
            "attention_mask": np.array([[1, 1, 0], [1, 1, 1]], dtype="<i8"),
            "old_log_probs": BF16([[0x3F80, 0xBF00, 0x0000], [0x4000, 0x7FC0, 0xFF80]]),
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
        f.write(frame(root, json.dumps))

    nan_root = {
        "metrics": {"loss": float("nan"), "up": float("inf"), "down": float("-inf"), "ok": 0.25},
        "by_rank": {0: "first", 1: "second"},
        "logprobs": np.array([[0.0, -1.0]], dtype="<f4"),
    }
    with open(os.path.join(HERE, "dssst1_python_nan.safetensors"), "wb") as f:
        f.write(frame(nan_root, json.dumps))


if __name__ == "__main__":
    main()
