"""safetensors files for the Python tests: the real safetensors package where it is importable, else a
reader and writer of the format (an 8-byte little-endian header length, a JSON header, raw tensors)."""

import importlib.util
import json
import struct

HAVE_SAFETENSORS = importlib.util.find_spec("safetensors") is not None


def save_file(tensors, path):
    """What safetensors.torch.save_file(tensors, path) writes for float32 tensors and no metadata."""
    if HAVE_SAFETENSORS:
        from safetensors.torch import save_file as real
        return real(tensors, path)
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_file(path):
    """safetensors.torch.load_file(path) for float32 tensors: name -> tensor."""
    if HAVE_SAFETENSORS:
        from safetensors.torch import load_file as real
        return real(path)
    import numpy
    import torch
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", entry
        begin, end = entry["data_offsets"]
        out[name] = torch.from_numpy(numpy.frombuffer(body[begin:end], dtype="<f4").copy()).reshape(entry["shape"])
    return out
