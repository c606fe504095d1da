"""Operator catalog: crawled from torch, kept by probing.

Candidates come from introspection, not a hand-written list:

* every ``torch.nn`` module class (family from the ``torch.nn.modules`` submodule that
  defines it; constructor parameters from its signature or, for ``*args`` signatures
  like ``nn.LSTM``, from the ``Args:`` section of its docstring);
* every public ATen function in the ``torch`` namespace and ``torch.functional``
  (parameters parsed from the overload lines of the docstring, e.g.
  ``sum(input, dim, keepdim=False, *, dtype=None)``);
* ``torch.nn.functional`` functions and ``Tensor`` methods whose names the ``torch``
  namespace lacks (``F.gelu``, ``Tensor.view``).

Each parameter is mapped to a rule by :mod:`.rules`; a required parameter without one
drops the candidate. Each survivor is then *probed* on small CPU tensors of ranks 1..5
and once on ``meta`` tensors. The probe decides what the op accepts (ranks, operand
shapes, value domain), what it gives (value range, scalar or batched, tuple or not),
and drops it if it is stochastic, ignores its input, is the identity, changes dtype,
mixes the batch dimension, or has no meta kernel. Every drop is recorded with its
reason in :attr:`Catalog.rejected`.

Aliases (``torch.absolute`` / ``torch.abs``, ``F.relu`` / ``torch.relu``) are found by
behaviour: identical outputs on the same probe input put ops in one *fold* group;
:meth:`Catalog.distinct` counts groups, not names.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import itertools
import random
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import rules
from .rules import DrawCtx, NoDraw

PROBE_SHAPES: dict[int, tuple[int, ...]] = {
    1: (6,), 2: (6, 8), 3: (6, 4, 8), 4: (6, 4, 6, 8), 5: (6, 4, 4, 6, 8),
}
PROBE_M = 5  # free size of matmul-like operands in the probe

# Names that are not operators worth a task: creation, randomness, I/O, dtype/device
# plumbing, indexing and data-dependent shapes, RNN/embedding internals, backward ops.
DENY = re.compile(
    r"^(_|is_|set_|get_|use_|can_|from_|as_|new_|to_|sym_|q_|fake_|fbgemm|mkldnn|miopen|"
    r"cudnn|native_|quantize|dequantize|quantized|sparse|empty|zeros|ones|full|rand|arange|"
    r"range|linspace|logspace|eye|tensor$|scalar_tensor|manual_seed|seed|save|load|"
    r"result_type|promote_types|numel|stft|istft|fft|lstm|gru|rnn|embedding|ctc|unique|"
    r"nonzero|argwhere|where$|masked|index|scatter|gather|take|put|select|slice|narrow|"
    r"split|chunk|unbind|topk|sort|argsort|msort|searchsorted|bucketize|histc|histogram|"
    r"bincount|combinations|cartesian_prod|meshgrid|block_diag|broadcast|align|rename|"
    r"refine|record|share|pin|data_ptr|element_size|dim$|size$|stride$|item|tolist|"
    r"numpy|cpu|cuda|type|double|half|bfloat16|float$|int$|long$|short|char|byte|bool$|"
    r"cdouble|cfloat|chalf|apply_|map_|register|retain|requires|backward|untyped|resize|"
    r"storage|nbytes|itemsize|dequant|int_repr|qscheme|values$|indices$|coalesce|"
    r"to_dense|to_sparse|to_mkldnn|xpu|mps|ipu|hpu|mtia|module_load|dim_order|"
    r"conj|real$|imag$|view_as_|polar|complex|angle|resolve_|vdot|geqrf|lu|qr|svd|"
    r"eig|slogdet|det|inverse|pinverse|cholesky|triangular|lstsq|solve|orgqr|ormqr|"
    r"matrix_exp|logdet|nuclear|frobenius|gradient|cov|corrcoef|hash_tensor|"
    r"constant_pad_nd|rot90|einsum|tensordot|chain_matmul|kron|cross|diag|"
    r"trace|vander|bartlett|blackman|hamming|hann|kaiser|unsafe|nan|bitwise|logical|"
    r"isin|isclose|allclose|equal|eq$|ne$|lt$|le$|gt$|ge$|less|greater|not_equal|"
    r"count_nonzero|argmax|argmin|adjoint|mT|mH|H$|T$|"
    r"unflatten|expand|squeeze|as_strided|atleast|"
    r"hsplit|vsplit|dsplit|tensor_split|tile|addbmm|upsample|.*with_indices|"
    r"local_response_norm|lp_pool1d)")
# Randomness: never a deterministic task (dropout, rrelu, randn-like, sampling).
STOCHASTIC = re.compile(r"dropout|rrelu|bernoulli|multinomial|rand|normal_|poisson|"
                        r"fractional|gumbel|binomial|alpha_dropout", re.I)

# An overload line of a docstring: ``name(params) -> ...``; params may span lines and
# hold one level of parentheses.
SIG_LINE = r"^\s*(?:\.\. function:: )?{name}\(([^()]*(?:\([^()]*\)[^()]*)*)\)"


@dataclass(frozen=True)
class Slot:
    """One argument of a call or constructor."""

    param: str
    role: str  # "x" (the stream tensor) | "operand" (extra tensor) | "arg" | "join"
    rule: str = ""  # for role "arg": a rule of .rules.draw
    kinds: tuple[str, ...] = ()  # for role "operand": accepted shapes (.rules.OPERAND_KINDS)
    domain: str = "real"  # for role "operand": values a new input must have
    keyword: bool = False
    varargs: bool = False


@dataclass(frozen=True)
class OpSpec:
    """Everything the composer needs to instantiate one operator."""

    name: str  # "nn.Conv2d", "torch.cumsum", "F.gelu", "Tensor.view"
    kind: str  # "module" | "function" | "method"
    family: str
    ranks: tuple[int, ...]
    call: tuple[Slot, ...]
    ctor: tuple[Slot, ...] = ()
    domain: str = "real"  # the stream tensor's values must lie in this domain
    out_range: str = "real"
    terminal: bool = False  # output is a scalar: the chain ends here
    tuple_out: bool = False  # returns a tuple; the task uses element 0
    fold: str = ""  # alias group (behaviour fingerprint winner's name)

    @property
    def short(self) -> str:
        return self.name.split(".")[-1]


@dataclass
class Catalog:
    ops: list[OpSpec]
    rejected: dict[str, str] = field(default_factory=dict)
    torch_version: str = torch.__version__

    def __post_init__(self) -> None:
        self._by_name = {op.name: op for op in self.ops}
        self.families: dict[str, list[OpSpec]] = {}
        for op in self.ops:
            self.families.setdefault(op.family, []).append(op)

    def __len__(self) -> int:
        return len(self.ops)

    def get(self, name: str) -> OpSpec | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted({op.name for op in self.ops})

    def distinct(self) -> int:
        """Number of distinct operators (alias groups), not names."""
        return len({op.fold for op in self.ops})

    def restrict(self, keep: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> "Catalog":
        """A catalog with only ``keep`` (if given) minus ``drop``. Unknown names raise KeyError."""
        known = {op.name for op in self.ops}
        unknown = [n for n in (*keep, *drop) if n not in known]
        if unknown:
            why = [f"{n} ({self.rejected[n]})" if n in self.rejected else n for n in unknown]
            raise KeyError(", ".join(why))
        ops = [op for op in self.ops if (not keep or op.name in keep) and op.name not in drop]
        return Catalog(ops, dict(self.rejected), self.torch_version)


# -- resolving and calling -----------------------------------------------------------


def resolve(spec_name: str) -> Any:
    ns, _, attr = spec_name.partition(".")
    if ns == "nn":
        return getattr(nn, attr)
    if ns == "torch":
        return getattr(torch, attr)
    if ns == "F":
        return getattr(F, attr)
    if ns == "Tensor":
        return getattr(torch.Tensor, attr)
    raise KeyError(spec_name)


def instantiate(op: OpSpec, ctor_values: dict[str, Any], device: str = "cpu") -> Any:
    """The module object (modules) or callable (functions, methods) of ``op``."""
    target = resolve(op.name)
    if op.kind != "module":
        return target
    args, kwargs = _split(op.ctor, ctor_values)
    with torch.device(device):
        return target(*args, **kwargs)


def call(op: OpSpec, fn: Any, x: torch.Tensor, values: dict[str, Any]) -> Any:
    """Call ``fn`` (from :func:`instantiate`) with the stream tensor and drawn values."""
    vals = dict(values)
    vals[_x_param(op)] = x
    args, kwargs = _split(op.call, vals)
    if op.kind == "method":
        out = fn(*args, **kwargs)
    else:
        out = fn(*args, **kwargs)
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out


def _x_param(op: OpSpec) -> str:
    return next(s.param for s in op.call if s.role in ("x", "join"))


def _split(slots: tuple[Slot, ...], values: dict[str, Any]) -> tuple[list, dict]:
    args, kwargs = [], {}
    for s in slots:
        if s.param not in values:
            continue
        v = values[s.param]
        if s.role == "join":
            v = [v, values[s.param + "#2"]]
        if s.varargs:
            args.extend(v if isinstance(v, (tuple, list)) else [v])
        elif s.keyword:
            kwargs[s.param] = v
        else:
            args.append(v)
    return args, kwargs


# -- crawling ------------------------------------------------------------------------


@dataclass
class _Param:
    name: str
    required: bool
    keyword_only: bool = False
    varargs: bool = False
    default: Any = None


def _parse_params(text: str) -> list[_Param] | None:
    """Parse ``input, dim, keepdim=False, *, dtype=None`` from a docstring signature."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    params, kw_only = [], False
    for raw in (p.strip().replace("\\", "") for p in parts):
        if not raw:
            continue
        if raw == "*":
            kw_only = True
            continue
        varargs = raw.startswith("*") and not raw.startswith("**")
        if raw.startswith("**"):
            continue
        name_part, eq, default = raw.lstrip("*").partition("=")
        name = name_part.split(":")[0].strip()
        if not name.isidentifier():
            return None
        dflt: Any = None
        if eq:
            try:
                dflt = eval(default.strip(), {"torch": torch, "inf": float("inf")})  # noqa: S307
            except Exception:
                dflt = None
        params.append(_Param(name, required=varargs or not eq,
                             keyword_only=kw_only, varargs=varargs, default=dflt))
    return params


