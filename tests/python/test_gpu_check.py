"""profiling/gpu-check.sh without a GPU. Its arguments: a run whose OUTDIR cannot hold the log and
results, or with an unknown phase, must stop at once (exit 2), before building anything, and not spend a
GPU session's minutes to keep nothing. Its steps, with stand-ins for nvidia-smi, CMake, CTest,
compute-sanitizer and the programs: the time the GPU tests leave the sanitizer, and what the summary says
when the sanitizer refuses the device or finds errors, or a data file is missing."""
import datetime
import gzip
import json
import os
import re
import shutil
import stat
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


# Stand-ins: each logs its arguments (one line) to $STANDIN_LOG. cmake --build makes the two programs the
# check runs; compute-sanitizer runs its program after its own options (each with a value), or exits with
# $SANITIZER_EXIT where its arguments hold $SANITIZER_EXIT_ON; its --log-file holds $SANITIZER_SAYS where
# that is set, else an error summary of 0 errors. ctest --help names the one option the check looks for.
STANDINS = {
    "nvidia-smi": """case "$*" in
  *--query-gpu=name*) echo "NVIDIA H200" ;;
  *driver_version*) echo 580.0 ;;
  *compute_cap*) echo 9.0 ;;
  *compute_mode*) echo "${COMPUTE_MODE:-Default}" ;;
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
esac""",
    "nvcc": 'echo "Cuda compilation tools, release 13.0, V13.0.0"; echo "Build cuda_13.0"',
    "cmake": """echo "cmake $*" >>"$STANDIN_LOG"
[[ $1 == --version ]] && { echo "cmake version 3.31.6"; exit 0; }
if [[ $1 == --build ]]; then
  mkdir -p "$2/engine" "$2/tests"
  for p in engine/lenet-train tests/test_gpu_probe; do
    printf '#!/bin/bash\necho "%s $*" >>"$STANDIN_LOG"\n' "$p" >"$2/$p"
    chmod +x "$2/$p"
  done
fi""",
    "ctest": """[[ $1 == --help ]] && { echo "  --test-output-size-passed <size>"; exit 0; }
echo "ctest LENET_GPU_REQUIRED=${LENET_GPU_REQUIRED:-} $*" >>"$STANDIN_LOG"
""",
    "compute-sanitizer": """if [[ $1 == --help ]]; then
  echo "--report-api-errors --racecheck-detect-level --kernel-name"
  exit 0
fi
echo "compute-sanitizer $*" >>"$STANDIN_LOG"
if [[ -n ${SANITIZER_SAYS:-} ]]; then
  args=("$@")
  for ((i = 0; i < $#; i++)); do [[ ${args[i]} == --log-file ]] && echo "$SANITIZER_SAYS" >"${args[i + 1]}"; done
fi
[[ -n ${SANITIZER_EXIT:-} && "$*" == *${SANITIZER_EXIT_ON:-}* ]] && exit "$SANITIZER_EXIT"
while [[ $1 == -* ]]; do
  [[ $1 == --log-file && -z ${SANITIZER_SAYS:-} ]] && echo "========= ERROR SUMMARY: 0 errors" >"$2"
  [[ $1 == --*=* ]] && shift || shift 2
done
exec "$@"
""",
}


