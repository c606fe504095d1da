"""Comparing a candidate's outputs with the reference's (in the trusted evaluator).

Every structure the reference returns (tensor, tuple, list, nesting, Python scalars) is
compared, shapes and dtypes included. Floating outputs are judged on the relative L2 error
``||out - ref|| / ||ref||`` against a tolerance set by dtype and precision mode; NaN and Inf
must appear in the same places. Integer and bool outputs must match exactly. The paper's
``allclose(atol=rtol=1e-2)`` is reported alongside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

# Relative-L2 tolerances. fp32 in strict mode sits between honest fp32 arithmetic (~1e-7..1e-5)
# and TF32 (~3e-4 and up on signed inputs), so a TF32 kernel cannot pass for fp32.
TOLERANCE = {
    ("fp32", torch.float32): 1e-4,
    ("tf32", torch.float32): 5e-3,
    (None, torch.float64): 1e-7,
    (None, torch.float16): 5e-3,
    (None, torch.bfloat16): 3e-2,
}
CHUNK = 1 << 24
"""Elements compared at a time (a float32 chunk is 64 MiB; its temporaries a few times that)."""
DOWNGRADE_CEILING = 5e-3
"""In strict fp32 mode, an error above the fp32 tolerance but at most this (with allclose 1e-2
holding) is the signature of TF32/fp16/bf16 arithmetic (unit roundoff 5e-4 to 4e-3): a precision
downgrade. Larger errors are plain wrong results. (Measured on the H200: a kernel off by 1% was
first classed as a downgrade under a 3e-2 ceiling; it is 'incorrect'.)"""


def is_precision_downgrade(c: "Comparison", precision: str) -> bool:
    """A failed comparison whose error is the signature of lower-precision arithmetic (TF32, fp16,
    bf16) under strict fp32, rather than a wrong result: above the tolerance, at most
    DOWNGRADE_CEILING, and within the paper's allclose(1e-2)."""
    return (not c.ok and c.problem is None and precision == "fp32" and bool(c.tolerance)
            and c.rel_err <= DOWNGRADE_CEILING and c.allclose_1e2)


def tolerance(dtype: torch.dtype, precision: str) -> float:
    return TOLERANCE.get((precision, dtype)) or TOLERANCE.get((None, dtype)) or 1e-4


@dataclass
class Comparison:
    ok: bool = False
    problem: str | None = None
    """Structure, shape, dtype or non-finite mismatch (not a tolerance miss)."""
    rel_err: float = 0.0
    max_abs_err: float = 0.0
    tolerance: float = 0.0
    allclose_1e2: bool = True
    worst: str = ""
    details: list[str] = field(default_factory=list)


def _flatten(obj, path="out"):
    if isinstance(obj, (list, tuple)):
        yield path, type(obj).__name__, len(obj)
        for i, o in enumerate(obj):
            yield from _flatten(o, f"{path}[{i}]")
    else:
        yield path, obj, None


def compare(out, ref, precision: str = "fp32") -> Comparison:
    c = Comparison(ok=True)
    got, want = list(_flatten(out)), list(_flatten(ref))
    if len(got) != len(want):
        return Comparison(problem=f"output structure differs: expected {_describe(ref)}, got {_describe(out)}")
    for (p, g, gl), (_, w, wl) in zip(got, want):
        if wl is not None or gl is not None:
            if gl != wl or g != w:
                return Comparison(problem=f"{p}: expected {w} of {wl}, got {_describe_leaf(g, gl)}")
            continue
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return Comparison(problem=f"{p}: expected a tensor, got {_describe_leaf(g, None)}")
            if g.shape != w.shape:
                return Comparison(problem=f"{p}: shape {tuple(g.shape)} != expected {tuple(w.shape)}")
            if g.dtype != w.dtype:
                return Comparison(problem=f"{p}: dtype {g.dtype} != expected {w.dtype}")
            _compare_tensor(p, g, w, precision, c)
            if c.problem:
                c.ok = False
                return c
        else:
            if isinstance(g, torch.Tensor) or type(g) is not type(w):
                return Comparison(problem=f"{p}: expected {type(w).__name__}, got {_describe_leaf(g, None)}")
            if isinstance(w, float):
                if math.isnan(w) or math.isnan(g):
                    if not (math.isnan(w) and math.isnan(g)):
                        c.ok, c.rel_err, c.worst = False, float("inf"), f"{p}: {g!r} != {w!r}"
                    continue
                err = abs(g - w) / max(abs(w), 1e-6)
                c.rel_err = max(c.rel_err, err)
                c.max_abs_err = max(c.max_abs_err, abs(g - w))
                if not err <= tolerance(torch.float32, precision):
                    c.ok, c.worst = False, f"{p}: {g!r} != {w!r}"
            elif g != w:
                c.ok, c.worst = False, f"{p}: {g!r} != {w!r}"
    return c


