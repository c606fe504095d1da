"""Decontamination against KernelBench, and de-duplication among generated tasks.

Both work on a *normalized* view of a task's source: docstrings dropped, every local
name (variables, attributes, parameters, constants' names) replaced by ``NAME`` and
every literal by ``CONST``, while API names (``nn.Conv2d``, ``torch.relu``,
``x.view``) are kept. The view is a token stream: the node types of the AST in
pre-order, with those API names. On that stream:

* **similarity** is ``difflib.SequenceMatcher(...).ratio()`` (a sequence-matcher ratio
  over the normalized tree, computed on tokens rather than on ``ast.dump`` text: same
  ordering information, ~20x fewer symbols). ``quick_ratio`` upper bounds skip most
  pairs cheaply;
* the **op sequence** is the ordered list of operators ``forward`` applies, with names
  folded (``nn.ReLU``, ``torch.relu``, ``F.relu`` -> ``relu``; ``x + y`` -> ``add``);
* the **structure key** (for de-duplication) is a hash of the whole stream: tasks that
  differ only in sizes, names or literal values share it.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from dataclasses import dataclass
from pathlib import Path

API_ROOTS = {"torch", "nn", "F", "functional"}
BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
          ast.MatMult: "matmul", ast.Pow: "pow", ast.FloorDiv: "floordivide", ast.Mod: "remainder"}
ALIASES = {"multiply": "mul", "divide": "div", "subtract": "sub", "truedivide": "div",
           "absolute": "abs", "clip": "clamp", "concat": "cat", "concatenate": "cat",
           "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim",
           "negative": "neg", "arccos": "acos", "arcsin": "asin", "arctan": "atan",
           "fix": "trunc", "maximum": "max", "minimum": "min", "square": "pow"}
# Calls that are not operators: shape queries, dtype/device moves, Python builtins.
NOT_OPS = {"size", "dim", "numel", "item", "contiguous", "to", "cuda", "cpu", "float", "half",
           "type", "detach", "clone", "super", "__init__", "len", "range", "print", "int",
           "tuple", "list", "dict", "isinstance", "Parameter", "register_buffer", "zip",
           "enumerate", "max_", "append", "extend"}


def fold(name: str) -> str:
    key = name.split(".")[-1].lower().replace("_", "")
    return ALIASES.get(key, key)


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def _api_name(node: ast.AST) -> str | None:
    """``torch.nn.functional.relu`` / ``nn.Conv2d`` / ``F.gelu`` -> folded name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in API_ROOTS and parts:
        return fold(parts[0])
    return None


