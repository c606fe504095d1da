"""Rows on disk: the append-only attempts log that makes runs resumable, and the output.

A run keeps ``<out>.parts/``:

* ``config.json``: the run's fingerprint (:meth:`SynthConfig.fingerprint`). A restart
  with different settings is refused rather than mixing two kinds of tasks;
* ``attempts.jsonl``: one JSON line per finished attempt, accepted (the full row) or
  rejected (why), written with one ``write`` and flushed. Attempts are logged in index
  order, so the log is always a prefix ``0..k-1``; a kill can leave at most a partial
  last line, which :class:`RunLog` drops (truncating the file) on the next start.

The output (``.jsonl`` or ``.parquet``) is written from the log at the end, to a
temporary name first, then renamed: it is either absent, old, or complete.

Columns: ``code``, ``ops`` (JSON list of op names, as in Ops-6K), ``data_source``
(``torch#N``, N = number of ops) -- the CUDA-Agent-Ops-6K columns -- then our metadata:
``name``, ``seed``, ``attempt``, ``n_ops``, ``origin``, ``shapes`` (JSON: inputs, output,
constants), ``filters`` (JSON: filter -> outcome), ``eager_ms`` (null until timed on a
GPU), ``compile_ms`` (inductor, GPU), ``flops``, ``bytes``, ``flops_per_byte``, ``graph_breaks``, ``structure_key``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from .config import ConfigError

COLUMNS = ("code", "ops", "data_source", "name", "seed", "attempt", "n_ops", "origin", "shapes",
           "filters", "eager_ms", "compile_ms", "flops", "bytes", "flops_per_byte", "graph_breaks",
           "structure_key")
JSON_COLUMNS = ("ops", "shapes", "filters")


def _require_pyarrow():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ConfigError("writing or reading .parquet needs pyarrow (pip install pyarrow); "
                          "or use a .jsonl path") from None
    return pyarrow


class RunLog:
    """The append-only log of one run (see module docstring)."""

    def __init__(self, parts_dir: Path, fingerprint: dict[str, Any]):
        self.dir = Path(parts_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "config.json"
        if cfg.exists():
            old = json.loads(cfg.read_text())
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            if diff:
                raise ConfigError(
                    f"{self.dir}: an earlier run used different settings ({', '.join(diff)}); "
                    "rerun with the same options to resume, or delete that directory")
        else:
            cfg.write_text(json.dumps(fingerprint, indent=1, sort_keys=True) + "\n")
        self.path = self.dir / "attempts.jsonl"
        self.records: list[dict[str, Any]] = self._load()
        self._fh = open(self.path, "a", encoding="utf-8")

    def _load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1  # drop a partial last line left by a kill
        records, good = [], 0
        for line in data[:end].splitlines(keepends=True):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good += len(line)
        if good != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)
        return records

    @property
    def next_attempt(self) -> int:
        return self.records[-1]["attempt"] + 1 if self.records else 0

    def accepted(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("status") == "accepted"]

    def append(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._fh.flush()
        self.records.append(record)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


def to_row(record: dict[str, Any]) -> dict[str, Any]:
    """An accepted log record -> an output row with exactly :data:`COLUMNS`."""
    row = {k: record.get(k) for k in COLUMNS}
    for k in JSON_COLUMNS:
        if row[k] is not None and not isinstance(row[k], str):
            row[k] = json.dumps(row[k], sort_keys=k != "ops")
    return row


def write_rows(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Write rows to ``.jsonl`` or ``.parquet`` atomically. Returns the row count."""
    path = Path(path)
    rows = [to_row(r) if not isinstance(r.get("filters"), str) else r for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".parquet":
        pa = _require_pyarrow()
        import pyarrow.parquet as pq

        schema = pa.schema([
            ("code", pa.string()), ("ops", pa.string()), ("data_source", pa.string()),
            ("name", pa.string()), ("seed", pa.int64()), ("attempt", pa.int64()),
            ("n_ops", pa.int64()), ("origin", pa.string()), ("shapes", pa.string()),
            ("filters", pa.string()), ("eager_ms", pa.float64()), ("compile_ms", pa.float64()),
            ("flops", pa.float64()),
            ("bytes", pa.float64()), ("flops_per_byte", pa.float64()),
            ("graph_breaks", pa.int64()), ("structure_key", pa.string()),
        ])
        table = pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in rows], schema=schema)
        pq.write_table(table, tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({k: r.get(k) for k in COLUMNS}, separators=(",", ":")) + "\n")
    os.replace(tmp, path)
    return len(rows)


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a ``.jsonl`` or ``.parquet`` file (ours, or Ops-6K's ``code/ops/data_source``)."""
    from cuda_agent.tasks import TaskError
    from cuda_agent.tasks.ops_dataset import read_rows as _read

    try:
        yield from _read(path)
    except TaskError as e:
        raise ConfigError(str(e)) from None
