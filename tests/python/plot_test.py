#!/usr/bin/env python3
"""scripts/plot.py on CSV files in every format the tutorials write (03's and 05's --csv, 06's three
files): each command must write a real PNG of a sensible size, and bad input must fail with a message
naming the file. Also what the figures hold: one colour per run in both panels of `curves`, the
"2^-24 / S" line inside the histogram's x-range, and `all` on a folder without training.csv (06 --csv
FILE) drawing the other two. Exits 77 (CTest's "skipped") when matplotlib is missing.
Usage: plot_test.py --script <path to scripts/plot.py>
"""
import argparse
import contextlib
import importlib.util
import io
import os
import struct
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("SKIP: matplotlib is not installed (Debian/Ubuntu: apt-get install python3-matplotlib)")
    sys.exit(77)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR", f"{path}: no IHDR chunk"
    return struct.unpack(">II", head[16:24])


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(script, *args):
    """plot.py's main() in this process (importing matplotlib once keeps the test fast)."""
    spec = importlib.util.spec_from_file_location("halfling_plot", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = [script, *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = mod.main()
            except SystemExit as e:
                code = e.code
    finally:
        sys.argv = saved
    return Result(code, out.getvalue(), err.getvalue())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    script = ap.parse_args().script
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    with tempfile.TemporaryDirectory() as d:
        j = lambda name: os.path.join(d, name)  # noqa: E731
        write(j("t03.csv"), "epoch,train_loss,train_acc,test_acc,seconds,images_per_second\n"
                            "1,0.243,0.9265,0.9696,2.0,30000\n2,0.078,0.976,0.9687,2.0,30000\n3,0.05,0.985,0.9746,2.0,30000\n")
        # 05's --csv as the program writes it: the table's four runs, where "mixed, no scaling" holds a comma
        # and is quoted (RFC 4180), and a --single label whose scaler spec has commas too.
        t05_header = "run,epoch,train_loss,test_acc,seconds,skipped_steps,loss_scale\n"
        t05_rows = ("fp32,1,0.24,0.97,2,0,1\nfp32,2,0.08,0.968,2,0,1\n"
                    "fp16 weights,1,0.25,0.968,3,0,65536\nfp16 weights,2,0.09,0.969,3,0,65536\n"
                    "\"mixed, no scaling\",1,0.25,0.968,3,0,1\n\"mixed, no scaling\",2,0.09,0.97,3,0,1\n"
                    "mixed + dynamic,1,0.25,0.969,3,0,65536\nmixed + dynamic,2,0.08,0.97,3,0,65536\n"
                    "\"mixed dynamic:init=1e9,hysteresis=2\",1,0.26,0.967,3,15,32768\n")
        write(j("t05.csv"), t05_header + t05_rows)
        os.mkdir(j("t06"))
        write(j("t06/training.csv"), "run,epoch,train_loss,train_acc,test_acc,seconds,images_per_second,skipped_steps,loss_scale\n"
                                     "\"histogram run (mixed, static:1024)\",1,0.24,0.92,0.97,100,400,0,1024\n"
                                     "static,1,0.24,0.92,0.97,50,1000,1,1024\n"
                                     "dynamic,1,0.24,0.92,0.97,50,1000,1,524288\n")
        rows = ["step,run,scale,skipped"]
        for run_name, scales in (("static", [1024] * 10), ("dynamic", [65536] * 4 + [32768] * 6)):
            rows += [f"{i + 1},{run_name},{s},{1 if i == 3 else 0}" for i, s in enumerate(scales)]
        write(j("t06/scale_history.csv"), "\n".join(rows) + "\n")
        rows = ["layer,log2_bin,count,percent,static_scale,dynamic_scale", '"all",zero,30,30,1024,32768']
        rows += [f'"all",{e},{c},{c},1024,32768' for e, c in zip(range(-30, -10), [1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3, 1, 1])]
        write(j("t06/histogram.csv"), "\n".join(rows) + "\n")

        for args, out in ((["curves", j("t03.csv"), "-o", j("c03.png")], j("c03.png")),
                          (["curves", j("t05.csv"), j("t03.csv"), "-o", j("c05.png")], j("c05.png")),
                          (["scale", j("t06/scale_history.csv"), "-o", j("s.png")], j("s.png")),
                          (["histogram", j("t06/histogram.csv"), "-o", j("h.png")], j("h.png"))):
            r = run(script, *args)
            check(r.returncode == 0, f"{' '.join(args[:1])}: exit {r.returncode}: {r.stderr}")
            if r.returncode == 0:
                w, h = png_size(out)
                check(300 <= w <= 2000 and 200 <= h <= 1200, f"{out}: odd size {w}x{h}")
                check(f"wrote {out}" in r.stdout, f"{args[0]}: no 'wrote' line: {r.stdout}")
        # The quoted labels come back whole, each run with its epochs as numbers (what plot_curves groups by).
        spec = importlib.util.spec_from_file_location("halfling_plot_csv", script)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        rows = mod.read_csv(j("t05.csv"), ["run", "epoch", "train_loss"])
        runs = {}
        for r in rows:
            runs.setdefault(r["run"], []).append(mod.number(r, "epoch", "t05.csv"))
        check(runs == {"fp32": [1, 2], "fp16 weights": [1, 2], "mixed, no scaling": [1, 2], "mixed + dynamic": [1, 2],
                       "mixed dynamic:init=1e9,hysteresis=2": [1]}, f"t05.csv runs: {runs}")
        check(mod.read_csv(j("t06/training.csv"), ["run"])[0]["run"] == "histogram run (mixed, static:1024)",
              "t06 training.csv: the quoted histogram-run label")
        # What the figures hold (the figure plot.py drew last is pyplot's current one; it is not closed).
        plt = mod.import_pyplot()
        # curves: a run's accuracy lines take its loss line's colour (test solid, train dashed), and the runs'
        # colours differ; before, each panel ran its own colour cycle and one run's lines disagreed.
        mod.plot_curves(plt, [j("t05.csv"), j("t03.csv")], j("colours.png"))
        ax_loss, ax_acc = plt.gcf().axes
        loss_colours = {ln.get_label(): ln.get_color() for ln in ax_loss.get_lines()}
        check(len(loss_colours) == 6 and len(set(loss_colours.values())) == 6, f"curves: run colours {loss_colours}")
        acc = {ln.get_label(): (ln.get_color(), ln.get_linestyle()) for ln in ax_acc.get_lines()}
        check(len(acc) == 7, f"curves: accuracy lines {sorted(acc)}")  # t05: test only; t03: test and train
        for label, (colour, style) in acc.items():
            run_label, kind = label.rsplit(" (", 1)
            check(colour == loss_colours.get(run_label), f"curves: '{label}' is {colour}, its loss line "
                                                         f"{loss_colours.get(run_label)}")
            check(style == {"test)": "-", "train)": "--"}[kind], f"curves: '{label}' drawn '{style}'")
        plt.close("all")
        # histogram: the "2^-24 / S" line of a static S lies inside the x-range, among the bins (right of the
        # "zero" bar), also where the data stop above it (S=1024: -34; the data here: -26 and up).
        for s_static, where in ((1024, -34), (2 ** 20, -44), (0.25, -22)):
            rows = ["layer,log2_bin,count,percent,static_scale,dynamic_scale", f'"all",zero,30,30,{s_static},32768']
            rows += [f'"all",{e},5,5,{s_static},32768' for e in range(-26, -7)]
            write(j("hs.csv"), "\n".join(rows) + "\n")
            mod.plot_histogram(plt, j("hs.csv"), j("hs.png"))
            ax = plt.gcf().axes[0]
            lines = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label().startswith("2^-24 / S")]
            lo, hi = ax.get_xlim()
            zero_tick = ax.get_xticks()[0]
            check(lines == [where] and zero_tick + 1 < where < hi,
                  f"histogram S={s_static}: line at {lines}, x-range ({lo}, {hi}), zero bar at {zero_tick}")
            plt.close("all")

        # The same rows with the labels unquoted (what 05 and 06 wrote before they quoted them): refused,
        # naming the row and the cause, instead of reading " no scaling" as an epoch.
        write(j("unquoted.csv"), t05_header + t05_rows.replace('"', ""))
        r = run(script, "curves", j("unquoted.csv"))
        check(r.returncode == 2 and "unquoted.csv: data row 5 has 8 fields, the header 7" in r.stderr
              and "double quotes" in r.stderr, f"unquoted comma: {r.returncode} {r.stderr}")

        # Once as a separate program, the way a user runs it.
        r = subprocess.run([sys.executable, script, "all", j("t06")], capture_output=True, text=True)
        check(r.returncode == 0, f"all: exit {r.returncode}: {r.stderr}")
        for name in ("curves.png", "loss_scale.png", "gradient_histogram.png"):
            check(os.path.exists(j("t06/" + name)) and png_size(j("t06/" + name))[0] > 300, f"all: {name} missing")

        # all on a folder without training.csv (06 --csv FILE wrote it elsewhere): a note naming the missing
        # file, the other two plots drawn, exit 0. On a folder with none of the three: exit 2, naming them.
        os.mkdir(j("t06_csv"))
        for name in ("scale_history.csv", "histogram.csv"):
            with open(j("t06/" + name)) as src:
                write(j("t06_csv/" + name), src.read())
        r = subprocess.run([sys.executable, script, "all", j("t06_csv")], capture_output=True, text=True)
        check(r.returncode == 0, f"all without training.csv: exit {r.returncode}: {r.stderr}")
        check(f"no {j('t06_csv/training.csv')}, curves.png skipped" in r.stderr and r.stderr.count("\n") == 1,
              f"all without training.csv: note: {r.stderr!r}")
        check(not os.path.exists(j("t06_csv/curves.png")), "all without training.csv: drew curves.png")
        for name in ("loss_scale.png", "gradient_histogram.png"):
            check(os.path.exists(j("t06_csv/" + name)) and f"wrote {j('t06_csv/' + name)}" in r.stdout,
                  f"all without training.csv: {name} not drawn: {r.stdout}")
        os.mkdir(j("t06_none"))
        r = run(script, "all", j("t06_none"))
        check(r.returncode == 2 and "none of training.csv, scale_history.csv, histogram.csv" in r.stderr
              and "t06_none" in r.stderr, f"all on an empty folder: {r.returncode} {r.stderr}")
        check(os.listdir(j("t06_none")) == [], "all on an empty folder: wrote something")

        # Bad input: a clear message naming the file, exit 2.
        r = run(script, "curves", j("missing.csv"))
        check(r.returncode == 2 and "missing.csv: no such file" in r.stderr, f"missing file: {r.returncode} {r.stderr}")
        write(j("wrong.csv"), "a,b\n1,2\n")
        r = run(script, "scale", j("wrong.csv"))
        check(r.returncode == 2 and "wrong.csv: missing column(s) step" in r.stderr, f"wrong columns: {r.returncode} {r.stderr}")
        r = run(script, "histogram", j("t06/histogram.csv"), "--layer", "nope")
        check(r.returncode == 2 and "no rows for layer 'nope'" in r.stderr, f"unknown layer: {r.returncode} {r.stderr}")
        write(j("text.csv"), "epoch,train_loss\n1,abc\n")
        r = run(script, "curves", j("text.csv"))
        check(r.returncode == 2 and "train_loss holds 'abc'" in r.stderr, f"non-number: {r.returncode} {r.stderr}")

    # Without matplotlib the script must say how to install it and exit 3: hide it from a child python.
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "matplotlib"))
        write(os.path.join(d, "matplotlib", "__init__.py"), "raise ImportError('hidden by plot_test.py')\n")
        env = dict(os.environ, PYTHONPATH=d, HALFLING_PLOT_REEXEC="1")
        r = subprocess.run([sys.executable, script, "curves", "x.csv"], capture_output=True, text=True, env=env)
        check(r.returncode == 3 and "apt-get install python3-matplotlib" in r.stderr, f"no matplotlib: {r.returncode} {r.stderr}")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("plot.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