def tokens(source: str) -> list[str]:
    """The normalized token stream of a task's source (see module docstring)."""
    tree = ast.parse(source)
    _strip_docstrings(tree)
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Attribute):
            api = _api_name(node)
            if api is not None:
                out.append("API:" + api)
                return
            out.append("Attribute")
            visit(node.value)
            # Method calls keep their name (x.view); plain attributes are local names.
            out.append("NAME")
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and _api_name(node.func) is None and not _is_self_attr(node.func):
            out.append("Call")
            out.append("METHOD:" + fold(node.func.attr))
            visit(node.func.value)
            for child in [*node.args, *node.keywords]:
                visit(child)
            return
        if isinstance(node, ast.Name):
            out.append("API:" + node.id if node.id in API_ROOTS else "NAME")
            return
        if isinstance(node, ast.Constant):
            out.append("CONST")
            return
        if isinstance(node, (ast.Load, ast.Store, ast.Del)):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return  # import spelling is boilerplate
        if isinstance(node, ast.arg):
            out.append("ARG")
            return
        if isinstance(node, ast.keyword):
            out.append("KW:" + (node.arg or "**"))
            visit(node.value)
            return
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(type(node).__name__ + ":" + (node.name if node.name in
                       ("Model", "forward", "__init__", "get_inputs", "get_init_inputs") else "NAME"))
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, ast.expr) or child in getattr(node, "bases", []):
                    visit(child)
            return
        out.append(type(node).__name__)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _is_self_attr(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id == "self"


def op_sequence(source: str) -> tuple[str, ...]:
    """Folded names of the operators ``Model.forward`` applies, in evaluation order."""
    tree = ast.parse(source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return ()
    modules: dict[str, str] = {}
    forward = None
    for fn in model.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    api = _api_name(node.value.func)
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and _is_self_attr(t) and api and api != "parameter":
                            modules[t.attr] = api
        elif isinstance(fn, ast.FunctionDef) and fn.name == "forward":
            forward = fn
    if forward is None:
        return ()
    seq: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):  # operands first: evaluation order
            if not (isinstance(node, ast.Call) and child is node.func and isinstance(child, ast.Attribute)):
                visit(child)
            elif isinstance(child.value, ast.Call | ast.Subscript | ast.BinOp):
                visit(child.value)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                if _is_self_attr(f):
                    if f.attr in modules:
                        seq.append(modules[f.attr])
                    return
                api = _api_name(f)
                name = api if api is not None else fold(f.attr)
                if name not in NOT_OPS:
                    seq.append(name)
        elif isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
            seq.append(BINOPS[type(node.op)])

    for stmt in forward.body:
        visit(stmt)
    return tuple(seq)


def structure_key(source: str) -> str:
    return hashlib.sha1("\x1f".join(tokens(source)).encode()).hexdigest()


def similarity(a: list[str], b: list[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass
class _Ref:
    name: str
    tokens: list[str]
    ops: tuple[str, ...]


class KernelBenchIndex:
    """The problems of a KernelBench checkout, normalized once, to check tasks against.

    Raises :class:`cuda_agent.tasks.TaskError` naming the path when it is not a
    readable KernelBench directory.
    """

    def __init__(self, root: str | Path, levels: tuple[int, ...] = (1, 2, 3), threshold: float = 0.9):
        from cuda_agent.tasks import TaskError, iter_kernelbench

        root = Path(root)
        base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
        if not base.is_dir():
            raise TaskError(f"{root}: not a KernelBench directory")
        present = tuple(lv for lv in levels if (base / f"level{lv}").is_dir())
        if not present:
            raise TaskError(f"{root}: no level{'/level'.join(map(str, levels))} directory in it")
        self.threshold = threshold
        self.refs: list[_Ref] = []
        for task in iter_kernelbench(root, levels=present):
            try:
                self.refs.append(_Ref(task.name, tokens(task.source), op_sequence(task.source)))
            except SyntaxError as e:
                raise TaskError(f"{task.origin}: cannot parse: {e.msg}") from None
        self._matchers: list[difflib.SequenceMatcher] | None = None
        self.by_ops: dict[tuple[str, ...], str] = {}
        for ref in self.refs:
            if ref.ops:
                self.by_ops.setdefault(ref.ops, ref.name)

    def __len__(self) -> int:
        return len(self.refs)

    def __getstate__(self) -> dict:  # matchers are rebuilt where used (worker processes)
        return {**self.__dict__, "_matchers": None}

    def check(self, source: str) -> str:
        """``"pass"`` or ``"fail: <why>"`` naming the KernelBench problem it matches."""
        ops = op_sequence(source)
        if ops in self.by_ops:
            return f"fail: same op sequence as KernelBench {self.by_ops[ops]} ({' -> '.join(ops)})"
        toks = tokens(source)
        if self._matchers is None:  # seq2 side is cached by SequenceMatcher: build once
            self._matchers = [difflib.SequenceMatcher(None, [], ref.tokens, autojunk=False)
                              for ref in self.refs]
        for ref, m in zip(self.refs, self._matchers):
            m.set_seq1(toks)
            if m.real_quick_ratio() <= self.threshold or m.quick_ratio() <= self.threshold:
                continue
            r = m.ratio()
            if r > self.threshold:
                return f"fail: AST similarity {r:.2f} to KernelBench {ref.name}"
        return "pass"
