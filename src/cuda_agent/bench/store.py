"""A run directory and its results database. The layout, as written here::

    RUN_DIR/
      bench.json            the run: format version, mode, task source, levels, precision, rule set, GPUs,
                            torch and cuda-agent versions, and every invocation (argv, start time)
      results.sqlite        table ``results``: one row per (task, sample), committed the moment
                            its verdict is known (the resume point); table ``meta``
      results.jsonl         the same rows, one JSON object per line (rewritten from the database
                            at the start and end of every invocation, appended in between)
      bench.log             one line per finished attempt, and the run's notices
      tasks/<task>/sample_<S>/
        solution/           the evaluated solution, copied: a workspace (model_new.py, kernels/)
                            or one .py file
        verdict.json        the sandbox's Verdict (docs/sandbox.md), or the bench's failure record
        verdict.first.json  the first Verdict, when it was a harness_error and the attempt was
                            evaluated once more (the final one is flagged harness_retried)
        eval.log            verdict, reasons, flags, the sandbox's log, a traceback if the bench
                            itself failed
        agent/              --agent: the agent's working directory
        trajectory.jsonl    --agent: the episode's trajectory, copied
      report/               written by ``cuda-agent report``

A row's ``status`` says who produced it: ``evaluated`` (a sandbox Verdict), ``error`` (the bench
recorded a failure: the solution could not be read, the evaluation raised or its process died,
the per-attempt time limit ran out; ``verdict_json`` holds a failed Verdict whose log is the
traceback) or ``no_solution`` (nothing to evaluate for that task; counts as failed).
A task that needed a GPU on a host without one gets no row at all.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
DB_NAME = "results.sqlite"
JSONL_NAME = "results.jsonl"
CONFIG_NAME = "bench.json"
LOG_NAME = "bench.log"
TASKS_DIR = "tasks"

EVALUATED = "evaluated"
ERROR = "error"
NO_SOLUTION = "no_solution"
STATUSES = (EVALUATED, ERROR, NO_SOLUTION)

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    task TEXT NOT NULL,
    sample INTEGER NOT NULL,
    level INTEGER,
    problem_id INTEGER,
    title TEXT,
    status TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reward REAL,
    speedup_vs_eager REAL,
    speedup_vs_compile REAL,
    ms REAL,
    eager_ms REAL,
    compile_ms REAL,
    gpu TEXT,
    torch_version TEXT,
    precision TEXT,
    flags TEXT,
    source TEXT,
    solution TEXT,
    lane TEXT,
    started REAL,
    finished REAL,
    wall_s REAL,
    verdict_json TEXT NOT NULL,
    PRIMARY KEY (task, sample)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

COLUMNS = ("task", "sample", "level", "problem_id", "title", "status", "verdict", "reward", "speedup_vs_eager",
           "speedup_vs_compile", "ms", "eager_ms", "compile_ms", "gpu", "torch_version", "precision", "flags",
           "source", "solution", "lane", "started", "finished", "wall_s", "verdict_json")


@dataclass
class Result:
    """One row: a (task, sample) and what became of it. ``verdict`` is the Verdict's JSON form."""

    task: str
    sample: int
    status: str
    verdict: dict[str, Any]
    level: int | None = None
    problem_id: int | None = None
    title: str | None = None
    source: str | None = None
    """Where the solution came from (a path, or ``agent``)."""
    solution: str | None = None
    """The copy that was evaluated, relative to the run directory."""
    lane: str | None = None
    """Which evaluation lane ran it (``gpu0``, ``cpu``, ``ray``)."""
    started: float | None = None
    finished: float | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.task, self.sample

    @property
    def wall_s(self) -> float | None:
        if self.started is None or self.finished is None:
            return None
        return round(self.finished - self.started, 3)

    def row(self) -> tuple:
        v = self.verdict
        precision = (v.get("precision") or {}).get("mode")
        return (self.task, self.sample, self.level, self.problem_id, self.title, self.status,
                v.get("verdict", "runtime_error"), v.get("reward"), v.get("speedup_vs_eager"),
                v.get("speedup_vs_compile"), v.get("ms"), v.get("eager_ms"), v.get("compile_ms"), v.get("gpu"),
                v.get("torch_version"), precision, ",".join(v.get("flags") or []), self.source, self.solution,
                self.lane, self.started, self.finished, self.wall_s, json.dumps(v))

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "task": self.task, "sample": self.sample, "level": self.level,
                "problem_id": self.problem_id, "title": self.title, "status": self.status, "source": self.source,
                "solution": self.solution, "lane": self.lane, "started": self.started, "finished": self.finished,
                "wall_s": self.wall_s, "verdict": self.verdict}

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Result:
        return cls(task=row["task"], sample=row["sample"], status=row["status"],
                   verdict=json.loads(row["verdict_json"]), level=row["level"], problem_id=row["problem_id"],
                   title=row["title"], source=row["source"], solution=row["solution"], lane=row["lane"],
                   started=row["started"], finished=row["finished"])


class ResultsDB:
    """The run's SQLite database. One writer (the bench's main thread); readers any time."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a committed row survives a power cut, not just a kill
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def add(self, result: Result) -> None:
        """Insert and commit one row. A second row for the same (task, sample) is a bug and raises."""
        with self.db:
            self.db.execute(f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                            result.row())

    def remove(self, keys: list[tuple[str, int]]) -> None:
        with self.db:
            self.db.executemany("DELETE FROM results WHERE task=? AND sample=?", keys)

    def statuses(self) -> dict[tuple[str, int], str]:
        return {(r["task"], r["sample"]): r["status"] for r in self.db.execute("SELECT task, sample, status FROM results")}

    def results(self) -> list[Result]:
        rows = self.db.execute("SELECT * FROM results ORDER BY level IS NULL, level, problem_id, task, sample")
        return [Result.from_row(r) for r in rows]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def set_meta(self, key: str, value: Any) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self) -> dict[str, Any]:
        return {r["key"]: json.loads(r["value"]) for r in self.db.execute("SELECT key, value FROM meta")}

    def export_jsonl(self, path: str | Path) -> int:
        """Write every row to ``path`` (atomically). Returns the number of rows."""
        results = self.results()
        tmp = Path(path).with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r.to_dict()) + "\n" for r in results)
        os.replace(tmp, path)
        return len(results)


class RunDir:
    """Paths of a run directory (see the module docstring for the layout)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def jsonl_path(self) -> Path:
        return self.root / JSONL_NAME

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def log_path(self) -> Path:
        return self.root / LOG_NAME

    def sample_dir(self, task: str, sample: int) -> Path:
        return self.root / TASKS_DIR / task / f"sample_{sample}"

    def exists(self) -> bool:
        return self.db_path.is_file()

    def read_config(self) -> dict[str, Any]:
        return json.loads(self.config_path.read_text()) if self.config_path.is_file() else {}

    def write_config(self, config: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.config_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(config, indent=1))
        os.replace(tmp, self.config_path)

    def log(self, line: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(time.strftime("%Y-%m-%d %H:%M:%S ") + line.rstrip() + "\n")

    def append_jsonl(self, result: Result) -> None:
        with open(self.jsonl_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(result.to_dict()) + "\n")


def load_run(root: str | Path) -> tuple[dict[str, Any], list[Result]]:
    """A run's configuration and rows, for reports. Raises FileNotFoundError naming the path."""
    run = RunDir(root)
    if not run.exists():
        raise FileNotFoundError(f"{run.root}: not a bench run directory (no {DB_NAME})")
    db = ResultsDB(run.db_path)
    try:
        return run.read_config(), db.results()
    finally:
        db.close()
