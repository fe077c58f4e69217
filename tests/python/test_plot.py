"""profiling/plot.py on the committed synthetic sample and on broken input.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
import warnings
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOT = os.path.join(ROOT, "profiling", "plot.py")
SAMPLE = os.path.join(ROOT, "profiling", "results", "sample")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def run_plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True, timeout=300)


class PlotErrors(unittest.TestCase):
    """Errors come before matplotlib is imported, so these run wherever Python does."""

    def assert_one_line_error(self, r, status):
        self.assertEqual(r.returncode, status, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("plot.py: "), lines[0])
        self.assertNotIn("Traceback", r.stderr)
        return lines[0]

    def test_empty_folder(self):
        with tempfile.TemporaryDirectory() as d:
            line = self.assert_one_line_error(run_plot("--out", os.path.join(d, "out"), d), 1)
            self.assertIn("no usable input", line)
            self.assertFalse(os.path.exists(os.path.join(d, "out")))

    def test_bad_json(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "row.json"), "w") as f:
                f.write('{"name": "x", "seconds_per_epoch": ')
            line = self.assert_one_line_error(run_plot("--out", d, d), 1)
            self.assertIn("row.json", line)
            self.assertIn("unreadable JSON", line)

    def test_bad_json_lines_names_the_line(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "m.jsonl"), "w") as f:
                f.write(json.dumps({"epoch": 1, "test_acc": 0.5}) + "\n{oops\n")
            line = self.assert_one_line_error(run_plot("--out", d, d), 1)
            self.assertIn("m.jsonl:2", line)

    def test_other_unreadable_lines_stay_errors(self):
        good = json.dumps({"epoch": 1, "test_acc": 0.5})
        # Only a last line without its newline is a write cut short: one in the middle is an error, and so
        # is a last line that ends in a newline (test_bad_json_lines_names_the_line).
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "m.jsonl"), "w") as f:
                f.write(good + "\n{oops\n" + good)
            self.assertIn("m.jsonl:2: unreadable JSON", self.assert_one_line_error(run_plot("--out", d, d), 1))

    def test_missing_input(self):
        with tempfile.TemporaryDirectory() as d:
            self.assert_one_line_error(run_plot("--out", d, os.path.join(d, "nothing-here.json")), 1)
            # A newline or escape sequence in the name stays escaped on the one line.
            line = self.assert_one_line_error(run_plot("--out", d, os.path.join(d, "no\nthing\x1b[2J\x9b.json")), 1)
            self.assertIn("no\\nthing\\x1b[2J\\xc2\\x9b.json", line)

    def test_json_without_known_records(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "other.json"), "w") as f:
                json.dump({"hello": "world"}, f)
            r = run_plot("--out", d, d)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("no usable input", r.stderr)

    def test_usage(self):
        self.assert_one_line_error(run_plot(SAMPLE), 2)  # --out missing
        self.assertIn("--out: empty value", self.assert_one_line_error(run_plot("--out", "", SAMPLE), 2))
        # As lenet-train: a flag given twice (argparse would keep the last) or abbreviated is refused.
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            self.assertIn("--out: given more than once",
                          self.assert_one_line_error(run_plot("--out", a, f"--out={b}", SAMPLE), 2))
            self.assertIn("the following arguments are required: --out",
                          self.assert_one_line_error(run_plot("--ou", a, SAMPLE), 2))
            self.assertEqual(os.listdir(d), [])

    def test_closed_stdout_or_stderr(self):
        # A closed stdout, which would lose the lines naming the files written, is refused first; with a
        # closed stderr, an error is not written on stdout instead (print takes a stream of None as stdout).
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run(["bash", "-c", 'exec "$0" "$1" --out "$2" "$3" >&-', sys.executable, PLOT,
                                os.path.join(d, "o"), SAMPLE], capture_output=True, text=True, timeout=300)
            self.assertEqual(self.assert_one_line_error(r, 1), "plot.py: stdout: closed, nothing can be written to it")
            self.assertFalse(os.path.exists(os.path.join(d, "o")))
            r = subprocess.run(["bash", "-c", 'exec "$0" "$1" --out "$2" "$3" 2>&-', sys.executable, PLOT,
                                os.path.join(d, "o"), os.path.join(d, "none.json")], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual((r.returncode, r.stdout), (1, ""))

    def test_json_that_python_cannot_hold(self):
        cases = [("deep.json", "[" * 5000 + "]" * 5000, "nested too deeply"),
                 ("nested.jsonl", "[" * 5000 + "]" * 5000 + "\n", "nested too deeply")]
        # Python 3.11 and the security releases before it refuse integers of over 4300 digits (unless
        # PYTHONINTMAXSTRDIGITS=0): a ValueError that is not a JSONDecodeError.
        if getattr(sys, "get_int_max_str_digits", lambda: 0)() not in (0, None):
            cases.append(("digits.jsonl", '{"epoch": 1, "test_acc": ' + "1" * 5000 + "}\n", "digits.jsonl:1"))
        with tempfile.TemporaryDirectory() as d:
            for name, text, said in cases:
                with self.subTest(name=name):
                    path = os.path.join(d, name)
                    with open(path, "w") as f:
                        f.write(text)
                    self.assertIn(said, self.assert_one_line_error(run_plot("--out", d, path), 1))

    def test_without_matplotlib_nothing_is_made(self):
        # A matplotlib that cannot be imported: missing, or broken.
        for error in ("ImportError('no matplotlib here')", "RuntimeError('broken')"):
            with self.subTest(error=error), tempfile.TemporaryDirectory() as d:
                fake = os.path.join(d, "fake", "matplotlib")
                os.makedirs(fake)
                with open(os.path.join(fake, "__init__.py"), "w") as f:
                    f.write(f"raise {error}\n")
                out = os.path.join(d, "plots")
                r = subprocess.run([sys.executable, PLOT, "--out", out, SAMPLE], capture_output=True, text=True,
                                   timeout=300, env=dict(os.environ, PYTHONPATH=os.path.dirname(fake)))
                self.assertIn("matplotlib is not importable", self.assert_one_line_error(r, 1))
                self.assertFalse(os.path.exists(out))

    def test_special_files(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertIn("not a regular file or folder",
                          self.assert_one_line_error(run_plot("--out", d, "/dev/null"), 1))
            # A named pipe in a folder is not read (it would wait for a writer): here nothing else is there.
            os.mkfifo(os.path.join(d, "pipe.json"))
            self.assertIn("no usable input", self.assert_one_line_error(run_plot("--out", os.path.join(d, "o"), d), 1))

    def test_words_after_a_double_dash_are_inputs(self):  # P33
        # After "--", "--x.json" is a file's name, not a flag: named twice, it is not "given more than once".
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "--x.json"), "w") as f:
                json.dump({"hello": "world"}, f)
            r = subprocess.run([sys.executable, PLOT, "--out", "o", "--", "--x.json", "--x.json"], cwd=d,
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertNotIn("given more than once", r.stderr)
            self.assertTrue(r.stderr.endswith("no usable input: no benchmark rows, metrics lines or timelines in "
                                              "--x.json, --x.json\n"), r.stderr)


@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not importable (apt-get install python3-matplotlib)")
class PlotSample(unittest.TestCase):
    def assert_png(self, path):
        self.assertTrue(os.path.isfile(path), path)
        with open(path, "rb") as f:
            head = f.read(8)
        self.assertEqual(head, PNG_MAGIC, path)
        self.assertGreater(os.path.getsize(path), 5000, path)

    def test_sample_draws_all_three(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "plots")
            r = run_plot("--out", out, SAMPLE)
            self.assertEqual(r.returncode, 0, r.stderr)
            for name in ("accuracy.png", "seconds_per_epoch.png", "timeline.png"):
                self.assert_png(os.path.join(out, name))
                self.assertIn(f"wrote {os.path.join(out, name)}", r.stdout)
            self.assertEqual(sorted(os.listdir(out)), ["accuracy.png", "seconds_per_epoch.png", "timeline.png"])

    def test_a_name_that_stdout_cannot_encode_is_escaped(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "plots-\u00e9")
            r = subprocess.run([sys.executable, PLOT, "--out", out, os.path.join(SAMPLE, "metrics-cpu-r1.jsonl")],
                               capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONIOENCODING="ascii"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, f"wrote {os.path.join(d, 'plots-')}\\xe9/accuracy.png\n")

    def test_a_reader_that_has_gone_is_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([sys.executable, PLOT, "--out", d, SAMPLE], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            p.stdout.close()  # before plot.py writes its first "wrote" line
            err = p.stderr.read()
            p.stderr.close()
            self.assertEqual(p.wait(timeout=300), 1, err)
            self.assertEqual(err, "plot.py: stdout: write failed (Broken pipe): its reader has gone\n")

    @unittest.skipUnless(os.path.exists("/dev/full"), "no /dev/full")
    def test_a_full_stdout_is_one_line(self):
        with tempfile.TemporaryDirectory() as d, open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, PLOT, "--out", d, SAMPLE], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=300)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(r.stderr, "plot.py: stdout: write failed (No space left on device)\n")

    def test_each_plot_only_when_its_data_exists(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_plot("--out", d, os.path.join(SAMPLE, "timeline-naive.json"),
                         os.path.join(SAMPLE, "timeline-graph.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(d), ["timeline.png"])
            self.assert_png(os.path.join(d, "timeline.png"))

        with tempfile.TemporaryDirectory() as d:
            r = run_plot("--out", d, os.path.join(SAMPLE, "metrics-cpu-r1.jsonl"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(d), ["accuracy.png"])  # metrics lines carry no benchmark rows
            self.assertEqual(r.stderr, "")
            # A plot of an earlier run into the same folder is named as such.
            r = run_plot("--out", d, os.path.join(SAMPLE, "timeline-naive.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, f"plot.py: {os.path.join(d, 'accuracy.png')}: from an earlier run (nothing to "
                                       "draw it from here); left as it is\n")

        with tempfile.TemporaryDirectory() as d:
            r = run_plot("--out", d, os.path.join(SAMPLE, "peer-pytorch-textbook-r1.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(d)), ["accuracy.png", "seconds_per_epoch.png"])

    def test_labels_with_dollars_and_figures_too_large(self):
        with tempfile.TemporaryDirectory() as d:
            # A '$' is text: "x $\\frac{$ y" would otherwise be a broken formula.
            with open(os.path.join(d, "r.json"), "w") as f:
                json.dump({"name": "x $\\frac{$ y", "impl": "x $\\frac{$ y", "mode": "m", "replicas": 1,
                           "seconds_per_epoch": 1.0, "test_acc_per_epoch": [0.5, 0.6]}, f)
            r = run_plot("--out", os.path.join(d, "out"), os.path.join(d, "r.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(d, "out", "seconds_per_epoch.png"))
            # More bars than a picture holds: one line, not a traceback.
            with open(os.path.join(d, "many.json"), "w") as f:
                json.dump([{"name": f"i{i} R={r}", "impl": f"i{i}", "mode": "m", "replicas": r, "seconds_per_epoch": 1.0}
                           for i in range(30) for r in range(1, 40)], f)
            r = run_plot("--out", os.path.join(d, "out2"), os.path.join(d, "many.json"))
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("cannot draw (Image size of", r.stderr)

    def test_values_that_overflow_an_axis_are_one_line(self):
        # numpy's overflow warnings (several lines each) become the plot's one-line error, and no file.
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "timeline-t.json"), "w") as f:
                json.dump({"mode": "graph", "steps": [{"step": 1, "busy_ms": 1e308, "idle_ms": 1e308}]}, f)
            with open(os.path.join(d, "rows.json"), "w") as f:
                json.dump([{"name": "n", "impl": "i", "mode": "m", "replicas": r, "seconds_per_epoch": s}
                           for r, s in ((1, 1e308), (2, 1e-300))], f)
            for name, png in (("timeline-t.json", "timeline.png"), ("rows.json", "seconds_per_epoch.png")):
                out = os.path.join(d, "out-" + name)
                r = run_plot("--out", out, os.path.join(d, name))
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                # Debian's matplotlib 3.6 overflows in numpy ("overflow encountered in ..."); another may
                # raise an error of its own, which is the same one line.
                self.assertIn(f"{png}: cannot draw (", r.stderr)
                self.assertFalse(os.path.exists(os.path.join(out, png)))

    def test_a_glyph_the_font_lacks_is_one_warning_line(self):
        # A name in a character no font has (private use): matplotlib warns once per glyph, in two lines.
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "m.jsonl"), "w") as f:
                for e in (1, 2):
                    f.write(json.dumps({"epoch": e, "test_acc": 0.4 * e, "mode": "graph\ue000\ue001"}) + "\n")
            out = os.path.join(d, "out")
            r = run_plot("--out", out, d)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(out, "accuracy.png"))
            self.assertEqual(r.stderr, f"plot.py: {os.path.join(out, 'accuracy.png')}: the font has no glyph for "
                                       "U+E000, U+E001 (drawn as boxes)\n")

    def test_a_cut_off_last_line_does_not_stop_the_plots(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "good.jsonl"), "w") as f:
                for e in (1, 2):
                    f.write(json.dumps({"epoch": e, "test_acc": 0.4 * e, "mode": "naive"}) + "\n")
            with open(os.path.join(d, "cut.jsonl"), "w") as f:
                for e in (1, 2):
                    f.write(json.dumps({"epoch": e, "test_acc": 0.3 * e, "mode": "graph"}) + "\n")
                f.write('{"epoch": 3, "test_a')  # a run stopped while writing
            r = run_plot("--out", os.path.join(d, "out"), d)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(d, "out", "accuracy.png"))
            self.assertEqual(r.stderr, f"plot.py: {os.path.join(d, 'cut.jsonl')}:3: last line cut off (no newline at "
                                       "its end, unreadable JSON); skipped\n")

    def test_metrics_file_with_several_runs_and_rows_in_a_list(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "in")
            os.mkdir(src)
            with open(os.path.join(src, "two-runs.jsonl"), "w") as f:
                for seed in (1, 2):
                    for e in (1, 2, 3):
                        f.write(json.dumps({"epoch": e, "epochs": 3, "test_acc": 0.2 * e, "backend": "cpu",
                                            "mode": "cpu", "replicas": 2, "seed": seed}) + "\n")
            with open(os.path.join(src, "rows.json"), "w") as f:
                json.dump([{"name": "a", "impl": "x", "mode": "m", "replicas": 1, "seconds_per_epoch": 1.0},
                           {"name": "b", "impl": "x", "mode": "m", "replicas": 4, "seconds_per_epoch": 0.5}], f)
            r = run_plot("--out", os.path.join(d, "out"), src)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assert_png(os.path.join(d, "out", "accuracy.png"))
            self.assert_png(os.path.join(d, "out", "seconds_per_epoch.png"))

    def test_an_earlier_plot_that_is_a_broken_link_is_named(self):  # P64
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.join(d, "gone.png"), os.path.join(d, "accuracy.png"))
            r = run_plot("--out", d, os.path.join(SAMPLE, "timeline-naive.json"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, f"plot.py: {os.path.join(d, 'accuracy.png')}: from an earlier run (nothing to "
                                       "draw it from here); left as it is\n")


class PlotModule(unittest.TestCase):
    """plot.py imported as a module (it imports matplotlib only to draw)."""

    @classmethod
    def setUpClass(cls):
        spec = importlib.util.spec_from_file_location("plot", PLOT)
        cls.plot = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.plot)


class SaveErrors(PlotModule):
    def test_a_figure_that_cannot_be_drawn_is_one_error(self):
        # As matplotlib's layout fails on steps at the end of the float range: an IndexError.
        class Figure:
            def tight_layout(self):
                raise IndexError("index 0 is out of bounds for axis 0 with size 0")

            def savefig(self, *args, **kwargs):
                raise AssertionError("drawn after a failed layout")

        class Pyplot:
            closed = None

            def close(self, fig):
                self.closed = fig

        plt, fig = Pyplot(), Figure()
        with self.assertRaises(self.plot.PlotError) as caught:
            self.plot.save(plt, fig, "out", "timeline.png", tight=True)
        self.assertEqual(str(caught.exception), "out/timeline.png: cannot draw (index 0 is out of bounds for axis 0 with size 0)")
        self.assertEqual(caught.exception.status, 1)
        self.assertIs(plt.closed, fig)


class DrawErrors(PlotModule):
    class Pyplot:
        def close(self, fig):
            pass

    def failing_save(self, error):
        class Figure:
            def savefig(self, *args, **kwargs):
                raise error

        with self.assertRaises(self.plot.PlotError) as caught:
            self.plot.save(self.Pyplot(), Figure(), "out", "timeline.png")
        self.assertEqual(caught.exception.status, 1)
        return str(caught.exception)

    def test_what_the_rasteriser_or_the_file_refuses_is_one_error(self):
        # A label of thousands of characters: the rasteriser's RuntimeError.
        self.assertEqual(self.failing_save(RuntimeError("In draw_glyphs_to_bitmap: raster overflow")),
                         "out/timeline.png: cannot draw (In draw_glyphs_to_bitmap: raster overflow)")
        # A named pipe where the file goes: an OSError without strerror.
        self.assertEqual(self.failing_save(io.UnsupportedOperation("File or stream is not seekable.")),
                         "out/timeline.png: cannot write (File or stream is not seekable.)")

    def test_warnings_are_distinct_lines_and_the_missing_glyphs_one(self):
        def warned(message):
            return warnings.WarningMessage(UserWarning(message), UserWarning, "f.py", 1)

        cjk = warned("Glyph 26085 (\\N{CJK UNIFIED IDEOGRAPH-65E5}) missing from current font.")
        caught = [cjk, warned("something else"), warned("Glyph 57344 (\ue000) missing from font(s) DejaVu Sans."),
                  warned("something else"), cjk]
        self.assertEqual(self.plot.warning_lines(caught),
                         ["something else", "the font has no glyph for U+65E5, U+E000 (drawn as boxes)"])


class CutOffLine(PlotModule):
    def test_the_lines_before_a_cut_off_last_line_are_read(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w") as f:
                f.write('{"epoch": 1, "test_acc": 0.5}\n\n{"epoch": 2, "test_acc": 0.6}\n{"epoch": 3, "te')
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                values = self.plot.parse_file(path)
            self.assertEqual([v["epoch"] for v in values], [1, 2])
            self.assertEqual(err.getvalue(), f"plot.py: {path}:4: last line cut off (no newline at its end, "
                                             "unreadable JSON); skipped\n")
            # A complete last line without its newline is read.
            with open(path, "w") as f:
                f.write('{"epoch": 1, "test_acc": 0.5}\n{"epoch": 2, "test_acc": 0.6}')
            self.assertEqual([v["epoch"] for v in self.plot.parse_file(path)], [1, 2])
            # A .json file of such lines likewise; one document cut off is an error.
            path = os.path.join(d, "m.json")
            with open(path, "w") as f:
                f.write('{"epoch": 1, "test_acc": 0.5}\n{"epoch": 2, "te')
            with contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual([v["epoch"] for v in self.plot.parse_file(path)], [1])
            with open(path, "w") as f:
                f.write('{\n  "rows": [\n    {"epoch": 1, "te')
            with self.assertRaises(self.plot.PlotError):
                self.plot.parse_file(path)


class Reading(PlotModule):
    def test_lines_split_at_newlines_only(self):
        # U+2028 and U+0085 may stand unescaped in a JSON string; str.splitlines would split there.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                f.write('{"epoch": 1, "test_acc": 0.5, "mode": "a\u2028b\x85c"}\r\n{"epoch": 2, "test_acc": 0.6}\n')
            self.assertEqual([v["epoch"] for v in self.plot.parse_file(path)], [1, 2])

    def test_an_unreadable_folder_is_an_error(self):
        # Not left out with its results (as root, who reads any folder, the refusal is simulated).
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "sub"))
            real = os.scandir
            def scandir(path="."):
                if os.path.basename(path) == "sub":
                    raise PermissionError(13, "Permission denied", path)
                return real(path)
            with mock.patch("os.scandir", scandir), self.assertRaises(self.plot.PlotError) as raised:
                self.plot.input_files([d])
            self.assertEqual(str(raised.exception), f"{os.path.join(d, 'sub')}: cannot read the folder (Permission denied)")

    def test_a_folder_is_read_in_name_order(self):  # P37
        # Whatever order the file system lists them in: a later row replaces an earlier one (seconds_table).
        with tempfile.TemporaryDirectory() as d:
            for name in ("a.json", "b.json", "c.jsonl"):
                open(os.path.join(d, name), "w").close()
            real = os.scandir
            class Reversed:  # os.scandir's iterator and context manager, its entries in reverse order of name
                def __init__(self, path):
                    with real(path) as it:
                        self.entries = iter(sorted(it, key=lambda e: e.name, reverse=True))
                def __iter__(self):
                    return self.entries
                def __next__(self):
                    return next(self.entries)
                def __enter__(self):
                    return self
                def __exit__(self, *exc):
                    return False
            def scandir(path="."):
                return Reversed(path)
            with mock.patch("os.scandir", scandir):
                files = self.plot.input_files([d])
            self.assertEqual([os.path.basename(f) for f in files], ["a.json", "b.json", "c.jsonl"])

    def test_a_file_not_in_utf8_is_one_error(self):  # P38
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "wb") as f:
                f.write(b'{"epoch": 1, "test_acc": 0.5, "mode": "\xff"}\n')
            with self.assertRaises(self.plot.PlotError) as raised:
                self.plot.parse_file(path)
            self.assertTrue(str(raised.exception).startswith(f"{path}: cannot read ("), str(raised.exception))

    def test_a_broken_document_of_several_lines_is_one_error_for_the_whole(self):  # P40
        # Not JSON Lines either: the error is the document's (its line and column), not its first line's.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rows.json")
            with open(path, "w") as f:
                f.write('{\n  "rows": [\n    {"name": "x",, "seconds_per_epoch": 1}\n  ]\n}\n')
            with self.assertRaises(self.plot.PlotError) as raised:
                self.plot.parse_file(path)
            self.assertEqual(str(raised.exception),
                             f"{path}: unreadable JSON (Expecting property name enclosed in double quotes: "
                             "line 3 column 18 (char 31))")

    @unittest.skipIf(getattr(sys, "get_int_max_str_digits", lambda: 0)() in (0, None), "no limit on digits")
    def test_a_whole_last_line_without_newline_is_not_cut_off(self):  # P39
        # A number of too many digits is an error of the line (as with its newline), not a write cut short.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w") as f:
                f.write('{"epoch": 1, "test_acc": 0.5}\n{"epoch": 2, "test_acc": ' + "1" * 5000 + "}")
            with contextlib.redirect_stderr(io.StringIO()) as said, self.assertRaises(self.plot.PlotError) as raised:
                self.plot.parse_file(path)
            self.assertTrue(str(raised.exception).startswith(f"{path}:2: unreadable JSON ("), str(raised.exception))
            self.assertEqual(said.getvalue(), "")

    def test_what_a_benchmark_row_is(self):  # P41, P42, P43
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rows.json")
            with open(path, "w") as f:
                json.dump([{"name": "accuracies only", "test_acc_per_epoch": [0.5, 0.6]},
                           {"impl": "no name", "replicas": 1, "seconds_per_epoch": 1.0},
                           {"other": 1}, {"other": 2}], f)
            with contextlib.redirect_stderr(io.StringIO()) as said:
                bench, metrics, timelines = self.plot.load([path])
            self.assertEqual([r.get("name") or r.get("impl") for _, r in bench], ["accuracies only", "no name"])
            # Two records that are none of these: one line for the file.
            self.assertEqual(said.getvalue(), "plot.py: skipped what is not a benchmark row, metrics line or timeline "
                                              f"in {path}\n")


class AccuracySeries(PlotModule):
    """plot.py's grouping of test accuracies into lines."""

    def test_runs_of_one_epoch_only_where_no_run_has_more(self):
        def run(mode, batch_size, epochs):
            return [("m.jsonl", {"backend": "cuda", "mode": mode, "replicas": 1, "batch_size": batch_size, "lr": 0.2,
                                 "epoch": e, "test_acc": 0.1 * e}) for e in range(1, epochs + 1)]
        # gpu-check.sh's folder: ten-epoch runs beside a one-epoch sweep of other batch sizes.
        sweep = [line for b in (64, 1024) for mode in ("naive", "graph") for line in run(mode, b, 1)]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            series = self.plot.accuracy_series([], run("naive", 256, 10) + sweep + run("graph", 256, 10))
        # The sweep's batch sizes do not name the lines that are drawn.
        self.assertEqual([(label, len(x)) for label, x, _ in series], [("cuda naive R=1", 10), ("cuda graph R=1", 10)])
        self.assertIn("accuracy.png: 4 runs of one epoch left out", err.getvalue())
        # A benchmark row of one epoch is a run of one epoch too.
        series = self.plot.accuracy_series([("b.json", {"name": "x", "test_acc_per_epoch": [0.5]})],
                                           run("naive", 256, 2))
        self.assertEqual([label for label, _, _ in series], ["cuda naive R=1"])
        # Where every run has one epoch, each is drawn (as a point).
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            series = self.plot.accuracy_series([], sweep)
        self.assertEqual(len(series), 4)
        self.assertEqual(err.getvalue(), "")

    def test_many_lines_stay_apart(self):
        styles = [self.plot.line_style(i) for i in range(40)]
        self.assertEqual(len(set(styles)), 40)
        self.assertNotIn("bbox_to_anchor", self.plot.legend_options(8))
        # More lines: the legend beside the axes (x beyond 1), at most 20 to a column.
        for n in (9, 20, 28, 41):
            options = self.plot.legend_options(n)
            self.assertGreater(options["bbox_to_anchor"][0], 1)
            self.assertLessEqual(n / options["ncol"], 20)

    def test_rows_left_out_are_named(self):
        rows = [("a.json", {"name": "a", "seconds_per_epoch": float("nan"), "replicas": 1, "test_acc_per_epoch": "0.5"})]
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            self.assertEqual(self.plot.accuracy_series(rows, []), [])
            self.assertEqual(self.plot.seconds_table(rows), {})
        self.assertEqual(said.getvalue(), 'plot.py: a.json: a: test_acc_per_epoch is not a list of accuracies; not drawn\n'
                                          'plot.py: a.json: row "a": seconds_per_epoch NaN is not a time; left out of the '
                                          'seconds plot\n')

    def test_numbers_out_of_range_are_not_drawn(self):
        big = 10 ** 400  # valid JSON, beyond any float
        rows = [("a.json", {"name": "a", "test_acc_per_epoch": [0.5, 7.5]}),
                ("b.json", {"name": "b", "test_acc_per_epoch": [0.5, big]}),
                ("c.json", {"name": "c", "test_acc_per_epoch": [0.5, 0.6]})]
        metrics = [("m.jsonl", {"epoch": 1, "test_acc": -3}), ("m.jsonl", {"epoch": big, "test_acc": 0.5})]
        metrics += [("n.jsonl", {"epoch": e, "test_acc": 0.5}) for e in (-5, 0, 0.5, 1.5)]  # epochs count from 1
        with contextlib.redirect_stderr(io.StringIO()) as said:
            self.assertEqual([(label, y) for label, _, y in self.plot.accuracy_series(rows, metrics)], [("c", [0.5, 0.6])])
        self.assertEqual(said.getvalue().count("n.jsonl: a metrics line without a whole epoch from 1"), 4, said.getvalue())
        self.assertEqual(self.plot.timeline_panels([("t.json", {"mode": "graph", "steps": [
            {"step": 1, "busy_ms": -2.0, "idle_ms": 1.0}]})]), [])

    def test_names_are_text_and_axes_keep_their_formulas(self):
        self.assertEqual(self.plot.text("cost $5 vs $_"), "cost \\$5 vs \\$_")
        self.assertEqual(self.plot.text("_fast"), " _fast")  # a leading '_' would hide it from the legend
        if HAVE_MATPLOTLIB:  # a log axis labels its ticks 10^k as formulas: math must stay on
            import matplotlib
            self.plot.pyplot()
            self.assertTrue(matplotlib.rcParams.get("text.parse_math", True))

    def test_three_digits_without_exponent(self):
        f = self.plot.three_digits
        self.assertEqual([f(x) for x in (0.00004, 1.5e-5, 0.0512, 3.04, 12345.0)],
                         ["0.0000400", "0.0000150", "0.0512", "3.04", "12300"])

    def test_three_digits_without_a_trailing_point(self):  # P36
        self.assertEqual([self.plot.three_digits(x) for x in (100.0, 999.0, 5.0)], ["100", "999", "5.00"])

    def test_each_file_read_once(self):
        files = self.plot.input_files([SAMPLE, os.path.join(SAMPLE, "timeline-graph.json")])
        self.assertEqual(len(files), len(set(os.path.realpath(f) for f in files)))
        self.assertIn(os.path.join(SAMPLE, "timeline-graph.json"), files)

    def test_a_row_found_in_two_files_is_one_line(self):
        peer = {"name": "pytorch-textbook R=1", "replicas": 1, "test_acc_per_epoch": [0.1, 0.66, 0.71]}
        other = dict(peer, test_acc_per_epoch=[0.1, 0.65, 0.72])  # another run of the same configuration
        series = self.plot.accuracy_series([("bench.json", peer), ("peer.json", dict(peer)), ("b2.json", other)], [])
        self.assertEqual([y for _, _, y in series], [[0.1, 0.66, 0.71], [0.1, 0.65, 0.72]])
        self.assertEqual(len({label for label, _, _ in series}), 2, series)

    def test_lines_of_other_settings_are_named_by_them(self):
        row = {"name": "lenet-dp cpu R=1", "batch_size": 256, "lr": 0.9, "test_acc_per_epoch": [0.1, 0.5]}
        # Equal accuracies (a run that learnt nothing at either lr) are still two runs.
        series = self.plot.accuracy_series([("a.json", row), ("b.json", dict(row, lr=0.1))], [])
        self.assertEqual([label for label, _, _ in series], ["lenet-dp cpu R=1 lr=0.9", "lenet-dp cpu R=1 lr=0.1"])
        line = {"backend": "cpu", "mode": "cpu", "replicas": 1, "batch_size": 256, "lr": 0.9, "epoch": 1,
                "test_acc": 0.5}
        # Three runs in one file (each starts again at epoch 1); the first two are one configuration with
        # one result, drawn once.
        two = lambda l: [("m.jsonl", l), ("m.jsonl", dict(l, epoch=2, test_acc=0.6))]  # a run of two epochs
        series = self.plot.accuracy_series([("a.json", row)], two(line) + two(dict(line, batch_size=256.0))
                                           + two(dict(line, batch_size=64)))
        self.assertEqual([label for label, _, _ in series],
                         ["lenet-dp cpu R=1 B=256", "cpu R=1 B=256", "cpu R=1 B=64"])
        # Where all lines agree, no setting is named.
        self.assertEqual([label for label, _, _ in self.plot.accuracy_series([("a.json", row)], two(line))],
                         ["lenet-dp cpu R=1", "cpu R=1"])

    def test_control_characters_are_escaped(self):  # P31
        self.assertEqual(self.plot.one_line("a\x7fb\x1fc\x80d\xa0e"), "a\\x7fb\\x1fc\\xc2\\x80d\xa0e")

    def test_a_run_ends_with_its_file_or_its_configuration(self):  # P44, P46
        line = {"backend": "cpu", "mode": "cpu", "replicas": 1, "lr": 0.2, "test_acc": 0.5}
        runs = self.plot.metrics_runs([("a.jsonl", dict(line, epoch=1)), ("a.jsonl", dict(line, epoch=2)),
                                       ("b.jsonl", dict(line, epoch=3)), ("b.jsonl", dict(line, epoch=4, lr=0.1))])
        self.assertEqual([(r["path"], r["epochs"]) for r in runs],
                         [("a.jsonl", [1, 2]), ("b.jsonl", [3]), ("b.jsonl", [4])])

    def test_accuracies_from_0_to_1_are_drawn(self):  # P45
        metrics = [("m.jsonl", {"epoch": e, "test_acc": a}) for e, a in ((1, 0), (2, 0.0), (3, 1))]
        with contextlib.redirect_stderr(io.StringIO()) as said:
            self.assertEqual(self.plot.accuracy_series([], metrics), [("? R=?", [1, 2, 3], [0, 0.0, 1])])
        self.assertEqual(said.getvalue(), "")

    def test_a_row_is_named_by_its_name_and_counts_epochs_from_1(self):  # P48, P49
        row = {"name": "lenet-dp naive R=2", "impl": "lenet-dp", "mode": "naive", "test_acc_per_epoch": [0.5, 0.6, 0.7]}
        self.assertEqual(self.plot.accuracy_series([("b.json", row)], []),
                         [("lenet-dp naive R=2", [1, 2, 3], [0.5, 0.6, 0.7])])

    def test_labels_equal_in_one_file_are_numbered(self):  # P47
        row = {"name": "x", "test_acc_per_epoch": [0.5, 0.6]}
        series = self.plot.accuracy_series([("b.json", row), ("b.json", dict(row, test_acc_per_epoch=[0.5, 0.7]))], [])
        self.assertEqual([label for label, _, _ in series], ["x [b] #1", "x [b] #2"])

    def test_the_training_set_size_does_not_name_accuracy_lines(self):  # P50
        # Metrics lines do not record it: a row that does is not another configuration for that.
        row = {"name": "lenet-dp cpu R=1", "train_examples": 60000, "test_acc_per_epoch": [0.1, 0.5]}
        metrics = [("m.jsonl", {"backend": "cpu", "replicas": 1, "epoch": e, "test_acc": 0.4}) for e in (1, 2)]
        self.assertEqual([label for label, _, _ in self.plot.accuracy_series([("a.json", row)], metrics)],
                         ["lenet-dp cpu R=1", "cpu R=1"])

    def test_settings_that_differ_are_told_apart(self):  # P51
        row = {"name": "x", "test_acc_per_epoch": [0.1, 0.5]}
        series = self.plot.accuracy_series([("a.json", dict(row, lr=0.1)), ("b.json", dict(row, lr=0.10000001))], [])
        self.assertEqual([label for label, _, _ in series], ["x lr=0.1", "x lr=0.10000001"])


