"""A bench run: for every (task, sample), get a solution, evaluate it, commit the row.

    tasks ─┬─ --solutions: find it ─┬─ copy into the run dir ─ static rules + build (CPU threads) ─┬─ GPU lanes ─┐
           └─ --agent: solve it ────┘                                                              └─ CPU lane ──┴─ commit

* **Resumable.** A row is committed (SQLite, synchronous) the moment its verdict is known; a
  restarted run skips every (task, sample) that has a row and redoes the rest, including those
  that were in flight when the run was killed. With ``--agent`` a finished episode is kept
  (``agent.json``), so a kill between the episode and its evaluation does not repeat the episode.
* **Crash-isolated.** Evaluations run in lane processes (:mod:`.lanes`); a candidate that kills
  its worker is a verdict, an exception or a dead lane is a failed row with the traceback.
* **Harness errors are retried once.** An attempt whose verdict is ``harness_error`` (the
  reference crashed, a worker was killed from outside, the harness raised: not the candidate's
  failure) is evaluated once more; the first verdict is kept beside the final one
  (``verdict.first.json``) and the final verdict is flagged ``harness_retried``. Not for
  ``does_not_fit`` (a task too large for the GPU fails the same way every time) nor for
  ``reference_not_repeatable`` (a reference that draws random numbers in forward).
* **Calibration** (``--calibrate``): every task's own Model is the candidate (``eval --calibrate``),
  so that reports show how far the harness's figures sit from 1.00x, and where an evaluation's
  time goes.
* **Parallel.** Builds run on ``--build-jobs`` threads ahead of the GPU lanes (``sandbox.build``
  caches by content, so the lane finds the library built); GPU lanes take attempts in the order
  their builds finish.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import queue
import shutil
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tasks import Task
from .lanes import ERROR, EVALUATED, NO_GPU, Lane, RayDispatcher, compact_cpus, ray_module, split_cpus
from .policy import Episode, Solver, load_solver
from .sources import BenchError, find_solutions, select_tasks
from .store import FORMAT_VERSION, NO_SOLUTION, Result, ResultsDB, RunDir

LEGACY_CONFIG = {"rules": "cuda-agent"}
"""What a bench.json written before a key existed meant by its absence (runs before --rules: cuda-agent)."""

GPU, CPU = "gpu", "cpu"
MAX_COPY_BYTES = 20 << 20
COPY_IGNORE = ("__pycache__", ".git", "build")
COPY_IGNORE_SUFFIXES = (".o", ".so", ".pyc", ".ncu-rep", ".nsys-rep", ".qdrep", ".sqlite")


@dataclass
class BenchConfig:
    """One bench run; every field is a flag of ``cuda-agent bench``."""

    kernelbench: Path
    out: Path
    levels: tuple[int, ...] = (1, 2, 3)
    problems: tuple[int, ...] | None = None
    """Problem ids to keep in every level; None keeps all."""
    solutions: Path | None = None
    """Evaluate the solutions found here (see :mod:`.sources` for the layouts)."""
    agent: str | None = None
    """Solve each task with this solver (``MODULE:FUNCTION``, see :mod:`.policy`)."""
    agent_argv: list[str] = field(default_factory=list)
    samples: int = 1
    """--agent: episodes per task."""
    gpus: str = "all"
    """``all`` or GPU indexes ``0,1``: one evaluation lane per GPU."""
    per_gpu: int = 1
    """Lanes per GPU. 1 serializes each GPU's evaluations; the sandbox's lock keeps timing
    exclusive either way, so 2 overlaps one attempt's setup with another's timing."""
    build_jobs: int = field(default_factory=lambda: max(1, (os.cpu_count() or 2) // 2))
    """Threads that build ahead of the GPU lanes (each build runs its compilers in parallel too)."""
    agent_jobs: int = 4
    """--agent: episodes in flight at once."""
    task_timeout_s: float = 3600.0
    """A lane that takes longer than this over one attempt is killed; the attempt is a failure."""
    ray_address: str | None = None
    progress: bool = True
    sandbox: Any = None
    """The SandboxConfig every evaluation uses (precision, trials, cache)."""
    argv: list[str] = field(default_factory=list)
    calibrate: bool = False
    """Evaluate every task's own Model as the candidate (no solutions, no agent)."""
    redo: tuple[str, ...] = ()
    """Tasks (``L1_14``) whose recorded results are dropped and evaluated again, e.g. after a harness fix."""
    split_cpus: bool = True
    """With two or more GPU lanes, give each its own share of the physical cores (:func:`.lanes.split_cpus`)."""

    @property
    def mode(self) -> str:
        return "calibrate" if self.calibrate else "agent" if self.agent else "solutions"


