"""Minimal safetensors reader/writer (Debian has no safetensors package), for training and, through
tests/reference/st.py, for the tests.

Format: 8-byte little-endian header length N, N bytes of JSON header
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [a, b]}, "__metadata__": {...}},
then the raw little-endian data. Offsets are relative to the end of the header."""
import json
import struct

import numpy as np
import torch

_DT = {
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I32": (torch.int32, 4),
    "I64": (torch.int64, 8),
}
_NAME = {v[0]: k for k, v in _DT.items()}


def _raw_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save(path, tensors, metadata=None):
    """tensors: dict name -> torch tensor (dtype kept)."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = _raw_bytes(t)
        header[name] = {"dtype": _NAME[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)  # align data to 8 bytes, as the Rust writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load(path):
    """Returns dict name -> torch tensor (in the file's dtype)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, size = _DT[info["dtype"]]
        a, b = info["data_offsets"]
        buf = data[base + a:base + b]
        if dt == torch.bfloat16:
            arr = np.frombuffer(buf, dtype=np.int16).copy()
            t = torch.from_numpy(arr).view(torch.bfloat16)
        else:
            np_dt = {torch.float32: np.float32, torch.float16: np.float16,
                     torch.int32: np.int32, torch.int64: np.int64}[dt]
            t = torch.from_numpy(np.frombuffer(buf, dtype=np_dt).copy())
        out[name] = t.reshape(info["shape"])
    return out
