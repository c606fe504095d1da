"""Eager and torch.compile timings, cached per task x GPU x torch x precision (SQLite), the
copy bandwidth measured on each GPU (roofline.measure_copy_bandwidth), per GPU x torch, and each task's
sizes and FLOPs as read on the meta device, per task x torch.

A second evaluation of the same task reads its baselines back in milliseconds, and
torch.compile is not run again. Exported and imported as JSON (like KernelBench's timing
files) with :func:`export_json` / :func:`import_json`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path

TIMING_VERSION = "3"
"""Bump when the timing method changes: old baselines then stop matching (2: refresh scales in [0.5, 1),
warm-up until clocks settle; 3: other evaluations' compile runs and candidate setups hold the GPU lock, so
a baseline cached before may have been timed beside them)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS baselines (
    task_sha TEXT NOT NULL, gpu TEXT NOT NULL, torch TEXT NOT NULL, precision TEXT NOT NULL,
    timing_version TEXT NOT NULL,
    eager_ms REAL, compile_ms REAL, overhead_ms REAL, compile_error TEXT,
    details TEXT, created REAL,
    PRIMARY KEY (task_sha, gpu, torch, precision, timing_version)
);
CREATE TABLE IF NOT EXISTS bandwidth (
    gpu TEXT NOT NULL, torch TEXT NOT NULL, method_version TEXT NOT NULL,
    gbs REAL NOT NULL, details TEXT, created REAL,
    PRIMARY KEY (gpu, torch, method_version)
);
CREATE TABLE IF NOT EXISTS task_sizes (
    task_sha TEXT NOT NULL, torch TEXT NOT NULL, sizes TEXT NOT NULL, created REAL,
    PRIMARY KEY (task_sha, torch)
);
"""

SIZES_VERSION = "1"
"""Bump when what the reference worker reads on the meta device changes (memory.Footprint, roofline.Work):
sizes cached before then stop matching."""

BANDWIDTH_VERSION = "4"
"""Bump when the bandwidth measurement changes (roofline.measure_copy_bandwidth; 2: the fastest copy,
not the median; 3: the fastest of a byte copy and an FP32 elementwise kernel, over 2 GiB; 4: and of a read-only
FP32 sum)."""


@dataclass
class Baseline:
    task_sha: str
    gpu: str
    torch: str
    precision: str
    eager_ms: float
    compile_ms: float | None
    overhead_ms: float
    """Per-iteration time the evaluator's clock sees beyond eager_ms (harness overhead)."""
    compile_error: str | None = None
    details: dict | None = None
    timing_version: str = TIMING_VERSION


class BaselineStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def get(self, task_sha: str, gpu: str, torch: str, precision: str) -> Baseline | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT eager_ms, compile_ms, overhead_ms, compile_error, details FROM baselines "
                "WHERE task_sha=? AND gpu=? AND torch=? AND precision=? AND timing_version=?",
                (task_sha, gpu, torch, precision, TIMING_VERSION)).fetchone()
        if row is None:
            return None
        return Baseline(task_sha, gpu, torch, precision, row[0], row[1], row[2], row[3],
                        json.loads(row[4]) if row[4] is not None else None)

    def put(self, b: Baseline) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       (b.task_sha, b.gpu, b.torch, b.precision, b.timing_version, b.eager_ms,
                        b.compile_ms, b.overhead_ms, b.compile_error,
                        json.dumps(b.details) if b.details is not None else None, time.time()))

    def get_bandwidth(self, gpu: str, torch: str) -> float | None:
        """The copy bandwidth measured on this GPU model, GB/s (None: not measured yet)."""
        with self._connect() as db:
            row = db.execute("SELECT gbs FROM bandwidth WHERE gpu=? AND torch=? AND method_version=?",
                             (gpu, torch, BANDWIDTH_VERSION)).fetchone()
        return None if row is None else row[0]

    def put_bandwidth(self, gpu: str, torch: str, gbs: float, details: dict | None = None) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO bandwidth VALUES (?,?,?,?,?,?)",
                       (gpu, torch, BANDWIDTH_VERSION, gbs, json.dumps(details) if details else None, time.time()))

    def get_sizes(self, task_sha: str, torch: str) -> dict | None:
        """What the reference worker read of this task on the meta device in an earlier evaluation (its
        footprint and FLOPs, see worker.op_setup), so that it need not run the task there again: the meta
        device's Python kernels import dynamo on their first call, seconds of a one-shot evaluation."""
        with self._connect() as db:
            row = db.execute("SELECT sizes FROM task_sizes WHERE task_sha=? AND torch=?", (task_sha, torch)).fetchone()
        sizes = None if row is None else json.loads(row[0])
        return sizes if isinstance(sizes, dict) and sizes.pop("version", None) == SIZES_VERSION else None

    def put_sizes(self, task_sha: str, torch: str, sizes: dict) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO task_sizes VALUES (?,?,?,?)",
                       (task_sha, torch, json.dumps({**sizes, "version": SIZES_VERSION}), time.time()))

    def claim(self, task_sha: str, gpu: str, torch: str, precision: str):
        """An exclusive claim on computing one baseline, across processes (an open file, flocked).

        The first evaluation of a task that finds no baseline claims it; others of the same task
        wait here, then read what it stored instead of compiling and timing again. The claim
        ends when the returned file is closed (or its process exits).
        """
        key = hashlib.sha1("|".join((task_sha, gpu, torch, precision, TIMING_VERSION)).encode()).hexdigest()[:20]
        lock_dir = self.path.parent / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        f = open(lock_dir / f"baseline-{key}.lock", "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        return f

    def all(self) -> list[Baseline]:
        with self._connect() as db:
            rows = db.execute("SELECT task_sha, gpu, torch, precision, eager_ms, compile_ms, overhead_ms, "
                              "compile_error, details, timing_version FROM baselines").fetchall()
        return [Baseline(*r[:8], json.loads(r[8]) if r[8] is not None else None, r[9]) for r in rows]

    def export_json(self, path: str | Path) -> int:
        rows = [asdict(b) for b in self.all()]
        Path(path).write_text(json.dumps(rows, indent=1))
        return len(rows)

    def import_json(self, path: str | Path) -> int:
        rows = json.loads(Path(path).read_text())
        for r in rows:
            self.put(Baseline(**r))
        return len(rows)
