#!/usr/bin/env python3
"""halfling computes what PyTorch computes: every op, forward and backward, the modules' initial values
and the optimizers, each recomputed by PyTorch in float64 from halfling's own inputs.

The gradient checks (framework/gradcheck.h) prove each backward consistent with its forward; this test
proves the forward is the one a PyTorch user means: the broadcasting rules, the padding of pooling
windows, which variance batch norm's running statistics keep, the order of weight decay, momentum,
dampening and Nesterov in SGD, Adam's bias correction and per-parameter step count, where AdamW's decay
goes, clip_grad_norm_'s factor, cross-entropy's mean, ReLU's gradient at 0, and so on.

parity_cases (tests/python/parity_cases.cpp) runs every case on the CPU and writes inputs, outputs,
the random seed gradient, the input gradients and the optimizers' trajectories to a safetensors file;
the "cases" metadata says which op and settings each case used. This script rebuilds each case in
PyTorch and compares, element by element, |halfling - torch64| <= allowance, where the allowance is
what FP32 arithmetic may add, plus, for an FP16 result, its rounding:

- FP16 results must be the float64 result correctly rounded: half an ulp at the reference, on top of
  the FP32 arithmetic before the store (DESIGN.md §2: FP16 storage, FP32 arithmetic, RNE on the store).
  Where that is the only rounding (an elementwise op's output, or a gradient of one FP16 op), the check
  also moves the result's largest element by one ulp and requires the comparison to fail: a wrong last
  bit is seen. A
  backward made of several FP16 ops rounds each intermediate, as PyTorch's autograd does on half
  tensors: 2^-11 of the terms' size for each (FP16_ROUNDINGS, counted from framework/ops.cpp), or, for
  an intermediate among FP16's subnormals, half their fixed spacing times what follows it (allowance()).
- FP32 arithmetic: 2^-22 (2 to 4 ulps) of |ref| for one elementwise op, 2^-20 for a gradient (a short
  chain of ops), plus |s - f32(s)| where a scalar s is rounded to FP32 and added; for sums of products (matmul,
  linear, conv, sums, means, average pooling, a broadcast operand's gradient, overlapping max-pooling
  windows) 1e-5 of the same op on absolute values (a sum of n terms is off by at most about n 2^-24 of
  the sum of their absolute values, and n <= 150 here); for softmax, cross-entropy and batch norm, whose
  results cancel, 2^-20 of |ref| plus 1e-6 of the tensor's largest |ref|.
- Output dtypes are checked against docs/precision.md, and each gradient has its input's dtype.
- Optimizers: after the last step, ||p - p_torch|| <= 1e-6 ||p_torch - p0|| + steps 2^-23 ||p_torch||
  (the update's arithmetic, and the FP32 rounding of each step's result); an FP16 parameter with FP32
  masters must be its master rounded. (Adam's 1 - beta2 computed in f32, a bug fixed in e428a30, misses
  this by 100x in `adam_beta2_near_1`.)

Negative controls: a few cases are compared once more against PyTorch with a neighbouring semantic
(average pooling without the padding in the divisor, SGD without dampening or Nesterov, Adam for AdamW,
an Adam that counts a step without a gradient, ...), and each of those comparisons must fail, so the
cases can tell those semantics apart.

The seed is fresh each run (HALFLING_TEST_SEED repeats one). Exits 77 (CTest's "skipped") without torch.
Usage: pytorch_parity.py --cases <build>/tests/python/parity_cases
       pytorch_parity.py --file FILE     (a file `parity_cases SEED FILE cuda` wrote on a GPU machine:
                                          the CUDA kernels against PyTorch; no initializer cases there)
"""
import argparse
import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP: {e} (Debian: apt-get install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_interop import read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

# How much FP32 arithmetic may move a result before it is stored, by kind of op (see the docstring).
# Sums of products: 1e-5 of the same op on absolute values.
SUMS_OF_PRODUCTS = {"matmul", "linear", "conv2d", "sum", "mean", "avg_pool2d", "global_avg_pool2d"}
# Results that cancel (softmax, batch norm's centring): an absolute allowance besides the relative one.
CANCELLING = {"log_softmax", "cross_entropy", "nll_loss", "batch_norm2d"}
# Scalar ops whose scalar is rounded to FP32 before it is added: |s - f32(s)| more.
ADDS_A_SCALAR = {"add_scalar", "rsub"}
# FP16 roundings on the way to an FP16 gradient, where the backward is a chain of FP16 ops (each one
# rounds its result, as PyTorch's autograd does on half tensors); 1, the final store, unless named.
# By (op, input), from framework/ops.cpp's formulas:
FP16_ROUNDINGS = {
    ("mul", 1): 2,   # g * a, then summed over the broadcast dims (mul_broadcast's b is broadcast)
    ("div", 1): 4,   # -(g * y) / b with y = a / b the stored output: y, g * y, the quotient; then the sum
    ("exp", 0): 2,   # g * y with y = exp(x) the stored output
    ("pow", 0): 3,   # (g * x^(e-1)) * e: the power, then each product
    ("rdiv", 0): 3,  # -(g * y) / x with y = s / x the stored output
}


def half_ulp16(x):
    """Half the FP16 spacing at |x| (subnormals: 2^-25), elementwise, as float64."""
    a = np.abs(x)
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -14)))
    return 2.0 ** (e - 11)