def _compare_tensor(path: str, g: torch.Tensor, w: torch.Tensor, precision: str, c: Comparison) -> None:
    if not (w.is_floating_point() or w.is_complex()):
        if not torch.equal(g, w):
            c.ok = False
            n = int((g != w).sum())
            c.worst = f"{path}: {n} of {w.numel()} elements differ"
            c.rel_err = max(c.rel_err, float("inf"))
        return
    # float32 arithmetic (float64 for float64 outputs), norms accumulated in float64, over chunks of CHUNK
    # elements: the temporaries of one whole 6 GiB output (masks, differences, a float64 copy for the norm)
    # ran a reference out of memory on an 80 GB GPU (KernelBench L1_19)
    if w.is_complex():  # judged as real and imaginary parts: a cast to a real dtype would drop the imaginary one
        g, w = torch.view_as_real(g.resolve_conj()), torch.view_as_real(w.resolve_conj())
    wide = torch.float64 if w.dtype == torch.float64 else torch.float32
    gf, wf = g.reshape(-1), w.reshape(-1)
    n_bad = n_ref_nonfinite = n_finite = 0
    max_abs = ref_norm = diff_norm = 0.0
    close = True
    for i in range(0, wf.numel(), CHUNK):
        g64, w64 = gf[i:i + CHUNK].to(wide), wf[i:i + CHUNK].to(wide)
        g_fin, w_fin, g_nan, w_nan = torch.isfinite(g64), torch.isfinite(w64), torch.isnan(g64), torch.isnan(w64)
        n_bad += int(((g_fin != w_fin) | (g_nan != w_nan) | (~w_fin & ~w_nan & (g64 != w64))).sum())
        n_ref_nonfinite += int((~w_fin).sum())
        if n_bad:
            continue  # the verdict is the non-finite mismatch: only its counts are still needed
        gd, wd = (g64, w64) if bool(w_fin.all()) else (g64[w_fin], w64[w_fin])
        if not wd.numel():
            continue
        diff = gd - wd
        n_finite += wd.numel()
        max_abs = max(max_abs, float(diff.abs().max()))
        ref_norm, diff_norm = math.hypot(ref_norm, _norm(wd)), math.hypot(diff_norm, _norm(diff))
        close = close and bool(torch.allclose(gd, wd, atol=1e-2, rtol=1e-2))
    if n_bad:
        c.problem = (f"{path}: non-finite values differ from the reference "
                     f"({n_bad} positions; reference has {n_ref_nonfinite} NaN/Inf)")
        c.rel_err = float("inf")
        return
    # values below 1e-6 RMS count as zero: an all-zero reference does not demand exact zeros
    denom = max(ref_norm, 1e-6 * math.sqrt(max(n_finite, 1)))
    rel = diff_norm / denom
    tol = tolerance(w.dtype, precision)
    c.tolerance = max(c.tolerance, tol)
    if rel > c.rel_err:
        c.rel_err, c.worst = rel, f"{path}: relative L2 error {rel:.3g} (tolerance {tol:.0e}), max |diff| {max_abs:.3g}"
    c.max_abs_err = max(c.max_abs_err, max_abs)
    if not close:
        c.allclose_1e2 = False
    if rel > tol:
        c.ok = False


def _norm(x: torch.Tensor) -> float:
    """The L2 norm in float64. Float64 values above 1e154 overflow its sum of squares (the norm came out inf,
    and inf / inf let any output of such a reference pass): they are scaled by their largest magnitude first."""
    n = float(torch.linalg.vector_norm(x, dtype=torch.float64))
    if math.isinf(n) and x.dtype == torch.float64 and bool(torch.isfinite(x).all()):
        scale = float(x.abs().max())
        n = scale * float(torch.linalg.vector_norm(x / scale, dtype=torch.float64))
    return n


def _describe(obj) -> str:
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    return _describe_leaf(obj, None)


def _describe_leaf(obj, n) -> str:
    if isinstance(obj, torch.Tensor):
        return f"Tensor{tuple(obj.shape)} {obj.dtype}"
    if n is not None:
        return f"{obj} of {n}"
    return type(obj).__name__ if not isinstance(obj, str) else obj