@dataclass
class Item:
    """One attempt on its way through the pipeline."""

    task: Task
    sample: int
    source: Path | None = None
    solution: Path | None = None
    started: float | None = None
    requeued: bool = False
    trajectory: Path | None = None
    first_reply: dict[str, Any] | None = None
    """The reply of the first evaluation, when a harness_error made bench evaluate it again."""

    @property
    def key(self) -> tuple[str, int]:
        return self.task.name, self.sample

    @property
    def label(self) -> str:
        return f"{self.task.name} sample {self.sample}"


@dataclass
class RunOutcome:
    total: int = 0
    """Attempts in the selection."""
    done_before: int = 0
    """Attempts that already had a row when this invocation started (skipped)."""
    recorded: int = 0
    """Rows committed by this invocation."""
    no_gpu: list[str] = field(default_factory=list)
    """Attempts not evaluated because this host has no GPU (no row written)."""
    no_gpu_reason: str | None = None
    interrupted: bool = False
    notices: list[str] = field(default_factory=list)


class Bench:
    def __init__(self, config: BenchConfig):
        if config.calibrate and config.sandbox is not None and not config.sandbox.calibrate:
            config = dataclasses.replace(config, sandbox=dataclasses.replace(config.sandbox, calibrate=True))
        self.cfg = config
        self.run_dir = RunDir(Path(config.out).resolve())
        self.db: ResultsDB | None = None
        self.solver: Solver | None = None
        self._build_locks: dict[str, threading.Lock] = {}  # identical sources build once
        self._build_locks_guard = threading.Lock()

    # ------------------------------------------------------------------ plan
    def plan(self) -> tuple[list[Item], list[str]]:
        """Every attempt of the selection, and notices. Raises BenchError on bad input."""
        cfg = self.cfg
        tasks, notices = select_tasks(cfg.kernelbench, cfg.levels, cfg.problems)
        if not tasks:
            raise BenchError(f"--kernelbench {cfg.kernelbench}: no task selected (levels "
                             f"{','.join(map(str, cfg.levels))}, problems {cfg.problems or 'all'})")
        items: list[Item] = []
        if cfg.calibrate:
            return [Item(t, 0) for t in tasks], notices
        if cfg.agent:
            self.solver = load_solver(cfg.agent, cfg.agent_argv)
            items = [Item(t, s) for t in tasks for s in range(cfg.samples)]
            return items, notices
        found = find_solutions(cfg.solutions)
        names = {t.name for t in tasks}
        for t in tasks:
            samples = found.for_task(t.name)
            items.extend(Item(t, s, source=p) for s, p in samples)
            if not samples:
                items.append(Item(t, 0))  # recorded as no_solution
        extra = sorted({k[0] for k in found.solutions} - names)
        if extra:
            notices.append(f"{len(extra)} solution(s) for tasks outside the selection left out "
                           f"(e.g. {', '.join(extra[:3])})")
        if found.ignored:
            notices.append(f"{len(found.ignored)} entries in {cfg.solutions} match no solution layout and were "
                           f"ignored (e.g. {', '.join(found.ignored[:3])})")
        if not found.solutions:
            notices.append(f"no solutions found in {cfg.solutions}: every task is recorded as no_solution")
        return items, notices

    # ------------------------------------------------------------------ run
    def run(self) -> RunOutcome:
        items, notices = self.plan()
        unknown = sorted(set(self.cfg.redo) - {i.key[0] for i in items})
        if unknown:  # bad input: said before the run directory is touched
            raise ValueError(f"--redo names tasks this run does not select: {', '.join(unknown)} "
                             f"(tasks are named like L1_14)")
        if self.cfg.ray_address:
            ray_module()  # a missing Ray is bad input: say so before touching the run directory
        outcome = RunOutcome(total=len(items), notices=notices)
        self._open()
        db, run = self.db, self.run_dir
        try:
            statuses = db.statuses()
            stale = [i.key for i in items if statuses.get(i.key) == NO_SOLUTION and i.source is not None]
            stale += [i.key for i in items if i.key[0] in self.cfg.redo and i.key in statuses and i.key not in stale]
            if stale:  # a solution appeared for a task recorded without one, or the task is to be redone
                db.remove(stale)
                for k in stale:
                    statuses.pop(k)
                    (run.sample_dir(*k) / "verdict.first.json").unlink(missing_ok=True)  # of the dropped result
            todo = [i for i in items if i.key not in statuses]
            outcome.done_before = len(items) - len(todo)
            db.export_jsonl(run.jsonl_path)
            run.log(f"start: {len(items)} attempts, {outcome.done_before} already recorded, {len(todo)} to do "
                    f"({' '.join(self.cfg.argv) or self.cfg.mode})")
            for n in notices:
                run.log("notice: " + n)
            if todo:
                self._pipeline(todo, outcome)
            db.export_jsonl(run.jsonl_path)
            run.log(f"end: {outcome.recorded} recorded, {len(outcome.no_gpu)} not evaluated for lack of a GPU"
                    + (", interrupted" if outcome.interrupted else ""))
        finally:
            db.close()
        return outcome

    def _open(self) -> None:
        cfg, run = self.cfg, self.run_dir
        existing = run.read_config()
        want = {"mode": cfg.mode, "precision": cfg.sandbox.precision, "rules": cfg.sandbox.rules,
                "kernelbench": str(Path(cfg.kernelbench).resolve())}
        for key, value in want.items():
            held = existing.get(key, LEGACY_CONFIG.get(key)) if existing else value
            if held != value:
                raise BenchError(f"--out {run.root} holds a run with {key} {held!r}; this command asks "
                                 f"for {value!r}: give another --out directory")
        import torch

        from .. import __version__

        config = existing or {"format_version": FORMAT_VERSION, "created": _now(), **want,
                              "solutions": str(Path(cfg.solutions).resolve()) if cfg.solutions else None,
                              "agent": cfg.agent, "agent_argv": cfg.agent_argv, "torch": torch.__version__,
                              "cuda_agent": __version__}
        config["levels"] = sorted(set(config.get("levels", [])) | set(cfg.levels))
        config.setdefault("invocations", []).append(
            {"argv": cfg.argv, "started": _now(), "host": socket.gethostname(), "gpus": self._gpu_names(),
             "levels": list(cfg.levels), "problems": list(cfg.problems) if cfg.problems else None,
             "lane_cpus": [compact_cpus(c) for c in self.lane_cpus or []] or None})
        run.write_config(config)
        self.db = ResultsDB(run.db_path)
        self.db.set_meta("format_version", FORMAT_VERSION)

    @functools.cached_property
    def lane_cpus(self) -> list[frozenset[int]] | None:
        """Each GPU lane's CPUs, in lane order (None: they share every CPU); worked out once per run."""
        if not self.cfg.split_cpus or self.cfg.ray_address:
            return None
        return split_cpus(len(self._selected_gpus()) * self.cfg.per_gpu)

    def _gpu_names(self) -> list[str]:
        return [g.name for g in self._selected_gpus()]

    def _selected_gpus(self):
        from ..sandbox.gpu import list_gpus

        gpus = list(list_gpus())
        spec = self.cfg.gpus.strip()
        if spec == "all":
            return gpus
        chosen = []
        for tok in spec.split(","):
            if not tok.strip().isdigit():
                raise BenchError(f"--gpus {spec!r}: expected 'all' or indexes like 0,1")
            i = int(tok)
            if i >= len(gpus):
                raise BenchError(f"--gpus {spec}: GPU {i} is not visible here ({len(gpus)} GPU(s) listed by nvidia-smi)")
            chosen.append(gpus[i])
        return chosen

    # ------------------------------------------------------------------ pipeline
    def _pipeline(self, todo: list[Item], outcome: RunOutcome) -> None:
        cfg = self.cfg
        gpus = self._selected_gpus()
        self.prebuild_config = (dataclasses.replace(cfg.sandbox, arch=gpus[0].arch)
                                if gpus and cfg.sandbox.arch is None else cfg.sandbox)
        results: queue.Queue = queue.Queue()
        prep_q: queue.Queue = queue.Queue()
        gpu_q: queue.Queue = queue.Queue()
        cpu_q: queue.Queue = queue.Queue()
        lanes: list[Lane] = []
        ray = None
        threads = []
        if cfg.ray_address:
            ray = RayDispatcher(cfg.ray_address)
            self.has_gpu_lanes = True
            threads.append(threading.Thread(target=self._ray_loop, args=(ray, gpu_q, cpu_q, results), daemon=True))
        else:
            cpus = self.lane_cpus
            for g in gpus:
                for k in range(cfg.per_gpu):
                    lanes.append(Lane(f"gpu{g.index}" + (f".{k}" if cfg.per_gpu > 1 else ""),
                                      {"CUDA_VISIBLE_DEVICES": g.uuid}, cfg.task_timeout_s,
                                      cpus[len(lanes)] if cpus else None))
            self.has_gpu_lanes = bool(lanes)
            cpu_lane = Lane(CPU, {"CUDA_VISIBLE_DEVICES": ""}, cfg.task_timeout_s)
            lanes.append(cpu_lane)
            for lane in lanes:
                q = cpu_q if lane is cpu_lane else gpu_q
                threads.append(threading.Thread(target=self._lane_loop, args=(lane, q, results), daemon=True))
        jobs = cfg.agent_jobs if cfg.agent else cfg.build_jobs
        for _ in range(max(1, jobs)):
            threads.append(threading.Thread(target=self._prep_loop, args=(prep_q, gpu_q, cpu_q, results), daemon=True))
        for item in todo:
            prep_q.put(item)
        for t in threads:
            t.start()
        progress = _Progress(len(todo), self.db, cfg.progress)
        remaining = len(todo)
        try:
            while remaining:
                try:
                    item, reply, lane_name = results.get(timeout=0.5)
                except queue.Empty:
                    continue
                if reply["status"] == NO_GPU:
                    if self.has_gpu_lanes and lane_name == CPU and not item.requeued:
                        item.requeued = True  # the build failed ahead of time, then passed: needs a GPU after all
                        gpu_q.put(item)
                        continue
                    outcome.no_gpu.append(item.label)
                    if outcome.no_gpu_reason is None:
                        outcome.no_gpu_reason = reply["message"]
                        progress.write(f"no GPU: {reply['message']}")
                    self.run_dir.log(f"{item.label}: not evaluated: no GPU on this host")
                    remaining -= 1
                    progress.update(None)
                    continue
                if item.first_reply is None and needs_retry(reply):
                    item.first_reply = reply  # not the candidate's failure: once more, the first kept
                    self.run_dir.log(f"{item.label}: harness_error ({_first_reason(reply)}): evaluated again")
                    (cpu_q if lane_name == CPU else gpu_q).put(item)
                    continue
                result = self._record(item, reply, lane_name)
                outcome.recorded += 1
                remaining -= 1
                progress.update(result)
        except KeyboardInterrupt:
            outcome.interrupted = True
            progress.write("interrupted: committed results are kept; run the same command again to resume")
        finally:
            progress.close()
            for _ in range(max(1, jobs)):
                prep_q.put(None)
            for _ in lanes or [None]:
                gpu_q.put(None)
                cpu_q.put(None)
            for lane in lanes:
                if outcome.interrupted:
                    lane.kill()
                else:
                    lane.close()
            if ray is not None:
                ray.close()

    def _prep_loop(self, prep_q: queue.Queue, gpu_q: queue.Queue, cpu_q: queue.Queue, results: queue.Queue) -> None:
        while (item := prep_q.get()) is not None:
            sdir = self.run_dir.sample_dir(*item.key)
            if self.cfg.calibrate:  # the task's own Model: nothing to copy or build
                (gpu_q if self.has_gpu_lanes or self.cfg.ray_address else cpu_q).put(item)
                continue
            if item.source is None and self.solver is None:
                results.put((item, {"status": NO_SOLUTION}, None))
                continue
            try:
                if self.solver is not None:
                    self._solve(item, sdir)
                else:
                    item.solution = copy_solution(item.source, sdir / "solution")
            except Exception:  # noqa: BLE001 - an unreadable solution or a crashed episode costs this attempt
                results.put((item, {"status": ERROR, "error": traceback.format_exc(),
                                    "stage": "agent" if self.solver is not None else "copy"}, None))
                continue
            route = GPU if self.cfg.ray_address else self._route(item.solution)
            (gpu_q if route == GPU and self.has_gpu_lanes else cpu_q).put(item)

    def _route(self, path: Path) -> str:
        """CPU when the sandbox will answer without a GPU (static rejection, failed build);
        else build now, so the GPU lane finds the library in the cache."""
        from ..sandbox import build, check_solution, load_solution, rejecting
        from ..sandbox.static import BROKEN, NO_MODEL_NEW

        try:
            solution = load_solution(path)
            findings = check_solution(solution, rules=self.cfg.sandbox.rules)
            if any(f.rule in {r.id for r in BROKEN} for f in findings):
                return CPU
            if rejecting(findings) and (self.cfg.sandbox.static_rules
                                        or any(f.rule == NO_MODEL_NEW.id for f in findings)):
                return CPU
            with self._build_locks_guard:
                lock = self._build_locks.setdefault(solution.fingerprint(), threading.Lock())
            with lock:  # a second copy of the same sources waits, then finds the build cached
                return GPU if build(solution, self.prebuild_config).ok else CPU
        except Exception:  # noqa: BLE001 - the lane repeats the step and records what went wrong
            return CPU

    def _solve(self, item: Item, sdir: Path) -> None:
        marker = sdir / "agent.json"
        if marker.is_file():  # the episode finished before a kill; only its evaluation is redone
            info = json.loads(marker.read_text())
            if Path(info["solution"]).exists():
                item.source, item.solution = Path(info["source"]), Path(info["solution"])
                return
        workdir = sdir / "agent"
        if workdir.exists():
            shutil.rmtree(workdir)
        workdir.mkdir(parents=True)
        episode: Episode = self.solver(item.task, workdir)
        item.source = episode.solution
        item.solution = copy_solution(episode.solution, sdir / "solution")
        trajectory = None
        if episode.trajectory is not None and Path(episode.trajectory).is_file():
            trajectory = sdir / "trajectory.jsonl"
            if Path(episode.trajectory).resolve() != trajectory.resolve():
                shutil.copy2(episode.trajectory, trajectory)
        marker.write_text(json.dumps({"source": str(episode.solution), "solution": str(item.solution),
                                      "trajectory": str(trajectory) if trajectory else None, "finished": _now()}))

    def _lane_loop(self, lane: Lane, q: queue.Queue, results: queue.Queue) -> None:
        while (item := q.get()) is not None:
            item.started = time.time()
            reply = lane.evaluate(item.task, item.solution, self.cfg.sandbox)
            results.put((item, reply, lane.name))

    def _ray_loop(self, ray: RayDispatcher, gpu_q: queue.Queue, cpu_q: queue.Queue, results: queue.Queue) -> None:
        closing = 0
        while closing < 2 or ray.pending:
            for q in (gpu_q, cpu_q):
                try:
                    while True:
                        item = q.get_nowait()
                        if item is None:
                            closing += 1
                            break
                        item.started = time.time()
                        ray.submit(item, item.task, item.solution, self.cfg.sandbox)
                except queue.Empty:
                    pass
            for item, reply in ray.next_done(0.5):
                results.put((item, reply, "ray"))
            if not ray.pending:
                time.sleep(0.2)

    # ------------------------------------------------------------------ record
    def _record(self, item: Item, reply: dict[str, Any], lane: str | None) -> Result:
        run = self.run_dir
        sdir = run.sample_dir(*item.key)
        sdir.mkdir(parents=True, exist_ok=True)
        if reply["status"] == EVALUATED:
            status, verdict = EVALUATED, reply["verdict"]
            if item.first_reply is not None:
                verdict.setdefault("flags", []).append("harness_retried")
                first = item.first_reply["verdict"]
                _write_json(sdir / "verdict.first.json", first)
                verdict.setdefault("reasons", []).append(
                    f"evaluated twice: the first evaluation was a harness_error ({_first_reason(item.first_reply)}); "
                    "its verdict is in verdict.first.json")
            if item.solution is not None:
                verdict["solution"] = f"{'workspace' if item.solution.is_dir() else 'file'}:{item.solution}"
        else:
            status = NO_SOLUTION if reply["status"] == NO_SOLUTION else ERROR
            verdict = failure_verdict(item, reply, self.cfg.sandbox.rules)
        meta = item.task.meta
        result = Result(task=item.task.name, sample=item.sample, status=status, verdict=verdict,
                        level=meta.get("level"), problem_id=meta.get("problem_id"), title=meta.get("title"),
                        source="agent" if self.solver is not None else "calibrate" if self.cfg.calibrate
                        else (str(item.source) if item.source else None),
                        solution=str(item.solution.relative_to(run.root)) if item.solution is not None
                        and item.solution.is_relative_to(run.root) else (str(item.solution) if item.solution else None),
                        lane=lane, started=item.started or time.time(), finished=time.time())
        _write_json(sdir / "verdict.json", verdict)
        (sdir / "eval.log").write_text(eval_log(result, reply))
        self.db.add(result)  # the commit point
        run.append_jsonl(result)
        s = verdict.get("speedup_vs_eager")
        run.log(f"{item.label}: {status} {verdict['verdict']}"
                + (f" speedup eager {s:.3f} compile {verdict.get('speedup_vs_compile') or 0:.3f}" if s else "")
                + f" lane {lane} {result.wall_s} s")
        return result


