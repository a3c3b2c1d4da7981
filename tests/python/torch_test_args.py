"""The shared start of the tests that run bench/train next to bench/pytorch/train.py: skip (exit 77,
CTest's "skipped") without numpy and torch or without MNIST, else parse --train, --script and --mnist."""
import argparse
import os
import sys


def parse_or_skip():
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (Debian: apt-get install python3-torch libopenblas0)")
        sys.exit(77)
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, help="<build>/bench/train")
    ap.add_argument("--script", required=True, help="bench/pytorch/train.py")
    ap.add_argument("--mnist", default="")
    a = ap.parse_args()
    if os.environ.get("HALFLING_DATA"):  # the same override as the C++ tests (tests/test_util.h data_dir)
        a.mnist = os.path.join(os.environ["HALFLING_DATA"], "mnist")
    if not a.mnist or not os.path.isdir(a.mnist):
        print("SKIP: MNIST not found: run datasets/fetch.sh mnist")
        sys.exit(77)
    return a
