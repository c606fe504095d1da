"""Composer: chain 1-5 catalog ops into a KernelBench-format task.

Shapes are inferred by running every op on ``meta`` tensors as it is chosen, so an op
whose constraints the current tensor does not meet (kernel larger than the image,
groups that do not divide the channels ...) is simply re-drawn. The result is source
text a person would write: a ``Model`` with named submodules, module-level size
constants (``batch_size``, ``in_channels`` ...), ``get_inputs()`` and
``get_init_inputs()``. Same RNG state in, same source out.
"""

from __future__ import annotations

import random
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from . import rules
from .catalog import Catalog, OpSpec, instantiate, call
from .rules import DrawCtx, NoDraw

MAX_NUMEL = 1 << 17  # elements of any intermediate, at the small CPU-check shapes
MAX_INPUT_NUMEL = 1 << 15
MAX_PARAMS = 1 << 21
TRIES_PER_STEP = 16

# Input dimension names and the sizes they are drawn from, by layout and rank.
LAYOUT_DIMS: dict[tuple[str, int], tuple[str, ...]] = {
    ("channels", 3): ("batch_size", "in_channels", "length"),
    ("channels", 4): ("batch_size", "in_channels", "height", "width"),
    ("channels", 5): ("batch_size", "in_channels", "depth", "height", "width"),
    ("features", 1): ("batch_size",),
    ("features", 2): ("batch_size", "in_features"),
    ("features", 3): ("batch_size", "seq_len", "dim"),
    ("features", 4): ("batch_size", "channels", "dim1", "dim2"),
    ("features", 5): ("batch_size", "channels", "dim1", "dim2", "dim3"),
}
DIM_SIZES: dict[str, tuple[int, ...]] = {
    "batch_size": (2, 4, 8, 16), "in_channels": (3, 4, 8, 16), "channels": (4, 8),
    "length": (32, 64, 128), "height": (8, 16, 24, 32), "width": (8, 16, 24, 32),
    "depth": (4, 6, 8), "in_features": (32, 64, 128, 256), "seq_len": (8, 16, 32),
    "dim": (16, 32, 64), "dim1": (8, 16), "dim2": (8, 16, 32), "dim3": (8, 16),
}
# Python operators for the arithmetic ops, used half the time (``x * y`` reads well).
OPERATORS = {"torch.add": "+", "torch.sub": "-", "torch.mul": "*", "torch.div": "/"}
SCALARS = (0.5, 1.5, 2.0, 3.0)


@dataclass
class Value:
    """The stream tensor at some point of ``forward``: meta tensor, dim names, range."""

    meta: torch.Tensor
    dims: tuple[str | None, ...]
    range: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.meta.shape)


@dataclass
class Draft:
    """A composed task, before any filter ran."""

    code: str
    ops: list[str]
    constants: dict[str, Any]
    input_shapes: list[tuple[int, ...]]
    output_shape: tuple[int, ...]
    families: list[str]


@dataclass
class _Program:
    constants: dict[str, Any] = field(default_factory=dict)
    init_params: list[str] = field(default_factory=list)
    init_lines: list[str] = field(default_factory=list)
    forward_lines: list[str] = field(default_factory=list)
    inputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)  # name, expr, shape
    attrs: set[str] = field(default_factory=set)
    uses_f: bool = False
    shape_exprs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # tuple consts

    def copy(self) -> "_Program":
        return _Program(dict(self.constants), list(self.init_params), list(self.init_lines),
                        list(self.forward_lines), list(self.inputs), set(self.attrs),
                        self.uses_f, dict(self.shape_exprs))

    def const(self, hint: str, value: Any) -> str:
        name, k = hint, 2
        while name in self.constants or name in ("x", "self"):
            name, k = f"{hint}_{k}", k + 1
        self.constants[name] = value
        return name

    def use_in_init(self, code: str) -> None:
        for tok in re.findall(r"[A-Za-z_]\w*", code):
            if tok in self.constants and tok not in self.init_params:
                self.init_params.append(tok)

    def attr(self, hint: str) -> str:
        name, k = hint, 2
        while name in self.attrs:
            name, k = f"{hint}{k}", k + 1
        self.attrs.add(name)
        return name

    def new_input(self, hint: str, shape_code: str, domain: str, shape: tuple[int, ...]) -> str:
        taken = {n for n, _, _ in self.inputs} | set(self.constants) | {"self", "F", "torch", "nn"}
        name, k = hint, 2
        while name in taken:
            name, k = f"{hint}{k}", k + 1
        self.inputs.append((name, rules.INPUT_EXPR[domain].format(shape=shape_code), shape))
        return name


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