# ----------------------------------------------------------------------------- helpers

def needs_retry(reply: dict[str, Any]) -> bool:
    """A harness_error (not the candidate's failure) is evaluated once more, unless it is a property of the
    task, the same every time: it does not fit on the GPU (``does_not_fit``) or its reference does not repeat
    itself (``reference_not_repeatable``)."""
    v = reply.get("verdict") or {}
    return (reply.get("status") == EVALUATED and v.get("verdict") == "harness_error"
            and not {"does_not_fit", "reference_not_repeatable"} & set(v.get("flags") or []))


def _first_reason(reply: dict[str, Any]) -> str:
    reasons = (reply.get("verdict") or {}).get("reasons") or ["no reason given"]
    return " ".join(str(reasons[0]).split())[:200]


def failure_verdict(item: Item, reply: dict[str, Any], rules: str = "cuda-agent") -> dict[str, Any]:
    """A failed Verdict for an attempt the sandbox could not judge (the defaults mean failed).
    Reports count a missing solution as its own category, ``no_solution`` (metrics.verdict_category)."""
    from ..sandbox import Verdict

    v = Verdict(task=item.task.name, solution=str(item.solution or item.source or ""), rules=rules)
    if reply["status"] == NO_SOLUTION:
        v.fail("compile_error", "no solution for this task")
        v.flag("no_solution")
        return v.to_dict()
    error = reply.get("error", "")
    last = error.strip().splitlines()[-1] if error.strip() else "unknown error"
    if reply.get("timeout"):
        v.fail("timeout", error)
        v.flag("bench_timeout")
    elif reply.get("stage") == "copy":
        v.fail("compile_error", f"the solution could not be read: {last}")
        v.flag("bad_solution")
    elif reply.get("stage") == "agent":
        v.fail("runtime_error", f"the agent failed: {last}")
        v.flag("agent_error")
    else:
        v.fail("runtime_error", f"the evaluation failed: {last}")
        v.flag("bench_error")
    v.log = error[-6000:]
    return v.to_dict()