class Mismatch(Exception):
    pass


def allowance(f32_part, ref, f16, roundings=1, scale=None, terms=1):
    """The whole allowance: the FP32 arithmetic's part, then for an FP16 result half an ulp (its
    rounding), and for each FP16 intermediate before it what its rounding may move the result: 2^-11 of
    `scale` (the terms' absolute values, else |ref|) where it is a normal number, and, where it falls
    among FP16's subnormals (below 2^-14), whose spacing is a fixed 2^-24, 2^-25 times what multiplies it
    afterwards (at most 16 here: a seed gradient below 8 over a divisor above 0.5, or an exponent of at
    most 3) for each of the `terms` summed into one result (a broadcast operand's gradient)."""
    if not f16:
        return f32_part
    scale = np.abs(ref) if scale is None else np.abs(scale)
    # A subnormal intermediate (below 2^-14) multiplied by at most 16 gives terms below 2^-10: where the
    # terms add up to more than 2^-10 each, none was subnormal, or its 2^-21 is far inside the 2^-11 part.
    subnormal = np.where(scale < 2.0 ** -10 * terms, 2.0 ** -25 * 16 * terms, 0.0)
    intermediate = 2.0 ** -11 * scale + subnormal
    return f32_part + half_ulp16(np.abs(ref) + f32_part) + (roundings - 1) * intermediate


