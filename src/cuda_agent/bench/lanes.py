"""Where evaluations run: a *lane* is one process that calls ``sandbox.evaluate`` for one
attempt at a time.

* one GPU lane per selected GPU (``--per-gpu`` lanes each), its process seeing only that GPU
  (``CUDA_VISIBLE_DEVICES=<uuid>``), so that GPU's evaluations are serialized here (and the
  sandbox's per-GPU lock serializes the timing across processes as well);
* one CPU lane, which sees no GPU, for attempts that need none (a static rejection or a failed
  build: the sandbox returns their verdicts without touching a GPU) and, on a host without a GPU,
  for everything;
* with ``--ray ADDRESS``: Ray remote functions with ``num_gpus=1`` instead of local lanes.

With two or more GPU lanes, each lane runs on its own share of the host's physical cores
(:func:`split_cpus`; ``--shared-cpus`` turns it off), which its workers and their torch.compile
threads inherit. A model whose time is mostly kernel launches (level 3's small-batch CNNs and RNNs) is
timed by one host thread; another lane's compile, which starts a thread per CPU, should not take that
thread's core while the GPU lock keeps its kernels alone on the GPU. The split is cooperative, not a
defense: a candidate's worker may widen its own CPU set (the process guard lets a process set its own).

A lane that dies (a fault in the sandbox itself, the OOM killer) or that overruns the per-attempt
limit costs that attempt, recorded as a failure, and is restarted. A lane whose parent dies
exits, so a killed bench leaves no evaluations running.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ..sandbox.process import compact_cpus, parse_cpu_list

EVALUATED, ERROR, NO_GPU = "evaluated", "error", "no_gpu"


def evaluate_one(task, solution_path: str | None, config) -> dict[str, Any]:
    """The guarded call: ``{"status": "evaluated", "verdict": {...}}``, ``{"status": "no_gpu",
    "message": ...}`` (this host cannot run it: not a result), or ``{"status": "error", "error":
    traceback}`` when loading the solution or ``evaluate`` itself raised. ``solution_path`` None:
    the task's own Model is the candidate (``config.calibrate``)."""
    from ..sandbox import NoGpuError, evaluate, load_solution

    try:
        verdict = evaluate(task, load_solution(solution_path) if solution_path is not None else None, config)
    except NoGpuError as e:
        return {"status": NO_GPU, "message": str(e)}
    except Exception:  # noqa: BLE001 - the bench's boundary: a failure of one attempt, recorded as data
        return {"status": ERROR, "error": traceback.format_exc()}
    return {"status": EVALUATED, "verdict": verdict.to_dict()}


# ----------------------------------------------------------------------------- local lanes

