"""A DSSST1 codec written the way the real Python codec writes and reads frames.

Test dependency of the conformance suite only (needs `safetensors` and `numpy` from PyPI). The
writer follows the frame rules: a tree of tagged nodes (`t`, `j`, `d`, `l`, `u`) in the `dss`
metadata string, built with `json.dumps` defaults; tensors under their dotted paths (`__root__`
at the root); a 0-d tensor stored with shape [1] and `{"scalar": true}`; tuples always `u`; a
frame without tensors carries the 1-element U8 placeholder `__dss_empty__`; the container is
written by the `safetensors` package itself.

Tensors are `Raw` values (dtype name, shape, little-endian bytes), so every dtype the container
names can be written, the ones numpy lacks (bfloat16, the 8-bit floats) included.
"""

import json

import numpy as np
from safetensors import TensorSpec, deserialize, serialize

# safetensors format code -> the dtype name TensorSpec takes.
SPEC_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "C64": "complex64",
}
BYTES_PER_ELEMENT = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}

EMPTY_KEY = "__dss_empty__"
ROOT_KEY = "__root__"


class Raw:
    """A tensor: safetensors dtype code, shape, raw little-endian bytes. `scalar` marks a 0-d
    tensor (shape [] here, stored as [1])."""

    def __init__(self, dtype, shape, data, scalar=False):
        self.dtype, self.shape, self.data, self.scalar = dtype, list(shape), bytes(data), scalar
        n = 1
        for d in self.shape or [1]:
            n *= d
        assert len(self.data) == n * BYTES_PER_ELEMENT[dtype], (dtype, shape, len(self.data))

    @staticmethod
    def of(array, scalar=False):
        a = np.ascontiguousarray(array)
        code = {v: k for k, v in SPEC_NAMES.items()}[a.dtype.name]
        return Raw(code, [] if scalar else a.shape, a.astype(a.dtype.newbyteorder("<")).tobytes(), scalar)

    def __eq__(self, other):
        return isinstance(other, Raw) and (self.dtype, self.shape, self.data, self.scalar) == (
            other.dtype, other.shape, other.data, other.scalar)

    def __repr__(self):
        return f"Raw({self.dtype}, {self.shape}, scalar={self.scalar})"


def has_tensor(x):
    if isinstance(x, Raw):
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
    if isinstance(x, Raw):
        key = path or ROOT_KEY
        tensors[key] = x
        return ["t", key, {"scalar": True}] if x.scalar else ["t", key]
    child = lambda k: f"{path}.{k}" if path else str(k)
    if isinstance(x, tuple):
        return ["u", [to_tree(v, child(i), tensors) for i, v in enumerate(x)]]
    if not has_tensor(x):
        return ["j", x]
    if isinstance(x, dict):
        return ["d", [[str_key(k), to_tree(v, child(k), tensors)] for k, v in x.items()]]
    return ["l", [to_tree(v, child(i), tensors) for i, v in enumerate(x)]]


def encode(root):
    tensors = {}
    tree = to_tree(root, "", tensors)
    if not tensors:
        tensors[EMPTY_KEY] = Raw("U8", [1], b"\0")
    metadata = {"dss": json.dumps({"v": "DSSST1", "tree": tree})}
    keep = []
    specs = {}
    for k, t in tensors.items():
        buf = np.frombuffer(t.data, dtype=np.uint8) if t.data else np.zeros(1, np.uint8)
        keep.append(buf)
        shape = [1] if t.scalar else t.shape
        specs[k] = TensorSpec(dtype=SPEC_NAMES[t.dtype], shape=shape,
                              data_ptr=buf.ctypes.data, data_len=len(t.data))
    out = bytes(serialize(specs, metadata=metadata))
    del keep
    return out


def decode(frame):
    """The tree of a frame; tensors come back as `Raw`."""
    header_len = int.from_bytes(frame[:8], "little")
    header = json.loads(frame[8:8 + header_len])
    doc = json.loads(header["__metadata__"]["dss"])
    assert doc["v"] == "DSSST1", doc
    tensors = {name: t for name, t in deserialize(frame)}

    def node(n):
        tag = n[0]
        if tag == "t":
            t = tensors[n[1]]
            scalar = len(n) > 2 and n[2].get("scalar", False)
            return Raw(t["dtype"], [] if scalar else t["shape"], t["data"], scalar)
        if tag == "j":
            return n[1]
        if tag == "d":
            return {k: node(v) for k, v in n[1]}
        if tag == "l":
            return [node(v) for v in n[1]]
        if tag == "u":
            return tuple(node(v) for v in n[1])
        raise ValueError(f"unknown tag {tag!r}")

    return node(doc["tree"])


OCTET_STREAM = "application/octet-stream"


def request_body(body=None, frame=None):
    """The data and headers of a request carrying `frame` (a DSSST1 frame) or else `body` (JSON,
    NaN refused as the sync client refuses it); `(None, {})` for neither."""
    if frame is not None:
        return encode(frame), {"Content-Type": OCTET_STREAM}
    if body is not None:
        return json.dumps(body, allow_nan=False).encode(), {"Content-Type": "application/json"}
    return None, {}


def response_value(raw, content_type):
    """What an answer holds: the tree of a DSSST1 frame, else its JSON (None when empty)."""
    if OCTET_STREAM in (content_type or ""):
        return decode(raw)
    return json.loads(raw) if raw else None
