#!/usr/bin/env python3
"""The PyTorch half of the end-to-end comparison (bench/compare_train.sh runs both).

Trains the canonical models of DESIGN.md section 4 in PyTorch eager, FP32 or AMP (autocast FP16 +
GradScaler), on exactly the data halfling trains on: `build/bench/train --export DIR` writes the
normalized images, labels and the shuffled order of every epoch as .npy files, and this script
reads them. The data sit on the device before the clock starts (for MNIST, as halfling does).

    bench/pytorch/train.py --data /tmp/export --model mlp512 --precision mixed --device cuda --epochs 3

Prints one line per epoch and, with --json, one machine-readable last line. Timing: the clock stops
after torch.cuda.synchronize(); with more than one epoch the first (warm-up) is left out of the
median, as in bench/train.

`--init` starts from halfling's initial weights and `--dump-weights DIR` writes the trained ones, so the
two frameworks' runs can be compared weight by weight; `--dtype float64` then gives the reference both
float32 runs are measured against (tests/python/pytorch_trajectory.py).

TF32 is off unless `--tf32` is given (torch.backends.cudnn.allow_tf32 and
torch.backends.cuda.matmul.allow_tf32): PyTorch's cuDNN convolutions default to TF32 on Ampere and
Hopper, which would make `--precision fp32` a 10-bit-mantissa run next to halfling's FP32 one. The
first line and the JSON line ("tf32") say which.

cuDNN times its algorithms for each new input shape (`torch.backends.cudnn.benchmark`) unless
`--no-cudnn-benchmark` is given: the setting a speed-minded PyTorch user runs fixed shapes with, and the
counterpart of halfling's convolution taking its fastest rung for a layer. The searches happen in the
first epoch (and the first evaluation), which the median leaves out. Runs before 2026-11-29 had it off
(PyTorch's default). The first line and the JSON line ("cudnn_benchmark") say which.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

# numpy and torch are imported by import_torch(): by main() after the flags are read (importing torch takes
# about 2.3 s with Debian's 1.13 on a 2-core CPU, which --help and a refused flag need not wait for), or at
# once when another script imports this file for its models (the end of the file).
np = torch = nn = F = None


def import_torch():
    global np, torch, nn, F
    try:
        import numpy as np
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:  # a clear message instead of a traceback
        sys.exit(f"bench/pytorch/train.py: {e}. Install PyTorch (Debian: apt-get install python3-torch "
                 f"libopenblas0) or run on the GPU machine, where it is installed.")

# Same constants as halfling's tutorials/common/cli.h defaults and bench/train.cpp.
WEIGHT_DECAY = {"mlp512": 0.0, "lenet": 0.0, "vgg_small": 5e-4}


def lr_at(step, kind, peak, warmup_steps, total_steps):
    """The learning rate of optimizer step `step` (0-based): halfling's LrSchedule::at
    (tutorials/common/schedule.cpp) with final_lr 0, line for line, so that both frameworks follow the
    same rates (tests/python/pytorch_trajectory.py checks it through the trained weights)."""
    step = min(step, total_steps - 1)
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    decay_steps = total_steps - warmup_steps
    t = (step - warmup_steps) / (decay_steps - 1) if decay_steps > 1 else 0.0
    if kind == "cosine":
        return 0.5 * peak * (1.0 + math.cos(math.pi * t))
    if kind == "step":
        return peak * (1.0 if t < 0.5 else (0.1 if t < 0.75 else 0.01))
    return peak


def mlp512():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def lenet():
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 256), nn.ReLU(), nn.Linear(256, 10))


def vgg_small():
    layers, c = [], 3
    for width in (64, 128, 256):
        for _ in range(2):
            layers += [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]  # BN cancels a bias (as in halfling)
            c = width
        layers.append(nn.MaxPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)]
    return nn.Sequential(*layers)


MODELS = {"mlp512": mlp512, "lenet": lenet, "vgg_small": vgg_small}


def augment(x, pad_value, gen):
    """torchvision's RandomCrop(32, padding=4) + RandomHorizontalFlip() on a batch already on the
    device, like halfling's DataLoader (padding is a black pixel, i.e. -mean/std after normalizing).
    The draws differ from halfling's (another generator); the distribution is the same."""
    n, c, h, w = x.shape
    p = 4
    padded = pad_value.view(1, c, 1, 1).expand(n, c, h + 2 * p, w + 2 * p).clone()
    padded[:, :, p:p + h, p:p + w] = x
    dy = torch.randint(0, 2 * p + 1, (n,), device=x.device, generator=gen)
    dx = torch.randint(0, 2 * p + 1, (n,), device=x.device, generator=gen)
    rows = (dy.view(n, 1) + torch.arange(h, device=x.device)).view(n, 1, h, 1).expand(n, c, h, w)
    cols = (dx.view(n, 1) + torch.arange(w, device=x.device)).view(n, 1, 1, w).expand(n, c, h, w)
    out = padded[torch.arange(n, device=x.device).view(n, 1, 1, 1), torch.arange(c, device=x.device).view(1, c, 1, 1),
                 rows, cols]
    flip = torch.rand(n, device=x.device, generator=gen) < 0.5
    # torch.where, not out[flip] = ...: boolean-mask indexing finds the mask's count on the host
    # (torch.nonzero), a device-to-host wait in every step.
    return torch.where(flip.view(n, 1, 1, 1), out.flip(3), out)