def _doc_overloads(fn: Any, name: str, drop_self: bool = False) -> list[list[_Param]]:
    doc = getattr(fn, "__doc__", None) or ""
    out = []
    for m in re.finditer(SIG_LINE.format(name=re.escape(name)), doc, re.M | re.S):
        params = _parse_params(" ".join(m.group(1).split()))
        if params is not None:
            out.append(params)
    return out


def _sig_params(fn: Any) -> list[_Param] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        if p.kind == p.VAR_KEYWORD:
            continue
        out.append(_Param(p.name, required=p.default is p.empty and p.kind != p.VAR_POSITIONAL,
                          keyword_only=p.kind == p.KEYWORD_ONLY,
                          varargs=p.kind == p.VAR_POSITIONAL,
                          default=None if p.default is p.empty else p.default))
    return out


def _docstring_args(cls: type) -> list[_Param]:
    """Constructor params from an ``Args:`` docstring section (for ``*args`` signatures)."""
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    section = re.split(r"^\S", section, maxsplit=1, flags=re.M)[0]  # up to the next heading
    params = []
    for m in re.finditer(r"^\s{4}(\w+):(.*?)(?=^\s{4}\w+:|^\S|\Z)", section, re.M | re.S):
        name, body = m.group(1), m.group(2)
        dm = re.search(r"Default:\s*`*([^`\s,]+?)`*\.?(?:\s|$)", body)
        default = None
        if dm:
            with contextlib.suppress(Exception):
                default = eval(dm.group(1), {"True": True, "False": False, "None": None})  # noqa: S307
        params.append(_Param(name, required=dm is None, keyword_only=True, default=default))
    return params


