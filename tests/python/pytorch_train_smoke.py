#!/usr/bin/env python3
"""bench/pytorch/train.py runs on data exported by bench/train and reports the same JSON fields.

Exports a smoke-sized MNIST subset with `bench/train --smoke --export`, trains 3 steps of each
model the export fits (MLP-512 and LeNet) in PyTorch on the CPU, and checks the JSON line the
wrapper bench/compare_train.sh consumes, TF32 off unless --tf32 is given, cuDNN's benchmark on unless
--no-cudnn-benchmark is given. Also checks the script refuses an export of the wrong shape for a model,
and counts that would train nothing. Exits 77 (CTest's "skipped") without torch or without MNIST.
Usage: pytorch_train_smoke.py --train <build>/bench/train --script bench/pytorch/train.py --mnist DIR
"""
import json
import os
import subprocess
import sys
import tempfile

from torch_test_args import parse_or_skip

a = parse_or_skip()

with tempfile.TemporaryDirectory() as d:
    subprocess.run([a.train, "--smoke", "--epochs", "2", "--export", d, "--data", a.mnist], check=True)
    for model in ("mlp512", "lenet"):
        out = subprocess.run([sys.executable, a.script, "--data", d, "--model", model, "--device", "cpu",
                              "--epochs", "2", "--max-steps", "3", "--threads", "1", "--json"],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        assert r["framework"] == "pytorch" and r["model"] == model, r
        assert r["seconds_per_epoch"] > 0 and r["images_per_second"] > 0, r
        assert 0.0 <= r["test_accuracy"] <= 1.0, r
        assert r["schedule"] == "constant" and r["warmup_epochs"] == 0.0, r
        assert r["tf32"] is False, r
        assert r["cudnn_benchmark"] is True, r
        print(f"{model}: {r}")
    out = subprocess.run([sys.executable, a.script, "--data", d, "--device", "cpu", "--epochs", "1", "--max-steps", "1",
                          "--threads", "1", "--json", "--tf32"], check=True, capture_output=True, text=True).stdout
    assert "TF32 on" in out.splitlines()[0], out
    assert json.loads(out.strip().splitlines()[-1])["tf32"] is True, out
    assert "cuDNN benchmark on" in out.splitlines()[0], out
    out = subprocess.run([sys.executable, a.script, "--data", d, "--device", "cpu", "--epochs", "1", "--max-steps", "1",
                          "--threads", "1", "--json", "--no-cudnn-benchmark"], check=True, capture_output=True,
                         text=True).stdout
    assert "cuDNN benchmark off" in out.splitlines()[0], out
    assert json.loads(out.strip().splitlines()[-1])["cudnn_benchmark"] is False, out
    # Counts that would train nothing: refused by argparse (exit 2) with the flag named, not a
    # ZeroDivisionError after the run (--max-steps 0) or an IndexError (--epochs 0).
    for flag, value in (("--max-steps", "0"), ("--epochs", "0"), ("--batch", "0"), ("--threads", "0"),
                        ("--max-steps", "-2"), ("--epochs", "x")):
        bad = subprocess.run([sys.executable, a.script, "--data", d, "--device", "cpu", flag, value],
                             capture_output=True, text=True)
        assert bad.returncode == 2 and flag in bad.stderr, (flag, value, bad.stderr)
    bad = subprocess.run([sys.executable, a.script, "--data", d, "--model", "vgg_small", "--device", "cpu",
                          "--epochs", "2"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "vgg_small needs CIFAR-10" in bad.stderr, bad.stderr
    for warmup in ("-1", "nan"):
        bad = subprocess.run([sys.executable, a.script, "--data", d, "--device", "cpu", "--warmup-epochs", warmup],
                             capture_output=True, text=True)
        assert bad.returncode != 0 and "--warmup-epochs must be a finite number >= 0" in bad.stderr, bad.stderr
    missing = subprocess.run([sys.executable, a.script, "--data", d + "/nowhere", "--device", "cpu"],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "is missing" in missing.stderr, missing.stderr
    # The flags are read before PyTorch is imported (about 2 s): --help and a refused flag never import it.
    # A stand-in torch module that stops the script shows whether it was imported; the last run shows that
    # the stand-in is the one a real run finds.
    with tempfile.TemporaryDirectory() as fake:
        with open(os.path.join(fake, "torch.py"), "w") as f:
            f.write("raise SystemExit('bench/pytorch/train.py imported torch')\n")
        env = {**os.environ, "PYTHONPATH": fake}
        for args in (["--help"], ["--data", d, "--epochs", "0"], ["--data", d, "--warmup-epochs", "-1"]):
            r = subprocess.run([sys.executable, a.script, *args], capture_output=True, text=True, env=env)
            assert "imported torch" not in r.stdout + r.stderr, (args, r.stdout, r.stderr)
            assert (r.returncode == 0) == (args == ["--help"]), (args, r.returncode, r.stderr)
        r = subprocess.run([sys.executable, a.script, "--data", d, "--device", "cpu"], capture_output=True, text=True,
                           env=env)
        assert r.returncode != 0 and "imported torch" in r.stderr, (r.returncode, r.stderr)
print("ok")