def load_init(model, data_dir):
    """Copy halfling's initial weights (written by `bench/train --export`, one init_NNN.npy per
    parameter in parameter order) into model, checking every shape."""
    params = list(model.parameters())
    for i, p in enumerate(params):
        path = os.path.join(data_dir, f"init_{i:03d}.npy")
        if not os.path.exists(path):
            sys.exit(f"bench/pytorch/train.py --init: {path} is missing; export again with a bench/train that "
                     f"writes initial weights")
        w = np.load(path)
        if tuple(w.shape) != tuple(p.shape):
            sys.exit(f"bench/pytorch/train.py --init: {path} has shape {list(w.shape)}, parameter {i} of the "
                     f"model is {list(p.shape)} (exported for another model?)")
        with torch.no_grad():
            p.copy_(torch.from_numpy(w))
    extra = os.path.join(data_dir, f"init_{len(params):03d}.npy")
    if os.path.exists(extra):
        sys.exit(f"bench/pytorch/train.py --init: {data_dir} holds more initial weights than the model has "
                 f"parameters ({len(params)}): exported for another model?")


def print_profile(prof, steps, cuda):
    """torch.profiler's operator table, sorted by the time each operator itself took (on the GPU when
    there is one): totals over `steps` training steps, so divide by it to compare with bench/train's
    per-step profile."""
    print(f"# profile: torch.profiler, {steps} steps, totals (divide by {steps} for per step)")
    events = prof.key_averages()
    # PyTorch 2.4 renamed the CUDA columns "device"; older releases (Debian's 1.13) know only "cuda".
    keys = (["self_device_time_total", "self_cuda_time_total"] if cuda else []) + ["self_cpu_time_total"]
    for key in keys:
        try:
            print(events.table(sort_by=key, row_limit=40))
            return
        except (AttributeError, KeyError, ValueError):
            continue
    print(events.table(row_limit=40))