_SKIP_PARAMS = {"device", "dtype", "inplace", "out", "layout", "memory_format", "generator",
                "size_average", "reduce", "return_indices", "_random_samples", "pin_memory"}


def _arg_slot(p: _Param, table_req: dict, forced: dict, optional: dict, keyword: bool) -> Slot | str | None:
    """A slot for a non-tensor parameter, None to omit it, or a reason string to drop."""
    if p.name in _SKIP_PARAMS or p.name.startswith("_"):
        return None
    if p.required:
        rule = table_req.get(p.name)
        if rule is None:
            return f"no rule for required arg {p.name!r}"
        return Slot(p.name, "arg", rule, keyword=p.keyword_only, varargs=p.varargs)
    rule = forced.get(p.name) or optional.get(p.name)
    if rule is None:
        return None
    if rule == "tune":
        if isinstance(p.default, bool) or not isinstance(p.default, (int, float)):
            return None
        rule = f"tune:{float(p.default)}"
    return Slot(p.name, "arg", rule, keyword=keyword or p.keyword_only, varargs=p.varargs)


def _module_candidates(rejected: dict[str, str]) -> list[OpSpec]:
    out = []
    for cname in sorted(dir(nn)):
        cls = getattr(nn, cname)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue
        name = f"nn.{cname}"
        sub = cls.__module__.rsplit(".", 1)[-1]
        family = rules.MODULE_FAMILY.get(sub, None)
        if STOCHASTIC.search(cname):
            rejected[name] = "stochastic"
            continue
        if family is None or cname.startswith("Lazy") or cname.endswith("Base"):
            rejected[name] = f"not an operator family ({sub})"
            continue
        if "embed_dim" in str(inspect.signature(cls.__init__)):
            family = "attention"
        params = _sig_params(cls.__init__)
        params = [p for p in (params or [])[1:] if not p.varargs]
        if not params and "Args:" in (cls.__doc__ or "") and family == "rnn":
            params = _docstring_args(cls)
        overrides = rules.FAMILY_OVERRIDES.get(family, {})
        ctor, reason = [], None
        for p in params:
            req = {**rules.CTOR_REQUIRED, **overrides}
            opt = {**rules.CTOR_OPTIONAL, **{k: v for k, v in overrides.items() if not p.required}}
            forced = {**rules.CTOR_FORCED, **({k: v for k, v in overrides.items()} if not p.required else {})}
            slot = _arg_slot(p, req, forced, opt, keyword=True)
            if isinstance(slot, str):
                reason = slot
                break
            if slot is not None:
                ctor.append(slot)
        if reason:
            rejected[name] = reason
            continue
        fwd = _sig_params(cls.forward) or []
        call_slots, reason = _tensor_slots(fwd[1:]) if len(fwd) > 1 else ([], "no forward signature")
        if reason:
            rejected[name] = reason
            continue
        out.append(OpSpec(name, "module", family, (), tuple(call_slots), tuple(ctor)))
    return out


