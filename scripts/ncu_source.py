#!/usr/bin/env python3
"""Where a kernel's warps wait and which instructions waste shared-memory or L2 traffic, instruction by
instruction, from Nsight Compute's source page as scripts/gpu_check.sh exports it (ncu_export: the
archive ncu_source_<stage>_<gpu>_<date>.tar.gz under bench/results/). Reads CSV only: no GPU and no
Nsight Compute needed, so a session without a GPU can study a run that had one.

    ncu_source.py ARCHIVE.tar.gz                 # the profiled steps the archive holds
    ncu_source.py ARCHIVE.tar.gz STEP [options]  # one step's kernels (STEP: e.g. gemm-4096-wmma_pipelined-own)
    ncu_source.py ARCHIVE.tar.gz STEP STEP...     # side by side: each step's kernel with the most samples
    ncu_source.py FILE.sass.csv [options]        # an export made by hand:
                                                 #   ncu --import R.ncu-rep --page source --csv --print-source sass
Options:
    --top N          the N instructions with the most stall samples (default 15)
    --range A:B      only the instructions at offsets A to B (hex, from the kernel's first instruction, as
                     scripts/sass.sh and nvdisasm number them; e.g. a K loop's 0x1770:0x2ef0)

For each kernel: its warp stall samples by reason; by opcode (LDSM, HMMA, LDGSTS, BAR, ...) the
instructions, their executions, their share of the samples and their worst reasons, their shared-memory
wavefronts against the ideal and their excess L2 sectors; the loops (a branch back to an earlier
instruction), the hottest first; and the instructions with the most samples. A sample is one warp found
at that instruction by Nsight Compute's periodic sampling, with the reason it could not issue
("selected": it was issuing); shares of the samples are shares of the warps' time. Side by side, the
steps' totals (executions, samples, shared wavefronts over the ideal, excess L2 sectors) and the shares
of their samples by reason and by opcode: e.g. tile #12 against its fragments-ahead form #21.
"""
import argparse
import csv
import io
import re
import signal
import sys
import tarfile
from collections import defaultdict

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
SHARED = ("L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal", "L1 Wavefronts Shared Excessive")
L2_EXCESS = "L2 Theoretical Sectors Global Excessive"
REQUIRED = ("Address", "Source", SAMPLES, EXECUTED)


class Kernel:
    def __init__(self, name):
        self.name = name
        self.rows = []  # (offset, sass, opcode, target offset or None, {column: number})
        self.reasons = []  # the stall_* columns of all samples (not the "(Not Issued)" ones)


def number(text):
    """A cell as a number: ncu writes '-' or '' where a metric does not apply, and may group thousands.
    Anything else (a unit, say) raises ValueError: a number read as 0 would be a silent wrong answer."""
    text = text.strip().replace(",", "")
    if text in ("", "-", "n/a"):
        return 0.0
    return float(text)


