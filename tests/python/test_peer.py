"""profiling/peers/lenet_peer.py on tiny synthetic IDX files.

The central claim of the source text is that R replicas train exactly the network one replica trains:
here R = 1, 3 and 4 (4 leaves a replica without rows in the last, partial minibatch) end with the same
parameters up to float32 rounding. Skipped where torch is not importable; the GPU cases where CUDA is
absent. Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import contextlib
import ctypes
import importlib.util
import io
import json
import math
import os
import re
import resource
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from safetensors_file import load_file, save_file
from synthetic_data import idx_images, idx_labels, write_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "profiling", "peers", "lenet_peer.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
LENET_TRAIN = os.environ.get("LENET_TRAIN") or os.path.join(ROOT, "build", "engine", "lenet-train")

ROW_FIELDS = {
    "name", "impl", "mode", "replicas", "devices", "batch_size", "lr", "epochs", "seconds_per_epoch",
    "examples_per_second", "kernel_ms_per_step", "idle_ms_per_step", "host_enqueue_ms_per_step",
    "kernel_launches_per_step", "graph_launches_per_step", "allreduce_ms_per_step", "test_acc",
    "test_acc_per_epoch", "epoch_seconds", "torch_version", "device_name", "timing_note", "train_examples",
    "seconds_per_epoch_spread",
}
FINAL_LINE = re.compile(r"^test acc: \d\.\d\d, \d[0-9.]* sec/epoch on \[(.*)\]$")
N_PARAMS = 129068
TRAIN, TEST, BATCH = 69, 32, 16  # 69 = 4 * 16 + 5: a partial last minibatch of 5 rows


def load_peer_module():
    spec = importlib.util.spec_from_file_location("lenet_peer", PEER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_peer(*args, env=None, limit_file_size=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_size, limit_file_size))
    return subprocess.run([sys.executable, PEER, *args], capture_output=True, text=True, timeout=600,
                          env=env, preexec_fn=None if limit_file_size is None else limit)


def distance(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def init_params(seed):
    """The flat initial parameters the peer draws from `seed` (torch needed)."""
    import torch
    return torch.cat([p.reshape(-1) for p in load_peer_module().init_params(torch, seed)]).tolist()


class PeerHelpers(unittest.TestCase):
    """Pure-Python parts, no torch needed."""

    @classmethod
    def setUpClass(cls):
        cls.peer = load_peer_module()

    def test_shard_rows_like_torch_chunk_with_empty_replicas(self):
        self.assertEqual(self.peer.shard_rows(5, 4), [(0, 2), (2, 2), (4, 1), (5, 0)])
        self.assertEqual(self.peer.shard_rows(256, 3), [(0, 86), (86, 86), (172, 84)])
        self.assertEqual(self.peer.shard_rows(96, 1), [(0, 96)])
        for rows in range(1, 40):
            for r in range(1, rows + 1):
                shards = self.peer.shard_rows(rows, r)
                self.assertEqual(len(shards), r)
                self.assertEqual(sum(c for _, c in shards), rows)
                pos = 0
                for first, count in shards:
                    self.assertEqual(first, pos)
                    pos += count

    def test_three_significant_digits(self):
        f = self.peer.three_digits
        self.assertEqual(f(3.04), "3.04")
        self.assertEqual(f(3.0), "3.00")
        self.assertEqual(f(15.46), "15.5")
        self.assertEqual(f(0.051234), "0.0512")
        self.assertEqual(f(123.4), "123")
        self.assertEqual(f(1234.0), "1230")
        self.assertEqual(f(0.00004), "0.0000400")  # not "0"

    def test_profile_summary(self):
        # Two steps on device 0: kernels [0,10] [5,12] (overlap) [20,30], plus a copy and an annotation
        # that must not count; device 1: one kernel. Host: three kernel launches and one graph launch.
        events = [
            ("cudaLaunchKernel", False, -1, 0, 1), ("cudaLaunchKernel", False, -1, 2, 3),
            ("cuLaunchKernel", False, -1, 4, 5), ("cudaGraphLaunch", False, -1, 6, 7),
            ("my_range", False, -1, 0, 40),
            ("k1", True, 0, 0, 10), ("k2", True, 0, 5, 12), ("k3", True, 0, 20, 30),
            ("Memcpy DtoD (Device -> Device)", True, 0, 12, 20), ("my_range", True, 0, 0, 40),
            ("k4", True, 1, 100, 104),
        ]
        for graph_replayed, launches in ((True, 3 / 2), (False, 4 / 2)):
            with self.subTest(graph_replayed=graph_replayed):
                s = self.peer.summarize_profile(events, 2, graph_replayed)
                self.assertAlmostEqual(s["kernel_ms_per_step"], (10 + 7 + 10 + 4) / 1e3 / 2)
                self.assertAlmostEqual(s["idle_ms_per_step"], (30 - 22) / 1e3 / 2)  # device 1 has no gap
                # With a graph, the host's launch calls; without, every kernel recorded.
                self.assertAlmostEqual(s["kernel_launches_per_step"], launches)
                self.assertAlmostEqual(s["graph_launches_per_step"], 1 / 2)
        # A kernel inside another's span adds no idle time (the span ends at the latest end, not the last start's).
        nested = [("a", True, 0, 0, 30), ("b", True, 0, 5, 10)]
        self.assertEqual(self.peer.summarize_profile(nested, 1, False)["idle_ms_per_step"], 0)

    def test_one_line_escapes_controls(self):
        self.assertEqual(self.peer.one_line("a\nb\x1b[2Jc\x7fd\u0085e\u00e9"), "a\\nb\\x1b[2Jc\\x7fd\\xc2\\x85e\u00e9")

    def test_spread_needs_two_timed_epochs(self):
        t = self.peer.Timing(3, True, 10)
        t.epoch_done(0, 9.0, 0.5, 1, None)
        self.assertIsNone(t.spread())  # one epoch timed: no spread, not 0
        t.epoch_done(1, 2.0, 0.5, 1, None)
        t.epoch_done(2, 4.0, 0.5, 1, None)
        self.assertAlmostEqual(t.spread(), (4 - 2) / 2 / 3)  # the first epoch left out

    def test_ranges_include_their_ends(self):
        # As lenet-train and the README: up to 64 replicas and GPUs, as many replicas as rows, seeds from 0.
        for args in (["--replicas", "64", "--num-gpus", "64"], ["--replicas", "16", "--batch-size", "16"],
                     ["--seed", "0"], ["--seed", str(2 ** 40 - 1)]):
            with self.subTest(args=args):
                self.peer.parse_args(["--data-dir", "/nonexistent", *args])
        for args, said in ((["--seed", "-1"], "--seed -1: must be in 0..2^40-1"),
                           (["--batch-size", "0"], "--batch-size 0: must be from 1 to 2147483647"),
                           (["--replicas", "17", "--batch-size", "16"], "--replicas 17 is more than --batch-size 16")):
            with self.subTest(args=args):
                with self.assertRaises(self.peer.UsageError) as caught:
                    self.peer.parse_args(["--data-dir", "/nonexistent", *args])
                self.assertIn(said, str(caught.exception))

    def test_json_in_a_folder_that_is_a_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            not_a_folder = os.path.join(tmp, "file")
            open(not_a_folder, "w").close()
            with self.assertRaises(self.peer.DataError) as caught:
                self.peer.parse_args(["--json", os.path.join(not_a_folder, "r.json")])
            self.assertIn(f"folder {not_a_folder} does not exist or is not writable", str(caught.exception))

    def test_one_line_names_tab_and_carriage_return(self):
        # As lenet-train's one_line: \t, \r and \n by name, other controls as \xNN.
        self.assertEqual(self.peer.one_line("a\tb\rc\x0bd"), "a\\tb\\rc\\x0bd")

    def test_spellings_lenet_train_accepts(self):
        # lenet-train takes a leading +, a fraction without its integer part and an exponent.
        for args, field, value in ((["--epochs", "+2"], "epochs", 2), (["--seed", "+7"], "seed", 7),
                                   (["--lr", ".5"], "lr", 0.5), (["--lr", "2e-1"], "lr", 0.2),
                                   (["--lr", "+0.25"], "lr", 0.25), (["--lr", "5.E-1"], "lr", 0.5)):
            with self.subTest(args=args):
                a = self.peer.parse_args(["--data-dir", "/nonexistent", *args])
                self.assertEqual(getattr(a, field), value)

    def test_each_flag_of_a_pair_is_checked(self):
        # --test-limit as --train-limit, --dump-params as --json.
        for args, said in ((["--test-limit", "0"], "--test-limit 0: must be at least 1"),
                           (["--test-limit", "-2"], "--test-limit -2: must be at least 1"),
                           (["--dump-params", "-"], "--dump-params -: a file, not stdout")):
            with self.subTest(args=args):
                with self.assertRaises(self.peer.UsageError) as caught:
                    self.peer.parse_args(["--data-dir", "/nonexistent", *args])
                self.assertIn(said, str(caught.exception))

    def test_progress_line_counts_epochs_from_one(self):
        t = self.peer.Timing(2, False, 100)
        with contextlib.redirect_stderr(io.StringIO()) as err:
            t.epoch_done(0, 2.0, 0.25, 1, None)
            t.epoch_done(1, 0.5, 0.5, 1, None)
        self.assertEqual(err.getvalue(), "epoch 1/2: test acc 0.250, 2.00 s (50 examples/s)\n"
                                         "epoch 2/2: test acc 0.500, 0.500 s (200 examples/s)\n")

    def test_host_enqueue_is_per_step_in_milliseconds(self):
        t = self.peer.Timing(3, True, 10)
        for epoch, steps, enqueue in ((0, 5, 0.5), (1, 5, 0.010), (2, 3, 0.006)):
            t.epoch_done(epoch, 1.0, 0.5, steps, enqueue)
        self.assertAlmostEqual(t.enqueue_ms_per_step(), 1e3 * (0.010 + 0.006) / (5 + 3))  # the first epoch left out

    def test_a_new_json_file_gets_the_bits_the_umask_leaves(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            old = os.umask(0o027)
            try:
                self.peer.write_json(path, {"a": 1})
            finally:
                os.umask(old)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
            with open(path) as f:
                self.assertEqual(f.read(), '{\n "a": 1\n}\n')  # ends with a newline, as a text file does

    def test_an_interrupted_json_write_leaves_the_old_row_and_no_temporary_file(self):
        class Interrupting(dict):  # json.dump with an indent asks a dict for its items
            def items(self):
                raise KeyboardInterrupt
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            self.peer.write_json(path, {"old": 1})
            for obj, caught in ((Interrupting(a=1), KeyboardInterrupt), ({"a": object()}, TypeError)):
                with self.subTest(caught=caught.__name__):
                    with self.assertRaises(caught):
                        self.peer.write_json(path, obj)
                    self.assertEqual(os.listdir(tmp), ["r.json"])
                    with open(path) as f:
                        self.assertEqual(json.load(f), {"old": 1})

    def test_the_row_and_the_parameters_in_one_file_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            for other in (path, os.path.join(tmp, ".", "r.json")):  # no file there yet
                with self.subTest(other=other):
                    with self.assertRaises(self.peer.UsageError) as caught:
                        self.peer.parse_args(["--data-dir", "/nonexistent", "--json", path, "--dump-params", other])
                    self.assertEqual(str(caught.exception), f"--json and --dump-params name the same file {path}")
            with open(path, "w") as f:
                f.write("{}\n")
            os.symlink(path, os.path.join(tmp, "link.json"))
            os.link(path, os.path.join(tmp, "hard.json"))
            for other in (path, os.path.join(tmp, "link.json"), os.path.join(tmp, "hard.json")):
                with self.subTest(other=other):
                    with self.assertRaises(self.peer.UsageError) as caught:
                        self.peer.parse_args(["--data-dir", "/nonexistent", "--json", path, "--dump-params", other])
                    self.assertEqual(str(caught.exception), f"--json and --dump-params name the same file {path}")
            self.assertEqual(self.peer.parse_args(["--data-dir", "/nonexistent", "--json", path, "--dump-params",
                                                   os.path.join(tmp, "p.json")]).json, path)


class WithDataset(unittest.TestCase):
    """A class-wide temporary folder holding the tiny IDX data set."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        write_dataset(cls.data, TRAIN, TEST)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


