#!/usr/bin/env python3
"""PyTorch peer of lenet-train: the same LeNet, data and data-parallel algorithm, written with plain
tensors, so the C++/CUDA trainer can be compared with what PyTorch itself does.

  --variant textbook  the source text's algorithm as written: replicas, a split minibatch, gradients
                      summed on replica 0 tensor by tensor and copied back, SGD everywhere, every
                      device synchronised after every minibatch, evaluation on replica 0.
  --variant graphs    the same arithmetic with the data resident on the GPU and one whole training
                      step (gather, forward, backward, allreduce, SGD) captured in a CUDA graph.

Final line (stdout), like the source text: `test acc: 0.83, 3.04 sec/epoch on [cuda:0, cuda:1]`.
Exit status: 0 done, 1 data or runtime error, 2 usage error, 130 interrupted (Ctrl-C); each error is one
line on stderr.
"""

import argparse
import contextlib
import errno
import gzip
import itertools
import json
import math
import os
import re
import stat
import struct
import sys
import tempfile
import time
import zlib

PROG = "lenet_peer"
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
# The four IDX files, each raw or gzipped (NAME.gz).
DATA_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MAX_REPLICAS = 64  # lenet-bench's --replicas go to 64
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
SIDE = 28
CLASSES = 10

# Names and shapes of lenet-train's checkpoints, so dumps and checkpoints line up tensor by tensor.
PARAM_SPECS = [
    ("conv1.weight", (20, 1, 3, 3)),
    ("conv1.bias", (20,)),
    ("conv2.weight", (50, 20, 5, 5)),
    ("conv2.bias", (50,)),
    ("fc1.weight", (128, 800)),
    ("fc1.bias", (128,)),
    ("fc2.weight", (10, 128)),
    ("fc2.bias", (10,)),
]


class UsageError(Exception):
    pass


class DataError(Exception):
    pass


ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text):
    """As lenet-train's messages: control characters (C0, DEL and C1, from a file name or a flag's value)
    escaped, C1 as its UTF-8 bytes."""
    return "".join(ESCAPES.get(c, "".join(f"\\x{b:02x}" for b in c.encode()))
                   if c < " " or "\x7f" <= c <= "\x9f" else c for c in text)


def fail(message, status):
    # A closed stderr is None, which print would take as stdout; a full one leaves the status as it is.
    if sys.stderr is not None:
        try:
            print(f"{PROG}: {one_line(message)}", file=sys.stderr, flush=True)
        except OSError:
            pass
    sys.exit(status)


class StdoutFailed(Exception):
    pass


def print_out(line):
    """A line on stdout. A failed write (a reader that has gone, a full disk) raises StdoutFailed: one line
    and exit 1, as lenet-train does."""
    try:
        print(line, flush=True)
    except OSError as e:
        gone = ": its reader has gone" if e.errno == errno.EPIPE else ""
        raise StdoutFailed(f"stdout: write failed ({e.strerror}){gone}") from None


class OneLineParser(argparse.ArgumentParser):
    # argparse prints the whole usage block before its message; the project's tools answer a usage
    # error with one line, which scripts and tests can match. As lenet-train's: no abbreviated flags,
    # and a flag given twice is refused (argparse would keep the last).
    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message):
        fail(f"{message} (see --help)", 2)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        # A value that starts with "--" comes after "=", or argparse refuses it: every other such word is a flag.
        flags = [t.split("=", 1)[0] for t in itertools.takewhile(lambda t: t != "--", args) if t.startswith("--")]
        for flag in flags:
            if flags.count(flag) > 1:
                self.error(f"{flag}: given more than once")
        return super().parse_args(args, namespace)


def decimal(text):
    """An integer flag's value as lenet-train reads one: an optional sign and decimal digits without a
    leading zero, not Python's int() spellings (" 256", "1_0", other scripts' digits)."""
    if text == "":
        raise argparse.ArgumentTypeError("empty value")
    if not re.fullmatch(r"[+-]?(0|[1-9][0-9]*)", text, re.ASCII):
        raise argparse.ArgumentTypeError(f"{text} is not a decimal integer (digits without a leading zero)")
    return int(text)