def opcode_of(sass):
    """The mnemonic of an instruction, without its predicate and modifiers: '@!P0 LDGSTS.E.BYPASS.128' -> LDGSTS."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def parse(text, where):
    """The kernels of one source-page export: each opens with a "Kernel Name" line and a header."""
    kernels, kernel, header = [], None, None
    for fields in csv.reader(io.StringIO(text)):
        if not fields or not any(f.strip() for f in fields):
            continue
        if fields[0] == "Kernel Name":
            kernel = Kernel(fields[1] if len(fields) > 1 else "?")
            kernels.append(kernel)
            header = None
            continue
        if kernel is None:
            continue  # ncu's own messages before the first kernel
        if header is None:
            header = fields
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise SystemExit(f"ncu_source.py: {where}: kernel {kernel.name}: no column {', '.join(missing)} "
                                 "(is this ncu --page source --csv --print-source sass output, with the "
                                 "SourceCounters section collected?)")
            kernel.reasons = [c for c in header if c.startswith("stall_") and not c.endswith("(Not Issued)")]
            continue
        row = dict(zip(header, fields))
        if not row.get("Address", "").startswith("0x"):
            continue
        address = int(row["Address"], 16)
        sass = row["Source"].strip()
        target = None
        m = re.match(r"(@!?\w+\s+)?BRA(\.\w+)*\s+(0x[0-9a-fA-F]+)", sass)
        if m:
            target = int(m.group(3), 16)
        values = {}
        for c in (SAMPLES, EXECUTED, *SHARED, L2_EXCESS, *kernel.reasons):
            try:
                values[c] = number(row.get(c, ""))
            except ValueError:
                raise SystemExit(f"ncu_source.py: {where}: kernel {kernel.name}, instruction {row['Address']}: "
                                 f"column {c} holds {row[c]!r}, not a number (export with --csv, whose "
                                 "units are the base units)")
        kernel.rows.append([address, sass, opcode_of(sass), target, values])
    if not kernels:
        raise SystemExit(f"ncu_source.py: {where}: no \"Kernel Name\" line: not a source-page export")
    for k in kernels:
        if not k.rows:
            raise SystemExit(f"ncu_source.py: {where}: kernel {k.name}: no instructions")
        base = k.rows[0][0]
        for r in k.rows:  # offsets from the kernel's first instruction, as nvdisasm prints them
            r[0] -= base
            if r[3] is not None:
                r[3] -= base
    return kernels


def pct(part, whole):
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def worst(values, reasons, n):
    ranked = sorted(((values[c], c) for c in reasons if values[c] > 0), reverse=True)[:n]
    total = values[SAMPLES]
    return ", ".join(f"{c[len('stall_'):]} {pct(v, total).strip()}" for v, c in ranked) or "-"


def summed(rows, columns):
    out = defaultdict(float)
    for r in rows:
        for c in columns:
            out[c] += r[4].get(c, 0.0)
    return out


def report(kernel, top, span):
    """Prints what the module's docstring lists; False if the kernel has no instruction in span."""
    rows = kernel.rows
    if span:
        rows = [r for r in rows if span[0] <= r[0] <= span[1]]
        if not rows:
            print(f"kernel: {kernel.name}\n  no instruction at offsets {span[0]:#x} to {span[1]:#x} "
                  f"(its last is at {kernel.rows[-1][0]:#x})")
            return False
    columns = (SAMPLES, EXECUTED, *SHARED, L2_EXCESS, *kernel.reasons)
    total = summed(rows, columns)
    samples = total[SAMPLES]
    print(f"kernel: {kernel.name}")
    where = f", offsets {span[0]:#x}-{span[1]:#x}" if span else ""
    print(f"  {len(rows)} instructions{where}; {total[EXECUTED]:.0f} warp instructions executed; "
          f"{samples:.0f} warp samples")
    print(f"  shared-memory wavefronts: {total[SHARED[0]]:.0f}, ideal {total[SHARED[1]]:.0f}, "
          f"excess {total[SHARED[2]]:.0f}; excess L2 sectors (global): {total[L2_EXCESS]:.0f}")
    print("  warp samples by reason:")
    for v, c in sorted(((total[c], c) for c in kernel.reasons if total[c] > 0), reverse=True)[:10]:
        print(f"    {c[len('stall_'):]:<20} {v:>12.0f} {pct(v, samples)}")

    print("  by opcode (samples: share of all; wavefronts: shared memory, actual / ideal):")
    print(f"    {'opcode':<10} {'instrs':>6} {'executed':>12} {'samples':>7}  {'wavefronts':>23} "
          f"{'L2 excess':>11}  worst reasons")
    groups = defaultdict(list)
    for r in rows:
        groups[r[2]].append(r)
    ranked = sorted(groups.items(), key=lambda kv: -sum(r[4][SAMPLES] for r in kv[1]))
    for op, members in ranked:
        s = summed(members, columns)
        if s[SAMPLES] == 0 and s[EXECUTED] == 0:
            continue
        wave = f"{s[SHARED[0]]:.0f} / {s[SHARED[1]]:.0f}" if s[SHARED[0]] or s[SHARED[1]] else "-"
        l2 = f"{s[L2_EXCESS]:.0f}" if s[L2_EXCESS] else "-"
        print(f"    {op:<10} {len(members):>6} {s[EXECUTED]:>12.0f} {pct(s[SAMPLES], samples)}  {wave:>23} "
              f"{l2:>11}  {worst(s, kernel.reasons, 2)}")

    loops = []
    for r in rows:
        if r[3] is not None and r[3] < r[0]:  # a branch back: a loop from its target to here
            body = [x for x in kernel.rows if r[3] <= x[0] <= r[0]]
            loops.append((sum(x[4][SAMPLES] for x in body), r[3], r[0], body))
    if loops:
        print("  loops (a branch back to an earlier instruction), the hottest first:")
        for s, start, end, body in sorted(loops, reverse=True)[:5]:
            ops = defaultdict(int)
            for x in body:
                ops[x[2]] += 1
            mix = " ".join(f"{op} {n}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1])[:6])
            print(f"    {start:#07x}-{end:#07x}: {len(body)} instructions, {pct(s, samples).strip()} of the "
                  f"samples; {mix}")

    print(f"  the {top} instructions with the most samples:")
    for r in sorted(rows, key=lambda x: -x[4][SAMPLES])[:top]:
        v = r[4]
        if v[SAMPLES] == 0:
            break
        extra = f"; shared {v[SHARED[0]]:.0f} / ideal {v[SHARED[1]]:.0f}" if v[SHARED[0]] > v[SHARED[1]] else ""
        print(f"    {r[0]:#07x} {r[1][:48]:<48} {pct(v[SAMPLES], samples)}  {worst(v, kernel.reasons, 3)}{extra}")
    return True


def compare(named):
    """Side by side, one column per (step, kernel): the kernel of each step with the most samples."""
    cols = []
    for step, kernels in named:
        k = max(kernels, key=lambda k: sum(r[4][SAMPLES] for r in k.rows))
        cols.append((step, k, summed(k.rows, (SAMPLES, EXECUTED, *SHARED, L2_EXCESS, *k.reasons))))
    width = max(12, *(len(step) for step, _, _ in cols))
    print(f"{'':<26}" + "".join(f" {step:>{width}}" for step, _, _ in cols))

    def line(label, cells):
        print(f"{label:<26}" + "".join(f" {c:>{width}}" for c in cells))

    line("warp instrs executed", [f"{t[EXECUTED]:.0f}" for _, _, t in cols])
    line("warp samples", [f"{t[SAMPLES]:.0f}" for _, _, t in cols])
    line("shared wavefronts / ideal",
         [f"{t[SHARED[0]] / t[SHARED[1]]:.3f}" if t[SHARED[1]] else "-" for _, _, t in cols])
    line("excess L2 sectors", [f"{t[L2_EXCESS]:.0f}" for _, _, t in cols])
    print("stall reasons, share of each kernel's samples:")
    reasons = sorted({c for _, k, _ in cols for c in k.reasons}, key=lambda c: -max(
        (t[c] / t[SAMPLES] if t[SAMPLES] else 0.0) for _, _, t in cols))
    for c in reasons[:10]:
        line("  " + c[len("stall_"):], [pct(t[c], t[SAMPLES]).strip() for _, _, t in cols])
    print("opcodes, share of each kernel's samples:")
    shares = []
    for _, k, t in cols:
        by_op = defaultdict(float)
        for r in k.rows:
            by_op[r[2]] += r[4][SAMPLES]
        shares.append({op: v / t[SAMPLES] if t[SAMPLES] else 0.0 for op, v in by_op.items()})
    ops = sorted({op for sh in shares for op in sh}, key=lambda op: -max(sh.get(op, 0.0) for sh in shares))
    for op in ops[:10]:
        line("  " + op, [f"{100.0 * sh[op]:.1f}%" if op in sh else "-" for sh in shares])


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `ncu_source.py ... | head` ends quietly
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("steps", nargs="*", metavar="step")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--range", dest="span")
    a = ap.parse_args()
    span = None
    if a.span:
        m = re.fullmatch(r"(0x)?([0-9a-fA-F]+):(0x)?([0-9a-fA-F]+)", a.span)
        if not m:
            ap.error(f"--range {a.span}: expected two hex offsets, A:B")
        span = (int(m.group(2), 16), int(m.group(4), 16))
    try:
        if a.file.endswith((".tar.gz", ".tgz")):
            with tarfile.open(a.file) as tar:
                steps = sorted(n[: -len(".sass.csv")] for n in tar.getnames() if n.endswith(".sass.csv"))
                if not a.steps:
                    print(f"{a.file}: {len(steps)} profiled steps")
                    for s in steps:
                        print(f"  {s}")
                    return 0
                named = []
                for step in a.steps:
                    if step not in steps:
                        raise SystemExit(f"ncu_source.py: {a.file} holds no step {step}; it holds: {', '.join(steps)}")
                    text = tar.extractfile(step + ".sass.csv").read().decode("utf-8", "replace")
                    named.append((step, parse(text, f"{a.file}:{step}.sass.csv")))
        else:
            if a.steps:
                ap.error("a STEP is for an archive; a CSV file is read whole")
            with open(a.file, encoding="utf-8", errors="replace") as f:
                named = [(a.file, parse(f.read(), a.file))]
    except (OSError, tarfile.TarError) as e:
        raise SystemExit(f"ncu_source.py: {a.file}: {e}")
    if len(named) > 1:
        if span:
            ap.error("--range is for one step: a range of offsets means something else in another kernel")
        compare(named)
        return 0
    found = False
    for i, kernel in enumerate(named[0][1]):
        if i:
            print()
        found |= report(kernel, a.top, span)
    if not found:
        raise SystemExit(f"ncu_source.py: {named[0][0]}: no kernel has an instruction at offsets {span[0]:#x} to "
                         f"{span[1]:#x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
