"""The rubric: every task gets a recorded outcome per filter.

An outcome is ``"pass"``, ``"fail: <why>"`` or ``"pending"`` (checked later, on a GPU);
``"skipped: <why>"`` marks checks not run because an earlier one failed (only rejected
tasks carry it). A task is accepted when every outcome is ``pass`` or ``pending``.

CPU checks (:func:`check_cpu`), cheapest first, on the task's own small shapes:

=================  ==================================================================
eager              builds ``Model(*get_init_inputs())`` and runs ``get_inputs()``
stochastic         no random op in ``Model`` (dropout, rrelu, rand*, bernoulli ...)
deterministic      two runs on the same inputs, different global RNG state: identical
finite             no NaN/Inf in any output
nonzero            outputs not all zero
nonconstant        an output with more than one element is not a single value
input_sensitive    two different inputs give outputs that are not allclose
dynamo             traces under ``torch.compile(backend="aot_eager")`` and matches eager
=================  ==================================================================

Deferred to the GPU pass (:mod:`.gpu`): ``runtime`` (eager 1-100 ms after shape
scaling, CUDA events) and ``compile`` (full inductor compile matches eager).
Set by the pipeline: ``decontam`` (:mod:`.decontam`) and ``dedup``.
"""

from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

CPU_FILTERS = ("eager", "stochastic", "deterministic", "finite", "nonzero", "nonconstant",
               "input_sensitive", "dynamo")
GPU_FILTERS = ("runtime", "compile")
PIPELINE_FILTERS = ("decontam", "dedup")
ALL_FILTERS = CPU_FILTERS + GPU_FILTERS + PIPELINE_FILTERS

PASS, PENDING = "pass", "pending"



def fail(why: str) -> str:
    return f"fail: {' '.join(str(why).split())[:300]}"


def accepted(results: dict[str, str]) -> bool:
    return all(v == PASS or v.startswith(PENDING) for v in results.values())


def first_failure(results: dict[str, str]) -> str | None:
    for k, v in results.items():
        if not (v == PASS or v.startswith(PENDING)):
            return f"{k}: {v}"
    return None


@dataclass
class CheckResult:
    results: dict[str, str]
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return accepted(self.results)


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return []


