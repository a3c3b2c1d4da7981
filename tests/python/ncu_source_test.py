#!/usr/bin/env python3
"""scripts/ncu_source.py on source-page exports made here, in the layout Nsight Compute writes them
(`ncu --import R --page source --csv --print-source sass`: a "Kernel Name" line, a header, one row per
SASS instruction with absolute addresses; several kernels one after the other), alone and inside an
archive as scripts/gpu_check.sh's ncu_export packs them. Every number the script prints below is
worked out by hand from the rows. Standard library only.
Usage: ncu_source_test.py --script <path to scripts/ncu_source.py>
"""
import argparse
import csv
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile

REASONS = ["stall_barrier", "stall_long_sb", "stall_mio", "stall_selected"]
HEADER = (["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
           "Instructions Executed", "L1 Wavefronts Shared Excessive", "L1 Wavefronts Shared",
           "L1 Wavefronts Shared Ideal", "L2 Theoretical Sectors Global Excessive"]
          + REASONS + [r + " (Not Issued)" for r in REASONS])


def kernel_rows(base, instructions):
    """instructions: (sass, samples, executed, shared, shared ideal, L2 excess, {reason: samples})."""
    rows = []
    for i, (sass, samples, executed, shared, ideal, l2, reasons) in enumerate(instructions):
        excess = shared - ideal
        rows.append([f"0x{base + 16 * i:x}", f"      {sass} ", str(samples), str(samples), f"{executed:,}",
                     str(excess) if shared else "-", str(shared) if shared else "-", str(ideal) if shared else "-",
                     str(l2)] + [str(reasons.get(r, 0)) for r in REASONS] + ["999"] * len(REASONS))
    return rows


def export(kernels):
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for name, base, instructions in kernels:
        w.writerow(["Kernel Name", name, ""])
        w.writerow(HEADER)
        w.writerows(kernel_rows(base, instructions))
    return out.getvalue()


BASE = 0x7F0000001000
# A K loop from offset 0x30 to 0x70 (the BRA at 0x70 goes back to 0x30), then the exit and a self-branch
# (the trap tail every kernel ends with: not a loop).
GEMM = [
    ("MOV R1, c[0x0][0x28]", 2, 1024, 0, 0, 0, {"stall_selected": 2}),
    ("S2R R0, SR_TID.X", 10, 1024, 0, 0, 0, {"stall_mio": 10}),
    ("@!P0 LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64]", 30, 4096, 512, 256, 1024,
     {"stall_mio": 20, "stall_long_sb": 10}),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 100, 4096, 0, 0, 0, {"stall_barrier": 100}),
    ("LDSM.16.M88.4 R8, [R6]", 40, 8192, 300, 200, 0, {"stall_mio": 30, "stall_long_sb": 10}),
    ("HMMA.16816.F32 R12, R8, R10, R12", 150, 16384, 0, 0, 0, {"stall_long_sb": 120, "stall_selected": 30}),
    ("HMMA.16816.F32 R16, R8, R11, R16", 60, 16384, 0, 0, 0, {"stall_selected": 60}),
    ("@P1 BRA 0x7f0000001030", 5, 4096, 0, 0, 0, {"stall_selected": 5}),
    ("EXIT", 1, 1024, 0, 0, 0, {"stall_selected": 1}),
    ("BRA 0x7f0000001090", 2, 0, 0, 0, 0, {"stall_selected": 2}),
]
SOFTMAX = [
    ("LDG.E.128 R4, [R2.64]", 7, 512, 0, 0, 64, {"stall_long_sb": 7}),
    ("EXIT", 3, 512, 0, 0, 0, {"stall_selected": 3}),
]