def eval_log(result: Result, reply: dict[str, Any]) -> str:
    v = result.verdict
    lines = [f"task: {result.task}   sample: {result.sample}   status: {result.status}   lane: {result.lane}",
             f"verdict: {v.get('verdict')}   reward: {v.get('reward')}"]
    if v.get("ms") is not None:
        lines.append(f"ms: {v.get('ms')}   eager_ms: {v.get('eager_ms')}   compile_ms: {v.get('compile_ms')}   "
                     f"speedup vs eager: {v.get('speedup_vs_eager')}   vs compile: {v.get('speedup_vs_compile')}")
    if v.get("flags"):
        lines.append("flags: " + ", ".join(v["flags"]))
    lines += [f"- {r}" for r in v.get("reasons") or []]
    if v.get("log"):
        lines += ["", "log:", v["log"]]
    return "\n".join(lines) + "\n"


def copy_solution(src: Path, dest: Path) -> Path:
    """Copy a solution into ``dest`` (replacing what is there); returns the path to evaluate.

    A workspace is copied whole except build products and files over 20 MB; a file keeps its name."""
    src = Path(src)
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file or directory" + (" (a dangling link)" if src.is_symlink() else ""))
    src = src.resolve()
    if dest.exists() and (src == dest.resolve() or dest.resolve() in src.parents):
        return src  # evaluating a run directory's own copy
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if src.is_file():
        shutil.copy2(src, dest / src.name)
        return dest / src.name
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if any(part in COPY_IGNORE for part in rel.parts) or p.suffix in COPY_IGNORE_SUFFIXES or not p.is_file():
            continue
        if p.stat().st_size > MAX_COPY_BYTES:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest / rel)
    return dest


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class _Progress:
    """tqdm when it is installed and wanted; otherwise silent (bench.log has every line)."""

    def __init__(self, total: int, db: ResultsDB, enabled: bool):
        self.bar = None
        self.correct = sum(1 for r in db.results() if r.verdict.get("verdict") == "correct")
        self.done = db.count()
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc="bench", unit="attempt", file=sys.stderr, dynamic_ncols=True)
                self._postfix()

    def _postfix(self) -> None:
        if self.bar is not None and self.done:
            self.bar.set_postfix_str(f"pass {self.correct}/{self.done} ({100 * self.correct / self.done:.0f}%)")

    def update(self, result: Result | None) -> None:
        if result is not None:
            self.done += 1
            self.correct += result.verdict.get("verdict") == "correct"
        if self.bar is not None:
            self.bar.update(1)
            self._postfix()

    def write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
