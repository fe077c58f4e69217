#!/usr/bin/env python3
"""Plots of lenet-dp results.

  plot.py --out DIR FILE_OR_DIR...

Reads JSON and JSON Lines files (folders are searched for *.json and *.jsonl) holding any of:
  - benchmark rows (lenet-bench's {"rows": [...]}, a PyTorch peer's single row, or a list of rows),
  - lenet-train metrics lines (--metrics: one object per epoch; a last line cut off, without its newline,
    is skipped with a warning, in a .json file of such lines too),
  - timelines ({"mode": ..., "steps": [{"step": k, "busy_ms": x, "idle_ms": y}, ...]}, timeline-*.json),
and writes, each only when its data is there:
  accuracy.png           test accuracy per epoch, one line per configuration (the source text's plot; runs
                         of one epoch only where no run has more)
  seconds_per_epoch.png  seconds per epoch per implementation and replica count
  timeline.png           per step, busy time (kernels running) and idle time, one panel per timeline
(one already in DIR that this run does not draw is named on stderr as an earlier run's, and left).
Made-up data (a row named "... (sample)", or a file in a folder results/sample) is marked "(sample)" in
each plot.
Exit status: 0 done, 1 an input that is missing, unreadable or holds nothing usable, or a plot that cannot
be drawn or written, 2 usage error (as lenet-train's and lenet-bench's); errors are one line, and so is each
warning.
"""

import argparse
import errno
import itertools
import json
import math
import os
import re
import sys
import warnings

PROG = "plot.py"


ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def say(message):
    """One line on stderr, as lenet-train writes them: control characters from a file's name or contents
    escaped. A closed stderr is None, which print would take as stdout; a full one changes nothing."""
    if sys.stderr is not None:
        try:
            print(f"{PROG}: {one_line(message)}", file=sys.stderr, flush=True)
        except OSError:
            pass


def one_line(text):
    """Control characters (C0, DEL and C1) escaped, C1 as its UTF-8 bytes, as lenet-train shows them."""
    return "".join(ESCAPES.get(c, "".join(f"\\x{b:02x}" for b in c.encode()))
                   if c < " " or "\x7f" <= c <= "\x9f" else c for c in text)


class PlotError(Exception):
    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


class StdoutFailed(Exception):
    pass


def print_out(line):
    """A line on stdout. A failed write (a reader that has gone, a full disk) raises StdoutFailed, which
    main's caller turns into one line and exit 1, as lenet-train does."""
    try:
        print(line, flush=True)
    except UnicodeEncodeError:  # a name that stdout's encoding cannot write (bytes that are not UTF-8)
        encoding = sys.stdout.encoding or "utf-8"
        print_out(line.encode(encoding, "backslashreplace").decode(encoding))
    except OSError as e:
        gone = ": its reader has gone" if e.errno == errno.EPIPE else ""
        raise StdoutFailed(f"stdout: write failed ({e.strerror}){gone}") from None


class OneLineParser(argparse.ArgumentParser):
    # One line for a usage error, like the project's other tools; as theirs, no abbreviated flags, and a
    # flag given twice is refused (argparse would keep the last).
    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message):
        raise PlotError(f"{message} (see --help)", 2)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        # A value that starts with "--" comes after "=", or argparse refuses it: every other such word is a flag.
        flags = [t.split("=", 1)[0] for t in itertools.takewhile(lambda t: t != "--", args) if t.startswith("--")]
        for flag in flags:
            if flags.count(flag) > 1:
                self.error(f"{flag}: given more than once")
        return super().parse_args(args, namespace)


def text(name):
    """A name from the files as matplotlib text: a '$' in it is a dollar, not the start of a formula (the
    axes' own labels, such as a log axis's 10^k, stay formulas), and a leading '_' is shown (matplotlib
    leaves a label that starts with one out of the legend)."""
    shown = one_line(str(name)).replace("$", r"\$")
    return " " + shown if shown.startswith("_") else shown


def is_number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond any float (JSON allows 400 digits)
        return False