def at_least(low):
    """An argparse type: an integer >= low, or the error argparse prints with the flag's name."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value
    return parse


def max_steps_value(text):
    """--max-steps: -1 (every step of an epoch) or at least 1, as bench/train."""
    value = at_least(-1)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 steps would train nothing (-1: every step)")
    return value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a directory written by `build/bench/train --export DIR`")
    ap.add_argument("--model", choices=sorted(MODELS), default="mlp512")
    ap.add_argument("--precision", choices=["fp32", "mixed"], default="fp32")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="float64: weights, data and arithmetic in double, a reference for the float32 runs "
                         "of both frameworks (CPU, --precision fp32 only; never timed against halfling)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None,
                    help="default: cuda when PyTorch sees a GPU, else cpu")
    ap.add_argument("--epochs", type=at_least(1), default=3)
    ap.add_argument("--batch", type=at_least(1), default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--schedule", choices=["constant", "cosine", "step"], default="constant",
                    help="learning-rate schedule, peak --lr, per step as bench/train --schedule")
    ap.add_argument("--warmup-epochs", type=float, default=0.0,
                    help="linear warm-up over this many epochs first, as bench/train --warmup-epochs")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=at_least(1), default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    ap.add_argument("--max-steps", type=max_steps_value, default=-1,
                    help="stop each epoch after this many steps (-1, the default: every step)")
    ap.add_argument("--tf32", action="store_true",
                    help="let cuDNN convolutions and matmuls use TF32 (PyTorch's default for convolutions on "
                         "Ampere and later); off by default, so that fp32 means FP32 as in halfling")
    ap.add_argument("--cudnn-benchmark", action=argparse.BooleanOptionalAction, default=True,
                    help="let cuDNN time its algorithms for each new shape (torch.backends.cudnn.benchmark; on by "
                         "default, as a speed-minded user runs fixed shapes; the first epoch pays the search)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="print torch.profiler's table of operators (epochs after the first when there are several); "
                         "the counterpart of `bench/train --profile`. Slows the run: take speed numbers from a run without it")
    ap.add_argument("--init", action="store_true",
                    help="start from halfling's initial weights (init_NNN.npy in --data) instead of PyTorch's draws")
    ap.add_argument("--dump-weights", default="", metavar="DIR",
                    help="after training, write the weights as DIR/final_NNN.npy (halfling's --dump-weights format)")
    a = ap.parse_args()

    if not (math.isfinite(a.warmup_epochs) and a.warmup_epochs >= 0):
        sys.exit(f"bench/pytorch/train.py: --warmup-epochs must be a finite number >= 0, got {a.warmup_epochs}")

    import_torch()
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/pytorch/train.py: --device cuda but torch.cuda.is_available() is False")
    if a.device == "cpu" and a.precision == "mixed":
        sys.exit("bench/pytorch/train.py: AMP with FP16 is a CUDA feature in PyTorch (CPU autocast is bfloat16); "
                 "compare --precision fp32 on the CPU")
    if a.dtype == "float64" and (a.device != "cpu" or a.precision != "fp32"):
        sys.exit(f"bench/pytorch/train.py: --dtype float64 is a CPU --precision fp32 reference, "
                 f"not for --device {a.device} --precision {a.precision}")
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    # Both switches, whatever the precision: under autocast the convolutions and matmuls run in FP16
    # anyway, and what stays FP32 stays FP32, as in halfling.
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)

    def load(name):
        path = os.path.join(a.data, name)
        if not os.path.exists(path):
            sys.exit(f"bench/pytorch/train.py: {path} is missing; write it with build/bench/train --export {a.data}")
        return torch.from_numpy(np.load(path))

    train_x, train_y, test_x, test_y = (load(f) for f in ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"))
    order = load("order.npy")
    if order.shape[0] < a.epochs:
        sys.exit(f"bench/pytorch/train.py: {a.data}/order.npy holds {order.shape[0]} epochs, {a.epochs} asked; "
                 f"export again with --epochs {a.epochs}")
    if a.model in ("mlp512", "lenet") and train_x.shape[1:] != (1, 28, 28):
        sys.exit(f"bench/pytorch/train.py: {a.model} needs MNIST [N,1,28,28], the export holds {list(train_x.shape)}")
    if a.model == "vgg_small" and train_x.shape[1:] != (3, 32, 32):
        sys.exit(f"bench/pytorch/train.py: vgg_small needs CIFAR-10 [N,3,32,32], the export holds {list(train_x.shape)}")

    train_x, train_y = train_x.to(dev, dtype), train_y.long().to(dev)
    test_x, test_y = test_x.to(dev, dtype), test_y.long().to(dev)
    order = order.to(dev)
    # The normalized value of a black pixel per channel: the minimum of each channel of the data.
    pad_value = train_x.amin(dim=(0, 2, 3))
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)

    model = MODELS[a.model]()
    if a.init:
        load_init(model, a.data)
    model = model.to(dev, dtype)  # --init copied float32 weights: exact in float64 as well
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=WEIGHT_DECAY[a.model])
    amp = a.precision == "mixed"
    scaler = torch.cuda.amp.GradScaler(enabled=amp)

    def autocast():  # FP16 autocast exists only on CUDA in PyTorch; fp32 runs use no context at all
        return torch.autocast(device_type="cuda", dtype=torch.float16) if amp else contextlib.nullcontext()
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated() if dev.type == "cuda" else 0

    print(f"pytorch {torch.__version__} bench/pytorch/train.py: {a.model}, {a.precision}, batch {a.batch}, "
          f"device {a.device}{' (' + torch.cuda.get_device_name() + ')' if dev.type == 'cuda' else ''}, "
          f"threads {torch.get_num_threads()}, TF32 {'on' if a.tf32 else 'off'}, "
          f"cuDNN benchmark {'on' if a.cudnn_benchmark else 'off'}")
    seconds, images = [], 0
    n = train_x.shape[0]
    steps_per_epoch = (n + a.batch - 1) // a.batch
    if a.max_steps >= 0:
        steps_per_epoch = min(steps_per_epoch, a.max_steps)
    # As tutorials/common/schedule.cpp's schedule_from_flags: at least one step, warm-up in whole steps.
    total_steps = max(1, steps_per_epoch) * a.epochs
    warmup_steps = min(total_steps, int(a.warmup_epochs * max(1, steps_per_epoch)))
    global_step = 0
    prof, profiled_steps = None, 0
    for epoch in range(a.epochs):
        if a.profile and prof is None and (epoch > 0 or a.epochs == 1):  # leave out the warm-up epoch
            activities = [torch.profiler.ProfilerActivity.CPU]
            if dev.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=activities)
            prof.start()
        model.train()
        perm = order[epoch]
        steps = steps_per_epoch
        images = 0
        loss_sum = torch.zeros((), device=dev)
        t0 = time.perf_counter()
        for s in range(steps):
            idx = perm[s * a.batch:(s + 1) * a.batch]
            x, y = train_x[idx], train_y[idx]
            if a.model == "vgg_small":
                x = augment(x, pad_value, gen)
            for group in opt.param_groups:
                group["lr"] = lr_at(global_step, a.schedule, a.lr, warmup_steps, total_steps)
            global_step += 1
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.detach().float() * idx.numel()
            images += idx.numel()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        if prof is not None:
            profiled_steps += steps
        print(f"epoch {epoch + 1}  {seconds[-1]:.3f} s  {images / seconds[-1]:.0f} img/s  "
              f"loss {loss_sum.item() / images:.4f}")

    if prof is not None:
        prof.stop()
        print_profile(prof, profiled_steps, dev.type == "cuda")

    if a.dump_weights:
        os.makedirs(a.dump_weights, exist_ok=True)
        for i, p in enumerate(model.parameters()):
            np.save(os.path.join(a.dump_weights, f"final_{i:03d}.npy"), p.detach().cpu().numpy())  # in --dtype

    model.eval()
    correct = 0
    with torch.no_grad(), autocast():
        for i in range(0, test_x.shape[0], 1000):
            correct += (model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
    accuracy = correct / test_x.shape[0]
    peak_mib = (torch.cuda.max_memory_allocated() - baseline) / 2**20 if dev.type == "cuda" else float("nan")
    timed = sorted(seconds[1:] if len(seconds) > 1 else seconds)
    median = timed[len(timed) // 2]
    print(f"summary: {median:.3f} s/epoch (median of {len(timed)}), {images / median:.0f} img/s, "
          f"test accuracy {100 * accuracy:.2f}%, peak memory {peak_mib:.1f} MiB")
    if a.json:
        print(json.dumps({"framework": "pytorch", "model": a.model, "precision": a.precision, "device": a.device,
                          "seconds_per_epoch": round(median, 4), "images_per_second": round(images / median, 1),
                          "test_accuracy": round(accuracy, 4),
                          "peak_mib": None if peak_mib != peak_mib else round(peak_mib, 1), "epochs": a.epochs,
                          "schedule": a.schedule, "warmup_epochs": a.warmup_epochs, "tf32": a.tf32,
                          "cudnn_benchmark": a.cudnn_benchmark}))


if __name__ == "__main__":
    main()
else:  # imported for its models (tests/python/pytorch_parity.py): they need torch at once
    import_torch()
