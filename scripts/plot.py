#!/usr/bin/env python3
"""Turn halfling's CSV logs into PNG plots (matplotlib).

  scripts/plot.py curves run.csv [more.csv ...] -o curves.png   loss and accuracy per epoch (--csv of any
                                                                  training tutorial; one line per run)
  scripts/plot.py scale scale_history.csv -o scale.png          loss scale over the steps (tutorial 06)
  scripts/plot.py histogram histogram.csv -o hist.png [--layer all]
                                                                  activation-gradient histogram with FP16's
                                                                  range marked (tutorial 06, paper Figure 3)
  scripts/plot.py all DIR                                        the three plots of a tutorial 06 --out DIR,
                                                                  written next to the CSV files; a CSV not
                                                                  there is skipped with a note (06's --csv
                                                                  FILE moves training.csv), none is an error

Needs matplotlib (Debian/Ubuntu: sudo apt-get install python3-matplotlib). A python3 from pyenv or a
venv often lacks the Debian packages: when matplotlib is missing here and /usr/bin/python3 has it,
the script re-runs itself with /usr/bin/python3. Without matplotlib anywhere it says how to install
it and exits with status 3. Bad input (a missing file, a CSV without the expected columns) exits 2
with a message naming the file.
"""
import argparse
import csv
import math
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
INSTALL_HINT = "Debian/Ubuntu: sudo apt-get install python3-matplotlib (or: pip install matplotlib)"


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        # Re-run under the system python3 when it is another interpreter (pyenv, venv) that has matplotlib.
        here = os.path.realpath(sys.executable)
        if (os.path.exists(SYSTEM_PYTHON) and os.path.realpath(SYSTEM_PYTHON) != here
                and not os.environ.get("HALFLING_PLOT_REEXEC")):
            os.environ["HALFLING_PLOT_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        sys.stderr.write(f"plot.py: matplotlib is not installed for {sys.executable}\n"
                         f"  install it with: {INSTALL_HINT}\n")
        sys.exit(3)
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt
    return plt


class InputError(Exception):
    pass


