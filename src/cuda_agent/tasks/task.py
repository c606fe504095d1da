"""The Task record: one KernelBench-format module.

A task file defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``. :func:`load_task` reads and validates one; a broken file
raises :class:`TaskError`, whose message names the file and the problem.

Task files are *trusted* code (they come from the benchmark or from our own
synthesis), so loading one executes it in the calling process. Candidate
solutions are never loaded this way: see :mod:`cuda_agent.sandbox`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
_module_counter = itertools.count()


class TaskError(Exception):
    """A task file that cannot be used. The message names the file and the problem."""


@dataclass(frozen=True)
class Task:
    """One KernelBench-format problem.

    ``source`` is the module text; ``name`` a short id (file stem by default);
    ``path`` where it came from (may be None for tasks held only in memory, e.g. a
    parquet row). ``meta`` carries loader-specific metadata (level, ops, seed ...).
    """

    name: str
    source: str
    path: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def origin(self) -> str:
        return str(self.path) if self.path else f"<task {self.name}>"

    def load_module(self) -> ModuleType:
        """Execute the task source in a fresh module and return it."""
        return _exec_source(self.source, self.origin, f"_cuda_agent_task_{next(_module_counter)}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path) if self.path else None,
                "sha256": self.sha256, "meta": self.meta}


def _exec_source(source: str, origin: str, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=origin)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = origin
    sys.modules[module_name] = module  # dataclasses / pickling look modules up here
    try:
        exec(compile(source, origin, "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def check_task_source(source: str, origin: str) -> None:
    """Static checks: it parses, and defines Model, get_inputs, get_init_inputs."""
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as e:
        raise TaskError(f"{origin}:{e.lineno}: syntax error: {e.msg}") from None
    defined = {node.name for node in tree.body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in tree.body:  # also accept `get_inputs = ...` style assignments
        if isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [n for n in REQUIRED_NAMES if n not in defined]
    if missing:
        raise TaskError(f"{origin}: missing {', '.join(missing)} "
                        "(a task defines class Model, get_inputs() and get_init_inputs())")


def validate_task(task: Task) -> ModuleType:
    """Execute the task and check its inputs. Returns the loaded module."""
    import torch

    check_task_source(task.source, task.origin)
    try:
        module = task.load_module()
    except Exception as e:  # the task's own code failed: report it as data
        raise TaskError(f"{task.origin}: executing the task failed: {type(e).__name__}: {e}") from None
    model_cls = getattr(module, "Model", None)
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise TaskError(f"{task.origin}: Model must be a subclass of torch.nn.Module")
    for fn_name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn_name, None)):
            raise TaskError(f"{task.origin}: {fn_name} must be a function")
    try:
        init_inputs = module.get_init_inputs()
        inputs, on_meta = _shapes_of_inputs(module)
    except Exception as e:
        raise TaskError(f"{task.origin}: calling get_inputs/get_init_inputs failed: "
                        f"{type(e).__name__}: {e}") from None
    if not isinstance(init_inputs, (list, tuple)):
        raise TaskError(f"{task.origin}: get_init_inputs() must return a list, got {type(init_inputs).__name__}")
    if not isinstance(inputs, (list, tuple)) or len(inputs) == 0:
        raise TaskError(f"{task.origin}: get_inputs() must return a non-empty list of tensors")
    has_tensor = any(isinstance(x, torch.Tensor) for x in inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            # a plain number beside tensors (KernelBench L1_5); not numpy's, which a worker's reply cannot carry
            if has_tensor and type(x) in (bool, int, float):
                continue
            raise TaskError(f"{task.origin}: get_inputs()[{i}] is a {type(x).__name__}, not a torch.Tensor "
                            "(plain numbers are allowed beside at least one tensor)")
        if x.device.type != "cpu" and not (on_meta and x.device.type == "meta"):
            raise TaskError(f"{task.origin}: get_inputs()[{i}] is on {x.device}; "
                            "tasks create inputs on the CPU and the harness moves them")
    return module


def _shapes_of_inputs(module: ModuleType) -> tuple[list, bool]:
    """``get_inputs()`` run without making its tensors, so that checking a task does not make its inputs on
    the host (KernelBench L1_47's are 8 GiB: about 10 s and 8 GiB of RSS each time). First on PyTorch's meta
    device, with torch's default device set to it: shapes and dtypes, no memory, and nothing to import. A
    task that names a device itself (``device=``, ``.cuda()``, ``.to(...)``) or needs what the meta device
    lacks is run again under fake tensors (devices as written, no memory; they import dynamo, about a
    second), and one that needs real values (``.item()``, data-dependent indexing) as written.
    Returns the inputs and whether they are meta tensors (made on the default device: the CPU's)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class NamesDevice(Exception):
        pass

    def names_device(x) -> bool:
        if isinstance(x, torch.device):
            return x.type != "meta"
        if isinstance(x, str) and x.split(":")[0] in _DEVICE_TYPES:
            return True
        return isinstance(x, (list, tuple)) and any(names_device(y) for y in x)

    class RefuseDevices(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in _DEVICE_METHODS or (name == "to" and any(isinstance(a, int) and not isinstance(a, bool)
                                                                 for a in args[1:])) \
                    or any(names_device(a) for a in (*args, *kwargs.values())):
                raise NamesDevice(name)
            return func(*args, **kwargs)

    try:
        if torch.get_default_device().type != "cpu":  # the task moved torch's default device itself
            raise NamesDevice("set_default_device")
        with torch.device("meta"), RefuseDevices():
            inputs = module.get_inputs()
        if isinstance(inputs, (list, tuple)) and all(not isinstance(x, torch.Tensor) or x.device.type == "meta"
                                                     for x in inputs):
            return inputs, True
    except Exception:  # noqa: BLE001 - a named device, an op without a meta kernel: fake tensors below
        pass
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            return module.get_inputs(), False
    except Exception:  # noqa: BLE001 - run as written below; its own error, if any, is the one reported
        return module.get_inputs(), False


_DEVICE_TYPES = frozenset({"cpu", "cuda", "meta", "xpu", "mps", "hip", "privateuseone", "xla", "lazy", "mtia"})
_DEVICE_METHODS = frozenset({"cuda", "cpu", "xpu", "mps", "pin_memory", "share_memory_"})


def load_task(path: str | Path, name: str | None = None, validate: bool = True) -> Task:
    """Read a KernelBench-format ``.py`` file into a :class:`Task`.

    With ``validate`` (the default) the file is executed and its inputs checked;
    any problem raises :class:`TaskError` naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such task file")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: cannot read: {e}") from None
    task = Task(name=name or path.stem, source=source, path=path.resolve())
    if validate:
        validate_task(task)
    else:
        check_task_source(source, task.origin)
    return task