class SecondsSeries(PlotModule):
    """plot.py's series of seconds per epoch."""

    def test_seconds_of_other_settings_are_other_series(self):
        base = {"impl": "lenet-dp", "mode": "cpu", "replicas": 1, "batch_size": 256, "lr": 0.2,
                "train_examples": 60000, "seconds_per_epoch": 6.5}
        table = self.plot.seconds_table([("a.json", base), ("b.json", dict(base, replicas=2, seconds_per_epoch=7.0))])
        self.assertEqual(table, {"lenet-dp cpu": {1: 6.5, 2: 7.0}})
        # A replica count that is no count (1.5, 0) is not drawn as another one.
        for bad in (1.5, 0, -2, "2", True, None):
            with contextlib.redirect_stderr(io.StringIO()) as said:
                table = self.plot.seconds_table([("a.json", base),
                                                 ("b.json", dict(base, name="x", replicas=bad, seconds_per_epoch=7.0))])
            self.assertEqual(table, {"lenet-dp cpu": {1: 6.5}}, bad)
            self.assertIn(f'b.json: row "x": replicas {json.dumps(bad)} is not a replica count', said.getvalue())
        self.assertEqual(self.plot.seconds_table([("a.json", dict(base, replicas=2.0))]), {"lenet-dp cpu": {2: 6.5}})
        # A row without an impl is named by its name, not left without a label.
        unnamed = {k: v for k, v in base.items() if k not in ("impl", "mode")}
        table = self.plot.seconds_table([("a.json", dict(unnamed, name="x")), ("b.json", dict(unnamed, name="y"))])
        self.assertEqual(table, {"x": {1: 6.5}, "y": {1: 6.5}})
        table = self.plot.seconds_table([("a.json", base), ("b.json", dict(base, replicas=2, batch_size=256.0))])
        self.assertEqual(list(table), ["lenet-dp cpu"])  # 256 and 256.0 are one batch size
        # ... and one series, named alike, where another batch size makes the batch size part of the name.
        table = self.plot.seconds_table([("a.json", base), ("b.json", dict(base, replicas=2, batch_size=256.0)),
                                         ("c.json", dict(base, batch_size=1024))])
        self.assertEqual(table, {"lenet-dp cpu B=256": {1: 6.5, 2: 6.5}, "lenet-dp cpu B=1024": {1: 6.5}})
        small = dict(base, train_examples=500, seconds_per_epoch=0.06)
        old = {k: v for k, v in base.items() if k != "train_examples"}  # a row from before the field
        table = self.plot.seconds_table([("a.json", base), ("b.json", small), ("c.json", old)])
        self.assertEqual(table, {"lenet-dp cpu N=60000": {1: 6.5}, "lenet-dp cpu N=500": {1: 0.06},
                                 "lenet-dp cpu N=?": {1: 6.5}})

    def test_a_peer_on_the_cpu_and_on_a_gpu_is_two_series(self):
        peer = {"impl": "pytorch-textbook", "mode": "textbook", "replicas": 1, "batch_size": 256, "lr": 0.9,
                "train_examples": 60000, "seconds_per_epoch": 40.0, "devices": ["cpu"]}
        ours = {"impl": "lenet-dp", "mode": "cpu", "replicas": 1, "batch_size": 256, "lr": 0.9,
                "train_examples": 60000, "seconds_per_epoch": 6.5, "devices": ["cpu"]}
        gpu = dict(peer, seconds_per_epoch=3.0, devices=["cuda:0"])
        table = self.plot.seconds_table([("a.json", peer), ("b.json", gpu), ("c.json", ours)])
        self.assertEqual(table, {"pytorch-textbook on cpu": {1: 40.0}, "pytorch-textbook on cuda": {1: 3.0},
                                 "lenet-dp cpu": {1: 6.5}})
        # Rows all on one kind of device keep their names.
        self.assertEqual(list(self.plot.seconds_table([("a.json", peer), ("c.json", ours)])),
                         ["pytorch-textbook", "lenet-dp cpu"])

    def test_rows_without_a_time_are_left_out(self):  # P35, P53, P54
        row = {"name": "x", "impl": "lenet-dp", "mode": "cpu", "replicas": 1}
        for seconds in (0, json.loads("Infinity"), -1.0):
            with self.subTest(seconds=seconds), contextlib.redirect_stderr(io.StringIO()) as said:
                self.assertEqual(self.plot.seconds_table([("a.json", dict(row, seconds_per_epoch=seconds))]), {})
            self.assertIn(f'a.json: row "x": seconds_per_epoch {json.dumps(seconds)} is not a time', said.getvalue())
        # A row of accuracies only is no seconds row, and not an error.
        with contextlib.redirect_stderr(io.StringIO()) as said:
            self.assertEqual(self.plot.seconds_table([("a.json", dict(row, test_acc_per_epoch=[0.5]))]), {})
        self.assertEqual(said.getvalue(), "")

    def test_an_empty_device_list_is_no_kind(self):  # P52
        row = {"impl": "pytorch-textbook", "mode": "textbook", "replicas": 1, "seconds_per_epoch": 40.0}
        self.assertIsNone(self.plot.device_kind(dict(row, devices=[])))
        table = self.plot.seconds_table([("a.json", dict(row, devices=[])), ("b.json", dict(row, replicas=2))])
        self.assertEqual(table, {"pytorch-textbook": {1: 40.0, 2: 40.0}})