def three_digits(x):
    """x to 3 significant digits without an exponent: 12.4, 3.04, 0.0000400, 1230."""
    s = format(x, "#.3g")
    if "e" in s:
        exponent = int(s.split("e")[1])
        s = str(int(round(float(s)))) if exponent >= 0 else format(float(s), f".{2 - exponent}f")
    return s.rstrip(".")


# ------------------------------------------------------------------------------------------ reading

def input_files(paths):
    """The files to read, each once (a folder and a file in it may both be given); in folders only regular
    files (a named pipe there would wait for a writer)."""
    files, seen = [], set()
    def unreadable(e):  # os.walk would leave the folder out, and its results with it
        raise PlotError(f"{e.filename}: cannot read the folder ({e.strerror})")
    def add(path):
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            files.append(path)
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path, onerror=unreadable):
                dirs.sort()
                for n in sorted(names):
                    if n.endswith((".json", ".jsonl")) and os.path.isfile(os.path.join(root, n)):
                        add(os.path.join(root, n))
        elif os.path.isfile(path):
            add(path)
        elif os.path.exists(path):
            raise PlotError(f"{path}: not a regular file or folder")
        else:
            raise PlotError(f"{path}: no such file or folder")
    return files


def parse_file(path):
    """The JSON values in a file: one document, or one per line (JSON Lines)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise PlotError(f"{path}: cannot read ({e})")
    if not path.endswith(".jsonl"):
        try:
            return [json.loads(text)]
        except ValueError as e:  # JSONDecodeError, or an integer of more digits than Python converts
            whole = e
            # A .json file may still be JSON Lines (several objects, one per line); if it is not, the
            # error of the whole document is the one worth reporting.
            if len([l for l in text.split("\n") if l.strip()]) < 2:
                raise PlotError(f"{path}: unreadable JSON ({whole})")
    values = []
    lines = text.split("\n")  # not splitlines: U+2028 or U+0085 may stand in a JSON string
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except RecursionError:
            raise PlotError(f"{path}:{number}: JSON nested too deeply")
        except ValueError as e:
            # A last line without its newline is a write cut short (a run stopped by a time limit): the
            # lines before it are still the run's (in a .json file holding JSON Lines too).
            if number == len(lines) and not text.endswith("\n") and isinstance(e, json.JSONDecodeError):
                say(f"{path}:{number}: last line cut off (no newline at its end, unreadable JSON); skipped")
                continue
            if not path.endswith(".jsonl"):
                raise PlotError(f"{path}: unreadable JSON ({whole})")
            raise PlotError(f"{path}:{number}: unreadable JSON ({e})")
    return values


def classify(value):
    """'timeline', 'metrics', 'bench' or None, with the records the value holds."""
    if isinstance(value, list):
        return [r for v in value for r in classify(v)]
    if not isinstance(value, dict):
        return [(None, value)]
    if isinstance(value.get("rows"), list):
        return [r for v in value["rows"] for r in classify(v)]
    if isinstance(value.get("steps"), list):
        return [("timeline", value)]
    if "epoch" in value and "test_acc" in value:
        return [("metrics", value)]
    if ("name" in value or "impl" in value) and ("seconds_per_epoch" in value or "test_acc_per_epoch" in value):
        return [("bench", value)]
    return [(None, value)]


def load(paths):
    bench, timelines, metrics = [], [], []
    skipped = []
    for path in input_files(paths):
        try:
            records = [r for v in parse_file(path) for r in classify(v)]
        except RecursionError:  # in the JSON parser or in classify
            raise PlotError(f"{path}: JSON nested too deeply")
        for kind, rec in records:
            if kind == "bench":
                bench.append((path, rec))
            elif kind == "metrics":
                metrics.append((path, rec))
            elif kind == "timeline":
                timelines.append((path, rec))
            else:
                skipped.append(path)
    for path in sorted(set(skipped)):
        say(f"skipped what is not a benchmark row, metrics line or timeline in {path}")
    return bench, metrics, timelines


# ------------------------------------------------------------------------------------------- series

RUN_KEYS = ("backend", "mode", "replicas", "batch_size", "lr", "seed")


def stem(path):
    base = os.path.basename(path)
    for ext in (".jsonl", ".json"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


def metrics_runs(metrics):
    """Metrics lines grouped into runs: a run ends where the file changes, the configuration changes or the
    epoch count goes back (a file appended to by several runs)."""
    runs = []
    for path, m in metrics:
        key = (path,) + tuple(json.dumps(m.get(k)) for k in RUN_KEYS)
        epoch = m.get("epoch")
        if (not is_number(epoch) or epoch < 1 or epoch != int(epoch) or not is_number(m.get("test_acc"))
                or not 0 <= m["test_acc"] <= 1):
            say(f"{path}: a metrics line without a whole epoch from 1 and a test_acc from 0 to 1; not drawn")
            continue
        if runs and runs[-1]["key"] == key and epoch > runs[-1]["epochs"][-1]:
            runs[-1]["epochs"].append(epoch)
            runs[-1]["acc"].append(m["test_acc"])
        else:
            runs.append({"key": key, "path": path, "first": m, "epochs": [epoch], "acc": [m["test_acc"]]})
    return runs


def metrics_label(m):
    backend, mode = m.get("backend", "?"), m.get("mode", "?")
    head = str(backend) if mode in (backend, None, "?") else f"{backend} {mode}"
    return f"{head} R={m.get('replicas', '?')}"


def is_sample(path, rec):
    """Made-up data: a row named "... (sample)", or any record of a file in results/sample (as
    profiling/results/sample, whose metrics lines and timelines have no name to say it)."""
    name = rec.get("name")
    folder = os.path.dirname(os.path.realpath(path))  # also reached through a symbolic link
    return ((isinstance(name, str) and "(sample)" in name)
            or (os.path.basename(folder) == "sample" and os.path.basename(os.path.dirname(folder)) == "results"))


def marked(label, sample):
    """label with " (sample)" where it is made-up data and does not say so already."""
    return f"{label} (sample)" if sample and "(sample)" not in label else label


def unique_labels(items):
    """items: (label, path). Labels that repeat get their file's name, then a number."""
    labels = [l for l, _ in items]
    out = []
    for label, path in items:
        out.append(label if labels.count(label) == 1 else f"{label} [{stem(path)}]")
    seen = {}
    final = []
    for label in out:
        seen[label] = seen.get(label, 0) + 1
        final.append(label if out.count(label) == 1 else f"{label} #{seen[label]}")
    return final


