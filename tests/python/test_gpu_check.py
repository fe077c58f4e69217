"""profiling/gpu-check.sh's arguments: what it can check without a GPU. A run whose OUTDIR cannot hold
the log and results, or with an unknown phase, must stop at once (exit 2), before building anything, and
not spend a GPU session's minutes to keep nothing."""
import os
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "profiling", "gpu-check.sh")


def check(*args, env=None):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


class GpuCheckArguments(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def assert_refused(self, proc, said):
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
        self.assertIn(said, proc.stderr)

    def test_usage(self):
        self.assert_refused(check(), "usage: profiling/gpu-check.sh OUTDIR")
        self.assert_refused(check(""), "usage: profiling/gpu-check.sh OUTDIR")
        self.assert_refused(check("a", "b"), "usage: profiling/gpu-check.sh OUTDIR")
        self.assert_refused(check("--bogus"), "unknown option --bogus")
        proc = check("--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("LENET_CHECK_PHASES", proc.stdout)

    def test_outdir_that_cannot_be_written(self):
        afile = os.path.join(self.tmp.name, "afile")
        open(afile, "w").close()
        logdir = os.path.join(self.tmp.name, "logdir")
        os.makedirs(os.path.join(logdir, "log"))  # where the log file would go
        for outdir in (afile, os.path.join(afile, "sub"), logdir):
            with self.subTest(outdir=outdir):
                self.assert_refused(check(outdir), "cannot write into OUTDIR " + outdir)

    def test_unknown_phase_creates_nothing(self):
        outdir = os.path.join(self.tmp.name, "out")
        self.assert_refused(check(outdir, env={"LENET_CHECK_PHASES": "sanitizers bogus"}), "unknown phase 'bogus'")
        self.assertFalse(os.path.exists(outdir))


if __name__ == "__main__":
    unittest.main()
