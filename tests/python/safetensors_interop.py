#!/usr/bin/env python3
"""halfling checkpoints <-> numpy, through the safetensors format, with numpy only.

(a) The helper (write_checkpoint.cpp) trains a small MLP and saves a checkpoint. This script parses
    the file by the format's rules alone, checks the layout (8-byte alignment, contiguous offsets,
    string metadata), compares every tensor with the values halfling reports, and recomputes the
    MLP's forward pass from the stored weights in float64: that only matches if the weights are laid
    out like PyTorch's (Linear weight [out, in], row-major).
(b) This script writes a checkpoint of its own (header order different from the data order, every
    dtype, metadata) and the helper loads it and compares; then a few corrupt files, which the
    helper must reject with a clear message.

Exits 77 (CTest's "skipped") when numpy is missing.
Usage: safetensors_interop.py --helper <path to write_checkpoint>
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed (Debian/Ubuntu: apt-get install python3-numpy)")
    sys.exit(77)

DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I32": "<i4"}


def read_safetensors(path):
    """Parse a safetensors file with numpy, checking the format's rules. Returns (tensors, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data), "header length past the end of the file"
    assert (8 + n) % 8 == 0, f"data not 8-byte aligned: header length {n}"
    text = data[8:8 + n].decode("utf-8")
    assert text.rstrip(" ") == text.strip() and text.startswith("{"), "header padding must be trailing spaces"
    header = json.loads(text, object_pairs_hook=lambda pairs: dict(pairs))
    metadata = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()), "metadata must be strings"
    buf = data[8 + n:]
    tensors, spans = {}, []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dt = np.dtype(DTYPES[info["dtype"]])
        shape = tuple(info["shape"])
        assert end - begin == int(np.prod(shape, dtype=np.int64)) * dt.itemsize, f"{name}: offsets vs shape"
        tensors[name] = np.frombuffer(buf[begin:end], dtype=dt).reshape(shape)
        spans.append((begin, end))
    expected = 0
    for begin, end in sorted(spans):
        assert begin == expected, f"data not contiguous at byte {begin}"
        expected = end
    assert expected == len(buf), "bytes after the last tensor"
    return tensors, metadata


def write_safetensors(path, tensors, metadata, header_order=None):
    """Write tensors (a list of (name, array)) by hand; header_order may list the names differently."""
    header, blobs, offset = {}, [], 0
    entries = {}
    for name, arr in tensors:
        code = {v: k for k, v in DTYPES.items()}[arr.dtype.newbyteorder("<").str]
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        entries[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    for name in header_order or [n for n, _ in tensors]:
        header[name] = entries[name]
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def forward(tensors, x):
    """The helper's MLP (Linear 6->8, ReLU, Linear 8->3) in float64, PyTorch's convention y = x W^T + b."""
    p = {k: v.astype(np.float64) for k, v in tensors.items()}
    h = np.maximum(x @ p["model.0.weight"].T + p["model.0.bias"], 0.0)
    return h @ p["model.2.weight"].T + p["model.2.bias"]


def rel_error(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helper", required=True)
    args = ap.parse_args()
    seed = int(os.environ.get("HALFLING_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"[ seed     ] HALFLING_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory(prefix="halfling_interop_") as d:
        # ---- (a) halfling writes, numpy reads -----------------------------------------------------
        code, out = run([args.helper, "write", d, str(seed)])
        check(code == 0, f"helper wrote a checkpoint ({out.strip()})")
        if code != 0:
            return 1
        tensors, metadata = read_safetensors(os.path.join(d, "halfling.safetensors"))
        with open(os.path.join(d, "halfling.json")) as f:
            reported = json.load(f)
        check(list(tensors) == list(reported["tensors"]), "tensor names and order match halfling's")
        for name, rep in reported["tensors"].items():
            arr = tensors.get(name)
            ok = (arr is not None and arr.dtype == np.dtype(DTYPES[rep["dtype"]]) and list(arr.shape) == rep["shape"]
                  and np.array_equal(arr.astype(np.float64).ravel(), np.array(rep["values"], dtype=np.float64)))
            check(ok, f"{name}: {rep['dtype']}{rep['shape']} values identical")
        check(metadata == reported["metadata"], "metadata identical")
        check(metadata.get("optim.type") == "SGD" and metadata.get("user.seed") == str(seed),
              "metadata holds the optimizer type and the user's keys")
        check(tensors["model.0.weight"].shape == (8, 6), "Linear weight stored as [out, in] like PyTorch")
        x = np.array(reported["x"]["values"]).reshape(reported["x"]["shape"])
        err = rel_error(forward(tensors, x), np.array(reported["logits"]["values"]).reshape(4, 3))
        # halfling computes in f32; numpy in float64 from the same f32 weights: ~1e-7.
        check(err < 1e-5, f"numpy's forward pass from the stored weights matches halfling's logits (rel. error {err:.1e})")

        # ---- (b) numpy writes, halfling reads ------------------------------------------------------
        mine = [
            ("model.0.weight", rng.standard_normal((8, 6)).astype(np.float32)),
            ("model.0.bias", rng.standard_normal(8).astype(np.float32)),
            ("model.2.weight", rng.standard_normal((3, 8)).astype(np.float32)),
            ("model.2.bias", rng.standard_normal(3).astype(np.float32)),
            ("notes.half", rng.standard_normal((2, 2, 2)).astype(np.float16)),
            ("notes.double", rng.standard_normal(4)),
            ("notes.ints", rng.integers(-2**31, 2**31, size=3, dtype=np.int32)),
            ("notes.scalar", np.array(rng.standard_normal(), dtype=np.float32)),
            ("notes.empty", np.zeros((0, 2), dtype=np.float32)),
        ]
        meta = {"halfling.sections": "notes", "user.written_by": "numpy", "notes.kind": "interop"}
        # The header lists the tensors in another order than their data (as the Rust writer does).
        order = [n for n, _ in mine][::-1]
        path = os.path.join(d, "numpy.safetensors")
        write_safetensors(path, mine, meta, header_order=order)
        x = rng.standard_normal((4, 6)).astype(np.float32).astype(np.float64)
        expected = {
            "tensors": {n: {"dtype": {v: k for k, v in DTYPES.items()}[a.dtype.str], "shape": list(a.shape),
                            "values": a.astype(np.float64).ravel().tolist()}
                        for n, a in sorted(mine, key=lambda t: order.index(t[0]))},
            "metadata": meta,
            "x": {"values": x.ravel().tolist()},
            "logits": {"values": forward(dict(mine), x).ravel().tolist()},
        }
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        code, out = run([args.helper, "check", path, os.path.join(d, "expected.json")])
        check(code == 0, f"halfling loads numpy's file: {out.strip()}")

        # Corrupt files are refused with a message that names the file and the problem.
        good = open(path, "rb").read()
        corrupt = {
            "trailing.safetensors": (good + b"\0\0\0\0", "unexpected bytes after the last tensor"),
            "truncated.safetensors": (good[:-3], "run past the end of the data"),
            "short.safetensors": (good[:5], "file too short"),
            "badlen.safetensors": (struct.pack("<Q", 1 << 40) + good[8:], "is larger than the file"),
        }
        for name, (blob, message) in corrupt.items():
            p = os.path.join(d, name)
            with open(p, "wb") as f:
                f.write(blob)
            code, out = run([args.helper, "load", p])
            check(code == 1 and message in out and p in out, f"{name} rejected: {out.strip()}")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
