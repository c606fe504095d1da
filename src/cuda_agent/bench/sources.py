"""What a bench run evaluates: KernelBench tasks, and solutions found on disk.

Tasks come from a KernelBench checkout (``ROOT/[KernelBench/]levelN/<id>_<name>.py``), named
``L<level>_<id>``. Solutions (``--solutions DIR``) are found in any of three layouts, mixed freely:

* **KernelBench generations** (``scripts/generate_samples.py`` writes them, ``eval_from_generations.py``
  reads them): ``DIR/level_{L}_problem_{P}_sample_{S}_kernel.py``, one ``load_inline`` file each.
* **a bench run directory** (``DIR/bench.json`` or ``DIR/results.sqlite`` present):
  ``DIR/tasks/<task>/sample_<S>/solution/``.
* **workspaces named by task id**: ``DIR/<task>/`` (a workspace with ``model_new.py`` and
  ``kernels/``), ``DIR/<task>.py`` (one file), or ``DIR/<task>/sample_<S>/`` for several samples.

Two solutions for the same (task, sample) are an error that names both paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..tasks import Task, TaskError, iter_kernelbench

KERNELBENCH_KERNEL = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
TASK_ID = re.compile(r"^L(\d+)_(\d+)$")
SAMPLE_DIR = re.compile(r"^sample_(\d+)$")
RUN_MARKERS = ("bench.json", "results.sqlite")


class BenchError(Exception):
    """Bad input to a bench run (missing directory, duplicate task id, bad option). The message
    names the path or option; the run does not start."""


def parse_ids(text: str | None, what: str = "--problems") -> tuple[int, ...] | None:
    """``"1,2,5-9"`` -> (1, 2, 5, 6, 7, 8, 9); None or "" or "all" -> None (everything)."""
    if text is None or text.strip() in ("", "all"):
        return None
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise BenchError(f"{what} {text!r}: expected numbers and ranges like 1,2,5-9")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise BenchError(f"{what} {text!r}: range {part} runs backwards")
        ids.extend(range(lo, hi + 1))
    return tuple(dict.fromkeys(ids))


def select_tasks(root: str | Path, levels: Iterable[int], problems: Iterable[int] | None) -> tuple[list[Task], list[str]]:
    """The tasks of a KernelBench tree, and notices (requested problems that are not there).

    Raises BenchError for a missing tree or level directory, an unreadable task file, and two
    files with the same problem id in one level."""
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"--kernelbench {root}: no such directory")
    levels = tuple(levels)
    try:
        tasks = list(iter_kernelbench(root, levels, problems))
    except TaskError as e:
        raise BenchError(str(e)) from None
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.name in seen:
            raise BenchError(f"duplicate task id {t.name}: {seen[t.name].path} and {t.path} have the same "
                             "level and problem number")
        seen[t.name] = t
    notices = []
    if problems is not None:
        for level in levels:
            found = {t.meta["problem_id"] for t in tasks if t.meta["level"] == level}
            missing = [p for p in problems if p not in found]
            if missing:
                notices.append(f"level {level}: no problem file for {_ranges(missing)}")
    return tasks, notices


@dataclass
class Found:
    """Solutions found under a directory, keyed by (task, sample)."""

    solutions: dict[tuple[str, int], Path] = field(default_factory=dict)
    layouts: dict[tuple[str, int], str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)

    def add(self, task: str, sample: int, path: Path, layout: str) -> None:
        key = (task, sample)
        if key in self.solutions:
            raise BenchError(f"duplicate solution for task {task} sample {sample}: {self.solutions[key]} "
                             f"and {path}; keep one")
        self.solutions[key] = path
        self.layouts[key] = layout

    def for_task(self, task: str) -> list[tuple[int, Path]]:
        return sorted((s, p) for (t, s), p in self.solutions.items() if t == task)


def find_solutions(directory: str | Path) -> Found:
    directory = Path(directory)
    if not directory.is_dir():
        raise BenchError(f"--solutions {directory}: no such directory")
    found = Found()
    if any((directory / m).exists() for m in RUN_MARKERS):
        _from_run_dir(directory, found)
    for entry in sorted(directory.iterdir()):
        if entry.name in RUN_MARKERS or entry.name in ("tasks", "report", "bench.log", "results.jsonl"):
            continue
        m = KERNELBENCH_KERNEL.match(entry.name)
        if m:
            level, problem, sample = (int(g) for g in m.groups())
            found.add(f"L{level}_{problem}", sample, entry, "kernelbench")
            continue
        stem = entry.name.removesuffix(".py")
        if TASK_ID.match(stem):
            if entry.is_dir() and not (entry / "model_new.py").exists() and _sample_dirs(entry):
                for sample, sdir in _sample_dirs(entry):
                    found.add(stem, sample, resolve_solution_dir(sdir), "workspaces")
            else:
                found.add(stem, 0, entry, "workspaces")
            continue
        found.ignored.append(entry.name)
    return found


def _from_run_dir(directory: Path, found: Found) -> None:
    tasks_dir = directory / "tasks"
    if not tasks_dir.is_dir():
        return
    for task_dir in sorted(p for p in tasks_dir.iterdir() if p.is_dir()):
        for sample, sdir in _sample_dirs(task_dir):
            if (sdir / "solution").exists():
                found.add(task_dir.name, sample, resolve_solution_dir(sdir / "solution"), "run")


def _sample_dirs(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.iterdir():
        m = SAMPLE_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def resolve_solution_dir(directory: Path) -> Path:
    """A directory holding a solution: the workspace itself, or the single ``.py`` inside it."""
    if (directory / "model_new.py").exists():
        return directory
    files = sorted(directory.glob("*.py"))
    if len(files) == 1 and not (directory / "kernels").is_dir():
        return files[0]
    return directory


def _ranges(ids: list[int]) -> str:
    ids = sorted(ids)
    parts, start = [], ids[0]
    for a, b in zip(ids, ids[1:] + [None]):
        if b != a + 1:
            parts.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ",".join(parts)
