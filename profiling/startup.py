#!/usr/bin/env python3
"""Start-up cost of lenet-train builds side by side: wall time and peak resident memory of short commands.

Usage: profiling/startup.py [--runs N] LABEL=PROGRAM [LABEL=PROGRAM ...]

Each command (--help, a usage error, --version, one CPU epoch of 64 examples) runs N times per program
(default 10), the programs taking turns, after one untimed run each; the table gives the median wall time,
the largest peak resident set size (wait4's ru_maxrss) and each program's median time as a ratio of the
first program's. LENET_DATA_DIR is passed on to the runs. A run that exits with another status than a
working program's stops the table (exit 1).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = [  # name, arguments, the exit status a working program gives
    ("--help", ["--help"], 0),
    ("usage error", ["--epochs", "x"], 2),
    ("--version", ["--version"], 0),
    ("CPU epoch of 64", ["--backend", "cpu", "--quiet", "--epochs", "1", "--train-limit", "64", "--test-limit", "64"],
     0),
]


def run_once(argv, expected_status):
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != expected_status:  # a failing run's time says nothing of start-up
        sys.exit(f"startup.py: {' '.join(argv)}: exit status {proc.returncode}, expected {expected_status}")
    return seconds, usage.ru_maxrss


def usage_error(what):
    print(f"startup.py: {what}", file=sys.stderr)
    sys.exit(2)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own is the usage text and then the error: two lines
        usage_error(f"{message} (see --help)")


def main():
    ap = OneLineParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("programs", nargs="+", metavar="LABEL=PROGRAM")
    args = ap.parse_args()
    programs = []
    for item in args.programs:
        label, sep, path = item.partition("=")
        if not sep or not os.access(path, os.X_OK):
            usage_error(f"{item}: expected LABEL=PROGRAM, an executable file")
        programs.append((label, path))
    if args.runs < 1:
        usage_error("--runs: must be at least 1")
    print(f"| command | {' | '.join(f'{label} s | {label} MB' for label, _ in programs)} | ratio |")
    print("|---|" + "---:|" * (2 * len(programs) + 1))
    for name, extra, expected in COMMANDS:
        for _, path in programs:
            run_once([path] + extra, expected)  # warm the page cache
        times = {label: [] for label, _ in programs}
        peak = {label: 0 for label, _ in programs}
        for _ in range(args.runs):
            for label, path in programs:
                seconds, rss_kb = run_once([path] + extra, expected)
                times[label].append(seconds)
                peak[label] = max(peak[label], rss_kb)
        medians = [statistics.median(times[label]) for label, _ in programs]
        cells = " | ".join(f"{m:.3f} | {peak[label] / 1024:.0f}" for m, (label, _) in zip(medians, programs))
        ratios = " : ".join(f"{m / medians[0]:.2f}" for m in medians)
        print(f"| {name} | {cells} | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