def compare(what, h, ref, allow):
    """Raise Mismatch unless |h - ref| <= allow everywhere (NaN where PyTorch has NaN, and the same
    infinities, count as equal). Returns the worst error as a fraction of the allowance."""
    h = np.asarray(h, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if h.shape != ref.shape:
        raise Mismatch(f"{what}: shape {h.shape}, PyTorch {ref.shape}")
    allow = np.broadcast_to(np.asarray(allow, dtype=np.float64), ref.shape)
    # Where PyTorch's result is NaN or infinite, only the same value passes (an allowance made from an
    # infinite reference would be infinite, and let anything through).
    same_special = (np.isnan(h) & np.isnan(ref)) | (np.isinf(ref) & (h == ref))
    with np.errstate(invalid="ignore"):
        err = np.abs(h - ref)
        bad = ~same_special & (~np.isfinite(ref) | ~(err <= allow))
    if np.any(bad):
        i = np.unravel_index(np.argmax(bad), bad.shape)
        raise Mismatch(f"{what}: {int(bad.sum())} of {bad.size} elements differ; first at {tuple(int(v) for v in i)}: "
                       f"halfling {h[i]!r}, PyTorch {ref[i]!r}, allowance {allow[i]:.3g}")
    ok = ~same_special
    return float(np.max(err[ok] / np.maximum(allow[ok], 1e-300))) if np.any(ok) else 0.0


def ulps_off(h, ref):
    """The largest distance of an FP16 result from the reference, in FP16 ulps at the reference."""
    return float(np.max(np.abs(h.astype(np.float64) - ref) / (2 * half_ulp16(ref))))


def one_ulp_off_fails(what, h, ref, allow):
    """The check's power, for an FP16 result of one rounding: the result moved by one FP16 ulp (at the
    reference's magnitude) away from the reference, at its largest element, must fail the same
    comparison; else the check could not see a wrong last bit."""
    h = np.array(h, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    finite = np.isfinite(ref) & (np.abs(ref) >= 2.0 ** -14)
    if not np.any(finite):
        return
    i = np.unravel_index(np.argmax(np.where(finite, np.abs(ref), -1.0)), ref.shape)
    away = np.sign(h[i] - ref[i]) or np.sign(ref[i])
    h[i] += away * 2 * half_ulp16(ref[i])
    try:
        compare(what, h, ref, allow)
    except Mismatch:
        return
    raise Mismatch(f"{what}: a result one FP16 ulp off at {tuple(int(v) for v in i)} passes; the allowance is too wide")


def t64(a, grad=False):
    x = torch.tensor(np.asarray(a, dtype=np.float64))
    return x.requires_grad_(grad)


def torch_op(c, x):
    """The case `c` in PyTorch on float64 tensors x (labels as int64)."""
    op = c["op"]
    if op == "add":
        return x[0] + x[1]
    if op == "sub":
        return x[0] - x[1]
    if op == "mul":
        return x[0] * x[1]
    if op == "div":
        return x[0] / x[1]
    if op == "add_scalar":
        return x[0] + c["s"]
    if op == "mul_scalar":
        return x[0] * c["s"]
    if op == "div_scalar":
        return x[0] / c["s"]
    if op == "rsub":
        return c["s"] - x[0]
    if op == "rdiv":
        return c["s"] / x[0]
    if op == "neg":
        return -x[0]
    if op == "exp":
        return torch.exp(x[0])
    if op == "log":
        return torch.log(x[0])
    if op == "pow":
        return torch.pow(x[0], c["exponent"])
    if op == "relu":
        return torch.relu(x[0])
    if op == "cast":
        return x[0] * 1.0  # values: the cast's rounding is checked by the FP16 comparison
    if op == "sum":
        return x[0].sum() if "dims" not in c else x[0].sum(dim=c["dims"], keepdim=c["keepdim"])
    if op == "mean":
        return x[0].mean() if "dims" not in c else x[0].mean(dim=c["dims"], keepdim=c["keepdim"])
    if op == "reshape":
        return x[0].reshape(c["shape"])
    if op == "flatten":
        return torch.flatten(x[0], c["start_dim"])
    if op == "matmul":
        a = x[0].t() if c["trans_a"] else x[0]
        b = x[1].t() if c["trans_b"] else x[1]
        return a @ b
    if op == "linear":
        y = F.linear(x[0], x[1], x[2] if len(x) > 2 else None)
        return torch.relu(y) if c["relu"] else y
    if op == "log_softmax":
        return F.log_softmax(x[0], dim=1)
    if op == "cross_entropy":
        return F.cross_entropy(x[0], x[1], reduction=c.get("reduction", "mean"))
    if op == "nll_loss":
        return F.nll_loss(x[0], x[1])
    if op == "conv2d":
        y = F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, stride=c["stride"], padding=c["padding"])
        return torch.relu(y) if c["relu"] else y
    if op == "max_pool2d":
        return F.max_pool2d(x[0], c["kernel"], c["stride"], c["padding"])
    if op == "avg_pool2d":
        return F.avg_pool2d(x[0], c["kernel"], c["stride"], c["padding"],
                            count_include_pad=c.get("count_include_pad", True))
    if op == "global_avg_pool2d":
        return F.adaptive_avg_pool2d(x[0], 1).flatten(1)
    if op == "dropout":
        return F.dropout(x[0], c["p"], True)  # p = 1 only: no mask to draw
    if op == "batch_norm2d":
        return F.batch_norm(x[0], x[3], x[4], x[1], x[2], training=c["training"], momentum=c["momentum"],
                            eps=c["eps"])
    raise KeyError(f"no PyTorch form for op {op!r}")


def torch_abs_op(c, x):
    """The case's op on the inputs' absolute values with every sign made +: the sum of the absolute
    values of the terms, which bounds the arithmetic's error. None where the op is not built from sums,
    products and quotients (exp, log, softmax, batch norm)."""
    op = c["op"]
    if op in ("exp", "log", "log_softmax", "cross_entropy", "nll_loss", "batch_norm2d", "max_pool2d", "cast",
              "dropout"):
        return None
    if op == "sub":
        return x[0] + x[1]
    if op == "rsub":
        return abs(c["s"]) + x[0]
    if op == "neg":
        return x[0] * 1.0
    if op == "relu":
        return x[0] * 1.0  # |x| >= |relu(x)|, and a gradient of 1 bounds relu's 0 or 1
    if "s" in c:
        c = dict(c, s=abs(c["s"]))
    if op in ("linear", "conv2d") and c["relu"]:
        c = dict(c, relu=False)
    return torch_op(c, x)


def dtype_of(a):
    return {np.float16: "f16", np.float32: "f32", np.float64: "f64", np.int32: "i32"}[a.dtype.type]


def expected_out_dtype(c, ins):
    """docs/precision.md: reductions, softmax and losses return f32 for f16 inputs; a binary op with one
    f16 and one f32 input promotes to f32; everything else keeps its input's dtype."""
    if c["op"] == "cast":
        return c["to"]
    floats = [dtype_of(a) for a in ins if dtype_of(a) != "i32"]
    if c["op"] == "batch_norm2d":
        return floats[0]
    d = "f32" if "f32" in floats else floats[0]
    if c["op"] in ("sum", "mean", "log_softmax", "cross_entropy", "nll_loss") and d == "f16":
        return "f32"
    return d


def check_op(c, T, override=None):
    """Compare one op case; returns a one-line summary. override: settings replacing the case's (the
    negative controls)."""
    name = c["name"]
    c = dict(c, **(override or {}))
    op = c["op"]
    n_in = sum(1 for k in T if k.startswith(name + "/in/"))
    ins = [T[f"{name}/in/{k}"] for k in range(n_in)]
    grads = {k: T[f"{name}/grad/{k}"] for k in range(n_in) if f"{name}/grad/{k}" in T}
    out = T[f"{name}/out"]
    if override is None and dtype_of(out) != expected_out_dtype(c, ins):
        raise Mismatch(f"{name}: output {dtype_of(out)}, docs/precision.md says {expected_out_dtype(c, ins)}")
    for k, g in grads.items():
        if override is None and dtype_of(g) != dtype_of(ins[k]):
            raise Mismatch(f"{name}: gradient {k} is {dtype_of(g)}, its input {dtype_of(ins[k])}")

    def run(absolute):
        """PyTorch's output and input gradients; absolute: the terms' absolute values summed instead
        (max pooling keeps its routing and takes |seed|). None where the op has no such form."""
        x = []
        for k, a in enumerate(ins):
            if dtype_of(a) == "i32":
                x.append(torch.tensor(a.astype(np.int64)))
            else:
                v = np.abs(a.astype(np.float64)) if absolute and op != "max_pool2d" else a
                x.append(t64(v, grad=k in grads))
        y = torch_op(c, x) if not absolute or op == "max_pool2d" else torch_abs_op(c, x)
        if y is None:
            return None, {}, x
        g = {}
        if grads:
            seed = T[f"{name}/seed"].astype(np.float64)
            y.backward(torch.tensor(np.abs(seed) if absolute else seed))
            g = {k: x[k].grad.numpy() for k in grads}
        return y.detach().numpy(), g, x

    ref, gref, xs = run(False)
    aref, agref, _ = run(True)
    all_f16 = all(dtype_of(a) == "f16" for a in ins if dtype_of(a) != "i32")

    def f32_part(r, absr, reduced, gradient):
        """What FP32 arithmetic may add to a result r (absr: its terms' absolute values; reduced: a
        gradient summed over broadcast dims; gradient: a chain of a few FP32 ops, not one)."""
        if op in SUMS_OF_PRODUCTS or reduced:
            return 1e-5 * np.abs(absr)
        if op in CANCELLING:
            finite = r[np.isfinite(r)]
            return 2.0 ** -20 * np.abs(r) + 1e-6 * (np.max(np.abs(finite)) if finite.size else 0.0)
        if op == "max_pool2d":
            return 2.0 ** -22 * np.abs(absr)  # overlapping windows add their gradients
        part = (2.0 ** -20 if gradient else 2.0 ** -22) * np.abs(r)
        if op in ADDS_A_SCALAR:
            part = part + abs(c["s"] - float(np.float32(c["s"])))  # the scalar's own rounding to FP32
        return part

    f16 = dtype_of(out) == "f16"
    allow = allowance(f32_part(ref, aref, False, False), ref, f16)
    worst = [compare(f"{name} output", out, ref, allow)]
    # The last bit: an elementwise op's FP16 result is one rounding of an FP32 value.
    single_rounding = op not in SUMS_OF_PRODUCTS and op not in CANCELLING
    if f16 and single_rounding:
        one_ulp_off_fails(f"{name} output", out, ref, allow)
    ulps = [ulps_off(out, ref)] if f16 else []
    for k, g in grads.items():
        reduced = ins[k].shape != out.shape and op in ("add", "sub", "mul", "div")
        r = FP16_ROUNDINGS.get((op, k), 1) if all_f16 else 1
        g16 = dtype_of(g) == "f16"
        terms = out.size // ins[k].size if reduced else 1
        allow = allowance(f32_part(gref[k], agref.get(k), reduced, True), gref[k], g16, r, agref.get(k), terms)
        worst.append(compare(f"{name} gradient {k}", g, gref[k], allow))
        if g16 and single_rounding and r == 1 and not reduced:
            one_ulp_off_fails(f"{name} gradient {k}", g, gref[k], allow)
        if g16 and r == 1:
            ulps.append(ulps_off(g, gref[k]))
    if op == "batch_norm2d" and c["training"]:
        # F.batch_norm updated xs[3] and xs[4] (the running statistics) in place.
        for key, k in (("running_mean", 3), ("running_var", 4)):
            want = xs[k].detach().numpy()
            worst.append(compare(f"{name} {key}", T[f"{name}/extra/{key}"], want, 2.0 ** -20 * np.abs(want)))
    return f"{name:30s} {op:18s} worst error {max(worst):5.2f} of the allowance" + (
        f", {max(ulps):.2f} FP16 ulp at one rounding" if ulps else "")


def check_dropout(c, T):
    name, p = c["name"], c["p"]
    x, y = T[f"{name}/in/0"].astype(np.float64), T[f"{name}/out"].astype(np.float64)
    g, seed = T[f"{name}/grad/0"].astype(np.float64), T[f"{name}/seed"].astype(np.float64)
    kept = y != 0
    want_y, want_g = x[kept] / (1 - p), np.where(kept, seed / (1 - p), 0.0)
    compare(f"{name} kept outputs", y[kept], want_y, 2.0 ** -22 * np.abs(want_y))
    compare(f"{name} gradient", g, want_g, 2.0 ** -22 * np.abs(want_g))
    dropped = 1 - kept.mean()
    sigma = math.sqrt(p * (1 - p) / kept.size)
    if abs(dropped - p) > 5 * sigma:
        raise Mismatch(f"{name}: {dropped:.4f} of the outputs dropped, p = {p} (5 sigma: {5 * sigma:.4f})")
    return (f"{name:30s} dropout            {dropped:.4f} dropped (p {p}), kept ones x/(1-p), "
            "gradient through the same mask")


def check_init(c, T):
    name = c["name"]
    if c["op"] == "init_bn":
        for key, v in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
            if not np.all(T[f"{name}/{key}"] == v):
                raise Mismatch(f"{name}: {key} is not all {v}, PyTorch's BatchNorm2d start")
        return f"{name:30s} init               weight 1, bias 0, running mean 0, running variance 1"
    # PyTorch's Linear and Conv2d: kaiming_uniform_(a=sqrt(5)) for the weight, U(-b, b) with
    # b = 1/sqrt(fan_in) for both weight and bias.
    b = 1 / math.sqrt(c["fan_in"])
    for key in ("weight", "bias"):
        w = T[f"{name}/{key}"].astype(np.float64).ravel()
        # Each test written so that a NaN fails it.
        if not np.all(np.abs(w) <= b):
            raise Mismatch(f"{name}: {key} reaches {np.max(np.abs(w))}, beyond PyTorch's bound {b}")
        n = w.size
        # A uniform on [-b, b]: mean 0 (sd b/sqrt(3n)), variance b^2/3 (sd about b^2 sqrt(4/(45 n))).
        if not abs(w.mean()) <= 5 * b / math.sqrt(3 * n):
            raise Mismatch(f"{name}: {key}'s mean {w.mean()} is not U(-{b}, {b})'s 0")
        if not abs(w.var() - b * b / 3) <= 5 * b * b * math.sqrt(4 / (45 * n)):
            raise Mismatch(f"{name}: {key}'s variance {w.var()} is not U(-{b}, {b})'s {b * b / 3}")
    return f"{name:30s} init               U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias, fan_in {c['fan_in']}"


def check_optimizer(c, T, override=None):
    """One optimizer case: torch.optim's optimizer in float64 from the same start, fed the same gradients
    (None where halfling's parameter had none), clipped as halfling clipped; then the parameters (or the
    FP32 masters, whose FP16 rounding must be the parameter) after the last step."""
    name = c["name"]
    c = dict(c, **(override or {}))
    params = [t64(T[f"{name}/p0/{i}"], grad=True) for i in range(c["params"])]
    if c["optimizer"] == "SGD":
        opt = torch.optim.SGD(params, lr=c["lr"], momentum=c["momentum"], dampening=c["dampening"],
                              weight_decay=c["weight_decay"], nesterov=c["nesterov"])
    else:
        cls = torch.optim.AdamW if c["optimizer"] == "AdamW" else torch.optim.Adam
        opt = cls(params, lr=c["lr"], betas=tuple(c["betas"]), eps=c["eps"], weight_decay=c["weight_decay"])
    use = 0.0
    for step in range(c["steps"]):
        for i, p in enumerate(params):
            key = f"{name}/g/{step}/{i}"
            if key in T:
                p.grad = torch.tensor(T[key].astype(np.float64))
            else:
                p.grad = torch.zeros_like(p) if c.get("zero_for_missing") else None
        if c["clip"] >= 0:
            norm = torch.nn.utils.clip_grad_norm_(params, c["clip"] * c.get("clip_factor", 1.0))
            want = norm.numpy().reshape(T[f"{name}/norm/{step}"].shape)
            use = max(use, compare(f"{name} norm at step {step}", T[f"{name}/norm/{step}"], want, 1e-5 * want))
        opt.step()
    for i, p in enumerate(params):
        p0 = T[f"{name}/p0/{i}"].astype(np.float64)
        want = p.detach().numpy()
        # A mixed-precision optimizer updates its FP32 masters; the FP16 parameter is the rounded master.
        got = T[f"{name}/master/{i}"] if f"{name}/master/{i}" in T else T[f"{name}/p/{i}"]
        if f"{name}/master/{i}" in T and not np.array_equal(T[f"{name}/p/{i}"], got.astype(np.float16)):
            raise Mismatch(f"{name}: parameter {i} is not its master rounded to FP16")
        err = np.linalg.norm(got.astype(np.float64) - want)
        allow = 1e-6 * np.linalg.norm(want - p0) + c["steps"] * 2.0 ** -23 * np.linalg.norm(want)
        if not err <= allow:
            raise Mismatch(f"{name}: parameter {i} after {c['steps']} steps is {err:.3g} from PyTorch's "
                           f"(allowance {allow:.3g}; the steps moved it {np.linalg.norm(want - p0):.3g})")
        use = max(use, err / allow)
    return f"{name:30s} {c['optimizer']:18s} worst error {use:5.2f} of the allowance after {c['steps']} steps"


@functools.lru_cache(maxsize=None)
def reference_models():
    """bench/pytorch/train.py's models (the ones compare_train.sh trains), by name, and a negative
    control's."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "pytorch"))
    import train as reference
    return dict(reference.MODELS, lenet_transposed=lambda: lenet_transposed(reference.lenet()))


class _SwapHW(torch.nn.Module):
    def forward(self, x):
        return x.transpose(2, 3)


def lenet_transposed(m):
    """A negative control: LeNet with its feature maps transposed before Flatten (the same parameters)."""
    return torch.nn.Sequential(*list(m)[:6], _SwapHW(), *list(m)[6:])


def check_model(c, T, override=None):
    """One canonical model in training mode: bench/pytorch/train.py's model in float64 with halfling's
    weights and running statistics (in parameter order, every shape checked), the same batch, then the
    logits, the loss and the running statistics after the pass, and for the f64 models every parameter's
    gradient, each norm-wise (MODEL_BOUND says why these bounds, and why no gradients for f16)."""
    name = c["name"]
    c = dict(c, **(override or {}))
    dtype = name.rsplit("_", 1)[1]
    model = reference_models()[c["model"]]().double().train(not c.get("eval", False))
    params = list(model.parameters())
    buffers = [b for n, b in model.named_buffers() if not n.endswith("num_batches_tracked")]
    if len(params) != c["params"] or len(buffers) != c["buffers"]:
        raise Mismatch(f"{name}: {c['params']} parameters and {c['buffers']} buffers, PyTorch's model "
                       f"{len(params)} and {len(buffers)}")
    with torch.no_grad():
        for i, p in enumerate(params + buffers):
            key = f"{name}/param/{i}" if i < len(params) else f"{name}/buffer/{i - len(params)}"
            if tuple(T[key].shape) != tuple(p.shape):
                raise Mismatch(f"{name}: {key} is {list(T[key].shape)}, PyTorch's {list(p.shape)}")
            p.copy_(torch.from_numpy(T[key].astype(np.float64)))
    logits = model(t64(T[f"{name}/x"]))
    loss = F.cross_entropy(logits, torch.tensor(T[f"{name}/y"].astype(np.int64)))
    loss.backward()
    pairs = [("logits", T[f"{name}/logits"], logits), ("loss", T[f"{name}/loss"], loss)]
    pairs += [(f"running statistic {i}", T[f"{name}/buffer_after/{i}"], b) for i, b in enumerate(buffers)]
    if dtype == "f64":
        pairs += [(f"gradient {i}", T[f"{name}/grad/{i}"], p.grad) for i, p in enumerate(params)]
    bound, worst = MODEL_BOUND[dtype], 0.0
    for what, h, ref in pairs:
        ref = ref.detach().numpy().reshape(np.shape(h))
        err = np.linalg.norm(h.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-300)
        if not err <= bound:
            raise Mismatch(f"{name} {what}: {err:.3g} of its norm from PyTorch's (bound {bound:g})")
        worst = max(worst, err)
    what = "everything" if dtype == "f64" else "forward pass"
    return f"{name:30s} model              {what}: worst norm-wise error {worst:.2e} (bound {bound:g})"


# Norm-wise bounds for the canonical models, relative to each tensor's norm:
# - f64: both sides compute in float64 and take the same decisions (a max-pool window's maximum, a ReLU
#   input's sign: in float64 they tie only at exact zeros, which route nothing), so only the summation
#   order differs; measured at most 6.5e-15 over 20 seeds. In f32 the decisions flip now and then (a
#   value within FP32 rounding of 0, or of its window's maximum: 2 of 20 seeds), and the gradients below
#   the flip then differed by up to 2.5% of their norm after VGG-small's batch norms: a different
#   computation, not an error, as in pytorch_trajectory.py. So the models are compared in f64.
# - f16 (`mixed`'s model: FP16 activations and weights, batch norm in f32): the logits, the loss and the
#   running statistics carry a few FP16 roundings, measured at most 1.1e-3 of their norm over 40 seeds
#   (1.08e-3 at seed 2013, VGG-small's logits).
#   The gradients are not compared: FP16 rounding flips many more of those decisions (it tied 19 of the
#   65,536 windows of VGG-small's first max pool in one run), and batch norm's backward, which removes
#   its gradient's mean and its correlation with the normalized input, then magnifies each flip's effect
#   (up to 8% of a gradient's norm, even against a PyTorch run that rounds every activation and gradient
#   to FP16 as halfling does). The op cases check FP16 gradients, op by op.
MODEL_BOUND = {"f64": 1e-10, "f16": 5e-3}


# Each: a case, the neighbouring semantic to compare it with, and why halfling's is the right one.
NEGATIVE_CONTROLS = [
    ("avg_pool_3x3_s2_p1_f32", {"count_include_pad": False}, "padding counts in the divisor (PyTorch's default)"),
    ("batch_norm_train", {"training": False}, "training normalizes with the batch's statistics"),
    ("cross_entropy_f32", {"reduction": "sum"}, "the loss is the batch's mean"),
    ("sgd_dampening_decay", {"dampening": 0.0}, "dampening scales each new gradient after the first"),
    ("sgd_nesterov", {"nesterov": False}, "Nesterov's look-ahead"),
    ("sgd_momentum_gaps", {"zero_for_missing": True}, "a parameter without a gradient keeps its momentum unused"),
    ("adam_l2", {"optimizer": "AdamW"}, "Adam's weight decay goes into the gradient"),
    ("adamw", {"optimizer": "Adam"}, "AdamW's decay is decoupled from the moments"),
    ("adam_gaps", {"zero_for_missing": True}, "a step without a gradient does not count in Adam's t"),
    ("clip_then_sgd", {"clip_factor": 1.02}, "the clipped norm is max_norm"),
    ("model_vgg_small_f64", {"eval": True}, "a model in training mode normalizes with the batch's statistics"),
    ("model_lenet_f64", {"model": "lenet_transposed"}, "Flatten takes each image's channels, rows, columns in "
     "that order"),
]


def main():
    ap = argparse.ArgumentParser()
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--cases", help="<build>/tests/python/parity_cases: run it here, on the CPU, and check")
    src.add_argument("--file", help="check a file parity_cases wrote elsewhere (`parity_cases SEED FILE cuda` "
                     "on a GPU machine: scripts/gpu_check.sh short's parity-cuda step)")
    ap.add_argument("--as-device-file", action="store_true",
                    help="with --cases: check only what a GPU's file holds (no initializers, no models), "
                    "as --file would: the CPU test of that path")
    a = ap.parse_args()
    if a.as_device_file and not a.cases:
        ap.error("--as-device-file goes with --cases")
    torch.set_num_threads(1)
    if a.cases:
        seed = int(os.environ.get("HALFLING_TEST_SEED", random.randrange(1_000_000_007)))
        print(f"[ seed     ] HALFLING_TEST_SEED={seed}")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cases.safetensors")
            subprocess.run([a.cases, str(seed), path], check=True)
            T, meta = read_safetensors(path)
    else:
        T, meta = read_safetensors(a.file)
        print(f"[ file     ] {a.file}: seed {meta.get('seed', '?')}, written on {meta.get('device_name', '?')}")
    cases = json.loads(meta["cases"])
    if a.as_device_file:
        cases = [c for c in cases if c["op"] not in ("init", "init_bn", "model")]
    by_name = {c["name"]: c for c in cases}
    failures = []
    for c in cases:
        try:
            if "error" in c:
                raise Mismatch(f"{c['name']}: halfling could not run it: {c['error']}")
            if c["op"] == "optimizer":
                line = check_optimizer(c, T)
            elif c["op"] == "model":
                line = check_model(c, T)
            elif c["op"] in ("init", "init_bn"):
                line = check_init(c, T)
            elif c["op"] == "dropout" and c["p"] < 1:
                line = check_dropout(c, T)
            else:
                line = check_op(c, T)
            print("ok   " + line)
        except Mismatch as e:
            print(f"FAIL {e}")
            failures.append(str(e))
    controls = 0
    for name, override, why in NEGATIVE_CONTROLS:
        c = by_name.get(name)
        if c is None or "error" in c:
            continue  # a CPU-only case, not in a file from a GPU; or one that failed above already
        controls += 1
        try:
            {"optimizer": check_optimizer, "model": check_model}.get(c["op"], check_op)(c, T, override)
        except Mismatch as e:
            print(f"ok   negative control {name} with {override}: fails as it must ({why}): {e}")
            continue
        print(f"FAIL negative control {name} with {override} passed: the case cannot tell {why}")
        failures.append(name)
    print(f"{len(cases)} cases, {controls} negative controls, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