@unittest.skipUnless(HAVE_TORCH, "torch is not importable (apt-get install python3-torch)")
class PeerTextbookCpu(WithDataset):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.runs = {}
        for r in (1, 3, 4):
            js = os.path.join(cls.tmp.name, f"row{r}.json")
            dump = os.path.join(cls.tmp.name, f"params{r}.json")
            # cpu forced even on a CUDA machine: CUDA_VISIBLE_DEVICES="" makes the textbook variant fall back.
            env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
            proc = run_peer("--data-dir", cls.data, "--batch-size", str(BATCH), "--epochs", "2", "--seed", "5",
                            "--replicas", str(r), "--json", js, "--dump-params", dump, "--quiet",
                            "--profile-steps", "2", env=env)
            row = params = None
            if proc.returncode == 0:
                with open(js) as f:
                    row = json.load(f)
                with open(dump) as f:
                    params = json.load(f)
            cls.runs[r] = (proc, row, params)

    def test_runs_and_final_line(self):
        for r, (proc, _, _) in self.runs.items():
            with self.subTest(replicas=r):
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(proc.stderr, "")  # --quiet
                last = proc.stdout.strip().splitlines()[-1]
                m = FINAL_LINE.match(last)
                self.assertIsNotNone(m, last)
                self.assertEqual(m.group(1), ", ".join(["cpu"] * r))

    def test_json_row(self):
        for r, (proc, row, _) in self.runs.items():
            with self.subTest(replicas=r):
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(set(row), ROW_FIELDS)
                self.assertEqual(row["name"], f"pytorch-textbook R={r}")
                self.assertEqual(row["impl"], "pytorch-textbook")
                self.assertEqual(row["mode"], "textbook")
                self.assertEqual(row["replicas"], r)
                self.assertEqual(row["devices"], ["cpu"] * r)
                self.assertEqual((row["batch_size"], row["lr"], row["epochs"]), (BATCH, 0.2, 2))
                self.assertEqual(row["train_examples"], TRAIN)
                self.assertIsNone(row["graph_launches_per_step"])  # measured by --profile-steps, CUDA only
                self.assertEqual(len(row["epoch_seconds"]), 2)
                self.assertEqual(len(row["test_acc_per_epoch"]), 2)
                self.assertEqual(row["test_acc"], row["test_acc_per_epoch"][-1])
                # Fewer than 3 epochs: the mean of all of them.
                self.assertAlmostEqual(row["seconds_per_epoch"], sum(row["epoch_seconds"]) / 2)
                a, b = row["epoch_seconds"]
                self.assertAlmostEqual(row["seconds_per_epoch_spread"], abs(a - b) / (a + b))
                self.assertAlmostEqual(row["examples_per_second"], TRAIN / row["seconds_per_epoch"])
                self.assertIn("evaluation excluded", row["timing_note"])
                for k in ("kernel_ms_per_step", "idle_ms_per_step", "host_enqueue_ms_per_step",
                          "kernel_launches_per_step"):
                    self.assertIsNone(row[k], k)  # nothing to launch on the cpu
                self.assertIsInstance(row["allreduce_ms_per_step"], float)
                if r == 1:  # nothing to reduce
                    self.assertEqual(row["allreduce_ms_per_step"], 0.0)
                else:
                    self.assertGreater(row["allreduce_ms_per_step"], 0.0)
                for a in row["test_acc_per_epoch"]:
                    self.assertTrue(0 <= a <= 1)
                self.assertTrue(row["torch_version"])
                self.assertTrue(row["device_name"])

    def test_replicas_train_the_same_parameters(self):
        for r in (1, 3, 4):
            self.assertEqual(self.runs[r][0].returncode, 0, self.runs[r][0].stderr)
        one = self.runs[1][2]
        self.assertEqual(len(one["params"]), N_PARAMS)
        self.assertEqual(one["names"][0], "conv1.weight")
        # Training moved the parameters; the runs differ by far less than that move (float32 summation
        # order only), whatever the untouched initial values.
        moved = distance(init_params(5), one["params"])
        self.assertGreater(moved, 1e-3)
        for r in (3, 4):
            with self.subTest(replicas=r):
                other = self.runs[r][2]
                self.assertEqual(other["names"], one["names"])
                self.assertLess(distance(one["params"], other["params"]) / moved, 1e-4)
                # Every replica got the same summed gradient, so replicas never drift apart.
                self.assertEqual(other["replica_max_abs_diff"], 0.0)

    def test_longer_runs_exclude_the_first_epoch(self):
        js = os.path.join(self.tmp.name, "row-3ep.json")
        proc = run_peer("--data-dir", self.data, "--batch-size", "32", "--epochs", "3", "--json", js,
                        "--train-limit", "40", "--test-limit", "10", env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 3)  # one progress line per epoch
        with open(js) as f:
            row = json.load(f)
        self.assertAlmostEqual(row["seconds_per_epoch"], sum(row["epoch_seconds"][1:]) / 2)
        timed = row["epoch_seconds"][1:]
        self.assertAlmostEqual(row["seconds_per_epoch_spread"], (max(timed) - min(timed)) / 2 / row["seconds_per_epoch"])
        self.assertAlmostEqual(row["examples_per_second"], 40 / row["seconds_per_epoch"])
        self.assertIn("epochs 2..3", row["timing_note"])

    def test_a_lone_partial_minibatch_trains_and_limits_reach_the_set_size(self):
        dump = os.path.join(self.tmp.name, "partial.json")
        proc = run_peer("--data-dir", self.data, "--batch-size", "16", "--epochs", "1", "--seed", "3", "--quiet",
                        "--train-limit", "5", "--test-limit", str(TEST), "--dump-params", dump,
                        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(dump) as f:
            self.assertGreater(distance(init_params(3), json.load(f)["params"]), 0)

    def test_epoch_orders(self):
        import torch
        peer = load_peer_module()
        orders = [peer.epoch_perm(torch, 5, e, 50).tolist() for e in range(3)]
        for order in orders:
            self.assertEqual(sorted(order), list(range(50)))
        self.assertEqual(len({tuple(o) for o in orders}), 3, "each epoch has its own order")
        self.assertEqual(peer.epoch_perm(torch, 5, 1, 50).tolist(), orders[1], "the seed and epoch decide the order")
        self.assertNotEqual(peer.epoch_perm(torch, 6, 1, 50).tolist(), orders[1])

    def test_allreduce_time_is_in_milliseconds(self):
        import torch
        import torch.nn.functional as F
        peer = load_peer_module()
        cpu = torch.device("cpu")
        model = peer.Textbook(torch, F, peer.init_params(torch, 1), [cpu, cpu], 0.2)
        reduce = model.allreduce
        model.allreduce = lambda: (time.sleep(0.02), reduce())
        x, y = torch.rand(4, 1, 28, 28), torch.tensor([1, 2, 3, 4])
        ms = peer.time_allreduce(torch, F, model, [(x, y), (x, y)])
        self.assertTrue(20 <= ms < 2000, ms)

    def test_dumped_parameters_and_replica_difference(self):
        import torch
        peer = load_peer_module()
        a = peer.init_params(torch, 1)
        b = [t.clone() for t in a]
        b[7][3] += 0.5
        path = os.path.join(self.tmp.name, "two-replicas.json")
        peer.dump_params(torch, path, [a, b])
        with open(path) as f:
            dumped = json.load(f)
        self.assertEqual(dumped["replica_max_abs_diff"], 0.5)
        self.assertEqual(dumped["params"], torch.cat([t.reshape(-1) for t in a]).tolist())

    def test_one_non_finite_value_stops_the_run(self):
        import torch
        peer = load_peer_module()
        params = peer.init_params(torch, 1)
        peer.check_finite(torch, [params], 0, 0.2)
        params[1][0] = float("nan")  # conv1.bias alone
        with self.assertRaisesRegex(peer.DataError, "non-finite in epoch 1"):
            peer.check_finite(torch, [params], 0, 0.2)

    def test_row_is_written_before_profiling(self):
        # A profiler that kills the process loses only the profile's fields.
        js = os.path.join(self.tmp.name, "early.json")
        code = ("import importlib.util, os, sys\n"
                "spec = importlib.util.spec_from_file_location('lenet_peer', sys.argv[1])\n"
                "m = importlib.util.module_from_spec(spec)\n"
                "spec.loader.exec_module(m)\n"
                "m.time_allreduce = lambda *args: os._exit(3)\n"
                "m.main(sys.argv[2:])\n")
        proc = subprocess.run([sys.executable, "-c", code, PEER, "--data-dir", self.data, "--epochs", "1", "--quiet",
                               "--replicas", "2", "--profile-steps", "1", "--json", js], capture_output=True,
                              text=True, timeout=600, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(proc.returncode, 3, proc.stderr)
        with open(js) as f:
            row = json.load(f)
        self.assertEqual(row["epochs"], 1)
        self.assertIsNone(row["allreduce_ms_per_step"])

    def test_a_lone_replica_dumps_a_difference_of_zero(self):
        proc, _, params = self.runs[1]
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(params["replica_max_abs_diff"], 0.0)

    def test_replicas_without_rows_in_the_first_minibatch(self):
        # 5 rows for 8 replicas: replicas 5..7 get none in the very first step, yet contribute zeros.
        dumps = {}
        for r in (1, 8):
            dumps[r] = os.path.join(self.tmp.name, f"few-rows-{r}.json")
            proc = run_peer("--data-dir", self.data, "--batch-size", "16", "--epochs", "2", "--seed", "3", "--quiet",
                            "--train-limit", "5", "--test-limit", "4", "--replicas", str(r), "--dump-params", dumps[r],
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
            self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(dumps[1]) as f:
            one = json.load(f)
        with open(dumps[8]) as f:
            eight = json.load(f)
        self.assertEqual(eight["replica_max_abs_diff"], 0.0)
        moved = distance(init_params(3), one["params"])
        self.assertGreater(moved, 1e-3)
        self.assertLess(distance(one["params"], eight["params"]) / moved, 1e-4)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable (apt-get install python3-torch)")
class PeerTextbookRunOnCpu(unittest.TestCase):
    """The textbook variant's pieces called directly on tiny tensors: initial parameters, steps counted,
    the accuracy reported and the profile returned."""

    def test_initial_parameters_as_the_source_text(self):
        import torch
        peer = load_peer_module()
        params = peer.init_params(torch, 2)
        for (name, shape), p in zip(peer.PARAM_SPECS, params):
            with self.subTest(name=name):
                self.assertEqual(tuple(p.shape), shape)
                if name.endswith(".bias"):
                    self.assertTrue(torch.equal(p, torch.zeros(shape)))
        fc1 = params[4]  # 102400 draws of N(0, 0.01^2)
        self.assertLess(abs(float(fc1.mean())), 1e-4)
        self.assertTrue(0.0095 < float(fc1.std()) < 0.0105, float(fc1.std()))

    def run_textbook(self, peer, data, replicas=1, **flags):
        """run_textbook called directly on the cpu: (what it returns, each epoch's (acc, steps, enqueue))."""
        import argparse
        import torch
        import torch.nn.functional as F
        args = argparse.Namespace(**{"seed": 1, "lr": 0.2, "batch_size": 8, "epochs": 2, "profile_steps": 0, **flags})
        epochs = []

        class Recorder:
            def epoch_done(self, epoch, seconds, acc, steps, enqueue):
                epochs.append((acc, steps, enqueue))
        prof = peer.run_textbook(torch, F, args, [torch.device("cpu")] * replicas, data, Recorder(), lambda _: None)
        return prof, epochs

    def small_data(self, n, test):
        import torch
        gen = torch.Generator().manual_seed(8)
        pixels = lambda k: torch.randint(0, 256, (k, 1, 28, 28), generator=gen, dtype=torch.int64).to(torch.uint8)
        return pixels(n), torch.arange(n) % 10, pixels(test), torch.arange(test) % 10

    def test_steps_count_the_partial_minibatch(self):
        _, epochs = self.run_textbook(load_peer_module(), self.small_data(37, 4), batch_size=8)
        self.assertEqual([steps for _, steps, _ in epochs], [5, 5])  # 4 full minibatches and one of 5 rows
        self.assertEqual([enqueue for _, _, enqueue in epochs], [None, None])  # nothing enqueued on the cpu

    def test_accuracy_is_that_of_the_trained_parameters_on_the_scaled_test_set(self):
        import torch
        import torch.nn.functional as F
        peer = load_peer_module()
        # Weights of N(0, 0.2^2), which tell classes apart, and a learning rate too small to change a prediction.
        # A last bias too: without one the network is homogeneous, and a wrong input scale changes no prediction.
        weights = [t * 20 if n.endswith(".weight") else t
                   for (n, _), t in zip(peer.PARAM_SPECS, peer.init_params(torch, 6))]
        weights[7] = torch.arange(10.0) / 10
        peer.init_params = lambda torch, seed: [t.clone() for t in weights]
        train_x, train_y, test_x, _ = self.small_data(20, 40)
        with torch.no_grad():
            labels = peer.lenet(F, peer.to_float(test_x), weights).argmax(dim=1)
        self.assertGreaterEqual(len(set(labels.tolist())), 3, "the weights should tell classes apart")
        _, epochs = self.run_textbook(peer, (train_x, train_y, test_x, labels), lr=1e-20, batch_size=16)
        self.assertEqual([acc for acc, _, _ in epochs], [1.0, 1.0])

    def test_no_allreduce_time_without_profile_steps(self):
        for r in (1, 2):
            with self.subTest(replicas=r):
                prof, _ = self.run_textbook(load_peer_module(), self.small_data(20, 4), replicas=r, epochs=1)
                self.assertEqual(prof, {})  # the row's allreduce field stays null


@unittest.skipUnless(HAVE_TORCH, "torch is not importable (apt-get install python3-torch)")
@unittest.skipUnless(os.access(LENET_TRAIN, os.X_OK), f"no lenet-train at {LENET_TRAIN} (set LENET_TRAIN)")
class PeerComputesWhatLenetTrainComputes(unittest.TestCase):
    """The peer's network, input scaling, SGD step and accuracy against lenet-train's CPU backend, an
    implementation that shares no code with it: from the same weights, the same step (one minibatch
    holding the whole training set, so that their shuffles, which differ, cannot matter) up to float32
    rounding, and the same test accuracy. Agreement between the peer's replicas cannot show these: every
    replica would share a wrong layer."""

    @classmethod
    def setUpClass(cls):
        import torch
        import torch.nn.functional as F
        cls.torch, cls.F, cls.peer = torch, F, load_peer_module()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        write_dataset(cls.data, TRAIN, 50, gz_train=False)  # raw: lenet-train may be built without zlib

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def save(self, params, name):
        path = os.path.join(self.tmp.name, name)
        save_file({n: t for (n, _), t in zip(self.peer.PARAM_SPECS, params)}, path)
        return path

    def lenet_train(self, *args):
        proc = subprocess.run([LENET_TRAIN, "--backend", "cpu", "--quiet", "--data-dir", self.data, *args],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def test_one_step_equals_lenet_train_step(self):
        torch, peer = self.torch, self.peer
        start = peer.init_params(torch, 5)
        saved = os.path.join(self.tmp.name, "step.safetensors")
        self.lenet_train("--load", self.save(start, "start.safetensors"), "--epochs", "1", "--batch-size", str(TRAIN),
                         "--lr", "0.2", "--save", saved)
        x, y = peer.load_split(torch, self.data, "train", None, "--train-limit", "training")
        model = peer.Textbook(torch, self.F, start, [torch.device("cpu")], 0.2)
        model.step(peer.to_float(x), y)
        got = load_file(saved)
        for (name, _), before, want in zip(peer.PARAM_SPECS, start, model.replicas[0]):
            step_want, step_got = want.detach() - before, got[name] - before
            self.assertGreater(step_want.norm().item(), 0, name)
            rel = ((step_got - step_want).norm() / step_want.norm()).item()
            self.assertLess(rel, 1e-4, f"{name}: the peer's step differs from lenet-train's by {rel:.2e} (relative)")

    def test_test_accuracy_equals_lenet_train_accuracy(self):
        torch, peer = self.torch, self.peer
        # Weights 20 times the peer's initial ones, N(0, 0.2^2): predictions of several classes.
        weights = [t * 20 if n.endswith(".weight") else t
                   for (n, _), t in zip(peer.PARAM_SPECS, peer.init_params(torch, 6))]
        x, _ = peer.load_split(torch, self.data, "t10k", None, "--test-limit", "test")
        with torch.no_grad():
            labels = peer.lenet(self.F, peer.to_float(x), weights).argmax(dim=1)
        self.assertGreaterEqual(len(set(labels.tolist())), 3, "the weights should tell classes apart")
        labels[:5] = (labels[:5] + 1) % 10  # 45 of 50 right, if both compute the same network
        with open(os.path.join(self.data, "t10k-labels-idx1-ubyte"), "wb") as f:
            f.write(idx_labels(labels.tolist()))
        out = self.lenet_train("--load", self.save(weights, "wide.safetensors"), "--epochs", "0")
        self.assertEqual(out.strip(), "test acc: 0.90, no training on [cpu]")
        self.assertEqual(peer.evaluate(torch, self.F, weights, x, labels, torch.device("cpu"), 7, False), 0.9)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable (apt-get install python3-torch)")
class PeerGraphsStepOnCpu(unittest.TestCase):
    """The graphs variant's step run eagerly on the cpu, without capture: the device-side step counter,
    the padded permutation and the masked partial minibatch train what the textbook step trains."""

    def test_masked_step_equals_textbook_step(self):
        import torch
        import torch.nn.functional as F
        peer = load_peer_module()
        gen = torch.Generator().manual_seed(3)
        n, batch = 37, 8  # 5 steps, the last of 5 rows
        x = torch.randint(0, 256, (n, 1, 28, 28), generator=gen, dtype=torch.int64).to(torch.uint8)
        y = torch.randint(0, 10, (n,), generator=gen)
        cpu = torch.device("cpu")
        init = peer.init_params(torch, 11)
        textbook = peer.Textbook(torch, F, init, [cpu], 0.2)
        graphs = {r: peer.Graphs(torch, F, init, cpu, r, 0.2, batch, x, y) for r in (1, 3)}
        xf = peer.to_float(x)
        for epoch in range(2):
            perm = peer.epoch_perm(torch, 11, epoch, n)
            for s in range(0, n, batch):
                idx = perm[s:s + batch]
                textbook.step(xf[idx], y[idx])
            for g in graphs.values():
                g.start_epoch(perm)
                for _ in range(g.steps_per_epoch):
                    g._step()
                self.assertEqual(int(g.step_no), 5)
        flat = lambda ps: torch.cat([p.detach().reshape(-1) for p in ps])
        ref = flat(textbook.replicas[0])
        self.assertGreater(float((ref - flat(init)).norm() / ref.norm()), 1e-3)
        for r, g in graphs.items():
            with self.subTest(replicas=r):
                got = flat(g.replicas[0])
                self.assertLess(float((got - ref).norm() / ref.norm()), 1e-5)
                for other in g.replicas[1:]:
                    self.assertTrue(torch.equal(flat(other), got))

    def test_warm_up_stays_in_an_epoch_of_one_step(self):
        import torch
        import torch.nn.functional as F
        peer = load_peer_module()
        gen = torch.Generator().manual_seed(4)
        x = torch.randint(0, 256, (5, 1, 28, 28), generator=gen, dtype=torch.int64).to(torch.uint8)
        g = peer.Graphs(torch, F, peer.init_params(torch, 1), torch.device("cpu"), 2, 0.2, 8, x,
                        torch.randint(0, 10, (5,), generator=gen))
        g.warm_up()  # the permutation has rows for one step only
        self.assertEqual(int(g.step_no), 1)


class PeerErrors(WithDataset):
    """Usage errors are found before torch is imported; data errors need torch to get that far."""


    def assert_one_line(self, proc, status):
        self.assertEqual(proc.returncode, status, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("lenet_peer: "), lines[0])
        self.assertNotIn("Traceback", proc.stderr)
        return lines[0]

    def test_usage_errors(self):
        cases = [
            ["--batch-size", "0"], ["--batch-size", "-3"], ["--lr", "0"], ["--lr", "-0.1"], ["--lr", "nan"],
            ["--lr", "inf"], ["--replicas", "0"], ["--replicas", "17", "--batch-size", "16"], ["--epochs", "0"],
            ["--num-gpus", "0"], ["--bogus"], ["--batch-size", "many"], ["--variant", "fast"],
            ["--train-limit", "0"], ["--lr", "1e39"], ["--lr", "1e-50"], ["--json", ""], ["--dump-params", ""],
            ["--seed", str(2 ** 40)],
            ["--num-gpus", "1000000000"],  # refused before a list of that many devices is made
            ["--replicas", "65", "--batch-size", "256"], ["--batch-size", str(2 ** 31)], ["--json", "-"],
            ["--epochs", str(2 ** 31)], ["--profile-steps", str(2 ** 31)], ["--profile-steps", "-1"],  # lenet-train's
        ]
        for args in cases:
            with self.subTest(args=args):
                self.assert_one_line(run_peer("--data-dir", self.data, *args), 2)
        # The value as typed, not as Python's float prints it.
        self.assertIn("--lr 0: must be", self.assert_one_line(run_peer("--data-dir", self.data, "--lr", "0"), 2))
        for lr in ("fast", " 0.2", "0.2 ", "1_0", "\u0660.\u0662", "0x1p-3"):  # "1_0" would be 10 to float()
            self.assertIn(f"--lr {lr}: must be", self.assert_one_line(run_peer("--data-dir", self.data, "--lr", lr), 2))
        self.assertIn("--lr: empty value", self.assert_one_line(run_peer("--data-dir", self.data, "--lr", ""), 2))
        # Integers as lenet-train reads them, not Python's int() spellings.
        for value in ("1_0", " 2", "02", "\u0662", "0x2"):
            self.assertIn(f"argument --epochs: {value} is not a decimal integer",
                          self.assert_one_line(run_peer("--data-dir", self.data, "--epochs", value), 2))
        self.assertIn("argument --epochs: empty value", self.assert_one_line(run_peer("--data-dir", self.data, "--epochs", ""), 2))
        # As lenet-train: a flag given twice (argparse would keep the last) or abbreviated is refused.
        for args, said in ((["--epochs", "1", "--epochs=2"], "--epochs: given more than once"),
                           (["--quiet", "--quiet"], "--quiet: given more than once"),
                           (["--epoch", "1"], "unrecognized arguments: --epoch 1")):
            self.assertIn(said, self.assert_one_line(run_peer("--data-dir", self.data, *args), 2))
        # Not the folder LENET_DATA_DIR or the default names (a missing one here: no training run if taken).
        line = self.assert_one_line(run_peer("--data-dir", "", env=dict(os.environ, LENET_DATA_DIR=self.tmp.name + "/none")), 2)
        self.assertIn("--data-dir: empty value", line)

    def test_output_files_it_cannot_replace(self):
        fifo = os.path.join(self.tmp.name, "pipe")
        os.mkfifo(fifo)
        for flag in ("--json", "--dump-params"):
            # A folder that takes no new file, found before the run for root too (access() lets root through).
            proc = ("cannot create a file in the folder /proc" if os.geteuid() == 0
                    else "does not exist or is not writable")
            for path, said in ((os.path.join(self.tmp.name, "none", "r.json"), "does not exist or is not writable"),
                               (fifo, "not a regular file"), ("/dev/null", "not a regular file"),
                               ("/proc/lenet-peer.json", f"{flag} /proc/lenet-peer.json: {proc}")):
                with self.subTest(flag=flag, path=path):
                    self.assertIn(said, self.assert_one_line(run_peer("--data-dir", self.data, flag, path), 1))
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))  # still there
        # A link naming no file is refused before training, not when the row is written after it.
        loop, dangling = os.path.join(self.tmp.name, "loop"), os.path.join(self.tmp.name, "dangling")
        os.symlink(loop, loop)
        os.symlink(os.path.join(self.tmp.name, "none"), dangling)
        for path in (loop, dangling):
            self.assertIn(f"--json {path}: a symbolic link naming no file",
                          self.assert_one_line(run_peer("--data-dir", self.data, "--json", path), 1))
        # A data file, in the form read, the other (a .gz beside a raw file), or through a link, is not replaced.
        labels = os.path.join(self.data, "t10k-labels-idx1-ubyte")  # raw here
        link = os.path.join(self.tmp.name, "labels.json")
        os.symlink(labels, link)
        with open(labels, "rb") as f:
            before = f.read()
        for flag in ("--json", "--dump-params"):
            for path, named in ((labels, labels), (labels + ".gz", labels + ".gz"), (link, labels)):
                with self.subTest(flag=flag, path=path):
                    self.assertIn(f"{flag} {path} names the data file {named}",
                                  self.assert_one_line(run_peer("--data-dir", self.data, flag, path), 2))
        with open(labels, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertFalse(os.path.exists(labels + ".gz"))
        out = os.path.join(self.tmp.name, "out")
        with open(out, "w") as f:
            proc = subprocess.run([sys.executable, PEER, "--data-dir", self.data, "--json", out], stdout=f,
                                  stderr=subprocess.PIPE, text=True, timeout=600)
        self.assertIn("the file stdout or stderr writes", self.assert_one_line(proc, 1))
        with open(out, "w") as f:  # the file stderr writes: the error lands in it
            proc = subprocess.run([sys.executable, PEER, "--data-dir", self.data, "--json", out],
                                  stdout=subprocess.PIPE, stderr=f, text=True, timeout=600)
        self.assertEqual(proc.returncode, 1)
        with open(out) as f:
            self.assertIn("the file stdout or stderr writes", f.read())

    def test_closed_stdout_or_stderr(self):
        # A closed stdout, which could not take the final line, is refused before the run; with a closed
        # stderr, an error is not written on stdout instead (print takes a stream of None as stdout).
        r = subprocess.run(["bash", "-c", 'exec "$0" "$1" --data-dir "$2" >&-', sys.executable, PEER, self.data],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(self.assert_one_line(r, 1), "lenet_peer: stdout: closed, nothing can be written to it")
        r = subprocess.run(["bash", "-c", 'exec "$0" "$1" --data-dir "$2" --epochs 0 2>&-', sys.executable, PEER, self.data],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual((r.returncode, r.stdout), (2, ""))

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_json_row_replaces_the_file_a_link_names_with_its_bits(self):
        # Through a symbolic link, a name as long as the folder takes (the temporary file's must fit too),
        # the old file's permission bits kept, and nothing else left in the folder.
        folder = os.path.join(self.tmp.name, "rows")
        os.mkdir(folder)
        target = os.path.join(folder, "c" * 250 + ".json")
        with open(target, "w") as f:
            f.write("{}\n")
        os.chmod(target, 0o640)
        link = os.path.join(folder, "link.json")
        os.symlink(os.path.basename(target), link)
        r = run_peer("--data-dir", self.data, "--epochs", "1", "--quiet", "--json", link,
                     env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.islink(link))
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o640)
        with open(target) as f:
            self.assertEqual(json.load(f)["name"], "pytorch-textbook R=1")
        self.assertEqual(sorted(os.listdir(folder)), sorted([os.path.basename(target), "link.json"]))

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_a_failed_json_write_leaves_the_old_row_and_no_temporary_file(self):
        folder = os.path.join(self.tmp.name, "limited")
        os.mkdir(folder)
        js = os.path.join(folder, "r.json")
        with open(js, "w") as f:
            f.write('{"old": 1}\n')
        # A file-size limit of 0 (the old file is there already): every write of a new file fails.
        r = run_peer("--data-dir", self.data, "--epochs", "1", "--quiet", "--json", js,
                     env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), limit_file_size=0)
        self.assertEqual(self.assert_one_line(r, 1), f"lenet_peer: {js}: cannot write (File too large)")
        self.assertEqual(os.listdir(folder), ["r.json"])
        with open(js) as f:
            self.assertEqual(f.read(), '{"old": 1}\n')

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_diverged_run_is_an_error(self):
        js = os.path.join(self.tmp.name, "diverged.json")
        line = self.assert_one_line(run_peer("--data-dir", self.data, "--batch-size", "32", "--epochs", "3",
                                             "--lr", "1e30", "--json", js, "--quiet"), 1)
        self.assertRegex(line, r"the parameters became non-finite in epoch \d; try a smaller --lr")
        self.assertFalse(os.path.exists(js))

    def run_with_failing_convolution(self, exception):
        """The peer run as a script, its convolution raising `exception` (Python source)."""
        code = ("import runpy, sys, torch.nn.functional as F\n"
                "def conv2d(*args, **kwargs):\n"
                f"    raise {exception}\n"
                "F.conv2d = conv2d\n"
                "sys.argv = sys.argv[1:]\n"
                "runpy.run_path(sys.argv[0], run_name='__main__')\n")
        return subprocess.run([sys.executable, "-c", code, PEER, "--data-dir", self.data, "--epochs", "1", "--quiet"],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_an_error_pytorch_raises_is_one_line(self):
        # As CUDA's errors fail: a first line, then advice.
        r = self.run_with_failing_convolution("RuntimeError('CUDA error: an illegal memory access was encountered\\n'"
                                              "'CUDA kernel errors might be asynchronously reported')")
        self.assertEqual(self.assert_one_line(r, 1),
                         "lenet_peer: PyTorch: CUDA error: an illegal memory access was encountered")
        # The CPU allocator's out of memory, as the CUDA one's, says what to shrink.
        r = self.run_with_failing_convolution("RuntimeError(\"[enforce fail at alloc_cpu.cpp:83] DefaultCPUAllocator: "
                                              "can't allocate memory: you tried to allocate 1 bytes\")")
        self.assertRegex(self.assert_one_line(r, 1), r"^lenet_peer: out of memory \(.*\); try a smaller --batch-size")
        self.assertEqual(self.assert_one_line(self.run_with_failing_convolution("KeyboardInterrupt()"), 130),
                         "lenet_peer: interrupted")

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_a_gz_name_on_a_file_that_is_not_gzip(self):
        bad = os.path.join(self.tmp.name, "not-gzip")
        write_dataset(bad, TRAIN, TEST, gz_train=False)
        os.rename(os.path.join(bad, "train-labels-idx1-ubyte"), os.path.join(bad, "train-labels-idx1-ubyte.gz"))
        line = self.assert_one_line(run_peer("--data-dir", bad, "--epochs", "1", "--quiet"), 1)
        self.assertIn("train-labels-idx1-ubyte.gz: named .gz but is not a gzip file", line)

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_missing_data_names_the_package(self):
        line = self.assert_one_line(run_peer("--data-dir", os.path.join(self.tmp.name, "none")), 1)
        self.assertIn("apt-get install dataset-fashion-mnist", line)
        # A newline or escape sequence in the name stays escaped on the one line, as lenet-train shows it.
        line = self.assert_one_line(run_peer("--data-dir", os.path.join(self.tmp.name, "no\nwhere\x1b[2J\x9b")), 1)
        self.assertIn("/no\\nwhere\\x1b[2J\\xc2\\x9b/train-images-idx3-ubyte", line)
        # A file of the data set that is there but not a regular file is not said to be missing.
        odd = os.path.join(self.tmp.name, "odd")
        shutil.copytree(self.data, odd)
        images = os.path.join(odd, "train-images-idx3-ubyte")
        for name in (images, images + ".gz"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(name)
        os.mkdir(images)
        self.assertEqual(self.assert_one_line(run_peer("--data-dir", odd), 1),
                         f"lenet_peer: {images}: not a regular file")

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_a_reader_that_has_gone_is_one_line(self):
        p = subprocess.Popen([sys.executable, PEER, "--data-dir", self.data, "--epochs", "1", "--quiet"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        p.stdout.close()  # before the peer writes its first line
        err = p.stderr.read()
        p.stderr.close()
        self.assertEqual(p.wait(timeout=600), 1, err)
        self.assertEqual(err, "lenet_peer: stdout: write failed (Broken pipe): its reader has gone\n")

    @unittest.skipUnless(HAVE_TORCH and os.path.exists("/dev/full"), "torch is not importable, or no /dev/full")
    def test_a_full_stdout_is_one_line(self):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, PEER, "--data-dir", self.data, "--epochs", "1", "--quiet"], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=600, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stderr, "lenet_peer: stdout: write failed (No space left on device)\n")

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_limit_above_the_data_set_is_a_usage_error(self):
        line = self.assert_one_line(run_peer("--data-dir", self.data, "--train-limit", str(TRAIN + 1)), 2)
        self.assertIn(f"--train-limit {TRAIN + 1}: the training set has only {TRAIN} examples", line)

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_corrupt_idx(self):
        bad = os.path.join(self.tmp.name, "bad")
        cases = {
            "wrong magic": (struct.pack(">IIII", 0x804, 2, 28, 28) + bytes(2 * 784), "bad magic"),
            "truncated": (idx_images([0] * 784, 2), "truncated"),
            "trailing bytes": (idx_images([0] * (3 * 784), 2), "unexpected bytes"),
            "wrong size": (struct.pack(">IIII", 0x803, 1, 32, 32) + bytes(1024), "expected 28x28"),
        }
        for what, (blob, expect) in cases.items():
            with self.subTest(what=what):
                write_dataset(bad, TRAIN, TEST, gz_train=False)
                with open(os.path.join(bad, "train-images-idx3-ubyte"), "wb") as f:
                    f.write(blob)
                line = self.assert_one_line(run_peer("--data-dir", bad), 1)
                self.assertIn(expect, line)
                self.assertIn("train-images-idx3-ubyte", line)
        with self.subTest(what="truncated gzip"):
            write_dataset(bad, TRAIN, TEST, gz_train=True)
            path = os.path.join(bad, "train-images-idx3-ubyte.gz")
            with open(path, "rb") as f:
                blob = f.read()
            with open(path, "wb") as f:
                f.write(blob[: len(blob) // 2])
            self.assertIn("gzip", self.assert_one_line(run_peer("--data-dir", bad), 1))
        with self.subTest(what="label out of range"):
            write_dataset(bad, TRAIN, TEST, gz_train=False)
            with open(os.path.join(bad, "train-labels-idx1-ubyte"), "wb") as f:
                f.write(idx_labels([1] * (TRAIN - 1) + [10]))
            self.assertIn("outside 0..9", self.assert_one_line(run_peer("--data-dir", bad), 1))

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_graphs_without_cuda(self):
        proc = run_peer("--variant", "graphs", "--data-dir", self.data,
                        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        line = self.assert_one_line(proc, 2)
        self.assertIn("CUDA", line)

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_replicas_the_devices_imply_above_the_batch_size(self):
        # No --replicas: one per device, 20 cpu "devices" here, more than the 16 rows of a minibatch.
        proc = run_peer("--data-dir", self.data, "--num-gpus", "20", "--batch-size", "16", "--epochs", "1", "--quiet",
                        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertIn("20 replicas is more than --batch-size 16", self.assert_one_line(proc, 2))

    def test_a_hard_link_to_a_data_file_is_not_an_output(self):
        labels = os.path.join(self.data, "t10k-labels-idx1-ubyte")
        hard = os.path.join(self.tmp.name, "hard-labels.json")
        os.link(labels, hard)
        with open(labels, "rb") as f:
            before = f.read()
        for flag in ("--json", "--dump-params"):
            with self.subTest(flag=flag):
                proc = run_peer("--data-dir", self.data, "--epochs", "1", "--quiet", flag, hard)
                self.assertIn(f"{flag} {hard} names the data file {labels}", self.assert_one_line(proc, 2))
        with open(hard, "rb") as f:
            self.assertEqual(f.read(), before)

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_the_raw_file_is_read_where_both_forms_are_there(self):
        both = os.path.join(self.tmp.name, "both")
        write_dataset(both, TRAIN, TEST, gz_train=False)
        with open(os.path.join(both, "train-images-idx3-ubyte.gz"), "wb") as f:
            f.write(b"not gzip")  # as lenet-train: the raw file first, the .gz one only without it
        proc = run_peer("--data-dir", both, "--epochs", "1", "--quiet", env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(proc.returncode, 0, proc.stderr)

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_idx_files_that_disagree_or_hold_nothing(self):
        bad = os.path.join(self.tmp.name, "disagree")
        images = os.path.join(bad, "train-images-idx3-ubyte")
        labels = os.path.join(bad, "train-labels-idx1-ubyte")
        cases = {
            "short header": (images, struct.pack(">III", 0x803, 2, 28)[:10], "truncated header (10 of 16 bytes)"),
            "28x32": (images, struct.pack(">IIII", 0x803, 1, 28, 32) + bytes(28 * 32),
                      "images are 28x32, expected 28x28"),
            "fewer labels": (labels, idx_labels([1] * (TRAIN - 1)),
                             f"{TRAIN} images but {labels} has {TRAIN - 1} labels"),
            "no examples": (None, None, "holds no examples"),
        }
        for what, (path, blob, said) in cases.items():
            with self.subTest(what=what):
                write_dataset(bad, TRAIN if path else 0, TEST, gz_train=False)
                if path:
                    with open(path, "wb") as f:
                        f.write(blob)
                proc = run_peer("--data-dir", bad, "--epochs", "1", "--quiet",
                                env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
                self.assertIn(said, self.assert_one_line(proc, 1))

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_host_memory_and_a_bare_runtime_error_are_one_line(self):
        self.assertEqual(self.assert_one_line(self.run_with_failing_convolution("MemoryError()"), 1),
                         "lenet_peer: out of host memory; try a smaller --batch-size or fewer --replicas")
        self.assertEqual(self.assert_one_line(self.run_with_failing_convolution("RuntimeError()"), 1),
                         "lenet_peer: PyTorch: RuntimeError")


def gpu_skip_reason():
    """Why the GPU tests skip here, or None where they run. As tests/gpu's rule, from the CUDA driver itself
    (torch counts no device also where CUDA fails to start): they skip where no driver answers (no
    libcuda.so.1, or cuInit's CUDA_ERROR_STUB_LIBRARY 34 or CUDA_ERROR_NO_DEVICE 100) and fail on any
    other error, or on a driver that counts no device. They also skip where torch is missing or built
    without CUDA; a torch that counts no device where the driver counts some fails them.
    LENET_GPU_REQUIRED=1, which profiling/gpu-check.sh sets, makes each skip a failure."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA device: no CUDA driver (libcuda.so.1)"
    rc = driver.cuInit(0)
    if rc in (34, 100):
        return f"no CUDA device: cuInit returned {rc}"
    count = ctypes.c_int(0)
    if rc != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        raise AssertionError(f"the CUDA driver does not start: cuInit returned {rc}, devices counted: {count.value}")
    if not HAVE_TORCH:
        return "no CUDA torch: torch is not importable"
    import torch
    if torch.version.cuda is None:
        return "no CUDA torch: torch is built without CUDA"
    if torch.cuda.device_count() == 0:
        raise AssertionError(f"the CUDA driver counts {count.value} device(s), torch {torch.__version__} none")
    return None


class PeerGpu(WithDataset):
    """Only where a GPU answers: the graphs variant trains what the textbook variant trains, with one and
    several replicas on one GPU, and the profiled fields are filled."""

    def setUp(self):
        if os.environ.get("LENET_PEER_GPU_ELSEWHERE") == "1":  # the test_python entry: test_python_gpu runs these
            self.skipTest("run by the CTest entry test_python_gpu")
        reason = gpu_skip_reason()
        if reason is not None:
            if os.environ.get("LENET_GPU_REQUIRED") == "1":
                self.fail("LENET_GPU_REQUIRED=1, but " + reason)
            self.skipTest(reason)
        super().setUp()

    def run_variant(self, variant, replicas, extra=()):
        js = os.path.join(self.tmp.name, f"{variant}-{replicas}.json")
        dump = os.path.join(self.tmp.name, f"{variant}-{replicas}-params.json")
        proc = run_peer("--variant", variant, "--num-gpus", "1", "--replicas", str(replicas), "--data-dir",
                        self.data, "--batch-size", str(BATCH), "--epochs", "2", "--seed", "5", "--json", js,
                        "--dump-params", dump, "--quiet", *extra)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        m = FINAL_LINE.match(proc.stdout.strip().splitlines()[-1])
        self.assertIsNotNone(m, proc.stdout)
        self.assertEqual(m.group(1), ", ".join(["cuda:0"] * replicas))
        with open(js) as f:
            row = json.load(f)
        with open(dump) as f:
            params = json.load(f)
        self.assertEqual(set(row), ROW_FIELDS)
        return row, params

    def test_graphs_match_textbook(self):
        _, reference = self.run_variant("textbook", 1)
        _, textbook3 = self.run_variant("textbook", 3)
        row, graphs1 = self.run_variant("graphs", 1, ["--profile-steps", "3"])
        _, graphs4 = self.run_variant("graphs", 4)
        self.assertEqual(row["graph_launches_per_step"], 1)
        self.assertIsNotNone(row["host_enqueue_ms_per_step"])
        moved = distance(init_params(5), reference["params"])
        self.assertGreater(moved, 1e-3)
        for name, p in (("textbook R=3", textbook3), ("graphs R=1", graphs1), ("graphs R=4", graphs4)):
            with self.subTest(run=name):
                self.assertLess(distance(reference["params"], p["params"]) / moved, 1e-4)
                self.assertEqual(p["replica_max_abs_diff"], 0.0)

    def test_textbook_profile_fields(self):
        row, _ = self.run_variant("textbook", 2, ["--profile-steps", "3"])
        self.assertEqual(row["graph_launches_per_step"], 0)
        for k in ("kernel_ms_per_step", "idle_ms_per_step", "host_enqueue_ms_per_step",
                  "kernel_launches_per_step", "allreduce_ms_per_step"):
            self.assertIsNotNone(row[k], k)
        self.assertGreater(row["kernel_launches_per_step"], 10)


if __name__ == "__main__":
    unittest.main()