def _tensor_slots(params: list[_Param], call_rules: bool = False) -> tuple[list[Slot], str | None]:
    """Slots of a call: first param is the stream tensor, named operands, rule args."""
    slots: list[Slot] = []
    names = {p.name for p in params}
    for i, p in enumerate(params):
        if p.name in _SKIP_PARAMS:
            continue
        if i == 0:
            if p.name == "tensors":
                slots.append(Slot(p.name, "join"))
            elif p.name in ("equation", "window_length", "size", "n", "start"):
                return [], f"first parameter {p.name!r} is not a tensor"
            else:
                slots.append(Slot(p.name, "x", varargs=p.varargs))
            continue
        if p.required and p.name in rules.OPERAND_KINDS:
            slots.append(Slot(p.name, "operand", kinds=rules.OPERAND_KINDS[p.name],
                              keyword=p.keyword_only))
            continue
        if not call_rules:
            if p.required:
                return [], f"no rule for required forward arg {p.name!r}"
            continue
        rule = rules.CALL_RULES.get(p.name)
        if p.name == "dims" and "shifts" in names:  # roll(input, shifts, dims): one axis
            rule = "axis"
        if p.name == "repeats" and p.varargs:  # Tensor.repeat(*repeats)
            rule = "repeat_tuple"
        if p.required or p.name in rules.CALL_FORCED or rule in ("approx",) or rule and rule.startswith("tune"):
            if rule is None:
                if p.required:
                    return [], f"no rule for required arg {p.name!r}"
                continue
            if rule == "tune":
                if isinstance(p.default, bool) or not isinstance(p.default, (int, float)):
                    continue
                rule = f"tune:{float(p.default)}"
            slots.append(Slot(p.name, "arg", rule, keyword=not p.varargs, varargs=p.varargs))
    return slots, None


