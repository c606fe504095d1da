"""Tasks from a dataset file: our ``cuda-agent synth`` output or CUDA-Agent-Ops-6K.

Both are tables with at least ``code`` (a KernelBench-format module), ``ops`` (the op
names, a JSON string or a list) and ``data_source`` (``torch#N``); ours adds metadata
(seed, shapes, filter outcomes, eager_ms, FLOP/byte estimate) that lands in
``Task.meta``. Files are ``.parquet`` (needs pyarrow) or ``.jsonl``.

    for task in iter_dataset("ops6k.parquet"):
        module = validate_task(task)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .task import Task, TaskError, check_task_source, validate_task

META_FIELDS = ("seed", "attempt", "n_ops", "origin", "eager_ms", "flops", "bytes",
               "flops_per_byte", "graph_breaks", "structure_key")
JSON_FIELDS = ("shapes", "filters")


def read_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of a ``.parquet`` or ``.jsonl`` file as dicts. Raises TaskError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such file")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise TaskError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types
            raise TaskError(f"{path}: not a readable parquet file: {e}") from None
        for batch in pf.iter_batches(batch_size=512):
            yield from batch.to_pylist()
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        raise TaskError(f"{path}:{i}: not JSON: {e.msg}") from None
    else:
        raise TaskError(f"{path}: expected a .parquet or .jsonl file")


def parse_ops(value: Any) -> list[str]:
    """The ``ops`` column as published: a JSON string, a list, or an array."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            v = json.loads(value)
        except json.JSONDecodeError:
            return [s.strip().strip("'\"") for s in value.strip("[]").split(",") if s.strip()]
        return [str(x) for x in v] if isinstance(v, list) else [str(v)]
    return [str(x) for x in list(value)]


def iter_dataset(path: str | Path, validate: bool = False, limit: int | None = None) -> Iterator[Task]:
    """One :class:`Task` per row; ``meta`` holds ops, data_source and our metadata.

    With ``validate`` each task is executed and its inputs checked (slow); otherwise
    only parsed. A broken row raises TaskError naming the file and row.
    """
    path = Path(path)
    for i, row in enumerate(read_rows(path)):
        if limit is not None and i >= limit:
            return
        code = row.get("code")
        if not isinstance(code, str) or not code.strip():
            raise TaskError(f"{path}: row {i} has no code")
        meta: dict[str, Any] = {"row": i, "ops": parse_ops(row.get("ops")),
                                "data_source": row.get("data_source")}
        for k in META_FIELDS:
            if row.get(k) is not None:
                meta[k] = row[k]
        for k in JSON_FIELDS:
            v = row.get(k)
            if isinstance(v, str):
                try:
                    v = json.loads(v)
                except json.JSONDecodeError:
                    pass
            if v is not None:
                meta[k] = v
        task = Task(name=row.get("name") or f"{path.stem}_{i}", source=code, meta=meta)
        if validate:
            validate_task(task)
        else:
            check_task_source(code, task.origin)
        yield task
