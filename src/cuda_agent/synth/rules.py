"""How to instantiate an operator: the compact rule tables, and the draws behind them.

The catalog (:mod:`.catalog`) finds candidate operators by crawling torch; it knows
*names* of parameters, not what to pass. This module maps a parameter name (with the
operator's family where it matters) to a *rule*, and a rule to a draw given the
current tensor. Both the probe (fixed RNG) and the composer (per-task RNG) draw
through :func:`draw`, so what the probe validated is what the composer emits.

A required parameter with no rule makes its candidate unusable; the catalog records
that as the reason it was dropped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

# -- parameter roles -----------------------------------------------------------------

# The stream tensor is always the first tensor parameter. Extra tensor operands, by
# parameter name, with the shapes ("kinds") worth trying, most natural first:
#   same    same shape as x            row     (x.shape[-1],), broadcast along rows
#   scalar  a Python float             bvec    (x.shape[0],), one value per sample
#   matmul  (x.shape[-1], m)           bmatmul (*x.shape[:-1] minus row dim, k, m)
#   linw    (m, x.shape[-1]) weight    convw   (m, C, 3, ...) conv weight
#   left    (*x.shape[:-1], k)         right   (*x.shape[:-2], k, x.shape[-1])
OPERAND_KINDS: dict[str, tuple[str, ...]] = {
    "other": ("same", "row", "scalar", "matmul", "bmatmul"),
    "input2": ("same", "row", "bvec"), "x2": ("same",), "end": ("same", "row"),
    "values": ("same", "scalar"), "target": ("same", "bvec"), "positive": ("same",),
    "negative": ("same",), "key": ("same",), "value": ("same",), "var": ("same",),
    "memory": ("same",), "tgt": ("same",),
    "tensor1": ("same", "row"), "tensor2": ("same", "row"),
    "weight": ("scalar", "same", "linw", "convw"), "exponent": ("scalar", "same"),
    "mat2": ("matmul", "bmatmul", "right"), "mat1": ("left",), "batch1": ("left",),
    "batch2": ("right",), "vec2": ("row",), "vec": ("row",), "divisor": ("same", "row", "scalar"),
}
# Operand kinds that may also be the stream tensor itself (x op x, attention on x).
SELF_OK = ("same",)
# A new-input operand's values are drawn from one of these domains (see RANGES below).
DOMAINS = ("real", "nonneg", "pos", "unit", "prob")

# -- value ranges --------------------------------------------------------------------
# What we know about the values of a tensor, coarse on purpose. An op's *domain* is the
# widest range its probe accepted without NaN/Inf; it may follow a tensor whose range is
# inside that domain.
INSIDE: dict[str, tuple[str, ...]] = {
    "real": ("real", "nonneg", "pos", "unit", "prob"),
    "nonneg": ("nonneg", "pos", "prob"),
    "pos": ("pos", "prob"),
    "unit": ("unit", "prob"),
    "prob": ("prob",),
    "sign": ("sign",),
}


def satisfies(value_range: str, domain: str) -> bool:
    return value_range in INSIDE[domain]


# Source for a fresh input tensor of a domain; SHAPE is replaced by the dims.
INPUT_EXPR = {
    "real": "torch.randn({shape})",
    "nonneg": "torch.rand({shape})",
    "pos": "torch.rand({shape}) + 0.1",
    "unit": "torch.tanh(torch.randn({shape}))",
    "prob": "torch.sigmoid(torch.randn({shape}))",
    "sign": "torch.randn({shape}).sign()",
}

# -- parameter -> rule ---------------------------------------------------------------
# Constructor parameters of nn modules, required ones.
CTOR_REQUIRED: dict[str, str] = {
    "in_channels": "C", "num_features": "C", "num_channels": "C", "channels": "C",
    "in_features": "F", "normalized_shape": "F", "embed_dim": "F", "d_model": "F",
    "input_size": "F", "in1_features": "F", "in2_features": "F",
    "out_channels": "out_size", "out_features": "out_size", "hidden_size": "out_size",
    "kernel_size": "kernel", "output_size": "pool_out", "num_groups": "div_groups",
    "groups": "div_groups", "num_heads": "heads", "nhead": "heads",
    "upscale_factor": "two", "downscale_factor": "two", "norm_type": "two_f",
    "size": "lrn", "padding": "pad_amount", "value": "float_small", "threshold": "float_small",
}
# Constructor parameters with defaults that we always set (determinism, layout, size).
CTOR_FORCED: dict[str, str] = {
    "batch_first": "true", "dropout": "zero", "dim_feedforward": "ff", "d_model": "F",
    "nhead": "heads", "num_encoder_layers": "one", "num_decoder_layers": "one",
    "num_layers": "layers", "scale_factor": "scale2", "dim": "axis",
}
# Constructor parameters with defaults that we sometimes vary (the rule may omit them).
CTOR_OPTIONAL: dict[str, str] = {
    "stride": "stride", "padding": "padding", "bias": "bias_opt", "negative_slope": "tune",
    "alpha": "tune", "beta": "tune", "lambd": "tune", "min_val": "tune", "max_val": "tune",
    "approximate": "approx", "eps": "keep",
}
# Per-family overrides of the tables above.
FAMILY_OVERRIDES: dict[str, dict[str, str]] = {
    "pool": {"kernel_size": "pool_kernel", "stride": "keep", "padding": "keep"},
    "reshape": {"kernel_size": "pool_kernel"},
    "upsample": {"scale_factor": "scale2"},
}
# Call parameters of functions and methods (required or optional alike; None: omit).
CALL_RULES: dict[str, str] = {
    "dim": "axis", "dim0": "axis", "dim1": "axis", "source": "axis", "destination": "axis",
    "axis": "axis", "axis0": "axis", "axis1": "axis", "dims": "perm", "norm_type": "two_f", "start_dim": "one", "keepdim": "keepdim",
    "shape": "flat_shape", "size": "flat_shape", "min": "clamp_lo", "max": "clamp_hi",
    "shifts": "shifts", "k": "one", "n": "two", "repeats": "two", "upscale_factor": "two",
    "downscale_factor": "two", "groups": "div_groups", "output_size": "pool_out",
    "kernel_size": "pool_kernel", "normalized_shape": "F_tuple", "num_groups": "div_groups",
    "pad": "pad_tuple", "scale_factor": "scale2", "threshold": "float_small",
    "value": "float_small", "approximate": "approx", "negative_slope": "tune",
}
# Optional call parameters we always pass (the default would break the batch dim or fail).
CALL_FORCED = ("dim", "dim0", "dim1", "axis0", "axis1", "start_dim", "min", "max", "scale_factor", "axis",
               "keepdim", "dims")

# Family of an nn module, by the torch.nn.modules submodule that defines it. None: skip.
MODULE_FAMILY: dict[str, str | None] = {
    "activation": "activation", "conv": "conv", "pooling": "pool", "batchnorm": "norm",
    "instancenorm": "norm", "normalization": "norm", "linear": "linear", "padding": "pad",
    "pixelshuffle": "reshape", "upsampling": "upsample", "flatten": "reshape",
    "distance": "distance", "loss": "loss", "channelshuffle": "reshape", "rnn": "rnn",
    "transformer": "attention", "fold": "reshape",
    "sparse": None, "dropout": None, "container": None, "module": None, "lazy": None,
    "data_parallel": None, "adaptive": None,
}

# How often the composer picks each family (then an op uniformly inside it). The first
# op of a task favours the compute-heavy families, as KernelBench level 2 does.
FAMILY_WEIGHTS: dict[str, float] = {
    "conv": 4.0, "linear": 3.0, "matmul": 3.0, "norm": 2.5, "pool": 2.0, "activation": 4.0,
    "unary": 2.5, "binary": 3.0, "reduction": 2.0, "scan": 1.5, "reshape": 1.0, "pad": 0.7,
    "upsample": 0.7, "loss": 1.0, "attention": 1.0, "rnn": 0.6, "distance": 0.5,
    "join": 0.5, "resize": 0.7,
}
FIRST_OP_BOOST: dict[str, float] = {"conv": 3.0, "linear": 3.0, "matmul": 2.5, "attention": 2.0,
                                    "rnn": 1.5, "norm": 1.5, "pool": 1.5}
# Families whose input layout is channels-first (N, C, *spatial).
CHANNEL_FAMILIES = ("conv", "pool", "norm", "pad", "upsample")

# -- draws -----------------------------------------------------------------------------


@dataclass
class DrawCtx:
    """What a draw may look at: the stream tensor's shape and dimension names."""

    shape: tuple[int, ...]
    dims: tuple[str | None, ...]
    rng: random.Random
    family: str = ""
    used_axes: set[int] = field(default_factory=set)

    def dim_code(self, d: int) -> str:
        d = d % len(self.shape)
        return self.dims[d] or str(self.shape[d])


