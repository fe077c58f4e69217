"""lenet-train and PyTorch exchange weights through safetensors files, and compute the same step.

A PyTorch LeNet of the source text (nn.Conv2d and nn.Linear named conv1, conv2, fc1, fc2) with PyTorch's
default initialisation is saved as PyTorch's safetensors.torch.save_file saves it (no metadata); lenet-train
--load's it, trains one minibatch that holds the whole training set (so the shuffle cannot matter) and
--save's the result; the saved file loads into a fresh module with load_state_dict(strict=True) and equals
PyTorch's own SGD step from the same weights, up to float32 rounding. A wrong tensor name, shape, weight
layout or flatten order fails here. The real safetensors package is used where it is importable; else a
reader and writer of the format (an 8-byte little-endian header length, a JSON header, raw tensors).

Needs torch (skipped without it) and lenet-train: $LENET_TRAIN (CTest sets it), else build/engine/lenet-train.
"""

import importlib.util
import json
import os
import re
import subprocess
import tempfile
import unittest

from safetensors_file import load_file, save_file
from synthetic_data import write_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAVE_TORCH = importlib.util.find_spec("torch") is not None
LENET_TRAIN = os.environ.get("LENET_TRAIN") or os.path.join(ROOT, "build", "engine", "lenet-train")
TRAIN, TEST, LR = 48, 200, 0.1


def read_idx(path, header_bytes):
    import numpy
    with open(path, "rb") as f:
        return numpy.frombuffer(f.read()[header_bytes:], dtype=numpy.uint8)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable (apt-get install python3-torch)")
@unittest.skipUnless(os.access(LENET_TRAIN, os.X_OK), f"no lenet-train at {LENET_TRAIN} (set LENET_TRAIN)")
class TorchInterop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        from torch import nn
        import torch.nn.functional as F

        class LeNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(1, 20, 3)
                self.conv2 = nn.Conv2d(20, 50, 5)
                self.fc1 = nn.Linear(800, 128)
                self.fc2 = nn.Linear(128, 10)

            def forward(self, x):
                h = F.avg_pool2d(F.relu(self.conv1(x)), 2)
                h = F.avg_pool2d(F.relu(self.conv2(h)), 2)
                return self.fc2(F.relu(self.fc1(torch.flatten(h, 1))))

        cls.torch, cls.F, cls.LeNet = torch, F, LeNet
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        write_dataset(cls.data, TRAIN, TEST, gz_train=False)
        images = lambda name, n: torch.from_numpy(read_idx(os.path.join(cls.data, name), 16).copy()).reshape(n, 1, 28, 28)
        labels = lambda name: torch.from_numpy(read_idx(os.path.join(cls.data, name), 8).astype("int64"))
        # uint8 / 255 in float32, as lenet-train reads pixels.
        cls.train_x = images("train-images-idx3-ubyte", TRAIN).float() / 255
        cls.train_y = labels("train-labels-idx1-ubyte")
        cls.test_x = images("t10k-images-idx3-ubyte", TEST).float() / 255
        cls.test_y = labels("t10k-labels-idx1-ubyte")

        torch.manual_seed(3)
        cls.start = LeNet()  # PyTorch's default initialisation: nothing like lenet-train's N(0, 0.01^2)
        cls.start_path = os.path.join(cls.tmp.name, "torch.safetensors")
        save_file(cls.start.state_dict(), cls.start_path)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def lenet_train(self, *args):
        return subprocess.run([LENET_TRAIN, "--backend", "cpu", "--quiet", "--data-dir", self.data, *args],
                              capture_output=True, text=True, timeout=300)

    def module_from(self, path):
        m = self.LeNet()
        m.load_state_dict(load_file(path), strict=True)
        return m

    def accuracy(self, model, x, y):
        with self.torch.no_grad():
            return (model(x).argmax(dim=1) == y).double().mean().item()

    def test_one_step_from_torch_weights_equals_torch_sgd(self):
        torch = self.torch
        # PyTorch's step: mean cross-entropy over the minibatch, w -= lr * grad.
        expected = self.LeNet()
        expected.load_state_dict(self.start.state_dict())
        logits = expected(self.train_x)
        loss = self.F.cross_entropy(logits, self.train_y)
        train_acc = (logits.argmax(dim=1) == self.train_y).double().mean().item()
        loss.backward()
        with torch.no_grad():
            for p in expected.parameters():
                p -= LR * p.grad
        start = self.start.state_dict()

        for replicas in (1, 3):
            with self.subTest(replicas=replicas):
                saved = os.path.join(self.tmp.name, f"step{replicas}.safetensors")
                metrics = os.path.join(self.tmp.name, f"m{replicas}.jsonl")
                proc = self.lenet_train("--load", self.start_path, "--epochs", "1", "--batch-size", str(TRAIN),
                                        "--lr", str(LR), "--replicas", str(replicas), "--save", saved,
                                        "--metrics", metrics)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                with open(metrics) as f:
                    row = json.loads(f.read().splitlines()[-1])
                self.assertAlmostEqual(row["train_loss"], loss.item(), delta=1e-5 * loss.item())
                self.assertEqual(row["train_acc"], train_acc)

                got = self.module_from(saved)  # strict: exactly the module's names and shapes
                for name, w in got.state_dict().items():
                    want = expected.state_dict()[name]
                    step_want, step_got = want - start[name], w - start[name]
                    rel = ((step_got - step_want).norm() / step_want.norm()).item()
                    self.assertLess(rel, 1e-4, f"{name}: the update differs from PyTorch's by {rel:.2e} (relative)")
                self.assertEqual(row["test_acc"], self.accuracy(got, self.test_x, self.test_y))

    def test_evaluates_torch_weights_as_torch_does(self):
        proc = self.lenet_train("--load", self.start_path, "--epochs", "0")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        m = re.match(r"^test acc: (\d\.\d\d), no training on \[cpu\]$", proc.stdout.strip())
        self.assertIsNotNone(m, proc.stdout)
        self.assertEqual(m.group(1), f"{self.accuracy(self.start, self.test_x, self.test_y):.2f}")

    def test_torch_weights_cannot_resume(self):
        proc = self.lenet_train("--resume", self.start_path, "--epochs", "2")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--load", proc.stderr)
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)


if __name__ == "__main__":
    unittest.main()
