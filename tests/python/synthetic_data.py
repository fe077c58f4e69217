"""Tiny Fashion-MNIST-shaped IDX files with random pixels, shared by the Python tests."""

import gzip
import os
import random
import shutil
import struct


def idx_images(pixels, count):
    return struct.pack(">IIII", 0x803, count, 28, 28) + bytes(pixels)


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def write_dataset(folder, train, test, gz_train=True):
    """`train` and `test` examples in `folder` (emptied first); labels cycle through the ten classes."""
    rng = random.Random(7)
    # A fresh folder: a raw file left beside a .gz one would be read in its place.
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)

    def images(n):
        return idx_images([rng.randrange(256) for _ in range(n * 784)], n)

    def put(name, data, gz):
        with open(os.path.join(folder, name + (".gz" if gz else "")), "wb") as f:
            f.write(gzip.compress(data) if gz else data)

    # Training files gzipped and test files raw, so both ways of reading are exercised.
    put("train-images-idx3-ubyte", images(train), gz_train)
    put("train-labels-idx1-ubyte", idx_labels([i % 10 for i in range(train)]), gz_train)
    put("t10k-images-idx3-ubyte", images(test), False)
    put("t10k-labels-idx1-ubyte", idx_labels([(3 * i) % 10 for i in range(test)]), False)