class SampleIsMarked(PlotModule):
    """Made-up rows are "(sample)" in every plot, not only in the accuracy legend."""

    def test_sample_folder_is_marked_in_each_plot(self):
        with contextlib.redirect_stderr(io.StringIO()):
            bench, metrics, timelines = self.plot.load([SAMPLE])
        labels = [label for label, _, _ in self.plot.accuracy_series(bench, metrics)]
        self.assertIn("cpu R=1 (sample)", labels)  # the metrics lines, which have no name to say it
        self.assertEqual([label for label in labels if label.count("(sample)") != 1], [])
        names = list(self.plot.seconds_table(bench))
        self.assertIn("lenet-dp naive (sample)", names)
        self.assertEqual([name for name in names if not name.endswith(" (sample)")], [])
        titles = [self.plot.panel_title(p) for p in self.plot.timeline_panels(timelines)]
        self.assertEqual(len(titles), 2)
        for title in titles:
            self.assertRegex(title, r"^(naive|graph), R=2 \(sample\): ")

    def test_sample_folder_through_a_link_is_marked(self):
        with tempfile.TemporaryDirectory() as d:
            link = os.path.join(d, "smp")
            os.symlink(SAMPLE, link)
            with contextlib.redirect_stderr(io.StringIO()):
                bench, metrics, timelines = self.plot.load([link])
            self.assertIn("cpu R=1 (sample)", [label for label, _, _ in self.plot.accuracy_series(bench, metrics)])
            for panel in self.plot.timeline_panels(timelines):
                self.assertIn("(sample)", self.plot.panel_title(panel))

    def test_only_samples_are_marked(self):
        row = {"name": "naive R=1", "impl": "lenet-dp", "mode": "naive", "replicas": 1, "seconds_per_epoch": 0.9}
        made_up = dict(row, name="naive R=1 (sample)", seconds_per_epoch=0.5)
        # A measured row and a made-up one of one configuration are two series, not one replacing the other.
        table = self.plot.seconds_table([("/r/2026-12-02/bench.json", row), ("/r/other/bench.json", made_up)])
        self.assertEqual(table, {"lenet-dp naive": {1: 0.9}, "lenet-dp naive (sample)": {1: 0.5}})
        self.assertEqual(list(self.plot.seconds_table([("/r/results/sample/bench.json", row)])), ["lenet-dp naive (sample)"])
        # A folder of one's own runs that happens to be named sample holds measurements.
        self.assertEqual(list(self.plot.seconds_table([("/home/me/sample/bench.json", row)])), ["lenet-dp naive"])
        timeline = {"mode": "graph", "steps": [{"step": 0, "busy_ms": 0.5, "idle_ms": 0.1}]}
        for path, title in (("/r/2026-12-02/timeline-graph-r1.json", "graph: 0.500 ms busy + 0.100 ms idle per step "
                                                                      "(timeline-graph-r1)"),
                            ("/r/results/sample/timeline-graph.json", "graph (sample): 0.500 ms busy + 0.100 ms idle per step "
                                                              "(timeline-graph)")):
            [panel] = self.plot.timeline_panels([(path, timeline)])
            self.assertEqual(self.plot.panel_title(panel), title)


