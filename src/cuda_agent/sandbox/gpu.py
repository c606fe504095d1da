"""What GPU is here, the lock that keeps timings from overlapping on it, and the ledger that keeps
evaluations sharing it within its memory.

The evaluator asks ``nvidia-smi`` rather than initializing CUDA itself, so the trusted
process never holds a CUDA context it does not need.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


ARCH_SPECIFIC = {"9.0": "90a", "10.0": "100a"}
"""Compute capabilities built for their arch-specific target: ``sm_90a`` on Hopper (wgmma, TMA bulk tensor
copies, setmaxnreg) and ``sm_100a`` on Blackwell B200 (tcgen05, tensor memory). The fastest GEMM and attention
kernels need these instructions, and plain ``sm_90`` rejects them. An ``a`` build runs only on that very
capability, which is all an evaluation on this GPU needs. Every other GPU is built for its plain ``sm_XY``
(A100: sm_80, L40S: sm_89)."""


def build_arch(compute_cap: str) -> str:
    """The target the sandbox builds for on a GPU of ``compute_cap`` ("9.0" -> "90a", "8.0" -> "80")."""
    return ARCH_SPECIFIC.get(compute_cap, compute_cap.replace(".", ""))


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # e.g. "9.0"
    uuid: str
    memory_mb: int = 0
    """Total memory, MiB (0: not reported)."""

    @property
    def arch(self) -> str:
        """The build target for this GPU (:func:`build_arch`): "90a" on an H100/H200, "80" on an A100."""
        return build_arch(self.compute_cap)


@functools.cache
def list_gpus() -> tuple[GpuInfo, ...]:
    """The GPUs nvidia-smi reports, honoring CUDA_VISIBLE_DEVICES by index or UUID."""
    gpus = all_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        chosen = []
        for tok in (t.strip() for t in visible.split(",") if t.strip()):
            match = [g for g in gpus if str(g.index) == tok or g.uuid.startswith(tok)]
            chosen.extend(match[:1])
        gpus = tuple(GpuInfo(i, g.name, g.compute_cap, g.uuid, g.memory_mb) for i, g in enumerate(chosen))
    return gpus


@functools.cache
def all_gpus() -> tuple[GpuInfo, ...]:
    """Every GPU nvidia-smi reports, whatever CUDA_VISIBLE_DEVICES says."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,compute_cap,uuid,memory.total",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) in (4, 5):
            mem = int(parts[4]) if len(parts) == 5 and parts[4].isdigit() else 0
            gpus.append(GpuInfo(int(parts[0]), parts[1], parts[2], parts[3], mem))
    return tuple(gpus)


def gpu_memory_bytes(device: int = 0) -> int | None:
    """Total memory of the GPU an evaluation will use, from nvidia-smi (None: unknown, e.g. a rehearsal)."""
    info = gpu_info(device)
    return info.memory_mb << 20 if info is not None and info.memory_mb else None


def gpu_key(device: int = 0) -> str:
    """What names one GPU in the lock files: its UUID where nvidia-smi answers, else ``dev<index>``."""
    info = gpu_info(device)
    return info.uuid if info else f"dev{device}"


def gpu_info(device: int = 0) -> GpuInfo | None:
    gpus = list_gpus()
    return gpus[device] if 0 <= device < len(gpus) else None


REHEARSAL_ENV = "CUDA_AGENT_REHEARSAL"
"""Tests only: ``CUDA_AGENT_REHEARSAL=cpu`` runs an evaluation's whole choreography (workers, trials,
timing, checksums, re-check, verdict) on the CPU, with CPU kernels registered for the CPU, so that
CI exercises it without a GPU. Its timings are CPU timings and mean nothing; its verdicts say so."""


def rehearsal() -> bool:
    return os.environ.get(REHEARSAL_ENV) == "cpu"


def no_gpu_reason() -> str | None:
    """None when a CUDA GPU is usable here, else a plain sentence saying why not."""
    if rehearsal():
        return None
    if not list_gpus():
        return ("no CUDA GPU found on this host (nvidia-smi lists none): correctness and timing need one. "
                "Static checks run anywhere: `cuda-agent check SOLUTION`.")
    return None