def accuracy_series(bench, metrics):
    """[(label, epochs, accuracies)]: a line per benchmark row with accuracies and per metrics run, named
    with the batch size and lr where the lines differ in them. Runs of one epoch are left out where a run
    has more (gpu-check.sh's one-epoch sweep beside its ten-epoch runs: points among curves)."""
    entries = []  # (name, path, row or a run's first metrics line, epochs, accuracies)
    for path, row in bench:
        acc = row.get("test_acc_per_epoch")
        name = str(row.get("name") or row.get("impl"))
        if acc is not None and not isinstance(acc, list):
            say(f"{path}: {name}: test_acc_per_epoch is not a list of accuracies; not drawn")
        elif isinstance(acc, list) and acc and not all(is_number(a) and 0 <= a <= 1 for a in acc):
            say(f"{path}: {name}: test accuracies that are not numbers from 0 to 1; not drawn")
        elif isinstance(acc, list) and acc:
            entries.append((marked(name, is_sample(path, row)), path, row, list(range(1, len(acc) + 1)), acc))
    for run in metrics_runs(metrics):
        entries.append((marked(metrics_label(run["first"]), is_sample(run["path"], run["first"])), run["path"],
                        run["first"], run["epochs"], run["acc"]))
    longer = [e for e in entries if len(e[3]) > 1]
    if longer and len(longer) < len(entries):
        n = len(entries) - len(longer)
        say(f"accuracy.png: {n} run{'s' if n > 1 else ''} of one epoch left out (drawn only where no run has "
            "more epochs)")
        entries = longer
    series = []
    seen = set()
    for (name, path, _, x, y), suffix in zip(entries, settings_suffixes([e[2] for e in entries], ACC_SETTINGS)):
        # One run's row found twice (lenet-bench --peers copies the peers' rows into its own file), or a run
        # repeated with the same result, is one line, not two drawn on top of each other.
        if (name + suffix, tuple(y)) in seen:
            continue
        seen.add((name + suffix, tuple(y)))
        series.append((name + suffix, path, x, y))
    labels = unique_labels([(s[0], s[1]) for s in series])
    return [(label, x, y) for label, (_, _, x, y) in zip(labels, series)]


