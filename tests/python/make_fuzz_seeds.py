#!/usr/bin/env python3
"""Write the seed corpus of tests/fuzz/fuzz_checkpoint.cpp (standard library only).

Small files that reach every branch of the safetensors reader: valid ones (each dtype, a scalar, an
empty tensor, metadata, a header listed out of data order) and near misses (overlap, gap, trailing
bytes, bad dtype, duplicate key, truncation). The output is byte for byte the same on every run, so
the committed corpus is rebuilt, from the repository root, with

    python3 tests/python/make_fuzz_seeds.py tests/fuzz/corpus/fuzz_checkpoint

(`git status tests/fuzz/corpus` then shows no change). OUT is created if missing; the seed files in it
are overwritten and nothing else there is touched (a regress_* input stays).
"""
import argparse
import json
import os
import struct
import sys


def file_bytes(header_text, data=b"", pad=True):
    h = header_text.encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="The committed corpus, from the repository root: "
               "python3 tests/python/make_fuzz_seeds.py tests/fuzz/corpus/fuzz_checkpoint")
    ap.add_argument("out", metavar="OUT", help="the folder to write the seed files into (created if missing)")
    out = ap.parse_args().out
    if os.path.exists(out) and not os.path.isdir(out):
        ap.error(f"{out} exists and is not a folder")
    seeds = {
        "empty_header": file_bytes("{}"),
        "one_f32": file_bytes(json.dumps({"w": entry("F32", [2], 0, 8)}), struct.pack("<2f", 1.5, -2.0)),
        "every_dtype": file_bytes(json.dumps({
            "__metadata__": {"halfling.format": "checkpoint", "optim.type": "SGD"},
            "model.0.weight": entry("F32", [2, 2], 0, 16),
            "h": entry("F16", [3], 16, 22),
            "i": entry("I32", [1], 22, 26),
            "d": entry("F64", [1], 26, 34),
        }), struct.pack("<4f", 1, 2, 3, 4) + struct.pack("<3e", 0.5, -1, 65504) + struct.pack("<i", -7) +
            struct.pack("<d", 3.25)),
        "scalar_and_empty": file_bytes(json.dumps({"s": entry("F32", [], 0, 4), "e": entry("F32", [0, 5], 4, 4)}),
                                       struct.pack("<f", 2.0)),
        "out_of_order": file_bytes(json.dumps({"b": entry("F32", [1], 4, 8), "a": entry("F32", [1], 0, 4)}),
                                   struct.pack("<2f", 1, 2)),
        "overlap": file_bytes(json.dumps({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}), bytes(12)),
        "gap": file_bytes(json.dumps({"a": entry("F32", [1], 4, 8)}), bytes(8)),
        "trailing": file_bytes(json.dumps({"a": entry("F32", [1], 0, 4)}), bytes(7)),
        "bad_dtype": file_bytes(json.dumps({"a": entry("BF16", [2], 0, 4)}), bytes(4)),
        "duplicate": file_bytes('{"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}, '
                                '"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4)),
        "truncated": file_bytes(json.dumps({"a": entry("F64", [4], 0, 32)}), bytes(20)),
        "huge_shape": file_bytes(json.dumps({"a": entry("F32", [2**40, 2**40], 0, 8)}), bytes(8)),
    }
    os.makedirs(out, exist_ok=True)
    for name, blob in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(blob)
    print(f"wrote {len(seeds)} seeds to {os.path.normpath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