def core_groups(cpus: set[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> list[tuple[int, ...]]:
    """``cpus`` grouped by physical core (hyper-thread siblings together), in CPU order; a CPU whose
    topology cannot be read is a core of its own."""
    groups: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for cpu in sorted(cpus):
        if cpu in seen:
            continue
        try:
            siblings = parse_cpu_list((sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text())
        except (OSError, ValueError):
            siblings = set()
        group = tuple(sorted(((siblings & cpus) - seen) | {cpu}))
        seen.update(group)
        groups.append(group)
    return groups


MIN_CORES_PER_LANE = 2
"""Fewer physical cores than this per lane and the lanes share every CPU instead: a lane also boots its
spare workers (torch imports, compiler preloads) while it times, and on one core of its own they would
compete with its timing thread harder than another lane does on a shared host."""


def split_cpus(lanes: int, cpus: set[int] | None = None, sysfs: Path = Path("/sys/devices/system/cpu")
               ) -> list[frozenset[int]] | None:
    """``lanes`` disjoint sets of whole physical cores covering ``cpus`` (default: those this process may
    run on), as equal as they divide; None (every lane shares every CPU) for one lane, or for fewer than
    MIN_CORES_PER_LANE cores a lane."""
    if cpus is None:
        cpus = set(os.sched_getaffinity(0))
    groups = core_groups(cpus, sysfs)
    if lanes < 2 or len(groups) < lanes * MIN_CORES_PER_LANE:
        return None
    per, extra = divmod(len(groups), lanes)
    out, start = [], 0
    for k in range(lanes):
        end = start + per + (k < extra)
        out.append(frozenset(c for g in groups[start:end] for c in g))
        start = end
    return out


def _lane_main(conn, env: dict[str, str], cpus: frozenset[int] | None = None) -> None:
    if cpus:  # first, before any thread starts: torch's thread pools and inductor's compile workers size to these
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as e:  # every CPU of the share gone offline since the split: the lane runs unpinned
            print(f"bench lane: could not pin to CPUs {compact_cpus(cpus)} ({e}); sharing every CPU", file=sys.stderr)
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the bench, which stops its lanes
    parent = os.getppid()

    def watch_parent() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    from .. import sandbox  # noqa: F401 - import torch and the sandbox now, while the first build runs

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        conn.send(evaluate_one(msg["task"], msg["solution"], msg["config"]))


class Lane:
    """One evaluation process. ``evaluate`` blocks until the attempt is done, failed or timed out."""

    def __init__(self, name: str, env: dict[str, str], timeout_s: float, cpus: frozenset[int] | None = None):
        self.name, self.env, self.timeout_s = name, env, timeout_s
        self.cpus = cpus
        """The CPUs this lane and every process it starts run on (None: all the bench may use)."""
        self.proc = None
        self.conn = None
        self.restarts = 0
        self.stopped = False
        """Set by :meth:`kill` (an interrupted bench): an evaluation in flight then ends without a restart."""
        self._start()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_lane_main, args=(child, self.env, self.cpus), name=f"bench-lane-{self.name}")
        self.proc.start()
        child.close()
        self.conn = parent

    def _restart(self) -> None:
        self.kill(stop=False)
        self.restarts += 1
        self._start()

    def evaluate(self, task, solution: Path, config) -> dict[str, Any]:
        try:
            self.conn.send({"task": task, "solution": str(solution) if solution is not None else None,
                            "config": config})
            if not self.conn.poll(self.timeout_s):
                self._restart()
                return {"status": ERROR, "timeout": True,
                        "error": f"the evaluation did not finish within --task-timeout {self.timeout_s:g} s; "
                                 "its process was killed"}
            return self.conn.recv()
        except (EOFError, OSError):
            if self.stopped:  # the bench was interrupted and killed this lane: no new process, no result
                return {"status": ERROR, "interrupted": True, "error": "the bench was interrupted"}
            self.proc.join(5)
            code = self.proc.exitcode
            self._restart()
            return {"status": ERROR, "error": f"the evaluation process (lane {self.name}) died with exit code {code} "
                                              "while evaluating this attempt"}

    def kill(self, stop: bool = True) -> None:
        """Kill the process; with ``stop`` (from outside the lane's thread) for good, so that an evaluation
        in flight returns instead of starting a new process (which the interpreter's exit would then wait on)."""
        self.stopped = self.stopped or stop
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        if self.conn is not None and not self.conn.closed:
            self.conn.close()

    def close(self) -> None:
        """Ask the lane to stop; it holds no state, so one that is slow to exit is killed."""
        try:
            self.conn.send(None)
            self.proc.join(1)
        except (OSError, ValueError):
            pass
        self.kill()


# ----------------------------------------------------------------------------- Ray

def ray_module():
    """Import Ray or say plainly that it is missing."""
    from .sources import BenchError

    try:
        import ray
    except ImportError:
        raise BenchError("--ray needs Ray, which is not installed here: pip install 'ray[default]' on the driver "
                         "and on every node (the same cuda-agent version too)") from None
    return ray


def pack_solution(path: Path) -> dict[str, bytes]:
    """A solution's files, relative to its root, for shipping to another node."""
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _ray_evaluate(task, files: dict[str, bytes], is_dir: bool, config) -> dict[str, Any]:
    """Runs on a Ray worker that holds one GPU (Ray sets CUDA_VISIBLE_DEVICES)."""
    from ..sandbox import gpu

    gpu.list_gpus.cache_clear()  # a reused Ray worker may have been given another GPU
    if files is None:  # calibration: the task's own Model
        return evaluate_one(task, None, config)
    root = Path(tempfile.mkdtemp(prefix="cuda_agent_bench_"))
    try:
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        target = root if is_dir else root / next(iter(files))
        return evaluate_one(task, str(target), config)
    finally:
        shutil.rmtree(root, ignore_errors=True)


class RayDispatcher:
    """Submits attempts as Ray tasks (``num_gpus=1``) and hands back results as they finish."""

    def __init__(self, address: str):
        self.ray = ray_module()
        self.ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        self.remote = self.ray.remote(num_gpus=1, max_retries=0)(_ray_evaluate)
        self.pending: dict[Any, Any] = {}

    def submit(self, item, task, solution: Path, config) -> None:
        ref = self.remote.remote(task, pack_solution(solution) if solution is not None else None,
                                 solution is not None and solution.is_dir(), config)
        self.pending[ref] = item

    def next_done(self, timeout_s: float) -> list[tuple[Any, dict[str, Any]]]:
        if not self.pending:
            return []
        done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=timeout_s)
        out = []
        for ref in done:
            item = self.pending.pop(ref)
            try:
                out.append((item, self.ray.get(ref)))
            except Exception:  # noqa: BLE001 - a Ray worker that died costs this attempt only
                out.append((item, {"status": ERROR, "error": traceback.format_exc()}))
        return out

    def close(self) -> None:
        self.ray.shutdown()
