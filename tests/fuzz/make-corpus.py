#!/usr/bin/env python3
"""Writes the seed corpora under corpus/ (committed; rerun only to change them). Python's standard
library only. Each seed is tiny: libFuzzer mutates inputs of a few KB well, and the checkpoint target
pads a header with a zero data section itself (see fuzz_checkpoint.cpp), so no 516 KB file is needed."""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# model::tensor_specs(): names, shapes and flat-buffer order.
TENSORS = [("conv1.weight", [20, 1, 3, 3]), ("conv1.bias", [20]), ("conv2.weight", [50, 20, 5, 5]),
           ("conv2.bias", [50]), ("fc1.weight", [128, 800]), ("fc1.bias", [128]), ("fc2.weight", [10, 128]),
           ("fc2.bias", [10])]


def write(target, name, data):
    with open(os.path.join(HERE, "corpus", target, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, mtime=0)


def idx_images(count, rows=28, cols=28, magic=0x803):
    pixels = bytes((i * 31 + p * 7) % 256 for i in range(count) for p in range(rows * cols))
    return struct.pack(">IIII", magic, count, rows, cols) + pixels


def idx_labels(labels, magic=0x801):
    return struct.pack(">II", magic, len(labels)) + bytes(labels)


def checkpoint_header(edit=None):
    header = {"__metadata__": {"format": "lenet-dp checkpoint 2", "epoch": "3", "epochs": "10",
                               "seed": "1", "step": "720", "lr": "0.2", "batch_size": "256", "replicas": "2", "train_examples": "60000",
                               "epoch_loss_sum": "3353.8", "epoch_correct": "3244", "epoch_seconds": "0.25"}}
    at = 0
    for name, shape in TENSORS:
        size = 4
        for d in shape:
            size *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + size]}
        at += size
    if edit:
        edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text


def main():
    for target in ("fuzz_idx", "fuzz_checkpoint"):
        shutil.rmtree(os.path.join(HERE, "corpus", target), ignore_errors=True)
        os.makedirs(os.path.join(HERE, "corpus", target))

    images, labels = idx_images(1), idx_labels([0, 9, 4, 1, 7])
    seeds = {
        "images-1": images, "images-0": idx_images(0), "labels-5": idx_labels([0, 9, 4, 1, 7]),
        "images-1.gz": gz(images), "labels-5.gz": gz(labels),
        "bad-magic": idx_images(1, magic=0x0802), "images-27x28": idx_images(1, rows=27),
        "images-truncated": images[:-1], "labels-count-too-large": struct.pack(">II", 0x801, 9) + bytes(5),
        "labels-out-of-range": idx_labels([0, 10]), "header-only-4": images[:4],
        "gz-truncated": gz(images)[:-5], "gz-trailing-junk": gz(labels) + b"junk",
        "gz-of-garbage": gz(b"\x00\x00\x08"),
    }
    for name, data in seeds.items():
        write("fuzz_idx", name, data)

    valid = checkpoint_header()
    zeros = bytes(64)

    def set_tensor(name, key, value):
        return lambda h: h[name].__setitem__(key, value)

    seeds = {
        "valid-header": valid,  # the target pads it with a zero data section: a full valid checkpoint
        "valid-header-and-64-data-bytes": valid + zeros,
        "length-only": valid[:8],
        "header-cut": valid[:len(valid) // 2],
        "length-huge": b"\xff" * 8 + valid[8:],
        "dtype-f16": checkpoint_header(set_tensor("conv2.weight", "dtype", "F16")),
        "shape-transposed": checkpoint_header(set_tensor("fc1.weight", "shape", [800, 128])),
        "offsets-overlap": checkpoint_header(set_tensor("conv1.bias", "data_offsets", [716, 796])),
        "tensor-missing": checkpoint_header(lambda h: h.pop("fc2.bias")),
        "metadata-missing": checkpoint_header(lambda h: h.pop("__metadata__")),
        "metadata-lr-unparsable": checkpoint_header(lambda h: h["__metadata__"].__setitem__("lr", "0.2x")),
        "metadata-test-examples": checkpoint_header(lambda h: h["__metadata__"].__setitem__("test_examples", "10000")),
        "metadata-train-fingerprint": checkpoint_header(
            lambda h: h["__metadata__"].__setitem__("train_fingerprint", "14695981039346656037")),
        "metadata-backend-mode": checkpoint_header(lambda h: h["__metadata__"].update(backend="cuda", mode="graph")),
        "header-array": struct.pack("<Q", 7) + b"[1,2,3]",
    }
    for name, data in seeds.items():
        write("fuzz_checkpoint", name, data)


if __name__ == "__main__":
    main()
