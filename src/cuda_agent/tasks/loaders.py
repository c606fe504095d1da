"""Task sources: a directory of task files, or a KernelBench checkout (levels 1-3)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from .task import Task, TaskError, load_task

_LEVEL_DIR = re.compile(r"level(\d+)$")
_PROBLEM_FILE = re.compile(r"^(\d+)_.*\.py$")


def iter_tasks(directory: str | Path, validate: bool = False) -> Iterator[Task]:
    """Every ``*.py`` task file directly in ``directory``, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TaskError(f"{directory}: not a directory")
    for path in sorted(directory.glob("*.py")):
        yield load_task(path, validate=validate)


def iter_kernelbench(root: str | Path, levels: Iterable[int] = (1, 2, 3),
                     problems: Iterable[int] | None = None) -> Iterator[Task]:
    """Tasks of a KernelBench checkout: ``ROOT/[KernelBench/]levelN/<id>_<name>.py``.

    Task names are ``L<level>_<id>`` (e.g. ``L1_19``), metadata carries level, id and title.
    """
    root = Path(root)
    base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    if not base.is_dir():
        raise TaskError(f"{root}: not a KernelBench directory")
    wanted = set(problems) if problems is not None else None
    for level in levels:
        level_dir = base / f"level{level}"
        if not level_dir.is_dir():
            raise TaskError(f"{level_dir}: missing (expected KernelBench level{level}/)")
        for path in sorted(level_dir.glob("*.py"), key=_problem_id):
            m = _PROBLEM_FILE.match(path.name)
            if not m:
                continue
            pid = int(m.group(1))
            if wanted is not None and pid not in wanted:
                continue
            task = load_task(path, name=f"L{level}_{pid}", validate=False)
            task.meta.update(level=level, problem_id=pid, title=path.stem)
            yield task


def _problem_id(path: Path) -> int:
    m = _PROBLEM_FILE.match(path.name)
    return int(m.group(1)) if m else 1 << 30
