#!/usr/bin/env python3
"""PyTorch reference for bench/softmax_bench: the same shapes, FP16 on the GPU, the same table.

    python3 bench/pytorch/softmax.py [--samples N] [--quick]

torch.softmax(x, -1) on FP16 logits (FP16 out), and F.cross_entropy forward + backward on FP16
logits (what a training step pays for the loss), timed with torch.cuda.Event after warm-up, median
of N samples, each sample timing several back-to-back calls. GB/s counts the compulsory bytes (FP16
input read once, FP16 output written once), and %copy compares it with a device-to-device copy
(y.copy_(x)) of the same bytes measured in this run, exactly as softmax_bench does.
"""
import argparse
import datetime
import statistics
import sys


def samples_arg(text):
    """--samples: a whole number from 3 to 1000, the range softmax_bench --samples takes (the median of
    fewer than 3 is hardly one; none would end in statistics.median's error)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
    if not 3 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{n} is outside 3..1000 (softmax_bench's range)")
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=samples_arg, default=25, help="timed samples per entry, 3..1000")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("no torch: nothing to compare against")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark")
        return 0

    def median_us(fn, reps):
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.samples):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            times.append(1000.0 * a.elapsed_time(b) / reps)
        return statistics.median(times)

    def row(op, rows, cols, variant, us, nbytes, copy_gbs):
        shape = f"{rows}x{cols}"
        if nbytes:
            gbs = nbytes / (us * 1e-6) / 1e9
            print(f"{op:<10} {shape:<12} {'f16->f16':<10} {variant:<18} {us:10.2f} {gbs:9.1f} {100 * gbs / copy_gbs:6.0f}%")
        else:
            print(f"{op:<10} {shape:<12} {'f16->f16':<10} {variant:<18} {us:10.2f} {'-':>9} {'-':>7}")

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# pytorch softmax  GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  date: {now}")
    print(f"# torch.cuda.Event, 3 warm-up calls, median of {args.samples} samples; GB/s = compulsory bytes / time")
    print(f"{'op':<10} {'shape':<12} {'dtypes':<10} {'variant':<18} {'us/call':>10} {'GB/s':>9} {'%copy':>7}")

    big = [(4096, 1024), (4096, 4096), (1024, 32768), (128, 65536)]
    heads = [(128, 10), (1024, 10)]
    if args.quick:
        big, heads = [(4096, 1024)], [(128, 10)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows, cols in big + heads:
        n = rows * cols
        x = (torch.rand(rows, cols, device="cuda", generator=gen) * 16 - 8).half()
        labels = torch.randint(0, cols, (rows,), device="cuda", generator=gen)
        y = torch.empty_like(x)
        is_big = (rows, cols) in big
        reps = 10 if is_big else 100
        copy_gbs = 1.0
        if is_big:
            copy_us = median_us(lambda: y.copy_(x), reps)
            copy_gbs = 4.0 * n / (copy_us * 1e-6) / 1e9
            row("copy", rows, cols, "torch copy_", copy_us, 4 * n, copy_gbs)
        row("softmax", rows, cols, "torch.softmax", median_us(lambda: torch.softmax(x, dim=-1), reps),
            4 * n if is_big else 0, copy_gbs)
        xg = x.clone().requires_grad_()

        def xent():
            xg.grad = None
            F.cross_entropy(xg, labels).backward()

        row("xent", rows, cols, "F.cross_entropy", median_us(xent, reps), 4 * n if is_big else 0, copy_gbs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
