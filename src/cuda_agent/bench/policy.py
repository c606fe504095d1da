"""The one thing bench needs from an agent: solve a task in a working directory.

A *solver* is a function ``solve(task, workdir, argv) -> episode``:

* ``task``: the :class:`~cuda_agent.tasks.Task`;
* ``workdir``: an empty directory the agent may use (``RUN_DIR/tasks/<task>/sample_<S>/agent``);
* ``argv``: the words after ``--`` on the bench command line (the LLM backend's options, passed
  through untouched);
* the episode: an object with ``solution`` and ``trajectory`` paths (``trajectory`` may be
  None), or a ``(solution, trajectory)`` pair, or a bare solution path.

``--agent`` uses ``cuda_agent.agent:solve``; ``--agent-solver MODULE:FUNCTION`` names any
other. The module is imported only when a run starts, so bench works without the agent package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tasks import Task
from .sources import BenchError

DEFAULT_SOLVER = "cuda_agent.agent:solve"


@dataclass
class Episode:
    solution: Path
    trajectory: Path | None = None


Solver = Callable[[Task, Path], Episode]


def load_solver(spec: str, argv: list[str]) -> Solver:
    """Resolve ``MODULE:FUNCTION``; a BenchError says plainly what is missing."""
    module_name, _, func_name = spec.partition(":")
    if not module_name or not func_name:
        raise BenchError(f"--agent-solver {spec!r}: expected MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if spec == DEFAULT_SOLVER:
            raise BenchError(f"--agent needs the agent package ({module_name}, issue 4), which cannot be imported "
                             f"here: {e}. Evaluate existing solutions with --solutions DIR instead.") from None
        raise BenchError(f"--agent-solver {spec}: cannot import {module_name}: {e}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise BenchError(f"--agent-solver {spec}: {module_name} has no function {func_name}"
                         + (" (the agent package does not expose solve)" if spec == DEFAULT_SOLVER else ""))

    def solve(task: Task, workdir: Path) -> Episode:
        return as_episode(func(task, workdir, list(argv)))

    return solve


def as_episode(value: Any) -> Episode:
    if isinstance(value, Episode):
        return value
    if isinstance(value, (str, Path)):
        return Episode(Path(value))
    if isinstance(value, tuple) and len(value) == 2:
        return Episode(Path(value[0]), Path(value[1]) if value[1] is not None else None)
    solution = getattr(value, "solution", None) or getattr(value, "solution_path", None)
    if solution is None:
        raise TypeError(f"the solver returned {type(value).__name__}; expected an object with .solution "
                        "(and .trajectory), a (solution, trajectory) pair or a path")
    trajectory = getattr(value, "trajectory", None) or getattr(value, "trajectory_path", None)
    return Episode(Path(solution), Path(trajectory) if trajectory is not None else None)