class SampleIsLabelled(unittest.TestCase):
    def test_readme_says_synthetic(self):
        with open(os.path.join(SAMPLE, "README.md")) as f:
            text = f.read()
        self.assertIn("NOT measurements", text)
        self.assertIn("Synthetic", text)


# Mutant IDs in comments (P16, ...): profiling/results/2026-12-05-cpu-2core/mutations-py.jsonl.
@unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not importable (apt-get install python3-matplotlib)")
class Drawing(PlotModule):
    def drawn(self, draw, data):
        """The figure draw() makes, before it is saved."""
        plt, figs = self.plot.pyplot(), []
        def keep(plt_, fig, out_dir, name, tight=False):
            figs.append(fig)
            return name
        with mock.patch.object(self.plot, "save", keep):
            draw(plt, data, "unused")
        self.addCleanup(plt.close, figs[0])
        return figs[0]

    def test_accuracy_axes(self):  # P17, P18
        [ax] = self.drawn(self.plot.draw_accuracy, [("a", [1, 2, 3], [0.5, 0.6, 0.7])]).axes
        self.assertEqual((ax.get_xlabel(), ax.get_ylabel()), ("epoch", "test acc"))
        self.assertEqual(ax.get_xlim(), (1, 3))
        self.assertEqual(ax.get_ylim(), (0, 1))
        self.assertEqual([list(l.get_ydata()) for l in ax.get_lines()], [[0.5, 0.6, 0.7]])

    def test_seconds_log_axis_only_for_a_wide_range(self):  # P19
        for times, scale in (((100.0, 1.0), "log"), ((29.0, 1.0), "linear")):
            with self.subTest(times=times):
                [ax] = self.drawn(self.plot.draw_seconds, {"x": {1: times[0]}, "y": {1: times[1]}}).axes
                self.assertEqual(ax.get_yscale(), scale)
                self.assertEqual(sorted(p.get_height() for p in ax.patches), sorted(times))

    def test_timeline_stacks_idle_on_busy(self):  # P20
        panels = self.plot.timeline_panels([("t.json", {"mode": "graph", "steps": [
            {"step": 0, "busy_ms": 2.0, "idle_ms": 0.5}, {"step": 1, "busy_ms": 3.0, "idle_ms": 1.5}]})])
        [ax] = self.drawn(self.plot.draw_timeline, panels).axes
        bars = [(p.get_y(), p.get_height()) for p in ax.patches]
        self.assertEqual(bars, [(0, 2.0), (0, 3.0), (2.0, 0.5), (3.0, 1.5)])  # busy, then idle on top
        self.assertEqual(ax.get_ylabel(), "ms")

    def test_accuracy_x_axis_holds_the_longest_line(self):  # P57, P58
        [ax] = self.drawn(self.plot.draw_accuracy,
                          [("a", [1, 2, 3, 4], [0.5, 0.6, 0.7, 0.8]), ("b", [1, 2], [0.5, 0.6])]).axes
        self.assertEqual(ax.get_xlim(), (1, 4))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # limits of one epoch from 1 to 1 are a warning
            [ax] = self.drawn(self.plot.draw_accuracy, [("a", [1], [0.5])]).axes
        self.assertEqual(ax.get_xlim(), (1, 2))

    def test_seconds_bars_side_by_side_at_their_replica_counts(self):  # P59, P60, P61
        [ax] = self.drawn(self.plot.draw_seconds, {"x": {1: 2.0, 2: 3.0}, "y": {2: 4.0}}).axes
        bars = [(round(p.get_x() + p.get_width() / 2, 6), round(p.get_width(), 6), p.get_height()) for p in ax.patches]
        # Two series: bars 0.4 wide, x left of each tick, y right of it; y has no bar at R=1.
        self.assertEqual(bars, [(-0.2, 0.4, 2.0), (0.8, 0.4, 3.0), (1.2, 0.4, 4.0)])
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["R=1", "R=2"])

    def test_timeline_panels_share_the_y_axis(self):  # P62, P63
        steps = lambda ms: [{"step": 0, "busy_ms": ms, "idle_ms": 0.1}]
        panels = self.plot.timeline_panels([("n.json", {"mode": "naive", "steps": steps(9.0)}),
                                            ("g.json", {"mode": "graph", "steps": steps(1.0)})])
        top, bottom = self.drawn(self.plot.draw_timeline, panels).axes
        self.assertEqual(top.get_ylim(), bottom.get_ylim())
        self.assertGreater(bottom.get_ylim()[1], 9.0)
        self.assertEqual((top.get_xlabel(), bottom.get_xlabel()), ("", "step"))