class GpuCheckSteps(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        # A tree of its own: the script builds into the folder above its own.
        os.makedirs(os.path.join(self.tmp, "tree", "profiling"))
        self.script = shutil.copy(SCRIPT, os.path.join(self.tmp, "tree", "profiling"))
        self.cuda = os.path.join(self.tmp, "cuda")
        os.makedirs(os.path.join(self.cuda, "bin"))
        for name, body in STANDINS.items():
            path = os.path.join(self.cuda, "bin", name)
            with open(path, "w") as f:
                f.write("#!/bin/bash\n" + body + "\n")
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        self.log = os.path.join(self.tmp, "standins.log")
        # The data set: three raw files and one compressed (the check takes either).
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte"):
            with open(os.path.join(self.data, name), "wb") as f:
                f.write(b"idx")
        with gzip.open(os.path.join(self.data, "t10k-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(b"idx")

    def run_check(self, budget, **env):
        out = os.path.join(self.tmp, "out")
        shutil.rmtree(out, ignore_errors=True)
        open(self.log, "w").close()
        proc = subprocess.run(
            ["bash", self.script, out], capture_output=True, text=True, timeout=120,
            env={**os.environ, "PATH": os.path.join(self.cuda, "bin") + ":" + os.environ["PATH"],
                 "CUDA_HOME": self.cuda, "STANDIN_LOG": self.log, "LENET_DATA_DIR": self.data,
                 "LENET_CHECK_PHASES": "gputests sanitizers", "LENET_CHECK_BUDGET": str(budget), **env})
        with open(os.path.join(out, "summary.md")) as f:
            summary = f.read()
        with open(self.log) as f:
            calls = f.read().splitlines()
        return proc, summary, calls

    def results(self, summary):
        return dict(re.findall(r"^\| (.+?) \| (.+) \|$", summary, re.M)[1:])

    def limits(self, stdout):  # each step's time limit, by name
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^=== (.+) \(limit (\d+)s\)", stdout, re.M)}

    def test_gpu_tests_leave_the_sanitizer_its_time(self):
        # 420 - 180 s, at most 240; 300 - 180 s, at least 120; 1000 - 180 s, at most 240 (G51)
        for budget, most in ((420, 240), (300, 120), (1000, 240)):
            with self.subTest(budget=budget):
                proc, summary, calls = self.run_check(budget)
                limit = self.limits(proc.stdout)["gpu tests"]
                self.assertLessEqual(limit, most)
                self.assertGreaterEqual(limit, most - 15)  # the seconds the steps before it took (a loaded machine)
                ctest = [c for c in calls if c.startswith("ctest ")]
                self.assertEqual(len(ctest), 1, calls)
                self.assertIn("LENET_GPU_REQUIRED=1 ", ctest[0])  # no device fails the tests
                self.assertIn("-L gpu -E ^test_cuda_accuracy$", ctest[0])
                self.assertIn("--test-output-size-passed 1000000", ctest[0])  # the JUnit file names each test

    def test_no_sanitizer_keeps_no_time_from_the_gpu_tests(self):
        os.remove(os.path.join(self.cuda, "bin", "compute-sanitizer"))
        path = [d for d in os.environ["PATH"].split(":") if not os.path.exists(os.path.join(d, "compute-sanitizer"))]
        proc, summary, _ = self.run_check(300, PATH=os.path.join(self.cuda, "bin") + ":" + ":".join(path))
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(self.results(summary)["compute-sanitizer"], "not found")
        self.assertGreater(self.limits(proc.stdout)["gpu tests"], 200)  # their 240 s, not the floor of 120

    def test_sanitizer_runs_with_each_tools_options(self):
        proc, summary, calls = self.run_check(420)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        results = self.results(summary)
        runs = ["sanitizer %s %s" % (tool, mode) for tool in ("memcheck", "racecheck") for mode in ("graph", "naive")]
        self.assertEqual({k: results.get(k) for k in ["sanitizer probe"] + runs},
                         dict.fromkeys(["sanitizer probe"] + runs, "ok"))
        sanitized = [c for c in calls if c.startswith("compute-sanitizer ")]
        self.assertEqual(len(sanitized), 5, calls)
        self.assertIn("test_gpu_probe --gtest_filter=CudaProbe.DeviceAnswersAndIsUsable", sanitized[0])
        self.assertIn("--error-exitcode 99", sanitized[0])  # G52: the probe's errors found are its failure
        for call in sanitized[1:]:
            self.assertIn("--error-exitcode 99", call)
            self.assertIn("lenet-train --backend cuda --mode", call)
            self.assertIn(" --num-gpus 1 --replicas 2 ", call)  # G54: two replicas sharing GPU 0
            self.assertEqual("--kernel-name kns=lenet" in call, "racecheck" in call, call)
        # Each run's program was started (the sanitizer ran it).
        self.assertEqual(sum(c.startswith("engine/lenet-train --backend cuda") for c in calls), 4, calls)
        self.assertIn("- exit status: 0 (every step passed)", summary)
        self.assertIn("- one GPU: peer copies", summary)

    def test_a_sanitizer_that_refuses_the_device_is_one_line_and_no_runs(self):
        proc, summary, calls = self.run_check(420, SANITIZER_EXIT="255", SANITIZER_EXIT_ON="test_gpu_probe")
        self.assertEqual(proc.returncode, 1)
        results = self.results(summary)
        self.assertRegex(results["sanitizer probe"], r"^failed \(exit 255\): compute-sanitizer or the GPU unusable")
        self.assertFalse([k for k in results if k.startswith("sanitizer ") and k != "sanitizer probe"], summary)
        self.assertEqual([c for c in calls if c.startswith("compute-sanitizer ")][1:], [])

    def test_a_device_not_supported_is_said_and_no_runs(self):
        # As on gVisor: the probe's report says so, and the test's allocation then fails.
        proc, summary, calls = self.run_check(420, SANITIZER_SAYS="========= Device not supported: 0",
                                              SANITIZER_EXIT="1", SANITIZER_EXIT_ON="test_gpu_probe")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("- exit status: 1 (see the table)", summary)
        self.assertEqual(self.results(summary)["sanitizer probe"],
                         "compute-sanitizer refuses the device here (========= Device not supported: 0); no runs")
        self.assertEqual([c for c in calls if c.startswith("compute-sanitizer ")][1:], [])

    def test_errors_found_are_told_from_a_failed_run(self):
        # The memcheck runs (the probe gives no --report-api-errors) find errors.
        proc, summary, _ = self.run_check(420, SANITIZER_EXIT="99",
                                          SANITIZER_EXIT_ON="memcheck --error-exitcode 99 --report-api-errors no")
        self.assertEqual(proc.returncode, 1)
        results = self.results(summary)
        self.assertEqual(results["sanitizer probe"], "ok")
        self.assertEqual(results["sanitizer memcheck graph"], "errors found (exit 99)")
        self.assertEqual(results["sanitizer memcheck naive"], "errors found (exit 99)")
        self.assertEqual(results["sanitizer racecheck graph"], "ok")

    # Mutant IDs in comments (G03, ...): profiling/results/2026-12-05-cpu-2core/mutations-py.jsonl.
    def test_default_phases(self):  # G03: an empty LENET_CHECK_PHASES is the default
        proc, summary, calls = self.run_check(420, LENET_CHECK_PHASES="", LENET_CHECK_SWEEP="0")
        steps = list(self.results(summary))
        for name in ("tests", "sanitizer probe", "sanitizer racecheck naive", "naive R=1", "graph R=2",
                     "lenet-bench", "cpu R=1"):
            self.assertIn(name, steps)
        self.assertNotIn("gpu tests", steps)
        self.assertNotIn("accuracy test", steps)
        self.assertFalse([s for s in steps if s.startswith("sweep ")], steps)

    def test_tests_run_one_at_a_time_unless_the_gpu_is_shared(self):
        # Exclusive_Process refuses a second process's context: the GPU tests run one at a time there.
        for mode, jobs in (("Default", "4"), ("Exclusive_Process", "1"), ("Prohibited", "1")):
            for phases in ("gputests", "tests"):
                with self.subTest(mode=mode, phases=phases):
                    proc, summary, calls = self.run_check(420, COMPUTE_MODE=mode, LENET_CHECK_PHASES=phases)
                    [ctest] = [c for c in calls if c.startswith("ctest ")]
                    self.assertIn(" -j %s " % jobs, ctest)
                    self.assertIn("compute mode %s (tests %s at a time)" % (mode, jobs), summary)

    def test_missing_or_broken_data_is_a_failed_step(self):
        proc, summary, _ = self.run_check(420)
        self.assertNotIn("data", self.results(summary))
        with open(os.path.join(self.tmp, "tree", "build-gpu", "fashion-mnist", "t10k-labels-idx1-ubyte"), "rb") as f:
            self.assertEqual(f.read(), b"idx")  # uncompressed into the build folder
        os.remove(os.path.join(self.data, "train-labels-idx1-ubyte"))
        with open(os.path.join(self.data, "t10k-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(b"not gzip")
        proc, summary, _ = self.run_check(420)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(self.results(summary)["data"], "missing or unreadable in %s: train-labels-idx1-ubyte "
                         "t10k-labels-idx1-ubyte.gz" % self.data)
        self.assertEqual(self.results(summary)["sanitizer memcheck graph"], "ok")  # the other steps still ran

    def test_tests_phase_replaces_gputests_and_accuracy(self):  # G15
        proc, summary, calls = self.run_check(420, LENET_CHECK_PHASES="tests gputests accuracy")
        ctest = [c for c in calls if c.startswith("ctest ")]
        self.assertEqual(len(ctest), 1, calls)
        self.assertNotIn("-L gpu", ctest[0])
        self.assertEqual(list(self.results(summary)), ["configure", "build", "version", "tests"])

    def test_a_spent_budget_skips_and_builds_nothing(self):  # G08, G09
        proc, summary, calls = self.run_check(3)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(self.results(summary), {"configure": "skipped (budget)"})
        self.assertEqual([c for c in calls if c.startswith("cmake -S")], [])

    def test_gpu_tests_get_at_least_120_s(self):  # G14: 250 - 180 s and 290 - 180 s are under the floor
        for budget in (250, 290):
            with self.subTest(budget=budget):
                proc, summary, calls = self.run_check(budget)
                self.assertEqual(self.limits(proc.stdout)["gpu tests"], 120)

    def test_ctest_stops_15_s_before_its_limit(self):  # G11
        t0 = datetime.datetime.now(datetime.timezone.utc)
        proc, summary, calls = self.run_check(420)
        took = (datetime.datetime.now(datetime.timezone.utc) - t0).total_seconds()
        limit = self.limits(proc.stdout)["gpu tests"]
        [ctest] = [c for c in calls if c.startswith("ctest ")]
        h, m, s = map(int, re.search(r"--stop-time (\d\d):(\d\d):(\d\d)", ctest).groups())
        stop = (h * 3600 + m * 60 + s - (t0.hour * 3600 + t0.minute * 60 + t0.second)) % 86400
        self.assertLessEqual(stop, limit - 15 + took + 1)  # the seconds the steps before it took
        self.assertGreaterEqual(stop, limit - 15 - 1)

    def test_probe_errors_found_still_runs_the_tools(self):  # G21, G22
        proc, summary, calls = self.run_check(420, SANITIZER_EXIT="99", SANITIZER_EXIT_ON="test_gpu_probe")
        self.assertEqual(proc.returncode, 1)
        results = self.results(summary)
        self.assertEqual(results["sanitizer probe"], "errors found (exit 99)")
        self.assertEqual(len([c for c in calls if c.startswith("compute-sanitizer ")]), 5, calls)
        self.assertEqual(results["sanitizer racecheck naive"], "ok")

    def test_device_not_supported_with_a_probe_that_passed_is_no_runs(self):  # G20
        proc, summary, calls = self.run_check(420, SANITIZER_SAYS="========= Device not supported: 0")
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(self.results(summary)["sanitizer probe"].startswith("compute-sanitizer refuses the device"))
        self.assertEqual([c for c in calls if c.startswith("compute-sanitizer ")][1:], [])

    def test_a_refusal_with_a_bar_keeps_the_table(self):  # G36
        proc, summary, calls = self.run_check(420, SANITIZER_SAYS="Device not supported | x",
                                              SANITIZER_EXIT="1", SANITIZER_EXIT_ON="test_gpu_probe")
        [row] = [l for l in summary.splitlines() if l.startswith("| sanitizer probe |")]
        self.assertEqual(row.count("|"), 3, row)

    def test_a_killed_run_is_timed_out(self):  # G10, G50: timeout's 124 and a kill's 137
        for code in ("124", "137"):
            with self.subTest(code=code):
                proc, summary, calls = self.run_check(420, SANITIZER_EXIT=code, SANITIZER_EXIT_ON="memcheck "
                                                      "--error-exitcode 99 --report-api-errors no")
                results = self.results(summary)
                self.assertEqual(results["sanitizer memcheck graph"], "timed out")
                self.assertEqual(results["sanitizer racecheck graph"], "ok")

    def test_sanitizer_runs_share_what_is_left(self):  # G23, G26
        for budget in (420, 1000):
            with self.subTest(budget=budget):
                proc, summary, calls = self.run_check(budget)
                limits = self.limits(proc.stdout)
                runs = [limits["sanitizer %s %s" % (t, m)]
                        for t in ("memcheck", "racecheck") for m in ("graph", "naive")]
                self.assertTrue(all(30 <= l <= 150 for l in runs), runs)
                if budget == 420:  # 420 s less the seconds spent (a loaded machine: up to 60), in four shares
                    self.assertTrue(90 <= runs[0] <= 105, runs)
                else:
                    self.assertEqual(runs, [150] * 4)

    def test_sanitizer_runs_get_at_least_30_s(self):  # G53: about 95 s left in four shares is under 30 s each
        proc, summary, calls = self.run_check(100, LENET_CHECK_PHASES="sanitizers")
        limits = self.limits(proc.stdout)
        self.assertEqual(limits["sanitizer memcheck graph"], 30, proc.stdout)

    def test_experiment_uses_two_gpus_and_the_epochs(self):  # G28, G29
        with open(os.path.join(self.cuda, "bin", "nvidia-smi"), "a") as f:  # a second GPU
            f.write('[[ $1 == -L ]] && echo "GPU 1: NVIDIA H200 (UUID: GPU-1)"\n')
        proc, summary, calls = self.run_check(420, LENET_CHECK_PHASES="experiment", LENET_CHECK_EPOCHS="2")
        runs = [c for c in calls if c.startswith("engine/lenet-train --backend cuda")]
        self.assertEqual(len(runs), 4, calls)
        for call in runs:
            self.assertIn("--epochs 2 ", call)
        for call in [c for c in runs if "-r1.jsonl" in c]:  # G59: one replica on one GPU
            self.assertIn("--num-gpus 1 --epochs 2 ", call)
        r2 = [c for c in runs if "-r2.jsonl" in c]
        self.assertEqual(len(r2), 2, runs)
        for call in r2:
            self.assertIn("--num-gpus 2 ", call)
            self.assertNotIn("--replicas", call)
        self.assertIn("- GPU: NVIDIA H200 x 2,", summary)
        self.assertNotIn("- one GPU", summary)  # G55


class GpuCheckSummary(unittest.TestCase):
    """The summary's Python part, on metrics files made here."""

    def test_metrics_tables(self):  # G31, G32
        with open(SCRIPT) as f:
            code = re.search(r"<<'PY' \|\| echo \"\(no metrics summary.*?\n(.*?)\nPY\n", f.read(), re.S).group(1)
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "sweep"))
            line = {"backend": "cuda", "replicas": 2, "devices": ["cuda:0", "cuda:0"], "batch_size": 256,
                    "test_acc": 0.8, "train_loss": 0.5, "examples_per_second": 1000}
            for mode, s in (("naive", 1.6384), ("graph", 0.8192)):  # 6 s and 3 s a 60,000-example epoch
                with open(os.path.join(d, "sweep", f"{mode}-b256-r2.jsonl"), "w") as f:
                    f.write(json.dumps(dict(line, mode=mode, epoch=1, epoch_seconds=s)) + "\n")
            with open(os.path.join(d, "sweep", "naive-b64-r1.jsonl"), "w") as f:  # G60: its graph run is missing
                f.write(json.dumps(dict(line, mode="naive", batch_size=64, replicas=1, epoch=1, epoch_seconds=1.6384))
                        + "\n")
            with open(os.path.join(d, "naive-r2.jsonl"), "w") as f:
                for e, s, n in ((1, 1.0, 1000), (2, 3.0, 3000)):  # G58: the means of both epochs
                    f.write(json.dumps(dict(line, mode="naive", epoch=e, epoch_seconds=s, examples_per_second=n))
                            + "\n")
                f.write('{"epoch": 3, "epoch_sec')  # G56: a run stopped by its time limit while writing
            out = subprocess.run(["python3", "-", d], input=code, capture_output=True, text=True, timeout=60).stdout
        self.assertIn("| 256 | 2 | 6.000 | 3.000 | 2.00 |", out)
        self.assertIn("| 64 | 1 | 6.000 | - | - |", out)
        self.assertIn("| naive-r2.jsonl | cuda | naive | 2 | cuda:0,cuda:0 | 2 | 0.8000 | 0.5000 | 2.000 | 2000 |", out)


if __name__ == "__main__":
    unittest.main()