def parse_args(argv):
    p = OneLineParser(prog=PROG, description="PyTorch peer of lenet-train (see profiling/peers/README.md)")
    p.add_argument("--variant", choices=["textbook", "graphs"], default="textbook")
    p.add_argument("--num-gpus", type=decimal, default=None,
                   help="use devices cuda:0..N-1 (default: all visible; cpu when CUDA is absent)")
    p.add_argument("--replicas", type=decimal, default=None, help="replicas, replica i on device i mod N (default N)")
    p.add_argument("--batch-size", type=decimal, default=256)
    p.add_argument("--lr", default="0.2")  # text, to be shown as typed in an error
    p.add_argument("--epochs", type=decimal, default=10)
    p.add_argument("--seed", type=decimal, default=1)
    p.add_argument("--data-dir", default=None,
                   help=f"folder of the four IDX files (default: $LENET_DATA_DIR, else {DEFAULT_DATA_DIR})")
    p.add_argument("--train-limit", type=decimal, default=None, help="use the first N training examples")
    p.add_argument("--test-limit", type=decimal, default=None, help="use the first N test examples")
    p.add_argument("--json", default=None, metavar="FILE", help="write the benchmark row to FILE")
    p.add_argument("--profile-steps", type=decimal, default=0, metavar="K",
                   help="after training, profile K steps for the kernel, idle, launch and allreduce fields "
                        "(default 0: those fields are null)")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines on stderr")
    # For the tests: the parameters after the run, replica 0 flattened, and how far the other replicas are
    # from it.
    p.add_argument("--dump-params", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if not 1 <= a.batch_size <= 2 ** 31 - 1:  # lenet-train's range
        raise UsageError(f"--batch-size {a.batch_size}: must be from 1 to 2147483647")
    # As lenet-train: the float32 the learning rate rounds to must be above 0 and finite.
    lr_text = a.lr
    if lr_text == "":
        raise UsageError("--lr: empty value")
    # A decimal number, as lenet-train reads it: not Python's float() spellings (" 0.2", "1_0", other digits).
    lr32 = math.nan
    if re.fullmatch(r"\+?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", lr_text, re.ASCII):
        a.lr = float(lr_text)
        try:
            lr32 = struct.unpack("f", struct.pack("f", a.lr))[0]
        except OverflowError:
            lr32 = math.inf
    if not (math.isfinite(lr32) and lr32 > 0):
        raise UsageError(f"--lr {lr_text}: must be a number that rounds to a finite float32 above 0 (1.4e-45 to 3.4e38 once rounded)")
    for flag, v, least in (("--epochs", a.epochs, 1), ("--profile-steps", a.profile_steps, 0)):  # lenet-train's range
        if not least <= v <= 2 ** 31 - 1:
            raise UsageError(f"{flag} {v}: must be from {least} to 2147483647")
    if a.num_gpus is not None and a.num_gpus < 1:
        raise UsageError(f"--num-gpus {a.num_gpus}: must be at least 1")
    if a.replicas is not None and a.replicas < 1:
        raise UsageError(f"--replicas {a.replicas}: must be at least 1")
    for flag, v in (("--num-gpus", a.num_gpus), ("--replicas", a.replicas)):  # before a list of that many devices
        if v is not None and v > MAX_REPLICAS:
            raise UsageError(f"{flag} {v}: at most {MAX_REPLICAS}, as lenet-bench's table goes")
    if a.replicas is not None and a.replicas > a.batch_size:
        raise UsageError(f"--replicas {a.replicas} is more than --batch-size {a.batch_size}: "
                         "every replica needs a row of a full minibatch")
    # Its epochs' generators are seeded with seed * 1_000_003 + 1 + epoch (epoch_perm), which must fit 64 bits.
    if not 0 <= a.seed < 2 ** 40:
        raise UsageError(f"--seed {a.seed}: must be in 0..2^40-1")
    if a.data_dir == "":  # as lenet-train: not the default folder
        raise UsageError("--data-dir: empty value")
    for flag, v in (("--train-limit", a.train_limit), ("--test-limit", a.test_limit)):
        if v is not None and v < 1:
            raise UsageError(f"{flag} {v}: must be at least 1")
    # The data set's files, in both forms (the one not read is the data set's too).
    data_dir = resolve_data_dir(a.data_dir)
    data_files = [os.path.join(data_dir, name + gz) for name in DATA_FILES for gz in ("", ".gz")]
    for flag, path in (("--json", a.json), ("--dump-params", a.dump_params)):
        if path == "":
            raise UsageError(f"{flag}: empty value")
        if path == "-":
            raise UsageError(f"{flag} -: a file, not stdout (it is written to a new file renamed over it); for a file "
                             "named -, give ./-")
        if path is not None:
            folder = os.path.dirname(os.path.realpath(path))  # written through a symbolic link
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
                raise DataError(f"{flag} {path}: folder {folder} does not exist or is not writable")
            try:  # access() lets root through where no file can be made (/proc)
                with tempfile.TemporaryFile(dir=folder):
                    pass
            except OSError as e:
                raise DataError(f"{flag} {path}: cannot create a file in the folder {folder} ({e.strerror})")
            # The file is replaced whole by a rename (the row twice: after training and after profiling),
            # which would put a regular file in a pipe's place, or cut off the file stdout or stderr writes.
            if os.path.exists(path) and not os.path.isfile(path):
                raise DataError(f"{flag} {path}: not a regular file (it is written to a new file renamed over it)")
            if os.path.lexists(path) and not os.path.exists(path):
                raise DataError(f"{flag} {path}: a symbolic link naming no file (dangling, or a loop)")
            if os.path.exists(path) and any(same_inode(path, fd) for fd in (1, 2)):
                raise DataError(f"{flag} {path}: the file stdout or stderr writes (it is replaced by a rename)")
            for data_file in data_files:
                if same_file(path, data_file):
                    raise UsageError(f"{flag} {path} names the data file {data_file}")
    # The row would replace the parameters written just before it.
    if a.json is not None and a.dump_params is not None and same_file(a.json, a.dump_params):
        raise UsageError(f"--json and --dump-params name the same file {a.json}")
    return a


def same_file(a, b):
    """Whether paths a and b name one file: the same inode where both exist, else the same resolved path."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def same_inode(path, fd):
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


# ---------------------------------------------------------------------------------------------- data

def read_bytes(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})")
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt or truncated gzip data ({e})")
    if path.endswith(".gz"):
        raise DataError(f"{path}: named .gz but is not a gzip file")
    return raw


def parse_idx(data, path, magic, dims):
    header = 4 + 4 * dims
    if len(data) < 4:
        raise DataError(f"{path}: truncated header ({len(data)} bytes)")
    got = int.from_bytes(data[0:4], "big")
    if got != magic:
        what = "images" if magic == IMAGES_MAGIC else "labels"
        raise DataError(f"{path}: bad magic number 0x{got:08x}, expected 0x{magic:08x} (IDX {what})")
    if len(data) < header:
        raise DataError(f"{path}: truncated header ({len(data)} of {header} bytes)")
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    if dims == 3 and (shape[1], shape[2]) != (SIDE, SIDE):
        raise DataError(f"{path}: images are {shape[1]}x{shape[2]}, expected {SIDE}x{SIDE}")
    expected = header + math.prod(shape)
    if len(data) < expected:
        raise DataError(f"{path}: truncated data: header promises {shape[0]} items ({expected} bytes) "
                        f"but the file has {len(data)} bytes")
    if len(data) > expected:
        raise DataError(f"{path}: {len(data) - expected} unexpected bytes after {shape[0]} items")
    return shape[0], memoryview(data)[header:]


def find_data_file(folder, name):
    plain = os.path.join(folder, name)
    for candidate in (plain, plain + ".gz"):
        if os.path.isfile(candidate):
            return candidate
        if os.path.exists(candidate):
            raise DataError(f"{candidate}: not a regular file")
    raise DataError(f"{plain}(.gz): not found; install the data set with `apt-get install dataset-fashion-mnist` "
                    "or point --data-dir / LENET_DATA_DIR at a folder holding the four IDX files")


def resolve_data_dir(flag):
    if flag:
        return flag
    return os.environ.get("LENET_DATA_DIR") or DEFAULT_DATA_DIR


def load_split(torch, folder, prefix, limit, flag, what):
    images_path = find_data_file(folder, f"{prefix}-images-idx3-ubyte")
    labels_path = find_data_file(folder, f"{prefix}-labels-idx1-ubyte")
    n_images, pixels = parse_idx(read_bytes(images_path), images_path, IMAGES_MAGIC, 3)
    n_labels, labels = parse_idx(read_bytes(labels_path), labels_path, LABELS_MAGIC, 1)
    if n_images != n_labels:
        raise DataError(f"{images_path}: {n_images} images but {labels_path} has {n_labels} labels")
    if n_images == 0:
        raise DataError(f"{images_path}: holds no examples")
    bad = next((i for i, v in enumerate(labels) if v >= CLASSES), None)
    if bad is not None:
        raise DataError(f"{labels_path}: label {labels[bad]} at index {bad} is outside 0..9")
    n = n_images
    if limit is not None:
        if limit > n:
            raise UsageError(f"{flag} {limit}: the {what} set has only {n} examples")  # as lenet-train: status 2
        n = limit
    # bytearray: torch.frombuffer wants a writable buffer and would warn otherwise.
    x = torch.frombuffer(bytearray(pixels[:n * SIDE * SIDE]), dtype=torch.uint8).reshape(n, 1, SIDE, SIDE)
    y = torch.frombuffer(bytearray(labels[:n]), dtype=torch.uint8).to(torch.int64)
    return x, y


def to_float(x_uint8):
    # uint8 / 255 in float32, no normalisation: the same bits as lenet-train's static_cast<float>(p) / 255.0f.
    return x_uint8.float() / 255


# ---------------------------------------------------------------------------------------------- model

def init_params(torch, seed):
    gen = torch.Generator().manual_seed(seed)
    params = []
    for name, shape in PARAM_SPECS:
        if name.endswith(".weight"):
            params.append(torch.randn(shape, generator=gen, dtype=torch.float32) * 0.01)
        else:
            params.append(torch.zeros(shape, dtype=torch.float32))
    return params


def replicate(params, device):
    out = []
    for p in params:
        q = p.detach().to(device).clone().requires_grad_(True)
        out.append(q)
    return out


def lenet(F, x, p):
    h = F.avg_pool2d(F.relu(F.conv2d(x, p[0], p[1])), kernel_size=2, stride=2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, p[2], p[3])), kernel_size=2, stride=2)
    h = F.relu(F.linear(h.reshape(h.shape[0], -1), p[4], p[5]))
    return F.linear(h, p[6], p[7])


def shard_rows(rows, replicas):
    """(first, count) per replica, like torch.chunk: ceil(rows / R) rows each in order, so late replicas
    may get fewer or none (rows 5, R 4: 2, 2, 1, 0). torch.chunk itself would return fewer than R chunks."""
    per = -(-rows // replicas)
    out = []
    for r in range(replicas):
        first = min(r * per, rows)
        out.append((first, min(per, rows - first)))
    return out


def evaluate(torch, F, params, x_all, y_all, device, batch, already_float):
    correct = torch.zeros((), dtype=torch.int64, device=device)
    with torch.no_grad():
        for s in range(0, x_all.shape[0], batch):
            x = x_all[s:s + batch].to(device)
            if not already_float:
                x = to_float(x)
            pred = lenet(F, x, params).argmax(dim=1)
            correct += (pred == y_all[s:s + batch].to(device)).sum()
    return correct.item() / x_all.shape[0]


def epoch_perm(torch, seed, epoch, n):
    # Its own generator per epoch, so an epoch's order depends only on (seed, epoch), like lenet-train's.
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 1 + epoch)
    return torch.randperm(n, generator=gen)


# ------------------------------------------------------------------------------------ textbook variant

class Textbook:
    def __init__(self, torch, F, params, devices, lr):
        self.torch, self.F, self.lr = torch, F, lr
        self.devices = devices
        self.replicas = [replicate(params, d) for d in devices]
        for rep in self.replicas:
            for p in rep:
                # Zero gradients up front: a replica that gets no rows of a minibatch contributes zeros.
                p.grad = torch.zeros_like(p)
        self.cuda_devices = sorted({d for d in devices if d.type == "cuda"}, key=lambda d: d.index)

    def step(self, x, y):
        torch, F = self.torch, self.F
        rows = x.shape[0]
        losses = []
        for (first, count), dev, p in zip(shard_rows(rows, len(self.replicas)), self.devices, self.replicas):
            if count == 0:
                continue
            xs = x[first:first + count].to(dev)
            ys = y[first:first + count].to(dev)
            losses.append(F.cross_entropy(lenet(F, xs, p), ys, reduction="none").sum())
        for loss in losses:
            loss.backward()
        self.allreduce()
        with torch.no_grad():
            for rep in self.replicas:
                for p in rep:
                    p -= self.lr * p.grad / rows
                    p.grad.zero_()

    def allreduce(self):
        # Per parameter tensor: sum on replica 0, then copy the sum back to every other replica.
        with self.torch.no_grad():
            first = self.replicas[0]
            for j in range(len(first)):
                for rep in self.replicas[1:]:
                    first[j].grad += rep[j].grad.to(first[j].device)
                for rep in self.replicas[1:]:
                    rep[j].grad.copy_(first[j].grad.to(rep[j].device))

    def sync(self):
        # The source text calls torch.cuda.synchronize() for the current device only; every device used
        # is waited for here, so a minibatch is really over on all of them before the next begins.
        for d in self.cuda_devices:
            self.torch.cuda.synchronize(d)

    def params(self):
        return self.replicas


def run_textbook(torch, F, args, devices, data, timing, trained):
    train_x, train_y, test_x, test_y = data
    train_xf = to_float(train_x)  # host floats once, as the source text's loader hands float tensors over
    test_xf = to_float(test_x)
    n = train_x.shape[0]
    model = Textbook(torch, F, init_params(torch, args.seed), devices, args.lr)
    on_cuda = bool(model.cuda_devices)
    B = args.batch_size
    for epoch in range(args.epochs):
        enqueue = 0.0
        model.sync()
        t0 = time.perf_counter()
        perm = epoch_perm(torch, args.seed, epoch, n)
        steps = 0
        for s in range(0, n, B):
            h0 = time.perf_counter()
            idx = perm[s:s + B]
            model.step(train_xf[idx], train_y[idx])
            enqueue += time.perf_counter() - h0
            model.sync()
            steps += 1
        seconds = time.perf_counter() - t0
        acc = evaluate(torch, F, model.replicas[0], test_xf, test_y, devices[0], B, True)
        check_finite(torch, model.replicas, epoch, args.lr)
        timing.epoch_done(epoch, seconds, acc, steps, enqueue if on_cuda else None)
    trained(model.replicas)

    prof = {}
    if args.profile_steps > 0:
        batches = []
        perm = epoch_perm(torch, args.seed, args.epochs, n)
        for s in range(0, min(n, args.profile_steps * B), B):
            idx = perm[s:s + B]
            batches.append((train_xf[idx], train_y[idx]))

        def one_step(k):
            model.step(*batches[k])
            model.sync()

        if on_cuda:
            prof.update(profile_kernels(torch, one_step, len(batches), model.sync, False))
        prof["allreduce_ms_per_step"] = time_allreduce(torch, F, model, batches)
    return prof


def time_allreduce(torch, F, model, batches):
    """Host time of the allreduce alone, each device synchronised before and after it: in the textbook
    algorithm the allreduce is launch-bound, so this is what it costs a step. One replica has nothing to
    reduce: 0, as lenet-bench's traced copies and adds measure it (timing the empty call would report the
    synchronisations' latency)."""
    if len(model.replicas) == 1:
        return 0.0
    total = 0.0
    for x, y in batches:
        rows = x.shape[0]
        losses = []
        for (first, count), dev, p in zip(shard_rows(rows, len(model.replicas)), model.devices, model.replicas):
            if count:
                losses.append(F.cross_entropy(lenet(F, x[first:first + count].to(dev), p),
                                              y[first:first + count].to(dev), reduction="none").sum())
        for loss in losses:
            loss.backward()
        model.sync()
        t0 = time.perf_counter()
        model.allreduce()
        model.sync()
        total += time.perf_counter() - t0
        with torch.no_grad():
            for rep in model.replicas:
                for p in rep:
                    p.grad.zero_()
    return 1e3 * total / len(batches)


# -------------------------------------------------------------------------------------- graphs variant

class Graphs:
    """One training step of all replicas captured once and replayed. The epoch's permutation and a step
    counter live on the device and the graph reads them, so a replay needs nothing from the host; the
    last partial minibatch runs at full size with the rows past the end masked out of the loss (exact
    zeros in every gradient sum), its row count computed on the device."""

    def __init__(self, torch, F, params, device, replicas, lr, batch, train_x, train_y):
        self.torch, self.F, self.device = torch, F, device
        self.lr, self.B = lr, batch
        self.n = train_x.shape[0]
        self.steps_per_epoch = -(-self.n // batch)
        self.train_x = to_float(train_x.to(device))
        self.train_y = train_y.to(device)
        self.replicas = [replicate(params, device) for _ in range(replicas)]
        self.perm = torch.zeros(self.steps_per_epoch * batch, dtype=torch.int64, device=device)
        self.step_no = torch.zeros((), dtype=torch.int64, device=device)
        self.offsets = torch.arange(batch, dtype=torch.int64, device=device)
        self.shards = shard_rows(batch, replicas)
        self.graph = None

    def _step(self):
        torch, F = self.torch, self.F
        pos = self.step_no * self.B + self.offsets
        valid = pos < self.n
        idx = self.perm.index_select(0, pos)
        x = self.train_x.index_select(0, idx)
        y = self.train_y.index_select(0, idx)
        mask = valid.to(torch.float32)
        rows = mask.sum()
        grads = []
        for (first, count), p in zip(self.shards, self.replicas):
            if count == 0:
                grads.append([torch.zeros_like(q) for q in p])
                continue
            sl = slice(first, first + count)
            loss = (F.cross_entropy(lenet(F, x[sl], p), y[sl], reduction="none") * mask[sl]).sum()
            grads.append(list(torch.autograd.grad(loss, p)))
        with torch.no_grad():
            for j in range(len(grads[0])):
                for g in grads[1:]:
                    grads[0][j].add_(g[j])
                for g in grads[1:]:
                    g[j].copy_(grads[0][j])
            for p, g in zip(self.replicas, grads):
                for q, gq in zip(p, g):
                    q.sub_(self.lr * gq / rows)
            self.step_no.add_(1)

    def warm_up(self):
        """Three eager steps, each as step 0: an epoch may have fewer than three steps."""
        for _ in range(3):
            self.step_no.zero_()
            self._step()

    def capture(self):
        torch = self.torch
        saved = [[q.detach().clone() for q in p] for p in self.replicas]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        # Warm-up outside the graph (cuDNN/cuBLAS handles, workspaces, autograd state), on a side stream
        # as capture requires; its updates are undone below.
        with torch.cuda.stream(side):
            self.warm_up()
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._step()
        torch.cuda.synchronize(self.device)
        with torch.no_grad():
            for p, s in zip(self.replicas, saved):
                for q, sq in zip(p, s):
                    q.copy_(sq)
        self.step_no.zero_()
        torch.cuda.synchronize(self.device)

    def start_epoch(self, perm_cpu):
        self.perm[:self.n].copy_(perm_cpu)
        self.step_no.zero_()

    def replay(self):
        self.graph.replay()

    def sync(self):
        self.torch.cuda.synchronize(self.device)


def run_graphs(torch, F, args, device, replicas, data, timing, trained):
    train_x, train_y, test_x, test_y = data
    model = Graphs(torch, F, init_params(torch, args.seed), device, replicas, args.lr, args.batch_size,
                   train_x, train_y)
    test_xf = to_float(test_x.to(device))
    test_y_dev = test_y.to(device)
    model.capture()
    n = train_x.shape[0]
    for epoch in range(args.epochs):
        model.sync()
        t0 = time.perf_counter()
        model.start_epoch(epoch_perm(torch, args.seed, epoch, n))
        enqueue = 0.0
        for _ in range(model.steps_per_epoch):
            h0 = time.perf_counter()
            model.replay()
            enqueue += time.perf_counter() - h0
        model.sync()
        seconds = time.perf_counter() - t0
        acc = evaluate(torch, F, model.replicas[0], test_xf, test_y_dev, device, args.batch_size, True)
        check_finite(torch, model.replicas, epoch, args.lr)
        timing.epoch_done(epoch, seconds, acc, model.steps_per_epoch, enqueue)
    trained(model.replicas)

    prof = {}
    if args.profile_steps > 0:
        k = min(args.profile_steps, model.steps_per_epoch)
        model.start_epoch(epoch_perm(torch, args.seed, args.epochs, n))
        model.sync()
        prof.update(profile_kernels(torch, lambda _: model.replay(), k, model.sync, True))
    return prof


# ------------------------------------------------------------------------------------------ profiling

def summarize_profile(events, steps, graph_replayed):
    """events: (name, on_device, device_index, start_us, end_us). Same definitions as lenet-bench:
    kernel time is the sum of kernel durations; idle, per device, is the span from its first kernel
    start to its last kernel end minus the union of its kernels, summed over devices; launches count
    the kernels the host launched, not a graph: without graphs every kernel recorded (cuBLAS's and
    cuDNN's may launch through calls the profiler does not name), with them the host's kernel-launch
    calls (the profiler does not say which kernels a graph ran); graph launches count the host's
    graph-launch calls."""
    launch_calls = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")
    graph_launches = sum(1 for e in events if not e[1] and e[0].startswith(("cudaGraphLaunch", "cuGraphLaunch")))
    host_names = {e[0] for e in events if not e[1]}
    kernels = {}
    kernel_us = 0.0
    launches = 0
    for name, on_device, dev, start, end in events:
        if not on_device:
            if graph_replayed and name.startswith(launch_calls):
                launches += 1
            continue
        # Copies and memsets are not kernels; device-side copies of host annotations carry a host name.
        if name.startswith(("Memcpy", "Memset")) or name in host_names:
            continue
        if not graph_replayed:
            launches += 1
        kernel_us += end - start
        kernels.setdefault(dev, []).append((start, end))
    idle_us = 0.0
    for spans in kernels.values():
        spans.sort()
        busy, run_start, run_end = 0.0, spans[0][0], spans[0][1]
        for start, end in spans[1:]:
            if start > run_end:
                busy += run_end - run_start
                run_start, run_end = start, end
            else:
                run_end = max(run_end, end)
        busy += run_end - run_start
        idle_us += max(e for _, e in spans) - spans[0][0] - busy
    return {
        "kernel_ms_per_step": kernel_us / 1e3 / steps,
        "idle_ms_per_step": idle_us / 1e3 / steps,
        "kernel_launches_per_step": launches / steps,
        "graph_launches_per_step": graph_launches / steps,
    }


def profile_kernels(torch, one_step, steps, sync, graph_replayed):
    """The kernel, idle and launch fields from K steps run under torch.profiler after training. Profiler
    overhead on the host widens the gaps, so idle is an upper bound. A profiler that fails leaves the
    fields null with a notice rather than losing the run."""
    try:
        from torch.profiler import ProfilerActivity, profile
        sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for k in range(steps):
                one_step(k)
            sync()
        events = []
        for e in prof.events():
            on_device = e.device_type == torch.autograd.DeviceType.CUDA
            if on_device and getattr(e, "is_user_annotation", False):  # flagged since torch 2.x
                continue
            events.append((e.name, on_device, e.device_index, float(e.time_range.start), float(e.time_range.end)))
        if not any(e[1] for e in events):
            raise RuntimeError("the profiler recorded no device activity")
        return summarize_profile(events, steps, graph_replayed)
    except Exception as e:  # noqa: BLE001 - any profiler failure only costs the optional fields
        print(f"{PROG}: notice: {one_line(f'profiling failed ({type(e).__name__}: {e})')}; kernel fields left null",
              file=sys.stderr)
        return {}


# ---------------------------------------------------------------------------------------------- output

def three_digits(x):
    """x to 3 significant digits without an exponent: 12.4, 3.04, 0.0000400, 1230."""
    s = format(x, "#.3g")
    if "e" in s:
        exponent = int(s.split("e")[1])
        s = str(int(round(float(s)))) if exponent >= 0 else format(float(s), f".{2 - exponent}f")
    return s.rstrip(".")


class Timing:
    def __init__(self, epochs, quiet, train_examples):
        self.epochs, self.quiet, self.n = epochs, quiet, train_examples
        self.seconds, self.acc, self.steps, self.enqueue = [], [], [], []

    def epoch_done(self, epoch, seconds, acc, steps, enqueue):
        self.seconds.append(seconds)
        self.acc.append(acc)
        self.steps.append(steps)
        self.enqueue.append(enqueue)
        if not self.quiet:
            print(f"epoch {epoch + 1}/{self.epochs}: test acc {acc:.3f}, {three_digits(seconds)} s "
                  f"({self.n / seconds:.0f} examples/s)", file=sys.stderr, flush=True)

    def timed(self):
        # The first epoch carries one-off costs (allocator growth, cuDNN/cuBLAS set-up, lazy module
        # loading); with at least 3 epochs it is left out of the mean so the rest is the steady state.
        return list(range(1, len(self.seconds))) if len(self.seconds) >= 3 else list(range(len(self.seconds)))

    def note(self):
        if len(self.seconds) >= 3:
            return (f"mean of the training passes of epochs 2..{len(self.seconds)} (the first is a warm-up); "
                    "evaluation excluded, every device synchronised at the end of the pass")
        return "mean of the training passes of all epochs; evaluation excluded, devices synchronised at the end"

    def seconds_per_epoch(self):
        idx = self.timed()
        return sum(self.seconds[i] for i in idx) / len(idx)

    def spread(self):
        """Half the range of the timed epochs' seconds over their mean, as lenet-bench's column "±"; None for
        one timed epoch."""
        times = [self.seconds[i] for i in self.timed()]
        if len(times) < 2 or sum(times) <= 0:
            return None
        return (max(times) - min(times)) / 2 / (sum(times) / len(times))

    def enqueue_ms_per_step(self):
        idx = self.timed()
        if any(self.enqueue[i] is None for i in idx):
            return None
        return 1e3 * sum(self.enqueue[i] for i in idx) / sum(self.steps[i] for i in idx)


def device_name(torch, devices):
    d = devices[0]
    if d.type == "cuda":
        return torch.cuda.get_device_name(d)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "cpu"


def write_json(path, obj):
    """obj in a new file renamed over `path` (over the file a symbolic link there names), so that a reader
    finds the old row or the new one, never a part of one. The new file has the old one's permission bits,
    else those a new file gets; a failed or interrupted write leaves no temporary file."""
    target = os.path.realpath(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".lenet_peer-", suffix=".tmp", dir=os.path.dirname(target))
        with os.fdopen(fd, "w") as f:
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except FileNotFoundError:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.fchmod(f.fileno(), mode)
            json.dump(obj, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise DataError(f"{path}: cannot write ({e.strerror})")
    finally:  # a failed write or an interruption (Ctrl-C) before the rename
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def check_finite(torch, replicas, epoch, lr):
    """After each epoch, as lenet-bench does: a diverged run's times and accuracy would mean nothing."""
    if not all(bool(torch.isfinite(q).all()) for q in replicas[0]):
        raise DataError(f"the parameters became non-finite in epoch {epoch + 1}; try a smaller --lr (this run: {lr})")


def dump_params(torch, path, replicas):
    flat = [torch.cat([q.detach().cpu().reshape(-1) for q in p]) for p in replicas]
    diff = max((float((f - flat[0]).abs().max()) for f in flat[1:]), default=0.0)
    write_json(path, {
        "names": [n for n, _ in PARAM_SPECS],
        "shapes": [list(s) for _, s in PARAM_SPECS],
        "params": flat[0].tolist(),
        "replica_max_abs_diff": diff,
    })


# ------------------------------------------------------------------------------------------------ main

def choose_devices(torch, args):
    cuda = torch.cuda.is_available()
    visible = torch.cuda.device_count() if cuda else 0
    if args.variant == "graphs":
        if not cuda:
            raise UsageError("--variant graphs needs CUDA, and torch.cuda.is_available() is False here "
                             "(use --variant textbook)")
        n = 1 if args.num_gpus is None else args.num_gpus
        if n != 1:
            raise UsageError(f"--variant graphs --num-gpus {n}: this peer captures one graph on one GPU; "
                             "replicas share cuda:0 (use --num-gpus 1 --replicas R)")
    else:
        n = args.num_gpus if args.num_gpus is not None else max(visible, 1)
        if cuda and n > visible:
            raise UsageError(f"--num-gpus {n}: only {visible} CUDA device(s) visible")
    r = args.replicas if args.replicas is not None else n
    if r > args.batch_size:
        raise UsageError(f"{r} replicas is more than --batch-size {args.batch_size}")
    # Like the source text's try_gpu: without CUDA every requested device is the cpu.
    return [torch.device(f"cuda:{i % n}") if cuda else torch.device("cpu") for i in range(r)]


def main(argv):
    args = parse_args(argv)
    if sys.stdout is None:  # closed: the final line could not be written after the whole run
        raise DataError("stdout: closed, nothing can be written to it")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        raise DataError(f"PyTorch is not importable by {sys.executable} ({e}); install it for that Python "
                        "(Debian's /usr/bin/python3: `apt-get install python3-torch`)")
    devices = choose_devices(torch, args)
    if any(d.type == "cuda" for d in devices):
        # Full fp32 arithmetic, as lenet-train's cuDNN and cuBLAS calls use (no TF32), so the comparison is
        # of the same computation. PyTorch 2.9 replaced the allow_tf32 flags (which now warn) by
        # fp32_precision settings; one set or the other, never both.
        if hasattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision"):
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            torch.backends.cuda.matmul.fp32_precision = "ieee"
        else:
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False

    folder = resolve_data_dir(args.data_dir)
    train = load_split(torch, folder, "train", args.train_limit, "--train-limit", "training")
    test = load_split(torch, folder, "t10k", args.test_limit, "--test-limit", "test")
    data = (train[0], train[1], test[0], test[1])
    timing = Timing(args.epochs, args.quiet, train[0].shape[0])

    names = [str(d) for d in devices]

    def row(prof):
        spe = timing.seconds_per_epoch()
        return {
            "name": f"pytorch-{args.variant} R={len(devices)}",
            "impl": f"pytorch-{args.variant}",
            "mode": args.variant,
            "replicas": len(devices),
            "devices": names,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "epochs": args.epochs,
            "train_examples": int(train[0].shape[0]),
            "seconds_per_epoch": spe,
            "timing_note": timing.note(),
            "examples_per_second": train[0].shape[0] / spe,
            "kernel_ms_per_step": prof.get("kernel_ms_per_step"),
            "idle_ms_per_step": prof.get("idle_ms_per_step"),
            "host_enqueue_ms_per_step": timing.enqueue_ms_per_step(),
            "kernel_launches_per_step": prof.get("kernel_launches_per_step"),
            "graph_launches_per_step": prof.get("graph_launches_per_step"),
            "allreduce_ms_per_step": prof.get("allreduce_ms_per_step"),
            "test_acc": timing.acc[-1],
            "test_acc_per_epoch": timing.acc,
            "epoch_seconds": timing.seconds,
            "seconds_per_epoch_spread": timing.spread(),
            "torch_version": str(torch.__version__),
            "device_name": device_name(torch, devices),
        }

    def trained(replicas):
        # Before the optional profiling steps, which move the parameters on. The row without the profile's
        # fields is written now, so a profiler that crashes or hangs the process loses only those.
        if args.dump_params:
            dump_params(torch, args.dump_params, replicas)
        if args.json:
            write_json(args.json, row({}))

    if args.variant == "textbook":
        prof = run_textbook(torch, F, args, devices, data, timing, trained)
    else:
        # torch.cuda.graph captures on the current device's stream: make the replicas' device current.
        with torch.cuda.device(devices[0]):
            prof = run_graphs(torch, F, args, devices[0], len(devices), data, timing, trained)

    if args.json:
        write_json(args.json, row(prof))
    spe = three_digits(timing.seconds_per_epoch())
    print_out(f"test acc: {timing.acc[-1]:.2f}, {spe} sec/epoch on [{', '.join(names)}]")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        fail(str(e), 2)
    except DataError as e:
        fail(str(e), 1)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except StdoutFailed as e:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        fail(str(e), 1)
    except MemoryError:
        fail("out of host memory; try a smaller --batch-size or fewer --replicas", 1)
    except RuntimeError as e:  # PyTorch's errors, CUDA's (torch.AcceleratorError) and its allocators' included
        first = (str(e).splitlines() or [type(e).__name__])[0]  # CUDA's add lines of advice on debugging
        if "out of memory" in str(e) or "can't allocate memory" in str(e):
            fail(f"out of memory ({first}); try a smaller --batch-size or fewer --replicas", 1)
        fail(f"PyTorch: {first}", 1)