class Ordering(PlotModule):
    def test_naive_timeline_first(self):  # P16
        t = lambda mode: {"mode": mode, "steps": [{"step": 0, "busy_ms": 1.0, "idle_ms": 0.1}]}
        panels = self.plot.timeline_panels([("g.json", t("graph")), ("t.json", t("pytorch-textbook")),
                                            ("n.json", t("naive"))])
        self.assertEqual([p[0] for p in panels], ["naive", "pytorch-textbook", "graph"])

    def test_a_later_row_replaces_an_earlier_one(self):  # P13
        row = {"impl": "lenet-dp", "mode": "cpu", "replicas": 1, "seconds_per_epoch": 6.5}
        with contextlib.redirect_stderr(io.StringIO()) as said:
            table = self.plot.seconds_table([("a.json", row), ("b.json", dict(row, seconds_per_epoch=5.0))])
        self.assertEqual(table, {"lenet-dp cpu": {1: 5.0}})
        self.assertIn("lenet-dp cpu R=1 appears more than once with different times; using the one from b.json",
                      said.getvalue())

    def test_a_repeated_epoch_starts_another_run(self):  # P06
        line = {"backend": "cpu", "mode": "cpu", "replicas": 1, "test_acc": 0.5}
        metrics = [("m.jsonl", dict(line, epoch=e)) for e in (1, 2, 2)]
        self.assertEqual([r["epochs"] for r in self.plot.metrics_runs(metrics)], [[1, 2], [2]])

    def test_timeline_steps_by_their_numbers(self):  # P55, P56
        [panel] = self.plot.timeline_panels([("t.json", {"mode": "graph", "steps": [
            {"step": 7, "busy_ms": 2.0, "idle_ms": 0.5}, {"step": 3, "busy_ms": 1.0, "idle_ms": 0.2}]})])
        self.assertEqual(panel[3], [(3, 1.0, 0.2), (7, 2.0, 0.5)])


if __name__ == "__main__":
    unittest.main()