# What else a row's seconds per epoch depend on, with its short name in a series label; an accuracy
# curve depends on the first two (metrics lines do not record the training-set size).
SETTINGS = (("batch_size", "B"), ("lr", "lr"), ("train_examples", "N"))
ACC_SETTINGS = SETTINGS[:2]


def number_label(v):
    """256 and 256.0 as 256; any other number exactly (repr), as settings_suffixes tells them apart."""
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


def settings_suffixes(rows, settings):
    """Per row, " B=256 lr=0.2" for the settings (key, short name) whose values differ between the rows
    ("?" where a row does not record one; 256 and 256.0 are one value); "" where they all agree."""
    def setting(r, key):
        v = r.get(key)
        return number_label(v) if is_number(v) else "?" if v is None else str(v)
    differing = [(key, short) for key, short in settings if len({setting(r, key) for r in rows}) > 1]
    return ["".join(f" {short}={setting(r, key)}" for key, short in differing) for r in rows]


def device_kind(row):
    """"cpu" or "cuda" (both, joined by "+"), from a row's device names such as "cuda:0"; None without them."""
    devices = row.get("devices")
    if not isinstance(devices, list) or not devices:
        return None
    return "+".join(sorted({str(d).split(":")[0] for d in devices}))


def seconds_table(bench):
    """{series: {replicas: seconds}}: a series per implementation and mode (and batch size, lr and
    training-set size, where rows differ in them; "?" where a row does not record one); a later row of
    the same series and replica count replaces an earlier one."""
    rows = []
    for p, r in bench:
        if "seconds_per_epoch" not in r:  # a row of accuracies only
            continue
        if not (is_number(r["seconds_per_epoch"]) and r["seconds_per_epoch"] > 0):
            say(f"{p}: row {json.dumps(r.get('name'))}: seconds_per_epoch {json.dumps(r['seconds_per_epoch'])} is not "
                "a time; left out of the seconds plot")
            continue
        if is_number(r.get("replicas")) and r["replicas"] >= 1 and float(r["replicas"]).is_integer():
            rows.append((p, r))
        else:
            say(f"{p}: row {json.dumps(r.get('name'))}: replicas {json.dumps(r.get('replicas'))} is not a replica "
                "count; left out of the seconds plot")
    # A peer's mode is the same on the CPU and on a GPU: where rows ran on different kinds of device, the
    # kind is part of the name.
    kinds_differ = len({device_kind(r) for _, r in rows}) > 1
    table = {}
    for (path, r), suffix in zip(rows, settings_suffixes([r for _, r in rows], SETTINGS)):
        impl, mode = str(r.get("impl") or r.get("name") or "?"), str(r.get("mode") or "")
        # lenet-bench rows share one impl ("lenet-dp") across modes; the peers name the mode in the impl.
        # A row without an impl is named by its name (the legend has no empty label).
        name = impl if mode in impl else f"{impl} {mode}".strip()
        if kinds_differ and device_kind(r) not in (mode, None):
            name += f" on {device_kind(r)}"
        name = marked(name, is_sample(path, r)) + suffix
        cell = table.setdefault(name, {})
        if cell.get(int(r["replicas"]), r["seconds_per_epoch"]) != r["seconds_per_epoch"]:
            say(f"{name} R={int(r['replicas'])} appears more than once with different times; using the one "
                f"from {path}")
        cell[int(r["replicas"])] = r["seconds_per_epoch"]
    return table


