"""The run: catalog -> composer -> filters -> decontamination -> de-dup -> writer.

:func:`synthesize` is the entry point. Attempts ``0, 1, 2, ...`` are composed and
checked by worker processes (each attempt draws only from ``Random(f"{seed}:{i}")``),
and their results are consumed *in attempt order* by this process, which de-duplicates,
runs the GPU pass when asked, and appends to the run log. So the accepted set depends
on the seed alone, never on scheduling, and a killed run resumes where its log ends.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import ConfigError, SynthConfig
from .writer import RunLog, write_rows

_WORKER: dict[str, Any] = {}


@dataclass
class Summary:
    """What a run did; :meth:`report` is the human-readable version."""

    out: Path
    accepted: int
    attempts: int
    resumed_from: int
    elapsed_s: float
    rejected: Counter = field(default_factory=Counter)
    op_mix: Counter = field(default_factory=Counter)
    op_counts: Counter = field(default_factory=Counter)
    catalog_ops: int = 0
    catalog_distinct: int = 0
    decontam_removed: int = 0

    @property
    def distinct_ops(self) -> int:
        return len(self.op_counts)

    def report(self) -> str:
        total = max(1, sum(self.op_mix.values()))
        mix = ", ".join(f"{k} ops {100 * v / total:.1f}%" for k, v in sorted(self.op_mix.items()))
        common = ", ".join(f"{k} {v}" for k, v in self.op_counts.most_common(5))
        rare = ", ".join(f"{k} {v}" for k, v in sorted(self.op_counts.items(), key=lambda kv: (kv[1], kv[0]))[:5])
        lines = [
            f"wrote {self.accepted} tasks to {self.out} "
            f"({self.attempts} attempts, {self.elapsed_s:.1f} s this run"
            + (f", resumed at attempt {self.resumed_from}" if self.resumed_from else "") + ")",
            f"catalog: {self.catalog_ops} op variants, {self.catalog_distinct} distinct operators",
            f"op-count mix: {mix}",
            f"distinct ops used: {self.distinct_ops}; most frequent: {common}; least: {rare}",
        ]
        if self.rejected:
            lines.append("rejected by: " + ", ".join(f"{k} {v}" for k, v in self.rejected.most_common()))
        return "\n".join(lines)


# -- worker side ---------------------------------------------------------------------


def _init_worker(catalog, kb, cfg: SynthConfig, threads: int = 1) -> None:
    import torch

    from .composer import Composer

    torch.set_num_threads(threads)
    _WORKER.update(composer=Composer(catalog), kb=kb, cfg=cfg, llm=None)
    if cfg.llm_url and cfg.llm_share > 0:
        from .llm import LLMComposer

        _WORKER["llm"] = LLMComposer(cfg.llm_url, cfg.llm_model, catalog)


def run_attempt(i: int) -> dict[str, Any]:
    """Compose and check attempt ``i``; returns its log record (accepted or rejected)."""
    from . import decontam
    from .filters import PENDING, accepted, check_cpu, estimate_cost, fail, first_failure

    cfg: SynthConfig = _WORKER["cfg"]
    rng = random.Random(f"{cfg.seed}:{i}")
    n_ops = rng.choices(list(cfg.op_mix), list(cfg.op_mix.values()))[0]
    origin = "composer"
    draft = None
    if _WORKER.get("llm") is not None and rng.random() < cfg.llm_share:
        origin = "llm"
        draft = _WORKER["llm"].compose(rng, n_ops)
    else:
        draft = _WORKER["composer"].compose(rng, n_ops)
    base = {"attempt": i, "n_ops": n_ops, "origin": origin}
    if draft is None:
        return {**base, "status": "rejected", "reason": f"composer: no chain of {n_ops} ops fits"}
    name = f"synth_s{cfg.seed}_{i:06d}"
    check = check_cpu(draft.code, name=name)
    results = dict(check.results)
    results["runtime"] = PENDING
    results["compile"] = PENDING
    kb = _WORKER["kb"]
    try:
        results["decontam"] = kb.check(draft.code) if kb is not None else "pending: no --kernelbench given"
        key = decontam.structure_key(draft.code)
    except SyntaxError as e:
        results["decontam"], key = fail(f"syntax error: {e.msg}"), ""
    results["dedup"] = PENDING  # decided in order, by the parent
    record = {**base, "name": name, "seed": cfg.seed, "ops": draft.ops,
              "n_ops": len(draft.ops), "data_source": f"torch#{len(draft.ops)}",
              "filters": results, "structure_key": key, "eager_ms": None,
              "graph_breaks": check.extras.get("graph_breaks")}
    if not accepted(results):
        return {**record, "status": "rejected", "reason": first_failure(results)}
    try:
        from cuda_agent.tasks import Task

        task = Task(name, draft.code)
        module = task.load_module()
        cost = estimate_cost(module)
        sys.modules.pop(module.__name__, None)
    except Exception:  # noqa: BLE001 - an estimate, not a filter
        cost = {"flops": None, "bytes": None, "flops_per_byte": None}
    shapes = {"inputs": [list(s) for s in draft.input_shapes], "output": list(draft.output_shape),
              "constants": draft.constants}
    return {**record, **cost, "status": "accepted", "code": draft.code, "shapes": shapes}


# -- parent side ---------------------------------------------------------------------


class _Progress:
    """tqdm when importable, else a line on stderr every few seconds."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.total, self.n, self.enabled = total, initial, enabled
        self.bar = None
        self.t0 = self.last = time.monotonic()
        self.attempts = 0
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=initial, unit="task", desc="synth",
                                dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, accepted: bool) -> None:
        self.attempts += 1
        if accepted:
            self.n += 1
            if self.bar is not None:
                self.bar.update(1)
        if self.enabled and self.bar is None and time.monotonic() - self.last > 5:
            self.last = time.monotonic()
            rate = self.attempts / max(self.last - self.t0, 1e-9)
            print(f"synth: {self.n}/{self.total} accepted, {self.attempts} attempts this run, "
                  f"{rate:.1f} attempts/s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def load_catalog(cfg: SynthConfig):
    from .catalog import build_catalog

    catalog = build_catalog()
    try:
        return catalog.restrict(cfg.ops, cfg.exclude_ops)
    except KeyError as e:
        raise ConfigError(f"unknown op name(s): {e.args[0]} "
                          "(`cuda-agent synth catalog` lists the names)") from None


def load_kernelbench(cfg: SynthConfig):
    if cfg.kernelbench is None:
        return None
    from cuda_agent.tasks import TaskError

    from .decontam import KernelBenchIndex

    try:
        return KernelBenchIndex(cfg.kernelbench, cfg.levels, cfg.similarity)
    except (TaskError, OSError) as e:
        raise ConfigError(f"--kernelbench {cfg.kernelbench}: {e}") from None


def synthesize(cfg: SynthConfig) -> Summary:
    """Run (or resume) a synthesis and write ``cfg.out``. Raises ConfigError on bad input."""
    t0 = time.monotonic()
    if cfg.out.suffix == ".parquet":
        from .writer import _require_pyarrow

        _require_pyarrow()  # before an hour of work, not after
    kb = load_kernelbench(cfg)  # cheap, and the likelier bad input: fail fast
    catalog = load_catalog(cfg)
    gpu = None
    if cfg.device == "cuda":
        from .gpu import GpuChecker

        gpu = GpuChecker(window_ms=cfg.runtime_window_ms)
    log = RunLog(cfg.parts_dir, cfg.fingerprint())
    seen: dict[str, int] = {r["structure_key"]: r["attempt"] for r in log.accepted()}
    n_accepted = len(seen)
    start = log.next_attempt
    summary = Summary(cfg.out, 0, 0, start, 0.0, catalog_ops=len(catalog),
                      catalog_distinct=catalog.distinct())
    progress = _Progress(cfg.count, min(n_accepted, cfg.count), cfg.progress)
    pool = None
    try:
        if n_accepted < cfg.count and start < cfg.attempt_limit:
            attempts = range(start, cfg.attempt_limit)
            if cfg.workers > 1:
                ctx = mp.get_context("spawn")  # fork after torch's thread pools is unsafe
                pool = ctx.Pool(cfg.workers, initializer=_init_worker, initargs=(catalog, kb, cfg))
                results = pool.imap(run_attempt, attempts, chunksize=4)
            else:
                import torch

                threads = torch.get_num_threads()
                _init_worker(catalog, kb, cfg, threads=1)
                results = map(run_attempt, attempts)
            try:
                for record in results:
                    record = _finish(record, seen, gpu)
                    log.append(record)
                    ok = record["status"] == "accepted"
                    progress.update(ok)
                    if ok:
                        n_accepted += 1
                        if n_accepted >= cfg.count:
                            break
            finally:
                if cfg.workers <= 1:
                    torch.set_num_threads(threads)
    finally:
        progress.close()
        if pool is not None:
            pool.terminate()
            pool.join()
        log.close()
    rows = sorted(log.accepted(), key=lambda r: r["attempt"])[: cfg.count]
    write_rows(rows, cfg.out)
    for r in log.records:
        if r["attempt"] >= start:
            summary.attempts += 1
        if r["status"] == "rejected":
            summary.rejected[(r.get("reason") or "?").split(":")[0]] += 1
            if (r.get("filters") or {}).get("decontam", "").startswith("fail") and \
                    _only_failure(r["filters"], "decontam"):
                summary.decontam_removed += 1
    for r in rows:
        summary.op_mix[r["n_ops"]] += 1
        summary.op_counts.update(r["ops"])
    summary.accepted = len(rows)
    summary.elapsed_s = time.monotonic() - t0
    return summary


def _only_failure(results: dict[str, str], name: str) -> bool:
    from .filters import PASS, PENDING

    return all(v == PASS or v.startswith(PENDING) for k, v in results.items() if k != name)


def _finish(record: dict[str, Any], seen: dict[str, int], gpu) -> dict[str, Any]:
    """Parent-side steps, in attempt order: de-duplication, then the GPU pass."""
    if record["status"] != "accepted":
        return record
    from .filters import PASS, fail, first_failure

    key = record["structure_key"]
    if key in seen:
        record["filters"]["dedup"] = fail(f"same structure as attempt {seen[key]}")
        return {k: v for k, v in record.items() if k not in ("code", "shapes")} | {
            "status": "rejected", "reason": first_failure(record["filters"])}
    record["filters"]["dedup"] = PASS
    if gpu is not None:
        record = gpu.check_record(record)
        if record["status"] != "accepted":
            return record
    seen[key] = record["attempt"]
    return record
