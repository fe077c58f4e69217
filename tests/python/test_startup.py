"""profiling/startup.py: the table of start-up costs, on the lenet-train of this build (LENET_TRAIN) and a
small synthetic data set."""
import contextlib
import importlib.util
import io
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from synthetic_data import write_dataset

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "profiling" / "startup.py"
TRAIN = os.environ.get("LENET_TRAIN")


def startup(*args, data=None):
    env = dict(os.environ, LENET_DATA_DIR=data) if data else None
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


class Startup(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        write_dataset(cls.data, 64, 64, gz_train=False)  # a build without zlib reads it too

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @unittest.skipUnless(TRAIN, "LENET_TRAIN (the built lenet-train) not given")
    def test_a_row_per_command_with_ratios_to_the_first_program(self):
        r = startup("--runs", "1", f"a={TRAIN}", f"b={TRAIN}", data=self.data)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "| command | a s | a MB | b s | b MB | ratio |")
        rows = [line.split(" | ") for line in lines[2:]]
        self.assertEqual([row[0] for row in rows], ["| --help", "| usage error", "| --version", "| CPU epoch of 64"])
        for row in rows:
            self.assertGreater(float(row[1]), 0)
            self.assertGreater(int(row[2]), 0)  # peak resident MB
            self.assertTrue(row[5].startswith("1.00 : "), row)

    @unittest.skipUnless(TRAIN, "LENET_TRAIN (the built lenet-train) not given")
    def test_a_program_that_fails_stops_the_table(self):
        # /bin/true exits 0 where a usage error exits 2
        r = startup("--runs", "1", f"a={TRAIN}", "b=/bin/true", data=self.data)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "startup.py: /bin/true --epochs x: exit status 0, expected 2\n")

    def test_bad_arguments_are_one_line_and_status_2(self):
        not_a_program = ": expected LABEL=PROGRAM, an executable file\n"
        not_executable = os.path.join(self.tmp.name, "not-executable")  # S20
        with open(not_executable, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(not_executable, 0o644)
        for args, said in [(["x"], "startup.py: x" + not_a_program),
                           (["a=/nonexistent"], "startup.py: a=/nonexistent" + not_a_program),
                           ([f"a={not_executable}"], f"startup.py: a={not_executable}" + not_a_program),
                           (["--runs", "0", "a=/bin/true"], "startup.py: --runs: must be at least 1\n"),
                           (["--runs", "x", "a=/bin/true"],
                            "startup.py: argument --runs: invalid int value: 'x' (see --help)\n"),
                           ([], "startup.py: the following arguments are required: LABEL=PROGRAM (see --help)\n"),
                           (["--run", "2", "a=/bin/true"], "startup.py: unrecognized arguments: --run (see --help)\n")]:
            r = startup(*args)
            self.assertEqual((r.returncode, r.stderr, r.stdout), (2, said, ""), args)


class StartupTable(unittest.TestCase):
    def table(self, argv, seconds, rss_mb):
        """startup.main() with argv, its runs stood in for: each program's runs of a command take seconds[program][i]
        and peak at rss_mb[program][i] (i counts its runs of that command, the untimed one first). The lines
        printed and the commands run."""
        spec = importlib.util.spec_from_file_location("startup", SCRIPT)
        startup = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(startup)
        calls, clock = [], [0.0]

        class Proc:
            def __init__(self, argv, **kwargs):
                calls.append(argv)
                self.pid = len(calls)

        def wait4(pid, options):
            argv = calls[pid - 1]
            i = sum(c == argv for c in calls[:pid]) - 1
            clock[0] += seconds[argv[0]][i]
            status = (2 if argv[1:] == ["--epochs", "x"] else 0) << 8
            return pid, status, mock.Mock(ru_maxrss=rss_mb[argv[0]][i] * 1024)

        out = io.StringIO()
        with mock.patch.object(startup.subprocess, "Popen", Proc), mock.patch.object(startup.os, "wait4", wait4), \
                mock.patch.object(startup.os, "access", lambda path, mode: True), \
                mock.patch.object(startup.time, "perf_counter", lambda: clock[0]), \
                mock.patch.object(sys, "argv", ["startup.py"] + argv), \
                contextlib.redirect_stdout(out):
            startup.main()
        return out.getvalue().splitlines(), calls

    def test_medians_peaks_and_ratios(self):
        # Per program and command: the untimed run first (slow, large), then three timed runs.
        seconds = {"/a": [5.0, 0.1, 0.1, 0.1], "/b": [5.0, 0.2, 0.8, 0.2]}  # b: median 0.2, mean 0.4
        rss_mb = {"/a": [999, 300, 300, 300], "/b": [999, 150, 200, 150]}
        lines, calls = self.table(["--runs", "3", "a=/a", "b=/b"], seconds, rss_mb)
        self.assertEqual(lines[2:], ["| %s | 0.100 | 300 | 0.200 | 200 | 1.00 : 2.00 |" % name
                                     for name in ("--help", "usage error", "--version", "CPU epoch of 64")])
        self.assertEqual(len(calls), 4 * 2 * (1 + 3))  # an untimed run each, then the timed ones

    # Mutant IDs in comments (S20, ...): profiling/results/2026-12-05-cpu-2core/mutations-py.jsonl.
    def test_a_markdown_table_of_programs_taking_turns(self):  # S21, S22
        lines, calls = self.table(["--runs", "2", "a=/a", "b=/b"], {"/a": [0.1] * 3, "/b": [0.1] * 3},
                                  {"/a": [100] * 3, "/b": [100] * 3})
        self.assertEqual(lines[:2], ["| command | a s | a MB | b s | b MB | ratio |", "|---|---:|---:|---:|---:|---:|"])
        self.assertEqual([argv[0] for argv in calls[:6]], ["/a", "/b"] * 3)  # the untimed runs, then turns

    def test_ten_runs_by_default(self):  # S23
        lines, calls = self.table(["a=/a"], {"/a": [0.1] * 11}, {"/a": [100] * 11})
        self.assertEqual(len(calls), 4 * (1 + 10))


if __name__ == "__main__":
    unittest.main()