def panel_title(panel):
    """A timeline panel's title: mode, replicas, mean busy and idle ms per step, and the file."""
    mode, path, t, steps = panel
    busy = sum(s[1] for s in steps) / len(steps)
    idle = sum(s[2] for s in steps) / len(steps)
    extra = f", R={t['replicas']}" if "replicas" in t else ""
    return marked(f"{mode}{extra}", is_sample(path, t)) + \
        f": {three_digits(busy)} ms busy + {three_digits(idle)} ms idle per step ({stem(path)})"


def timeline_panels(timelines):
    panels = []
    for path, t in timelines:
        steps = []
        for i, s in enumerate(t["steps"]):
            if (not isinstance(s, dict) or not is_number(s.get("busy_ms")) or not is_number(s.get("idle_ms"))
                    or s["busy_ms"] < 0 or s["idle_ms"] < 0):
                steps = None
                break
            steps.append((s.get("step", i) if is_number(s.get("step", i)) else i, s["busy_ms"], s["idle_ms"]))
        if not steps:
            say(f"{path}: timeline without usable steps (each needs busy_ms and idle_ms, numbers >= 0); "
                "skipped")
            continue
        steps.sort()
        panels.append((str(t.get("mode", "?")), path, t, steps))
    # The naive/textbook timeline first: it is the one the graph is compared against.
    def order(p):
        mode = p[0].lower()
        return (0 if ("naive" in mode or "textbook" in mode) else 1, mode, p[1])
    return sorted(panels, key=order)


# ----------------------------------------------------------------------------------------- drawing

def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or whatever a broken installation raises
        raise PlotError(f"matplotlib is not importable by {sys.executable} ({e}); install it for that Python "
                        "(Debian's /usr/bin/python3: `apt-get install python3-matplotlib`)")
    return plt


def warning_lines(caught):
    """The distinct warnings drawing gave, as lines; the glyphs the font lacks (a warning each) as one."""
    glyphs, lines = [], []
    for w in caught:
        message = str(w.message)
        glyph = re.match(r"Glyph (\d+) .*missing from", message)
        seen, line = (glyphs, f"U+{int(glyph.group(1)):04X}") if glyph else (lines, message)
        if line not in seen:
            seen.append(line)
    if glyphs:
        lines.append(f"the font has no glyph for {', '.join(glyphs)} (drawn as boxes)")
    return lines


def save(plt, fig, out_dir, name, tight=False):
    path = os.path.join(out_dir, name)
    try:
        if tight:
            fig.tight_layout()
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise PlotError(f"{path}: cannot write ({e.strerror or e})")  # a pipe's has none: "not seekable"
    except (ValueError, IndexError, OverflowError, RuntimeError) as e:
        # e.g. a figure of too many bars or panels ("Image size of ... is too large"), a label too long
        # for the rasteriser ("raster overflow"); numpy's overflow warnings are main's
        raise PlotError(f"{path}: cannot draw ({e})")
    finally:
        plt.close(fig)
    print_out(f"wrote {one_line(path)}")
    return path


LINE_STYLES = ("-", "--", ":", "-.")