class Composer:
    """Draws tasks from a catalog. ``compose(rng, n_ops)`` returns a Draft or None."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.families = {f: ops for f, ops in catalog.families.items()}

    # -- sampling ----------------------------------------------------------------------

    def _pick(self, rng: random.Random, ok, first: bool) -> OpSpec | None:
        fams, weights = [], []
        for fam, ops in sorted(self.families.items()):
            cands = [op for op in ops if ok(op)]
            if not cands:
                continue
            w = rules.FAMILY_WEIGHTS.get(fam, 1.0) * (rules.FIRST_OP_BOOST.get(fam, 1.0) if first else 1.0)
            fams.append(cands)
            weights.append(w)
        if not fams:
            return None
        cands = rng.choices(fams, weights)[0]
        return rng.choice(cands)

    def compose(self, rng: random.Random, n_ops: int) -> Draft | None:
        """Compose a task of ``n_ops`` ops; None when no chain fits (rare)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(4):
                draft = self._compose(rng, n_ops)
                if draft is not None:
                    return draft
        return None

    def _compose(self, rng: random.Random, n_ops: int) -> Draft | None:
        prog = _Program()
        first = self._pick(rng, lambda op: not (op.terminal and n_ops > 1)
                           and any(r >= 2 for r in op.ranks), first=True)
        if first is None:
            return None
        x = self._input(prog, rng, first)
        ops: list[str] = []
        families: list[str] = []
        for step in range(n_ops):
            last = step == n_ops - 1
            for attempt in range(TRIES_PER_STEP):
                if step == 0 and attempt == 0:
                    op = first
                else:
                    op = self._pick(rng, lambda o: len(x.shape) in o.ranks
                                    and rules.satisfies(x.range, o.domain)
                                    and (last or not o.terminal), first=step == 0)
                if op is None or len(x.shape) not in op.ranks or not rules.satisfies(x.range, op.domain):
                    continue
                out = self._apply(prog, rng, op, x, last)
                if out is not None:
                    x = out
                    ops.append(op.name)
                    families.append(op.family)
                    break
            else:
                return None
        return Draft(self._render(prog, ops), ops, dict(prog.constants),
                     [s for _, _, s in prog.inputs], x.shape, families)

    # -- inputs --------------------------------------------------------------------------

    def _input(self, prog: _Program, rng: random.Random, first: OpSpec) -> Value:
        ranks = [r for r in first.ranks if r >= 2] or list(first.ranks)
        rank = rng.choice(ranks)
        channel_op = first.family in rules.CHANNEL_FAMILIES or any(s.rule == "C" for s in first.ctor)
        layout = "channels" if channel_op and rank >= 3 else "features"
        names = LAYOUT_DIMS[(layout, rank)]
        for _ in range(20):
            sizes = [rng.choice(DIM_SIZES[n]) for n in names]
            numel = 1
            for s in sizes:
                numel *= s
            if numel <= MAX_INPUT_NUMEL:
                break
        dims = tuple(prog.const(n, s) for n, s in zip(names, sizes))
        meta = torch.empty(sizes, device="meta")
        prog.new_input("x", ", ".join(dims), first.domain, tuple(sizes))
        return Value(meta, dims, first.domain)

    # -- one op --------------------------------------------------------------------------

    def _apply(self, prog: _Program, rng: random.Random, op: OpSpec, x: Value, last: bool) -> Value | None:
        """Instantiate ``op`` on ``x``; on success append its code to ``prog``."""
        trial = prog.copy()
        before = set(prog.constants)
        ctx = DrawCtx(x.shape, x.dims, rng, op.family)
        try:
            ctor_vals, ctor_code, _ = self._draw_ctor(trial, op, ctx)
            call_vals, call_code, metas = self._draw_call(trial, rng, op, ctx, x)
        except NoDraw:
            return None
        try:
            fn = instantiate(op, ctor_vals, device="meta")
            out = call(op, fn, x.meta, {**call_vals, **metas})
        except Exception:  # noqa: BLE001 - constraints we do not model: draw another op
            return None
        if not isinstance(out, torch.Tensor) or out.dtype != x.meta.dtype or out.numel() == 0:
            return None
        if out.numel() > MAX_NUMEL:
            return None
        if out.dim() == 0:
            if not last:
                return None
        elif out.shape[0] != x.shape[0]:
            return None
        if op.kind == "module" and sum(p.numel() for p in fn.parameters()) > MAX_PARAMS:
            return None
        # Commit.
        self._emit(trial, op, ctor_code, call_code, use_operator=rng.random() < 0.5)
        prog.__dict__.update(trial.__dict__)
        new_consts = [c for c in trial.constants if c not in before]
        dims = self._out_dims(x, out, new_consts, prog)
        return Value(out, dims, op.out_range)

    def _draw_ctor(self, prog: _Program, op: OpSpec, ctx: DrawCtx):
        vals, pos, kw, new_consts = {}, [], [], []
        for s in op.ctor:
            d = rules.draw(s.rule, s.param, ctx, s.varargs)
            if d is None:
                continue
            vals[s.param] = d.value
            code = d.code
            if d.const:
                code = prog.const(d.const, d.value)
                new_consts.append(code)
            prog.use_in_init(code)
            (kw.append(f"{s.param}={code}") if s.keyword else pos.append(code))
        return vals, ", ".join(pos + kw), new_consts

    def _draw_call(self, prog: _Program, rng: random.Random, op: OpSpec, ctx: DrawCtx, x: Value):
        vals: dict[str, Any] = {}
        metas: dict[str, Any] = {}
        parts: list[tuple[str, str]] = []  # (param or "", code)
        m = rng.choice((16, 32, 64))  # free size of matmul-like operands, one name per call
        self._m_name = None
        for s in op.call:
            if s.role == "x":
                parts.append(("", "x"))
            elif s.role == "join":
                other = self._operand(prog, rng, op, s, x, "same", m) if rng.random() < 0.7 else ("x", x.meta)
                metas[s.param + "#2"] = other[1]
                parts.append(("", f"[x, {other[0]}]"))
            elif s.role == "operand":
                kinds = [k for k in s.kinds if rules.operand_shape(k, x.shape, m) is not None or k == "scalar"]
                if not kinds:
                    raise NoDraw("no operand kind fits")
                kind = rng.choice(kinds)
                if kind == "self" and not rules.satisfies(x.range, s.domain):
                    kind = kinds[0]
                code, meta = self._operand(prog, rng, op, s, x, kind, m)
                metas[s.param] = meta
                parts.append(("" if not s.keyword else s.param, code))
            else:
                d = rules.draw(s.rule, s.param, ctx, s.varargs)
                if d is None:
                    continue
                vals[s.param] = d.value
                parts.append(("" if (s.varargs or not s.keyword) else s.param, d.code))
        return vals, parts, metas

    def _operand(self, prog: _Program, rng: random.Random, op: OpSpec, s, x: Value, kind: str, m: int):
        """Source text and meta value of one extra operand."""
        if kind == "self":
            return "x", x.meta
        if kind == "scalar":
            choices = SCALARS if s.param != "exponent" and op.short != "pow" else (2.0, 3.0)
            v = rng.choice(choices)
            if rng.random() < 0.5:  # KernelBench style: a named init argument kept on self
                hint = f"{op.short}_value" if s.param in ("other", "weight", "values") else s.param
                name = prog.const(hint, v)
                prog.use_in_init(name)
                prog.init_lines.append(f"self.{name} = {name}")
                return f"self.{name}", v
            return repr(v), v
        shape = rules.operand_shape(kind, x.shape, m)
        dims = self._operand_dims(prog, kind, x, shape, m)
        # Weights and broadcast rows become parameters; same-shape operands are inputs.
        as_param = kind in ("linw", "convw", "matmul") and rng.random() < 0.6 or \
            kind == "row" and rng.random() < 0.6
        if as_param:
            hint = {"row": "bias_shape", "linw": "weight_shape", "convw": "weight_shape",
                    "matmul": "weight_shape"}[kind]
            shape_name = prog.const(hint, tuple(shape))
            self_name = prog.attr(hint.replace("_shape", ""))
            prog.use_in_init(shape_name)
            prog.init_lines.append(f"self.{self_name} = nn.Parameter(torch.randn({shape_name}))")
            prog.shape_exprs[shape_name] = dims
            return f"self.{self_name}", torch.empty(shape, device="meta")
        hint = s.param if s.param.isidentifier() and s.param not in ("input", "self") else "y"
        hint = {"other": "y", "input2": "y", "x2": "y"}.get(hint, hint)
        name = prog.new_input(hint, ", ".join(dims), s.domain, tuple(shape))
        return name, torch.empty(shape, device="meta")

    def _operand_dims(self, prog: _Program, kind: str, x: Value, shape, m: int) -> tuple[str, ...]:
        """Dimension source text of an operand, reusing the stream's dim names."""
        xs = [x.dims[i] or str(x.shape[i]) for i in range(len(x.shape))]
        if kind in ("same", "self"):
            return tuple(xs)
        if kind == "row":
            return (xs[-1],)
        if kind == "bvec":
            return (xs[0],)
        if self._m_name is None:
            self._m_name = prog.const("out_features", m)
        out = self._m_name
        if kind == "matmul":
            return (xs[-1], out)
        if kind == "bmatmul":
            return (*xs[:-2], xs[-1], out)
        if kind == "linw":
            return (out, xs[-1])
        if kind == "convw":
            return (out, xs[1], *(["3"] * (len(xs) - 2)))
        if kind == "left":
            return (*xs[:-1], out)
        if kind == "right":
            return (*xs[:-2], out, xs[-1])
        return tuple(str(v) for v in shape)

    def _emit(self, prog: _Program, op: OpSpec, ctor_code: str, parts: list[tuple[str, str]],
              use_operator: bool) -> None:
        suffix = "[0]" if op.tuple_out else ""
        if op.kind == "module":
            attr = prog.attr(snake(op.short))
            prog.init_lines.append(f"self.{attr} = nn.{op.short}({ctor_code})")
            args = ", ".join(code for _, code in parts)
            prog.forward_lines.append(f"x = self.{attr}({args}){suffix}")
            return
        rendered = [f"{p}={c}" if p else c for p, c in parts]
        if op.name in OPERATORS and len(parts) == 2 and not parts[1][0] and use_operator:
            prog.forward_lines.append(f"x = x {OPERATORS[op.name]} {parts[1][1]}")
            return
        ns = op.name.split(".")[0]
        if op.kind == "method":
            prog.forward_lines.append(f"x = x.{op.short}({', '.join(rendered[1:])}){suffix}")
        else:
            prog.uses_f = prog.uses_f or ns == "F"
            prog.forward_lines.append(f"x = {ns}.{op.short}({', '.join(rendered)}){suffix}")

    def _out_dims(self, x: Value, out: torch.Tensor, new_consts: list[str], prog: _Program):
        if out.dim() == 0:
            return ()
        if tuple(out.shape) == x.shape and not new_consts:
            return x.dims
        dims: list[str | None] = [x.dims[0]]
        for i in range(1, out.dim()):
            v = out.shape[i]
            # A size this op introduced (out_channels ...) names the dim it produced;
            # otherwise a dim of unchanged size keeps its name.
            name = next((c for c in new_consts if prog.constants.get(c) == v
                         and re.match(r"(out_|hidden)", c)), None)
            if name is None and out.dim() == len(x.shape) and v == x.shape[i]:
                name = x.dims[i]
            dims.append(name)
        return tuple(dims)

    # -- source ----------------------------------------------------------------------------

    def _render(self, prog: _Program, ops: list[str]) -> str:
        lines = ["import torch", "import torch.nn as nn"]
        if prog.uses_f:
            lines.append("import torch.nn.functional as F")
        lines += ["", "", "class Model(nn.Module):"]
        lines.append(f'    """{describe(ops)}"""')
        lines.append("")
        params = "".join(f", {p}" for p in prog.init_params)
        lines.append(f"    def __init__(self{params}):")
        lines.append("        super().__init__()")
        lines += [f"        {ln}" for ln in prog.init_lines]
        lines.append("")
        inputs = ", ".join(n for n, _, _ in prog.inputs)
        lines.append(f"    def forward(self, {inputs}):")
        lines += [f"        {ln}" for ln in prog.forward_lines]
        lines.append("        return x")
        lines += ["", ""]
        for name, value in prog.constants.items():
            if isinstance(value, tuple) and name in prog.shape_exprs:
                value_code = "(" + ", ".join(prog.shape_exprs[name]) + ("," if len(value) == 1 else "") + ")"
            else:
                value_code = repr(value)
            lines.append(f"{name} = {value_code}")
        lines += ["", ""]
        lines.append("def get_inputs():")
        lines.append("    return [" + ", ".join(expr for _, expr, _ in prog.inputs) + "]")
        lines += ["", ""]
        lines.append("def get_init_inputs():")
        lines.append("    return [" + ", ".join(prog.init_params) + "]")
        return "\n".join(lines) + "\n"


def describe(ops: list[str]) -> str:
    names = [op.split(".")[-1] for op in ops]
    if len(names) == 1:
        return f"A model that applies {names[0]}."
    return "A model that applies " + ", then ".join(names) + "."