def _function_candidates(rejected: dict[str, str]) -> list[OpSpec]:
    out: list[OpSpec] = []
    torch_names = set(dir(torch._C._VariableFunctions)) | set(getattr(torch.functional, "__all__", []))
    sources: list[tuple[str, str, Any, bool]] = []
    for n in sorted(torch_names):
        if hasattr(torch, n):
            sources.append(("torch", n, getattr(torch, n), False))
    for n in sorted(vars(F)):
        fn = getattr(F, n)
        # F's own functions, and F's spelling of torch functions whose torch binding has
        # no docstring signature (torch.relu, torch.selu, torch.log_softmax ...).
        shadowed = n in torch_names and _doc_overloads(getattr(torch, n, None), n)
        if callable(fn) and not isinstance(fn, type) and not shadowed and not n.startswith("_"):
            sources.append(("F", n, fn, False))
    for n in sorted(dir(torch.Tensor)):
        if n not in torch_names and not n.startswith("_") and not n.endswith("_"):
            fn = getattr(torch.Tensor, n, None)
            if callable(fn) and not isinstance(fn, property):
                sources.append(("Tensor", n, fn, True))
    for ns, n, fn, method in sources:
        name = f"{ns}.{n}"
        if n.endswith("_") or DENY.match(n):
            continue
        if STOCHASTIC.search(n):
            rejected[name] = "stochastic"
            continue
        overloads = _doc_overloads(fn, n)
        if not overloads and not method:
            sig = _sig_params(fn)
            overloads = [sig] if sig else []
        if not overloads:
            rejected[name] = "no signature found"
            continue
        reasons = []
        for k, params in enumerate(overloads):
            if method:
                params = [_Param("self", True), *params]
            slots, reason = _tensor_slots(params, call_rules=True)
            if reason:
                reasons.append(reason)
                continue
            kind = "method" if method else "function"
            out.append(OpSpec(name, kind, "", (), tuple(slots), fold=str(k)))
        if reasons and not any(o.name == name for o in out):
            rejected[name] = reasons[0]
    return out


# -- probing -------------------------------------------------------------------------