def run(script, *args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


failures = []


def check(cond, what, output=""):
    if not cond:
        failures.append(what)
        print(f"FAILED: {what}\n{output}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    script = ap.parse_args().script
    with tempfile.TemporaryDirectory() as tmp:
        both = os.path.join(tmp, "two.sass.csv")
        with open(both, "w") as f:
            f.write("==PROF== a line ncu may print first\n")
            f.write(export([("gemm_kernel<1>(GemmArgs)", BASE, GEMM), ("softmax_kernel(float *)", BASE, SOFTMAX)]))

        rc, out, err = run(script, both, "--top", "3")
        check(rc == 0, "a two-kernel export is read", err)
        first, _, second = out.partition("kernel: softmax_kernel(float *)")
        check(first.startswith("kernel: gemm_kernel<1>(GemmArgs)") and second, "each kernel reported", out)
        # 400 samples in all; 56320 warp instructions (written with thousands separators, read as numbers).
        check("10 instructions; 56320 warp instructions executed; 400 warp samples" in first,
              "instruction, execution and sample totals", first)
        check("shared-memory wavefronts: 812, ideal 456, excess 356; excess L2 sectors (global): 1024" in first,
              "wavefront and L2 totals ('-' read as none)", first)
        # By reason: long_sb 10+10+120 = 140 of 400 = 35.0%; barrier 100 = 25.0%; selected 2+30+60+5+1+2 = 100.
        check("long_sb" in first and "140  35.0%" in first, "long_sb summed over the instructions", first)
        check(re.search(r"barrier\s+100\s+25\.0%", first), "barrier's share", first)
        # The opcode table: both HMMAs in one row (210 of 400 = 52.5%), the predicated LDGSTS by its mnemonic.
        hmma = [line for line in first.splitlines() if line.strip().startswith("HMMA ")]
        check(len(hmma) == 1 and " 2 " in hmma[0] and "32768" in hmma[0] and "52.5%" in hmma[0]
              and "long_sb 57.1%" in hmma[0], "HMMA's row: 2 instructions, 32768 executed, 52.5%", first)
        ldgsts = [line for line in first.splitlines() if line.strip().startswith("LDGSTS ")]
        check(len(ldgsts) == 1 and "512 / 256" in ldgsts[0] and "1024" in ldgsts[0],
              "LDGSTS's row without its predicate, with its wavefronts and L2 excess", first)
        # The loop: from the BAR at 0x30 to the BRA at 0x70, 5 instructions, 355 of the 400 samples.
        check("0x00030-0x00070: 5 instructions, 88.8% of the samples" in first, "the K loop found", first)
        check("0x00090-0x00090" not in first and first.count("instructions, ") == 1,
              "the self-branch at the end is not a loop", first)
        # The top 3: the first HMMA, BAR, the second HMMA; the LDSM (4th) left out; offsets from the start.
        top = [line for line in first.split("the 3 instructions with the most samples:")[1].splitlines()
               if line.strip()]
        check(len(top) == 3 and top[0].strip().startswith("0x00050 HMMA.16816.F32 R12")
              and top[1].strip().startswith("0x00030 BAR.SYNC") and top[2].strip().startswith("0x00060 HMMA"),
              "the top instructions in order of samples", "\n".join(top))
        check("LDSM" not in "\n".join(top), "--top 3 shows three", "\n".join(top))
        check("10 warp samples" in second and "LDG " in second, "the second kernel on its own", second)

        rc, out, err = run(script, both, "--range", "0x40:0x50")
        check(rc == 0 and "2 instructions, offsets 0x40-0x50; 24576 warp instructions executed; 190 warp samples"
              in out, "--range keeps the offsets asked for", out + err)
        check("no instruction at offsets 0x40 to 0x50 (its last is at 0x10)" in out,
              "a kernel with nothing in the range says so, the others are still reported", out)
        check("shared 300 / ideal 200" in out, "an instruction's wavefront excess shown", out)
        rc, out, err = run(script, both, "--range", "0x500:0x600")
        check(rc != 0 and "no kernel has an instruction at offsets 0x500 to 0x600" in err and both in err,
              "a range no kernel reaches refused, naming the file", out + err)
        rc, out, err = run(script, both, "--range", "zz")
        check(rc != 0 and "--range zz" in err, "a malformed range refused", out + err)

        # The archive as ncu_export writes it: STEP.sass.csv and STEP.raw.csv per profiled step.
        archive = os.path.join(tmp, "ncu_source_short_h100_2026-11-29.tar.gz")
        with tarfile.open(archive, "w:gz") as tar:
            for name, text in (("gemm-4096-own.sass.csv", export([("gemm_kernel<1>(GemmArgs)", BASE, GEMM)])),
                               ("gemm-4096-own.raw.csv", '"ID","Kernel Name"\n"0","gemm_kernel"\n'),
                               ("softmax-128x65536.sass.csv", export([("softmax_kernel(float *)", BASE, SOFTMAX)])),
                               # Two launches in one step (ncu_kernel's COUNT > 1), the smaller first.
                               ("two-launches.sass.csv", export([("softmax_kernel(float *)", BASE, SOFTMAX),
                                                                 ("gemm_kernel<1>(GemmArgs)", BASE, GEMM)]))):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        rc, out, err = run(script, archive)
        check(rc == 0 and "3 profiled steps" in out and "gemm-4096-own" in out and "softmax-128x65536" in out
              and ".raw" not in out, "the archive's steps listed", out + err)
        rc, out, err = run(script, archive, "softmax-128x65536")
        check(rc == 0 and "kernel: softmax_kernel(float *)" in out and "gemm" not in out, "one step read", out + err)
        # Side by side: one column per step; shares of each kernel's own samples.
        rc, out, err = run(script, archive, "gemm-4096-own", "softmax-128x65536")
        rows = {line[:26].strip(): line[26:].split() for line in out.splitlines() if line.strip()}
        check(rc == 0 and out.splitlines()[0].split() == ["gemm-4096-own", "softmax-128x65536"],
              "one column per step, in the order named", out + err)
        check(rows.get("warp samples") == ["400", "10"] and rows.get("warp instrs executed") == ["56320", "1024"],
              "each step's totals", out)
        check(rows.get("shared wavefronts / ideal") == ["1.781", "-"]
              and rows.get("excess L2 sectors") == ["1024", "64"],
              "wavefronts over the ideal (812 / 456), '-' without shared accesses", out)
        check(rows.get("long_sb") == ["35.0%", "70.0%"] and rows.get("barrier") == ["25.0%", "0.0%"],
              "stall reasons as shares of each kernel's samples", out)
        check(rows.get("HMMA") == ["52.5%", "-"] and rows.get("LDG") == ["-", "70.0%"],
              "opcodes as shares, '-' where a kernel has none", out)
        rc, out, err = run(script, archive, "softmax-128x65536", "two-launches")
        rows = {line[:26].strip(): line[26:].split() for line in out.splitlines() if line.strip()}
        check(rc == 0 and rows.get("warp samples") == ["10", "400"],
              "a step of two launches compared through its kernel with the most samples", out + err)
        rc, out, err = run(script, archive, "gemm-4096-own", "softmax-128x65536", "--range", "0:10")
        check(rc != 0 and "--range is for one step" in err, "a range refused side by side", out + err)
        rc, out, err = run(script, archive, "gemm-4096")
        check(rc != 0 and "holds no step gemm-4096" in err and "gemm-4096-own" in err,
              "an unknown step refused with the list", out + err)

        # Bad input: the message names the file and what is wrong.
        raw = os.path.join(tmp, "x.raw.csv")
        with open(raw, "w") as f:
            f.write('"ID","Kernel Name"\n"0","k"\n')
        rc, out, err = run(script, raw)
        check(rc != 0 and raw in err and "not a source-page export" in err, "a raw-page file refused", out + err)
        nosamples = os.path.join(tmp, "no_samples.sass.csv")
        with open(nosamples, "w") as f:
            f.write('"Kernel Name","k",""\n"Address","Source","Instructions Executed"\n"0x10","EXIT","1"\n')
        rc, out, err = run(script, nosamples)
        check(rc != 0 and nosamples in err and "Warp Stall Sampling (All Samples)" in err and "SourceCounters" in err,
              "an export without the samples refused, naming the column", out + err)
        units = os.path.join(tmp, "units.sass.csv")
        with open(units, "w") as f:
            f.write('"Kernel Name","k",""\n"Address","Source","Warp Stall Sampling (All Samples)",'
                    '"Instructions Executed"\n"0x10","EXIT","3","1.5 K"\n')
        rc, out, err = run(script, units)
        check(rc != 0 and units in err and "0x10" in err and "Instructions Executed" in err and "'1.5 K'" in err,
              "a cell that is not a number refused, naming the file, instruction and column", out + err)
        rc, out, err = run(script, os.path.join(tmp, "absent.sass.csv"))
        check(rc != 0 and "absent.sass.csv" in err and "Traceback" not in err, "a missing file refused", out + err)
        rc, out, err = run(script, both, "step")
        check(rc != 0 and "a STEP is for an archive" in err, "a step with a CSV file refused", out + err)

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("ncu_source.py: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
