"""Your own ``nn.Module`` as a task, and the drop-in module written back for it.

``task_from_module("pkg.mod:MyBlock", "float32[8,1024];float32[1024]", "[1024]")`` builds a
KernelBench-format Task: the module's source (inlined when it has no relative imports, so the
sandbox's workers need nothing on their path; imported otherwise) plus ``Model = MyBlock``,
``get_inputs()`` drawing random tensors of the given dtypes and shapes, and
``get_init_inputs()`` returning the constructor arguments.

:func:`write_dropin` writes ``<name>_optimized.py`` next to the solution: it loads the built
``cuda_ext`` library and ``model_new.py`` from the solution directory and exposes a class with
the original's name, constructor and state_dict (a subclass of ``ModelNew``), calling
``prepare()`` again whenever the weights change.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any

from ..tasks import Task, TaskError, validate_task
from .templating import render

SPEC_RX = re.compile(r"^\s*([a-z]+[0-9]*)\s*\[\s*([0-9,\s]*)\]\s*$")
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


def parse_inputs(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """``"float32[8,1024];int64[8]"`` -> [("float32", (8, 1024)), ("int64", (8,))]."""
    out = []
    for part in [p for p in spec.split(";") if p.strip()]:
        m = SPEC_RX.match(part)
        if not m:
            raise TaskError(f"--inputs: cannot read {part.strip()!r}; write DTYPE[D0,D1,...], e.g. float32[8,1024]")
        dtype, dims = m.group(1), m.group(2)
        if dtype not in FLOAT_DTYPES + INT_DTYPES + ("bool",):
            raise TaskError(f"--inputs: unknown dtype {dtype!r} (one of {', '.join(FLOAT_DTYPES + INT_DTYPES)}, bool)")
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
        out.append((dtype, shape))
    if not out:
        raise TaskError("--inputs: give at least one input, e.g. float32[8,1024]")
    return out


def _input_expr(dtype: str, shape: tuple[int, ...]) -> str:
    dims = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    size = f"({dims})"
    if dtype in FLOAT_DTYPES:
        return f"torch.randn({size}, dtype=torch.{dtype})"
    if dtype == "bool":
        return f"torch.randint(0, 2, {size}).bool()"
    return f"torch.randint(0, 16, {size}, dtype=torch.{dtype})"


def import_target(target: str) -> tuple[Any, type, str]:
    """``pkg.mod:Class`` or ``path/to/file.py:Class`` -> (module, class, module name)."""
    if ":" not in target:
        raise TaskError(f"--module {target!r}: write MODULE:CLASS, e.g. mypkg.blocks:MLP or blocks.py:MLP")
    mod_name, cls_name = target.rsplit(":", 1)
    if mod_name.endswith(".py"):
        path = Path(mod_name).resolve()
        if not path.is_file():
            raise TaskError(f"--module: no such file {path}")
        name = path.stem
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(name, module)
        sys.path.insert(0, str(path.parent))
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(mod_name)
        except ImportError as e:
            raise TaskError(f"--module: cannot import {mod_name}: {e}") from None
        name = mod_name
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type):
        raise TaskError(f"--module: {mod_name} has no class {cls_name}")
    return module, cls, name


def init_args_list(cls: type, init_args: str | None) -> list[Any]:
    if not init_args:
        return []
    try:
        value = json.loads(init_args)
    except json.JSONDecodeError as e:
        raise TaskError(f"--init-args is not valid JSON: {e}") from None
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        try:
            bound = inspect.signature(cls).bind(**value)
        except TypeError as e:
            raise TaskError(f"--init-args do not fit {cls.__name__}{inspect.signature(cls)}: {e}") from None
        if bound.kwargs:
            raise TaskError(f"--init-args: keyword-only arguments {list(bound.kwargs)} cannot be passed positionally")
        return list(bound.args)
    return [value]


def task_from_module(target: str, inputs: str, init_args: str | None = None, name: str | None = None) -> Task:
    module, cls, mod_name = import_target(target)
    specs = parse_inputs(inputs)
    args = init_args_list(cls, init_args)
    source_file = inspect.getsourcefile(module)
    text = Path(source_file).read_text() if source_file else ""
    root = Path(source_file).resolve().parent if source_file else Path.cwd()
    for _ in range(mod_name.count(".")):
        root = root.parent
    relative = re.search(r"^\s*from\s+\.", text, re.M) is not None
    if text and not relative:
        body = text.rstrip() + "\n"
        origin = f"inlined from {source_file}"
    else:
        body = f"from {mod_name} import {cls.__name__}\n"
        origin = f"imported from {mod_name}"
    lines = [f'"""Task for {target} ({origin}), written by cuda-agent optimize."""',
             "import sys as _sys", f"_sys.path.insert(0, {str(root)!r})", "import torch", "", body]
    if cls.__name__ != "Model":
        lines.append(f"Model = {cls.__name__}\n")
    lines += ["", "def get_inputs():", f"    return [{', '.join(_input_expr(d, s) for d, s in specs)}]", "", "",
              "def get_init_inputs():", f"    return {args!r}", ""]
    task = Task(name=name or cls.__name__, source="\n".join(lines), path=None,
                meta={"module": target, "inputs": inputs, "init_args": args})
    validate_task(task)
    return task


def write_dropin(out_dir: Path, target: str, solution_dir: Path, verdict: dict[str, Any]) -> Path:
    """Write ``<out_dir>/<module>_optimized.py`` exposing the optimized class under its original name."""
    mod_name, cls_name = target.rsplit(":", 1)
    stem = Path(mod_name).stem if mod_name.endswith(".py") else mod_name.rsplit(".", 1)[-1]
    out = Path(out_dir) / f"{stem}_optimized.py"
    binding = "\n".join(p.read_text(errors="replace") for p in Path(solution_dir).glob("kernels/**/*.cpp"))
    s_e, s_c = verdict.get("speedup_vs_eager"), verdict.get("speedup_vs_compile")
    speed = (f"{s_e:.2f}x faster than eager PyTorch, {s_c:.2f}x vs torch.compile" if s_e and s_c else "verified correct")
    out.write_text(render("dropin.py.tmpl", target=target, class_name=cls_name, date=date.today().isoformat(),
                          gpu=verdict.get("gpu") or "the GPU it was verified on", speed=speed,
                          module_name=out.stem, solution_dirname=Path(solution_dir).name,
                          pybind="True" if "PYBIND11_MODULE" in binding else "False",
                          import_line=f"from {mod_name} import {cls_name}" if not mod_name.endswith(".py")
                          else f"{cls_name} from {mod_name}"))
    return out