def _sample(shape: tuple[int, ...], domain: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if domain == "real":
        return x * 3
    if domain == "nonneg":
        x = x.abs()
        x.view(-1)[::3] = 0.0
        return x
    if domain == "pos":
        return torch.rand(shape, generator=g) * 3 + 0.05
    if domain == "unit":
        return torch.tanh(x)
    if domain == "prob":
        return torch.sigmoid(x)
    if domain == "sign":
        return torch.where(x >= 0, 1.0, -1.0)
    raise KeyError(domain)


def _operand_value(kind: str, shape: tuple[int, ...], domain: str, seed: int) -> Any:
    if kind == "scalar":
        return 2.0 if domain != "prob" else 0.5
    oshape = rules.operand_shape(kind, shape, PROBE_M)
    if oshape is None:
        raise NoDraw(f"operand kind {kind} does not fit rank {len(shape)}")
    return _sample(oshape, domain, seed)


@dataclass
class _Trial:
    ctor_vals: dict[str, Any]
    call_vals: dict[str, Any]
    kinds: dict[str, str]


def _draw_args(op: OpSpec, shape: tuple[int, ...], seed: int) -> tuple[dict, dict]:
    ctx = DrawCtx(shape, (None,) * len(shape), random.Random(seed), op.family)
    ctor_vals, call_vals = {}, {}
    for s in op.ctor:
        d = rules.draw(s.rule, s.param, ctx, s.varargs)
        if d is not None:
            ctor_vals[s.param] = d.value
    for s in op.call:
        if s.role == "arg":
            d = rules.draw(s.rule, s.param, ctx, s.varargs)
            if d is not None:
                call_vals[s.param] = d.value
    return ctor_vals, call_vals


def _run(op: OpSpec, trial: _Trial, x: torch.Tensor, domains: dict[str, str], seed: int = 0,
         device: str = "cpu", fn: Any = None) -> Any:
    vals = dict(trial.call_vals)
    for i, s in enumerate(op.call):
        if s.role == "operand":
            vals[s.param] = _operand_value(trial.kinds[s.param], tuple(x.shape),
                                           domains.get(s.param, "real"), seed + 7 + 13 * i)
            if isinstance(vals[s.param], torch.Tensor):
                vals[s.param] = vals[s.param].to(device)
        elif s.role == "join":
            vals[s.param + "#2"] = _sample(tuple(x.shape), "real", seed + 11).to(device)
    if fn is None:
        torch.manual_seed(seed)
        fn = instantiate(op, trial.ctor_vals, device)
    return call(op, fn, x.to(device), vals)


def _valid_out(out: Any, x: torch.Tensor) -> str | None:
    if not isinstance(out, torch.Tensor):
        return f"returns {type(out).__name__}"
    if out.dtype != x.dtype:
        return f"returns {out.dtype}"
    if out.numel() == 0:
        return "returns an empty tensor"
    if out.dim() == 0:
        return None
    if out.shape[0] != x.shape[0]:
        return "mixes the batch dimension"
    if out.numel() > 64 * x.numel():
        return "output much larger than input"
    return None


# (stream domain, operand domain) pairs tried, in order, to find a first valid call;
# some ops reject out-of-domain values with an error rather than NaN (BCELoss, var<0).
_DOMAIN_PAIRS = (("real", "real"), ("real", "pos"), ("prob", "prob"), ("pos", "pos"),
                 ("real", "prob"), ("unit", "unit"))


def _find_trial(op: OpSpec, rank: int) -> tuple[_Trial | None, str]:
    shape = PROBE_SHAPES[rank]
    try:
        ctor_vals, call_vals = _draw_args(op, shape, seed=rank)
    except NoDraw as e:
        return None, str(e)
    operands = [s for s in op.call if s.role == "operand"]
    combos = list(itertools.islice(itertools.product(*(s.kinds for s in operands)), 32))
    last = "no operand shapes fit"
    for xd, od in _DOMAIN_PAIRS if operands else _DOMAIN_PAIRS[:1] + (("pos", ""), ("prob", "")):
        x = _sample(shape, xd, 1)
        for combo in combos:
            trial = _Trial(ctor_vals, call_vals, {s.param: k for s, k in zip(operands, combo)})
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = _run(op, trial, x, {s.param: od for s in operands})
            except Exception as e:  # noqa: BLE001 - the probe's job is to find what fails
                last = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                continue
            bad = _valid_out(out, x)
            if bad:
                last = bad
                continue
            return trial, ""
    return None, last


def _finite(out: Any) -> bool:
    return isinstance(out, torch.Tensor) and bool(torch.isfinite(out).all())


def _range_of(out: torch.Tensor) -> str:
    lo, hi = float(out.detach().min()), float(out.detach().max())
    if lo > 0 and hi < 1:
        return "prob"
    if lo >= -1 and hi <= 1:
        return "unit"
    if lo > 0:
        return "pos"
    if lo >= 0:
        return "nonneg"
    return "real"


def probe(op: OpSpec) -> tuple[OpSpec | None, str]:
    """Probe one candidate. Returns the completed spec, or None and the reason."""
    if op.kind == "module":
        m = re.search(r"([123])d$", op.name)
        ranks_to_try = [int(m.group(1)) + 2] if m else [2, 3, 4, 5]
        if op.name.endswith("BatchNorm1d") or op.name.endswith("InstanceNorm1d"):
            ranks_to_try = [2, 3] if "Batch" in op.name else [3]
    else:
        ranks_to_try = [1, 2, 3, 4, 5]
    ok: dict[int, _Trial] = {}
    reason = "no rank works"
    for r in ranks_to_try:
        trial, why = _find_trial(op, r)
        if trial is not None:
            ok[r] = trial
        else:
            reason = why or reason
    if not ok:
        return None, reason
    rank = 3 if 3 in ok else (4 if 4 in ok else min(ok))
    trial, shape = ok[rank], PROBE_SHAPES[rank]
    operands = [s for s in op.call if s.role == "operand"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Domain: the widest input range (and operand range) with finite outputs.
        found = None
        for xd in rules.DOMAINS:
            for od in (rules.DOMAINS if operands else ("real",)):
                try:
                    out = _run(op, trial, _sample(shape, xd, 1), {s.param: od for s in operands})
                except Exception:  # noqa: BLE001
                    continue
                if _finite(out):
                    found = (xd, od, out)
                    break
            if found:
                break
        if found is None:
            return None, "non-finite output on every input domain"
        xd, od, out = found
        domains = {s.param: od for s in operands}
        x = _sample(shape, xd, 1)
        torch.manual_seed(123)
        fn = instantiate(op, trial.ctor_vals)
        torch.manual_seed(1)
        a = _run(op, trial, x, domains, fn=fn)
        torch.manual_seed(2)
        b = _run(op, trial, x, domains, fn=fn)
        if not torch.equal(a, b):
            return None, "stochastic (same input, different outputs)"
        c = _run(op, trial, _sample(shape, xd, 2), domains, fn=fn)
        if a.shape == c.shape and torch.equal(a, c):
            return None, "output does not depend on the input"
        if a.shape == x.shape and torch.equal(a, x):
            return None, "identity on float input"
        try:
            with torch.device("meta"):
                mfn = instantiate(op, trial.ctor_vals, "meta")
            mout = _run(op, trial, x, domains, device="meta", fn=mfn)
            if tuple(mout.shape) != tuple(a.shape):
                return None, "meta shape differs from CPU shape"
        except Exception as e:  # noqa: BLE001
            return None, f"no meta support ({type(e).__name__})"
        # Which operand kinds work (others fixed) for the composer to choose from.
        new_slots = []
        for s in op.call:
            if s.role != "operand":
                new_slots.append(s)
                continue
            accepted = []
            for k in s.kinds:
                t = _Trial(trial.ctor_vals, trial.call_vals, {**trial.kinds, s.param: k})
                try:
                    o = _run(op, t, x, domains, fn=fn)
                except Exception:  # noqa: BLE001
                    continue
                if _valid_out(o, x) is None and _finite(o):
                    accepted.append(k)
            if "same" in accepted:
                accepted.append("self")
            new_slots.append(replace(s, kinds=tuple(accepted), domain=domains[s.param]))
    family = op.family or _function_family(op, new_slots, x, a)
    if family in ("conv", "linear", "matmul"):  # a weight shaped like x is an accident
        new_slots = [replace(s, kinds=tuple(k for k in s.kinds if k not in ("same", "self", "row")))
                     if s.role == "operand" else s for s in new_slots]
    # Behaviour fingerprint over every accepted rank, for alias folding.
    prints = []
    # Ranks >= 2 only: modules are not probed on rank 1, their function twins are.
    for r, t in sorted((r, t) for r, t in ok.items() if r >= 2 or max(ok) < 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.manual_seed(123)
                o = _run(op, t, _sample(PROBE_SHAPES[r], xd, 5), domains)
                prints.append((r, tuple(o.shape), [round(v, 4) for v in o.flatten()[:64].tolist()]))
            except Exception:  # noqa: BLE001
                prints.append((r, "fails"))
    fp = hashlib.sha1(repr(prints).encode()).hexdigest()
    return replace(op, ranks=tuple(sorted(ok)), call=tuple(new_slots), domain=xd,
                   out_range=_range_of(a), terminal=a.dim() == 0, family=family,
                   tuple_out=_is_tuple(op, trial, x, domains, fn),
                   fold=f"{op.kind == 'module'}:{fp}"), ""


def _is_tuple(op, trial, x, domains, fn) -> bool:
    vals = dict(trial.call_vals)
    vals[_x_param(op)] = x
    for s in op.call:
        if s.role == "operand":
            vals[s.param] = _operand_value(trial.kinds[s.param], tuple(x.shape), domains[s.param], 7)
        elif s.role == "join":
            vals[s.param + "#2"] = x
    args, kwargs = _split(op.call, vals)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return isinstance(fn(*args, **kwargs), (tuple, list))


def _function_family(op: OpSpec, slots: list[Slot], x: torch.Tensor, out: torch.Tensor) -> str:
    kinds = {k for s in slots if s.role == "operand" for k in s.kinds}
    has_axis = any(s.role == "arg" and s.rule == "axis" for s in slots)
    if any(s.role == "join" for s in slots):
        return "join"
    if "linw" in kinds and not ({"same", "scalar"} & kinds):
        return "linear"
    if "convw" in kinds and not ({"same", "scalar"} & kinds):
        return "conv"
    if {"matmul", "bmatmul", "left", "right"} & kinds and not ({"same", "scalar"} & kinds):
        return "matmul"
    if out.dim() == 0:
        return "reduction"
    if tuple(out.shape) == tuple(x.shape):
        if any(s.role == "operand" for s in slots):
            return "binary"
        return "scan" if has_axis else "unary"
    if has_axis and out.numel() < x.numel():
        return "reduction"
    return "reshape" if out.numel() == x.numel() else "resize"


def _fold(ops: list[OpSpec], rejected: dict[str, str]) -> list[OpSpec]:
    """Group aliases by behaviour; keep one module and one function per group.

    Group key is the output fingerprint alone (module or not): ``nn.ReLU``, ``torch.relu``
    and ``F.relu`` are one operator. Within a group the kept function is the torch one
    with the shortest name; a name with several overloads keeps all its overloads.
    """
    def fp(op: OpSpec) -> str:
        return op.fold.split(":", 1)[1]

    groups: dict[str, list[OpSpec]] = {}
    for op in ops:
        groups.setdefault(fp(op), []).append(op)
    rank_ns = {"nn": 0, "torch": 1, "F": 2, "Tensor": 3}
    keep_names: set[str] = set()
    canonical: dict[str, str] = {}

    def derived(m: OpSpec, members: list[OpSpec]) -> bool:
        """Its docstring names another member ("Alias for torch.clamp", sgn -> sign)."""
        doc = (getattr(resolve(m.name), "__doc__", None) or "")[:600]
        return any(o.short != m.short and re.search(rf"\b{re.escape(o.short)}\b", doc) for o in members)

    for key, members in groups.items():
        mods = sorted((m for m in members if m.kind == "module"), key=lambda m: (len(m.name), m.name))
        fns = sorted((m for m in members if m.kind != "module"),
                     key=lambda m: (rank_ns[m.name.split(".")[0]], derived(m, members),
                                    len(m.name), m.name))
        winners = [*mods[:1], *fns[:1]]
        keep_names.update(w.name for w in winners)
        canonical[key] = winners[0].name
        for m in members:
            if m.name not in keep_names:
                rejected.setdefault(m.name, f"alias of {winners[0].name}")
    # Names with several overloads: a name kept in any group stays whole; its overloads
    # may sit in different groups, and they all belong to that name's first group.
    first_group: dict[str, str] = {}
    for op in ops:
        first_group.setdefault(op.name, canonical[fp(op)])
    kept = [replace(op, fold=first_group[op.name]) for op in ops if op.name in keep_names]
    # Merge groups through shared names so that distinct() counts operators once.
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.get(a, a) != a:
            a = parent[a]
        return a

    for op in ops:
        a, b = find(first_group[op.name]), find(canonical[fp(op)])
        if a != b:
            parent[b] = a
    return [replace(op, fold=find(op.fold)) for op in kept]


_CACHE: dict[str, Catalog] = {}


def build_catalog() -> Catalog:
    """Crawl, probe and fold. Deterministic for a torch version; cached per process."""
    if "default" in _CACHE:
        return _CACHE["default"]
    rejected: dict[str, str] = {}
    candidates = _module_candidates(rejected) + _function_candidates(rejected)
    probed: list[OpSpec] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rng_state = torch.random.get_rng_state()
    try:
        for op in candidates:
            spec, reason = probe(op)
            if spec is None:
                key = op.name
                if not any(p.name == key for p in probed):
                    rejected.setdefault(key, reason)
                continue
            rejected.pop(op.name, None)
            probed.append(spec)
    finally:
        torch.set_num_threads(threads)
        torch.random.set_rng_state(rng_state)
    ops = _fold(probed, rejected)
    for op in ops:
        rejected.pop(op.name, None)
    catalog = Catalog(sorted(ops, key=lambda o: (o.name, repr(o.call))), rejected)
    _CACHE["default"] = catalog
    return catalog