def _clone(xs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


STOCHASTIC_NAMES = re.compile(
    r"^(dropout\w*|\w*Dropout\w*|rrelu\w*|RReLU|bernoulli\w*|multinomial|rand|randn|rand_like|"
    r"randn_like|randint\w*|randperm|normal_?|poisson|FractionalMaxPool\w*|"
    r"fractional_max_pool\w*|gumbel_softmax|exponential_|cauchy_|geometric_|uniform_|"
    r"log_normal_|random_)$")
# Calls whose arguments are initial values, where randomness is the point.
INIT_CALLS = {"Parameter", "register_buffer", "Buffer"}


def stochastic_check(source: str) -> str:
    """``fail`` if ``class Model`` calls a random op outside parameter initialization."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return fail(f"syntax error: {e.msg}")
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), tree)

    def name_of(func: ast.AST) -> str:
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    def visit(node: ast.AST) -> str | None:
        if isinstance(node, ast.Call):
            name = name_of(node.func)
            if name in INIT_CALLS:
                return None
            if STOCHASTIC_NAMES.match(name):
                return name
        for child in ast.iter_child_nodes(node):
            found = visit(child)
            if found:
                return found
        return None

    found = visit(model)
    return fail(f"uses random op {found}") if found else PASS


def _close(a: list[torch.Tensor], b: list[torch.Tensor], rtol=1e-4, atol=1e-5) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
        for x, y in zip(a, b))


def check_cpu(source: str, name: str = "task", dynamo: bool = True, seed: int = 0) -> CheckResult:
    """Run the CPU-checkable filters on one task source."""
    from cuda_agent.tasks import Task, TaskError, validate_task

    res: dict[str, str] = {k: "skipped: eager failed" for k in CPU_FILTERS}
    extras: dict[str, Any] = {}
    res["stochastic"] = stochastic_check(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = validate_task(Task(name, source))
            torch.manual_seed(seed)
            model = module.Model(*module.get_init_inputs())
            torch.manual_seed(seed + 1)
            inputs_a = module.get_inputs()
            torch.manual_seed(seed + 2)
            inputs_b = module.get_inputs()
            with torch.no_grad():
                torch.manual_seed(100)
                out1 = _flat(model(*_clone(inputs_a)))
                torch.manual_seed(200)
                out2 = _flat(model(*_clone(inputs_a)))
                out_b = _flat(model(*_clone(inputs_b)))
        except TaskError as e:
            res["eager"] = fail(str(e))
            return CheckResult(res, extras)
        except Exception as e:  # noqa: BLE001 - any failure of the task is a result
            res["eager"] = fail(f"{type(e).__name__}: {e}")
            return CheckResult(res, extras)
        if not out1:
            res["eager"] = fail("forward returned no tensor")
            return CheckResult(res, extras)
        res["eager"] = PASS
        extras["output_shapes"] = [list(o.shape) for o in out1]
        same = all(a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
                   for a, b in zip(out1, out2))  # bitwise, NaN == NaN (NaN is `finite`'s call)
        if same and len(out1) == len(out2):
            res["deterministic"] = PASS
        else:
            diff = max(float((a - b).abs().max()) for a, b in zip(out1, out2) if a.shape == b.shape)
            res["deterministic"] = fail(f"two runs on the same inputs differ (max |diff| {diff:.3g})")
        finite = all(bool(torch.isfinite(o).all()) for o in out1 + out_b)
        res["finite"] = PASS if finite else fail("NaN or Inf in the output")
        nonzero = all(any(bool(o.abs().max() > 0) for o in outs) for outs in (out1, out_b))
        res["nonzero"] = PASS if nonzero else fail("output is all zeros")
        res["nonconstant"] = PASS
        for o in out1:
            if o.numel() > 1 and finite:
                spread = float(o.max() - o.min())
                if spread <= 1e-6 * max(1.0, float(o.abs().max())):
                    res["nonconstant"] = fail(f"every element of an output equals {float(o.flatten()[0]):.4g}")
                    break
        res["input_sensitive"] = (fail("different inputs give the same output")
                                  if _close(out1, out_b) else PASS)
        if not dynamo:
            res.pop("dynamo")
        elif accepted({k: v for k, v in res.items() if k != "dynamo"}):
            res["dynamo"], extras["graph_breaks"] = dynamo_check(model, inputs_a, out1)
        else:
            res["dynamo"] = "skipped: an earlier check failed"
    sys.modules.pop(module.__name__, None)  # thousands of tasks per process: do not keep them
    return CheckResult(res, extras)


def dynamo_check(model: torch.nn.Module, inputs: list, expected: list[torch.Tensor]) -> tuple[str, int]:
    """Trace with dynamo + AOT autograd (``aot_eager``: no codegen), compare to eager."""
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()
    counters.clear()
    try:
        compiled = torch.compile(model, backend="aot_eager", fullgraph=False)
        with torch.no_grad():
            torch.manual_seed(100)
            got = _flat(compiled(*_clone(inputs)))
        breaks = sum(counters["graph_break"].values())
        if not _close(got, expected, rtol=1e-3, atol=1e-4):
            return fail("aot_eager output differs from eager"), breaks
        return PASS, breaks
    except Exception as e:  # noqa: BLE001
        return fail(f"dynamo: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"), -1
    finally:
        dynamo.reset()


# -- cost estimate --------------------------------------------------------------------


def estimate_cost(module: Any) -> dict[str, float]:
    """FLOPs (matmul/conv/attention by torch's flop formulas, 1 per output element for
    everything else that is not a view) and minimum bytes moved (inputs + parameters +
    outputs, once each), on meta tensors at the task's own shapes."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry
    from torch.utils._pytree import tree_flatten

    class _Cost(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.flops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet in flop_registry:
                try:
                    self.flops += int(flop_registry[packet](*args, **kwargs, out_val=out))
                except Exception:  # noqa: BLE001 - a formula that cannot read meta args
                    pass
            elif not getattr(func, "is_view", False):
                self.flops += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
            return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
        inputs = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs]
        with torch.no_grad(), _Cost() as cost:
            out = _flat(model(*inputs))
    nbytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    nbytes += sum(p.numel() * p.element_size() for p in model.parameters())
    nbytes += sum(o.numel() * o.element_size() for o in out)
    return {"flops": float(cost.flops), "bytes": float(nbytes),
            "flops_per_byte": round(cost.flops / max(nbytes, 1), 4)}