@dataclass(frozen=True)
class Drawn:
    """A drawn argument: the value to call with, and its source text.

    ``const`` names a module-level constant to lift the value into (KernelBench style:
    ``out_channels = 16`` ... ``nn.Conv2d(in_channels, out_channels, kernel_size)``).
    """

    value: Any
    code: str
    const: str | None = None


class NoDraw(Exception):
    """The rule cannot produce a valid value for this tensor (e.g. no divisor)."""


OMIT = None


def _axis(ctx: DrawCtx) -> int:
    rank = len(ctx.shape)
    free = [a for a in range(1, rank) if a not in ctx.used_axes] if rank > 1 else [0]
    if not free:
        raise NoDraw("no free axis")
    a = ctx.rng.choice(free)
    ctx.used_axes.add(a)
    # -1 reads better for the last axis, as people write it.
    return -1 if a == rank - 1 and rank > 2 and ctx.rng.random() < 0.5 else a


def _spatial_min(ctx: DrawCtx) -> int:
    return min(ctx.shape[2:]) if len(ctx.shape) > 2 else ctx.shape[-1]


def draw(rule: str, param: str, ctx: DrawCtx, varargs: bool = False) -> Drawn | None:
    """Draw a value for ``param`` by ``rule``. Returns None to leave it at its default."""
    rng, shape = ctx.rng, ctx.shape
    if rule == "keep":
        return OMIT
    if rule == "C":
        if len(shape) < 2:
            raise NoDraw("needs a channel dim")
        return Drawn(shape[1], ctx.dim_code(1))
    if rule == "F":
        return Drawn(shape[-1], ctx.dim_code(-1))
    if rule == "F_tuple":
        return Drawn((shape[-1],), f"({ctx.dim_code(-1)},)")
    if rule == "out_size":
        v = rng.choice((8, 16, 32) if ctx.family in ("conv",) else (16, 32, 64, 128))
        return Drawn(v, str(v), const=param)
    if rule == "kernel":
        options = [k for k in (1, 3, 3, 5) if k <= _spatial_min(ctx)]
        if not options:
            raise NoDraw("spatial dims too small")
        v = rng.choice(options)
        return Drawn(v, str(v), const=param)
    if rule == "pool_kernel":
        options = [k for k in (2, 2, 3) if k <= _spatial_min(ctx)]
        if not options:
            raise NoDraw("spatial dims too small")
        v = rng.choice(options)
        return Drawn(v, str(v), const=param)
    if rule == "pool_out":
        v = rng.choice((1, 2, 4))
        return Drawn(v, str(v), const=param)
    if rule == "div_groups":
        c = shape[1] if len(shape) > 1 else shape[-1]
        options = [g for g in (2, 4, 8) if c % g == 0 and g < c]
        if not options:
            raise NoDraw(f"no group count divides {c}")
        v = rng.choice(options)
        return Drawn(v, str(v), const=param)
    if rule == "heads":
        f = shape[-1]
        options = [h for h in (1, 2, 4, 8) if f % h == 0 and f // h >= 4] or [1]
        v = rng.choice(options)
        return Drawn(v, str(v), const=param)
    if rule == "lrn":
        v = rng.choice((3, 5))
        return Drawn(v, str(v), const=param)
    if rule == "pad_amount":
        limit = max(1, _spatial_min(ctx) - 1)
        v = rng.choice([p for p in (1, 2, 3) if p <= limit])
        return Drawn(v, str(v), const=param)
    if rule == "two":
        return Drawn(2, "2")
    if rule == "two_f":
        return Drawn(2.0, "2.0")
    if rule == "one":
        return Drawn(1, "1")
    if rule == "true":
        return Drawn(True, "True")
    if rule == "zero":
        return Drawn(0.0, "0.0")
    if rule == "layers":
        v = rng.choice((1, 1, 2))
        return Drawn(v, str(v))
    if rule == "ff":
        v = 2 * shape[-1]
        return Drawn(v, str(v))
    if rule == "scale2":
        return Drawn(2.0, "2.0")
    if rule == "float_small":
        v = rng.choice((0.1, 0.25, 0.5))
        return Drawn(v, repr(v))
    if rule == "stride":
        if rng.random() < 0.7 or _spatial_min(ctx) < 6:
            return OMIT
        return Drawn(2, "2")
    if rule == "padding":
        if rng.random() < 0.6:
            return OMIT
        return Drawn(1, "1")
    if rule == "bias_opt":
        return Drawn(False, "False") if rng.random() < 0.2 else OMIT
    if rule == "approx":
        return Drawn("tanh", "'tanh'") if rng.random() < 0.3 else OMIT
    if rule.startswith("tune:"):  # `tune:<default>`: keep the default mostly, else scale it
        default = float(rule.split(":", 1)[1])
        if rng.random() < 0.7:
            return OMIT
        v = round(default * rng.choice((0.5, 2.0)), 6) if default else rng.choice((0.1, 0.5))
        return Drawn(v, repr(v))
    if rule == "axis":
        a = _axis(ctx)
        return Drawn(a, str(a))
    if rule == "keepdim":
        return Drawn(True, "True") if rng.random() < 0.4 else OMIT
    if rule == "perm":
        rank = len(shape)
        if rank < 3:
            raise NoDraw("needs rank >= 3 to permute non-batch dims")
        rest = list(range(1, rank))
        while rest == sorted(rest):
            rng.shuffle(rest)
        perm = (0, *rest)
        text = ", ".join(map(str, perm))
        return Drawn(perm, text if varargs else f"({text})")
    if rule == "flat_shape":
        return Drawn((shape[0], -1), "x.size(0), -1" if varargs else "(x.size(0), -1)")
    if rule == "clamp_lo":
        v = rng.choice((-1.0, -0.5, 0.0))
        return Drawn(v, repr(v))
    if rule == "clamp_hi":
        v = rng.choice((0.5, 1.0, 2.0))
        return Drawn(v, repr(v))
    if rule == "shifts":
        v = rng.choice((1, 2))
        return Drawn(v, str(v))
    if rule == "repeat_tuple":
        reps = [1] * len(shape)
        reps[rng.randrange(1, len(shape)) if len(shape) > 1 else 0] = 2
        text = ", ".join(map(str, reps))
        return Drawn(tuple(reps), text if varargs else f"({text})")
    if rule == "pad_tuple":
        n = min(len(shape) - 1, 2)
        v = (1, 1) * n
        return Drawn(v, repr(v))
    raise KeyError(f"unknown rule {rule!r} for parameter {param!r}")


def operand_shape(kind: str, shape: tuple[int, ...], m: int) -> tuple[int, ...] | None:
    """Shape of an extra operand of ``kind`` for stream shape ``shape``; None: not applicable."""
    r = len(shape)
    if kind in ("same", "self"):
        return shape
    if kind == "row":
        return (shape[-1],)
    if kind == "bvec":
        return (shape[0],)
    if kind == "matmul":
        return (shape[-1], m)
    if kind == "bmatmul":
        return (*shape[:-2], shape[-1], m) if r >= 3 else None
    if kind == "linw":
        return (m, shape[-1])
    if kind == "convw":
        return (m, shape[1], *([3] * (r - 2))) if 3 <= r <= 5 else None
    if kind == "left":
        return (*shape[:-1], m)
    if kind == "right":
        return (*shape[:-2], m, shape[-1]) if r >= 2 else None
    return None  # scalar and unknown kinds have no tensor shape