def _flock(f, op: int, deadline: float | None) -> None:
    """flock ``f``; with a ``deadline`` (time.monotonic), polled until then, and TimeoutError after."""
    if deadline is None:
        fcntl.flock(f, op)
        return
    while True:
        try:
            fcntl.flock(f, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError from None
            time.sleep(0.05)


@contextlib.contextmanager
def _rw(main: Path, gate: Path, exclusive: bool, wait_s: float | None = None) -> Iterator[None]:
    """A readers-writer flock on ``main``; whoever waits for it exclusive holds ``gate`` meanwhile (and while
    it holds it), so that new sharers queue behind a waiting writer and it cannot starve. With ``wait_s``,
    TimeoutError when it is not had by then."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    with open(gate, "a") as g, open(main, "a") as m:
        _flock(g, fcntl.LOCK_EX, deadline)
        try:
            _flock(m, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline)
            if not exclusive:
                fcntl.flock(g, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(m, fcntl.LOCK_UN)
        finally:
            fcntl.flock(g, fcntl.LOCK_UN)


class GpuLock:
    """A readers-writer lock on one GPU, across processes (flock on two files per GPU).

    Correctness work (trials, profiles) takes it *shared*: several evaluations may run their
    trials side by side. Timing takes it *exclusive*: nothing else runs on the GPU while eager,
    compile and the candidate are timed. A waiting timer holds the gate, so new sharers queue
    behind it and timing cannot starve. ``held_s`` accumulates the time this object held it (setup holds,
    below, apart: ``setup_s``).

    Work that touches the GPU only in part, before the trials (the torch.compile baseline's first run on
    drawn inputs, the candidate's import, construction and ``prepare``), takes it shared with
    ``busy=False``: it keeps every other evaluation's timing off while it may run kernels, but it is mostly
    CPU time, so it is kept apart (``setup_holds``) from the holds that say the GPU was busy (``intervals``).

    The GPU lock keeps out the harness's own requests only. Between them a candidate's code stays loaded in
    its worker, where a thread or a side-stream kernel it started can run at any time; so can a command of
    the agent's ``bash``. A second readers-writer lock covers that: :meth:`candidate_code` is held (shared)
    wherever such code may run on this GPU, from before a candidate's import until its worker's processes
    are gone, and :meth:`quiet` (exclusive) waits until none is left. The baselines are timed quiet: they
    are cached for every later evaluation of the task, so another evaluation's candidate that slowed them
    would raise every later speed-up. Order: the code lock before the GPU lock, never while holding it.
    """

    def __init__(self, cache_dir: Path, device: int = 0):
        self.key = key = gpu_key(device)
        """Which GPU this lock is for (its UUID where nvidia-smi answers)."""
        lock_dir = Path(cache_dir) / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.main = lock_dir / f"gpu-{key}.lock"
        self.gate = lock_dir / f"gpu-{key}.gate"
        self.code = lock_dir / f"gpu-{key}.code.lock"
        self.code_gate = lock_dir / f"gpu-{key}.code.gate"
        self.holds: list[tuple[float, float, bool]] = []
        """(start, end, exclusive) of every hold, in seconds since the epoch, so that holds of
        concurrent evaluations can be merged into the time the GPU was in use
        (benchmarks/bench_throughput.py)."""
        self.setup_holds: list[tuple[float, float]] = []
        """(start, end) of the shared holds taken with ``busy=False``, not counted as GPU use."""
        self.quiet_holds: list[tuple[float, float, float, bool]] = []
        """(asked, start, end, quiet) of every :meth:`quiet`: how long it waited for candidate code to end, and
        whether it did (False: it gave up waiting at ``start``)."""

    @property
    def held_s(self) -> float:
        return sum(end - start for start, end, _ in self.holds)

    @property
    def exclusive_s(self) -> float:
        return sum(end - start for start, end, exclusive in self.holds if exclusive)

    @property
    def intervals(self) -> list[tuple[float, float]]:
        return [(round(start, 3), round(end, 3)) for start, end, _ in self.holds]

    @property
    def setup_s(self) -> float:
        return sum(end - start for start, end in self.setup_holds)

    @contextlib.contextmanager
    def _held(self, exclusive: bool, busy: bool = True) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            if busy:
                self.holds.append((start, time.time(), exclusive))
            else:
                self.setup_holds.append((start, time.time()))

    @contextlib.contextmanager
    def shared(self, busy: bool = True) -> Iterator[None]:
        with _rw(self.main, self.gate, exclusive=False), self._held(exclusive=False, busy=busy):
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with _rw(self.main, self.gate, exclusive=True), self._held(exclusive=True):
            yield

    def candidate_code(self) -> "CodeHold":
        """A hold (shared, taken now) that says candidate code may run on this GPU until it is released."""
        return CodeHold(self.code, self.code_gate)

    @contextlib.contextmanager
    def quiet(self, wait_s: float | None = None) -> Iterator[bool]:
        """No candidate code and no agent command may run on this GPU meanwhile: waits until every
        :meth:`candidate_code` hold is released, and keeps new ones out. Take it before the GPU lock. Yields
        True when held; False (not held) when that took longer than ``wait_s``."""
        asked = time.time()
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(_rw(self.code, self.code_gate, exclusive=True, wait_s=wait_s))
                quiet = True
            except TimeoutError:
                quiet = False
            start = time.time()
            try:
                yield quiet
            finally:
                self.quiet_holds.append((asked, start, time.time(), quiet))


_releasing: set[threading.Thread] = set()
"""Background releases (:meth:`CodeHold.release`) still waiting for processes to go: the process joins them
before it exits, since its exit would drop their locks at once."""


@atexit.register
def _finish_releases() -> None:
    for t in list(_releasing):
        t.join(15.0)


class CodeHold:
    """A shared hold on a GPU's candidate-code lock (:meth:`GpuLock.candidate_code`), taken when made. Its
    :meth:`release` can wait until the processes that ran the code are gone: a SIGKILLed worker's threads,
    and the kernels it queued, end with its processes, not with the signal."""

    def __init__(self, code: Path, gate: Path):
        self._hold = contextlib.ExitStack()
        self._hold.enter_context(_rw(code, gate, exclusive=False))

    def release(self, groups: list[int] = (), wait_s: float = 10.0, background: bool = False) -> None:
        """Release the hold once no process is left in the process groups ``groups`` (at most ``wait_s``
        seconds on), on a thread of its own when ``background``."""
        groups = list(groups)

        def when_gone() -> None:
            try:
                wait_gone(groups, wait_s)
            finally:  # whatever happens: a hold left behind would keep every later baseline waiting
                self._hold.close()
                _releasing.discard(threading.current_thread())

        if background:
            t = threading.Thread(target=when_gone, name="code-hold", daemon=True)
            _releasing.add(t)
            t.start()
        else:
            when_gone()

    def __enter__(self) -> "CodeHold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def every_gpu_code_hold(cache_dir: Path, wait_s: float | None = None) -> contextlib.ExitStack:
    """Shared holds on the candidate-code lock (:meth:`GpuLock.candidate_code`) of every GPU: every GPU on the
    host (CUDA_VISIBLE_DEVICES aside: a command can change it) and every one that evaluations with this cache
    have used (their lock files), taken in the order of their names. For code that may use any GPU on the
    host, such as a command of the agent's ``bash``. TimeoutError (none held) when they take over ``wait_s``."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    lock_dir = Path(cache_dir) / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    keys = {g.uuid for g in all_gpus()} or {gpu_key(0)}
    keys |= {f.name[len("gpu-"):-len(".code.lock")] for f in lock_dir.glob("gpu-*.code.lock")}
    holds = contextlib.ExitStack()
    try:
        for key in sorted(keys):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            holds.enter_context(_rw(lock_dir / f"gpu-{key}.code.lock", lock_dir / f"gpu-{key}.code.gate",
                                    exclusive=False, wait_s=left))
    except BaseException:
        holds.close()
        raise
    return holds


def wait_gone(groups: list[int], wait_s: float) -> bool:
    """Wait until no process is left in the process groups ``groups``, at most ``wait_s`` seconds: whether
    none is (a SIGKILLed process's threads, and the kernels it queued, end with the process, not the signal)."""
    deadline = time.monotonic() + wait_s
    while groups and _groups_alive(groups):
        if time.monotonic() >= deadline:
            log.warning("processes of groups %s still alive %.0f s after they were killed", groups, wait_s)
            return False
        time.sleep(0.02)
    return True


class GpuMemory:
    """The GPU memory that evaluations sharing one GPU (bench lanes, ``--per-gpu`` > 1) have reserved, across
    processes: one small JSON file per reservation under ``locks/gpu-<uuid>.mem/``, read and written under
    an flock. An evaluation reserves its expected peak (:func:`memory.gpu_need`) before its trials make the
    task's tensors on the GPU, and waits while the others' reservations and its own would not fit the GPU;
    with no other reservation it is admitted whatever it asks (a task above the whole GPU was refused before,
    by memory.fit_problem). Waiters are admitted in the order they came (a waiter's file says since when), so
    a large evaluation is not starved by a stream of small ones; what a waiter already holds on the GPU (its
    workers' CUDA contexts, the reference's weights) counts while it waits. A reservation counts until it is
    released and then until no process is left in the process groups of the evaluation's workers (their memory
    is freed with them), or until the process that made it is gone."""

    POLL_S = 0.2

    def __init__(self, cache_dir: Path, device: int = 0, total_bytes: int | None = None):
        key = gpu_key(device)
        lock_dir = Path(cache_dir) / "locks"
        self.dir = lock_dir / f"gpu-{key}.mem"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.guard = lock_dir / f"gpu-{key}.mem.lock"
        self.total = total_bytes
        self.path: Path | None = None
        self.need = 0
        self.waited_s = 0.0
        """How long :meth:`reserve` waited for the others' memory."""

    def others(self) -> tuple[int, int, tuple | None]:
        """(bytes the other live reservations hold, bytes the other waiters hold meanwhile, and (since, name)
        of the earliest other live waiter). Files of reservations no longer live are removed. Decisions on it
        are made under the guard; a read without it is safe (files are replaced whole) but may be a moment old."""
        held, waiting, first_waiter = 0, 0, None
        for f in self.dir.glob("*.json"):
            if f == self.path:
                continue
            try:
                r = json.loads(f.read_text())
                state = r["state"]
                live = _groups_alive(r.get("workers", [])) if state == "released" else _alive(int(r["owner"]))
                n, since = int(r["bytes"]), float(r.get("since", 0))
            except (OSError, ValueError, KeyError, TypeError):  # half-written or foreign: not counted
                continue
            if not live:
                f.unlink(missing_ok=True)
                continue
            if state == "waiting":
                waiting += n
                first_waiter = min(first_waiter or (since, f.name), (since, f.name))
            else:
                held += n
        return held, waiting, first_waiter

    def others_bytes(self) -> int:
        """Bytes the other live reservations and waiters hold (see :meth:`others`)."""
        held, waiting, _ = self.others()
        return held + waiting

    def reserve(self, need: int, timeout_s: float, holding: int = 0) -> bool:
        """Wait until ``need`` bytes fit beside the other reservations (or none is left) and no earlier waiter
        is still waiting, then hold them; ``holding``: what the evaluation already holds on the GPU, counted for
        the others while it waits. False if ``timeout_s`` passed first (the evaluation then goes on,
        unreserved, and says so)."""
        t0, since = time.monotonic(), time.time()
        self.path = self.dir / f"{os.getpid()}-{time.monotonic_ns()}-{id(self)}.json"
        self.need = int(need)
        mine = (since, self.path.name)
        in_line = False
        while True:
            with open(self.guard, "a") as guard:
                fcntl.flock(guard, fcntl.LOCK_EX)
                held, held_by_waiters, first_waiter = self.others()
                # no reservation held: the first in line goes, whatever it asks (those behind it hold contexts)
                fits = held == 0 or self.total is None or held + held_by_waiters + need <= self.total
                if fits and (first_waiter is None or first_waiter > mine):
                    self._write("held", since)
                    self.waited_s = time.monotonic() - t0
                    return True
                if time.monotonic() - t0 > timeout_s:
                    self.path.unlink(missing_ok=True)
                    self.path, self.waited_s = None, time.monotonic() - t0
                    return False
                if not in_line:
                    self._write("waiting", since, held=holding)
                    in_line = True
            time.sleep(self.POLL_S)

    def release(self, groups: list[int]) -> None:
        """The evaluation is done; its memory is free once the process groups ``groups`` (its workers', each
        started in a session of its own) have no process left. Never raises: a reservation it cannot rewrite
        is removed (the others then count it no longer)."""
        if self.path is None:
            return
        try:
            with open(self.guard, "a") as guard:
                fcntl.flock(guard, fcntl.LOCK_EX)
                if _groups_alive(groups):
                    self._write("released", time.time(), workers=list(groups))
                else:
                    self.path.unlink(missing_ok=True)
        except OSError:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)
        self.path = None

    def _write(self, state: str, since: float, held: int | None = None, workers: list[int] | None = None) -> None:
        record = {"state": state, "bytes": self.need if held is None else int(held), "owner": os.getpid(),
                  "since": since, **({"workers": workers} if workers is not None else {})}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.path)


def _groups_alive(groups: list[int]) -> bool:
    """Whether any process that is not a zombie belongs to one of the process groups ``groups``."""
    wanted = {str(g) for g in groups}
    if not wanted:
        return False
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[2] in wanted and fields[0] != "Z":
                return True
    return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited child not yet reaped holds no memory)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