def line_style(i):
    """The i-th line's colour and line style: the colour cycle's ten colours, then again in another style (a
    pair repeats after 40 lines)."""
    return f"C{i % 10}", LINE_STYLES[i // 10 % len(LINE_STYLES)]


def legend_options(n):
    """The accuracy legend of n lines: inside, lower right, for a few; beside the axes, in columns of at most
    20, for more (inside it would cover the curves)."""
    if n <= 8:
        return {"fontsize": "small", "loc": "lower right"}
    return {"fontsize": "x-small", "loc": "upper left", "bbox_to_anchor": (1.02, 1), "borderaxespad": 0,
            "ncol": math.ceil(n / 20)}


def draw_accuracy(plt, series, out_dir):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    last = 1
    for i, (label, x, y) in enumerate(series):
        color, style = line_style(i)
        ax.plot(x, y, color=color, linestyle=style, marker="o", markersize=3, label=text(label))
        last = max(last, max(x))
    ax.set_xlabel("epoch")
    ax.set_ylabel("test acc")
    ax.set_xlim(1, max(last, 2))
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend(**legend_options(len(series)))
    ax.set_title("test accuracy per epoch")
    return save(plt, fig, out_dir, "accuracy.png")


def draw_seconds(plt, table, out_dir):
    names = sorted(table)
    replicas = sorted({r for cells in table.values() for r in cells})
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(replicas) * len(names) + 2), 4.5))
    values = [v for cells in table.values() for v in cells.values()]
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j, r in enumerate(replicas) if r in table[name]]
        ys = [table[name][r] for r in replicas if r in table[name]]
        bars = ax.bar(xs, ys, width=width, label=text(name))
        for bar, v in zip(bars, ys):
            ax.annotate(three_digits(v), (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom",
                        fontsize="x-small")
    # Implementations differ by orders of magnitude (a CPU against a captured graph): a log axis keeps
    # the fast ones visible.
    if max(values) / min(values) > 30:
        ax.set_yscale("log")
    ax.set_xticks(range(len(replicas)))
    ax.set_xticklabels([f"R={r}" for r in replicas])
    ax.set_xlabel("replicas")
    ax.set_ylabel("seconds per epoch (training pass)")
    ax.set_title("seconds per epoch by implementation and replica count")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return save(plt, fig, out_dir, "seconds_per_epoch.png")


def draw_timeline(plt, panels, out_dir):
    # Shared y axis: the point of the figure is how much of a step each mode spends idle.
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels) + 0.6), sharey=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        steps = panel[3]
        x = [s[0] for s in steps]
        busy = [s[1] for s in steps]
        ax.bar(x, busy, width=1.0, color="tab:blue", label="kernels running")
        ax.bar(x, [s[2] for s in steps], width=1.0, bottom=busy, color="tab:orange", label="idle")
        ax.set_title(text(panel_title(panel)), fontsize="small")
        ax.set_ylabel("ms")
        ax.legend(fontsize="x-small", loc="upper right")
    axes[-1, 0].set_xlabel("step")
    return save(plt, fig, out_dir, "timeline.png", tight=True)


def main(argv):
    p = OneLineParser(prog=PROG, description="Plots from benchmark rows, metrics JSON Lines and timelines.")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG files (created if missing)")
    p.add_argument("inputs", nargs="+", metavar="FILE_OR_DIR")
    args = p.parse_args(argv)
    if args.out == "":
        raise PlotError("--out: empty value", 2)
    if sys.stdout is None:  # closed: the lines naming what was written could not be
        raise PlotError("stdout: closed, nothing can be written to it")

    bench, metrics, timelines = load(args.inputs)
    acc = accuracy_series(bench, metrics)
    seconds = seconds_table(bench)
    panels = timeline_panels(timelines)
    if not (acc or seconds or panels):
        raise PlotError("no usable input: no benchmark rows, metrics lines or timelines in "
                        + ", ".join(args.inputs))
    plt = pyplot()  # before the folder is made: a failed run leaves nothing behind
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise PlotError(f"{args.out}: cannot create the output folder ({e.strerror})")
    for data, draw, name in ((acc, draw_accuracy, "accuracy.png"), (seconds, draw_seconds, "seconds_per_epoch.png"),
                             (panels, draw_timeline, "timeline.png")):
        path = os.path.join(args.out, name)
        if data:
            # Values that numpy overflows on would give a plot of nonsense axes and warnings of several lines;
            # other warnings (a glyph that the font lacks, in a name) are one line each.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warnings.simplefilter("error", RuntimeWarning)
                try:
                    draw(plt, data, args.out)
                except RuntimeWarning as e:  # while drawing or in save() (which closes the figure)
                    raise PlotError(f"{path}: cannot draw ({e})") from None
            for line in warning_lines(caught):
                say(f"{path}: {line}")
        elif os.path.lexists(path):  # beside this run's plots, it would pass for one
            say(f"{path}: from an earlier run (nothing to draw it from here); left as it is")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PlotError as e:
        say(str(e))
        sys.exit(e.status)
    except KeyboardInterrupt:
        say("interrupted")
        sys.exit(130)
    except StdoutFailed as e:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        say(str(e))
        sys.exit(1)