def read_csv(path, required):
    """The rows of an RFC 4180 CSV file as dicts. A field that holds a comma is quoted ("mixed, no scaling"),
    as the tutorials write it; a row with more or fewer fields than the header is refused, naming it,
    rather than read with its columns shifted."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames or []
    if not rows:
        raise InputError(f"{path}: no data rows")
    for i, r in enumerate(rows, start=1):
        # DictReader files surplus fields under the key None and fills missing ones with None.
        extra = len(r.get(None) or [])
        missing = sum(1 for k in header if r.get(k) is None)
        if extra or missing:
            hint = ' (a field holding a comma must be in double quotes, e.g. "mixed, no scaling")' if extra else ""
            raise InputError(f"{path}: data row {i} has {len(header) + extra - missing} fields, the header "
                             f"{len(header)}{hint}")
    missing = [c for c in required if c not in rows[0]]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(rows[0].keys())})")
    return rows


def number(row, key, path):
    try:
        return float(row[key])
    except (TypeError, ValueError):
        raise InputError(f"{path}: column {key} holds '{row[key]}', not a number")


def plot_curves(plt, paths, out):
    """Loss and accuracy per epoch; a 'run' column (tutorials 05, 06) splits a file into several lines.
    A run has one colour in both panels (its loss line's); in the accuracy panel the line style tells
    test (solid) from train (dashed)."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for path in paths:
        rows = read_csv(path, ["epoch", "train_loss"])
        stem = os.path.splitext(os.path.basename(path))[0]
        runs = {}
        for r in rows:
            runs.setdefault(r.get("run", stem) if len(paths) == 1 else f"{stem}: {r.get('run', '')}".rstrip(": "), []).append(r)
        for label, rs in runs.items():
            ep = [number(r, "epoch", path) for r in rs]
            (loss_line,) = ax_loss.plot(ep, [number(r, "train_loss", path) for r in rs], marker="o", label=label)
            for col, style in (("test_acc", "-"), ("train_acc", "--")):
                if col in rs[0]:
                    ax_acc.plot(ep, [100 * number(r, col, path) for r in rs], style, marker="o",
                                color=loss_line.get_color(), label=f"{label} ({col.replace('_acc', '')})")
    ax_loss.set(xlabel="epoch", ylabel="mean training loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    from matplotlib.ticker import MaxNLocator
    for ax in (ax_loss, ax_acc):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    return out


def plot_scale(plt, path, out):
    rows = read_csv(path, ["step", "run", "scale", "skipped"])
    fig, ax = plt.subplots(figsize=(8, 3.5))
    runs = {}
    for r in rows:
        runs.setdefault(r["run"], []).append(r)
    for label, rs in runs.items():
        steps = [number(r, "step", path) for r in rs]
        scales = [number(r, "scale", path) for r in rs]
        (line,) = ax.step(steps, scales, where="post", label=label)
        skipped = [(s, v) for s, v, r in zip(steps, scales, rs) if r["skipped"] not in ("0", "")]
        if skipped:
            ax.plot([s for s, _ in skipped], [v for _, v in skipped], "x", color=line.get_color(), markersize=9,
                    label=f"{label}: skipped step ({len(skipped)})")
    ax.set_yscale("log", base=2)
    ax.set(xlabel="training step", ylabel="loss scale S", title="loss scale over time (x: step skipped on inf/NaN)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    return out


def plot_histogram(plt, path, out, layer="all"):
    rows = read_csv(path, ["layer", "log2_bin", "count", "percent"])
    rows = [r for r in rows if r["layer"] == layer]
    if not rows:
        raise InputError(f"{path}: no rows for layer '{layer}'")
    zero = sum(number(r, "percent", path) for r in rows if r["log2_bin"] == "zero")
    bins = [(int(number(r, "log2_bin", path)), number(r, "percent", path)) for r in rows if r["log2_bin"] != "zero"]
    # Fold each tail holding under 0.01% of the values out of view (as the tutorial's ASCII table does),
    # so that a handful of values near 2^-64 do not squeeze the picture.
    bins.sort()
    kept = [e for e, p in bins if p > 0] or [-20]
    lo_e, hi_e = kept[0], kept[-1]
    below = 0.0
    for e, p in bins:
        if p == 0:
            continue
        if below + p > 0.01:
            lo_e = e
            break
        below += p
    above = 0.0
    for e, p in reversed(bins):
        if p == 0:
            continue
        if above + p > 0.01:
            hi_e = e
            break
        above += p
    lo, hi = min(lo_e, -26) - 1, max(hi_e, -13) + 1
    static_s = number(rows[0], "static_scale", path) if "static_scale" in rows[0] else None
    # The "2^-24 / S" line of a static scale S: the range is widened to hold it, so that a line named in the
    # legend is also drawn, among the bins (S=1024 puts it at -34, below what most runs' data reach).
    s_line = -24 - math.log2(static_s) if static_s and static_s > 0 and static_s != 1 else None
    if s_line is not None:
        lo, hi = min(lo, math.floor(s_line) - 1), max(hi, math.ceil(s_line) + 1)

    fig, ax = plt.subplots(figsize=(11, 4.2))
    ax.axvspan(lo - 1, -24, color="tab:red", alpha=0.10, label="below FP16 (rounds to 0 below 2^-25)")
    ax.axvspan(-24, -14, color="tab:orange", alpha=0.12, label="FP16 subnormal (2^-24 .. 2^-14)")
    ax.axvspan(-14, min(hi + 1, math.log2(65504)), color="tab:green", alpha=0.08, label="FP16 normal (2^-14 .. 65504)")
    ax.bar([e + 0.5 for e, p in bins if lo <= e <= hi], [p for e, p in bins if lo <= e <= hi], width=0.9,
           color="tab:blue", label="nonzero values")
    ax.bar([lo - 3], [zero], width=0.9, color="tab:gray", label="exactly 0 (e.g. behind an inactive ReLU)")
    ax.text(lo - 3, zero, f"{zero:.0f}%", ha="center", va="bottom", fontsize=8)
    for x, text in ((-24, "2^-24"), (-14, "2^-14")):
        ax.axvline(x, color="k", lw=0.8)
        ax.text(x, ax.get_ylim()[1] * 0.95, text, ha="right", va="top", fontsize=8, rotation=90)
    if s_line is not None:
        ax.axvline(s_line, color="tab:purple", ls="--", lw=1,
                   label=f"2^-24 / S: the smallest value FP16 keeps after scaling by S={static_s:g}")
    ticks = list(range(lo + (-lo) % 4, hi + 1, 4))
    ax.set_xticks([lo - 3] + ticks)
    ax.set_xticklabels(["zero"] + [str(t) for t in ticks])
    ax.set_xlim(lo - 4, hi + 1)
    ax.set(xlabel="log2(|activation gradient|)", ylabel="% of all values",
           title=f"activation-gradient magnitudes ({layer})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    return out


def plot_all(plt, d):
    """The plots of a tutorial 06 --out folder, each one whose CSV is there. A missing CSV is skipped with a
    note (06 --csv FILE writes training.csv to FILE instead: plot.py curves FILE draws that one); none there
    at all is an error."""
    plots = (("training.csv", "curves.png", lambda i, o: plot_curves(plt, [i], o)),
             ("scale_history.csv", "loss_scale.png", lambda i, o: plot_scale(plt, i, o)),
             ("histogram.csv", "gradient_histogram.png", lambda i, o: plot_histogram(plt, i, o)))
    if not any(os.path.isfile(os.path.join(d, csv_name)) for csv_name, _, _ in plots):
        raise InputError(f"{d}: none of {', '.join(p[0] for p in plots)} there (a tutorial 06 --out folder?)")
    written = []
    for csv_name, png, draw in plots:
        if os.path.isfile(os.path.join(d, csv_name)):
            written.append(draw(os.path.join(d, csv_name), os.path.join(d, png)))
        else:
            note = (" (06 --csv FILE writes it to FILE; plot.py curves FILE draws it)"
                    if csv_name == "training.csv" else "")
            sys.stderr.write(f"plot.py all: no {os.path.join(d, csv_name)}, {png} skipped{note}\n")
    return written


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("curves", help="loss and accuracy per epoch from one or more --csv logs")
    c.add_argument("csv", nargs="+")
    c.add_argument("-o", "--out", default="curves.png")
    s = sub.add_parser("scale", help="loss scale over the steps (scale_history.csv of tutorial 06)")
    s.add_argument("csv")
    s.add_argument("-o", "--out", default="loss_scale.png")
    h = sub.add_parser("histogram", help="activation-gradient histogram (histogram.csv of tutorial 06)")
    h.add_argument("csv")
    h.add_argument("-o", "--out", default="gradient_histogram.png")
    h.add_argument("--layer", default="all", help="'all' or a layer name from the CSV, e.g. '1 Linear(784 -> 512)'")
    a = sub.add_parser("all", help="the three plots of a tutorial 06 --out folder (each whose CSV is there)")
    a.add_argument("dir")
    args = p.parse_args()

    plt = import_pyplot()
    try:
        if args.cmd == "curves":
            written = [plot_curves(plt, args.csv, args.out)]
        elif args.cmd == "scale":
            written = [plot_scale(plt, args.csv, args.out)]
        elif args.cmd == "histogram":
            written = [plot_histogram(plt, args.csv, args.out, args.layer)]
        else:
            written = plot_all(plt, args.dir)
    except InputError as e:
        sys.stderr.write(f"plot.py {args.cmd}: {e}\n")
        return 2
    for w in written:
        print(f"wrote {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
