"""The evaluator's handle on a worker process: spawn, request with a timeout, kill.

Workers are fresh processes (``python -m cuda_agent.sandbox.worker``), one role and one
evaluation each, in their own session so that a kill takes any children with them. Their
stdout/stderr go to a log file that feeds the verdict's ``log`` on a crash.

With ``SandboxConfig.spare_workers > 0``, :func:`start_worker` keeps that many workers started
ahead of need (Python, torch and the harness imported; no CUDA context, no task or candidate code
yet), so that a long-lived caller (bench lanes, the agent, the evaluation service) does not wait
for interpreter start-up. A spare still serves one role of one evaluation and then exits.

A one-shot caller (``cuda-agent eval``) calls :func:`prestart` first thing, before it imports torch
itself: the two workers its evaluation will ask for start then, and make their CUDA context while
the caller loads and checks the task. This module imports no torch, so that this costs nothing.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from . import confine
from .build import BuildResult, inline_env, resolve_arch
from .config import SandboxConfig
from .confine import CONFINED_ENV, Jail, confined_env, read_status
from .gpu import no_gpu_reason, rehearsal
from .solution import FILE


class WorkerDied(Exception):
    """The worker exited or crashed (segfault, sys.exit, killed). ``log`` holds its output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class BadReply(WorkerDied):
    """The worker answered, but not with plain data: its reply machinery was tampered with
    (the harness itself only ever sends plain data)."""


class WorkerOverMemory(WorkerDied):
    """The harness stopped the worker: its processes held more host memory than
    :attr:`WorkerProcess.host_memory_limit_mb`."""


class ReplyTooLong(WorkerDied):
    """The worker's reply was longer than :attr:`WorkerProcess.max_reply_bytes` (the worker is stopped)."""


MAX_UNTRUSTED_REPLY = 256 << 20
"""The longest reply the harness reads from a worker that runs candidate code (its replies are scalars
and small reports; in a CPU rehearsal, outputs by value)."""


class WorkerTimeout(Exception):
    pass


class WorkerError(Exception):
    """The worker reported an exception (it exits right after)."""

    def __init__(self, reply: dict):
        super().__init__(reply.get("message", ""))
        self.reply = reply


class WorkerProcess:
    def __init__(self, env: dict[str, str] | None = None, cwd: str | None = None, label: str = "worker",
                 prefix: list[str] | None = None, jail: Jail | None = None, warm: bool = False,
                 preload: bool = False):
        """``prefix`` wraps the worker command (e.g. an ``ncu`` invocation). With ``jail`` the worker runs
        confined (sandbox/confine.py) with a fresh scratch directory, :attr:`scratch`, as its only
        writable place: the caller stages there what the worker is to read. With ``warm`` it makes its
        CUDA context as soon as it has started, before its first request (see :func:`prestart`). With
        ``preload`` it imports what torch.compile needs (dynamo, inductor) before it is ready: for a spare,
        which has the time, so that a reference that compiles its baseline does not spend it then."""
        parent, child = socket.socketpair()
        self.scratch: str | None = None
        self.label = label
        self.from_pool = False
        """Set when :func:`start_worker` handed out a worker started ahead (a spare, or a prestarted one)."""
        self.memory: dict = {}
        """The worker's latest peaks (``peak_rss_mb``, ``peak_gpu_mb``), from its last reply."""
        self.killed_by_harness = False
        """Set when :meth:`kill` signals it: a SIGKILL death without it came from outside (the OOM killer)."""
        self.host_memory_limit_mb: float | None = None
        """Set by :meth:`limit_memory`."""
        self.over_memory: str | None = None
        """Why the memory watchdog stopped the worker, once it has."""
        self.max_reply_bytes: int | None = None
        """A reply longer than this is a ReplyTooLong (an untrusted worker cannot stream the evaluator full)."""
        self._watchdog: threading.Thread | None = None
        self._look_lock = threading.Lock()
        self._peaks: dict[int, int] = {}  # pid -> the highest VmHWM seen (KiB): a reset of it still counts
        self.oom_score_raised: str | None = None
        """Set once the watchdog saw one of the worker's processes offer itself to the OOM killer (an
        ``oom_score_adj`` above the harness's own): an OOM kill after that is the worker's doing."""
        self._oom_score_adj = _oom_score_adj("self")
        self.log_file = tempfile.NamedTemporaryFile(prefix=f"cuda_agent_{label}_", suffix=".log", delete=False)
        cmd = [*(prefix or []), sys.executable, "-m", "cuda_agent.sandbox.worker", str(child.fileno()),
               *(["--warm"] if warm else []), *(["--preload"] if preload else [])]
        fds = [child.fileno()]
        self._status_fd: int | None = None
        self._status_pending = bytearray()
        self._status_lock = threading.Lock()
        self._group_killed = False
        self.status: dict = {}
        """What bwrap reported of a confined worker (confine.read_status): ``child-pid``, ``exit-code``."""
        if jail is not None:
            self.scratch = tempfile.mkdtemp(prefix=f"cuda_agent_{label}_")
            self._status_fd, status_w = os.pipe()
            fds.append(status_w)
            cmd = jail.command(cmd, scratch=self.scratch, status_fd=status_w)
            env = {**confined_env(dict(os.environ) if env is None else env), CONFINED_ENV: "1"}
            cwd = None
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=tuple(fds), env=env, cwd=cwd,
                                         stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True)
        except BaseException:
            for fd in [*fds[1:], *([self._status_fd] if self._status_fd is not None else [])]:
                os.close(fd)
            parent.close()
            child.close()
            self.log_file.close()
            raise
        for fd in fds[1:]:
            os.close(fd)
        child.close()
        self.conn = Connection(parent.detach())

    def request(self, msg: dict, timeout: float) -> dict:
        """Send one request and wait for its reply. Raises WorkerTimeout / WorkerDied / WorkerError."""
        self.send(msg)
        return self.receive(msg["op"], timeout)

    def send(self, msg: dict) -> None:
        try:
            self.conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, ConnectionResetError, OSError):
            if self.over_memory:
                raise WorkerOverMemory(f"{self.over_memory} (before '{msg['op']}')", self.read_log()) from None
            raise WorkerDied(f"{self.label} died before '{msg['op']}'", self.read_log()) from None

    def receive(self, op: str, timeout: float) -> dict:
        msg = {"op": op}
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerTimeout(f"{self.label}: '{msg['op']}' did not finish within {timeout:.0f} s")
            try:
                ready = self.conn.poll(min(remaining, 1.0))
            except (EOFError, OSError):
                ready = True
            if ready:
                break
            if self.proc.poll() is not None:
                break
        try:
            data = self.conn.recv_bytes(self.max_reply_bytes)
        except (EOFError, OSError) as e:
            if self.over_memory:
                self.exit_code()
                raise WorkerOverMemory(f"{self.over_memory} (during '{msg['op']}')", self.read_log()) from None
            if "bad message length" in str(e) and self.max_reply_bytes:
                self.kill()
                raise ReplyTooLong(f"{self.label} sent a reply longer than {self.max_reply_bytes >> 20} MiB "
                                   "(outputs travel on the GPU; a large output on the CPU?)", self.read_log()) from None
            code = self.exit_code()
            raise WorkerDied(f"{self.label} exited with code {code} during '{msg['op']}'"
                             f"{_signal_name(code)}", self.read_log()) from None
        import torch  # here, not at the top: see the module doc

        try:
            reply = torch.load(io.BytesIO(data), weights_only=True)
        except Exception as e:  # noqa: BLE001 - a reply we refuse to unpickle is a broken worker
            self.kill()
            raise BadReply(f"{self.label} sent a reply that is not plain data ({type(e).__name__})",
                             self.read_log()) from None
        if not isinstance(reply, dict):
            self.kill()
            raise BadReply(f"{self.label} sent a malformed reply", self.read_log())
        if "error" in reply:
            self.kill()
            raise WorkerError(reply)
        if isinstance(reply.get("memory"), dict):
            self.memory = reply["memory"]
        return reply

    def exit_code(self, timeout: float | None = None) -> int:
        """The worker's exit status as Popen reports it (negative N: killed by signal N). bwrap reports a
        child killed by signal N as 128 + N; that is translated back, so that a confined worker killed by
        the OOM killer reads as SIGKILL. The worker cannot fake one: its process guard
        (confine.enter_process_guard) kills it with SIGSYS if it exits with 129-192, and refuses it
        SIGKILL, even to itself."""
        code = self.proc.wait(timeout=timeout)
        if self.scratch is not None and 128 < code <= 128 + 64:
            return -(code - 128)
        return code

    def limit_memory(self, mb: float) -> None:
        """Stop the worker once the peak resident memory of its processes (their VmHWM, summed: a spike
        between two looks still counts) exceeds ``mb`` MiB. A thread looks four times a second for the
        worker's whole life, whatever the harness is waiting on; the next request to the worker then
        raises WorkerOverMemory. Calling it again changes the limit."""
        self.host_memory_limit_mb = mb
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch_memory, name=f"cuda-agent-{self.label}-memory",
                                              daemon=True)
            self._watchdog.start()

    def _watch_memory(self) -> None:
        while self.proc.poll() is None and not self.look_at_memory():
            time.sleep(0.25)

    def look_at_memory(self) -> bool:
        """One look of the watchdog: stop the worker if it is over its limit. True once it has been."""
        with self._look_lock:
            if self.over_memory or self.host_memory_limit_mb is None or self.proc.poll() is not None:
                return bool(self.over_memory)
            used, limit = self.group_peak_mb(), self.host_memory_limit_mb
            if used <= limit:
                return False
            self.over_memory = (f"{self.label} held {used / 1024:.2f} GiB of host memory, over its limit of "
                                f"{limit / 1024:.2f} GiB: stopped by the harness")
            self.killed_by_harness = True
            for group in (self.status.get("child-pid"), self.proc.pid):
                if isinstance(group, int) and group > 1:
                    _killpg(group)
            return True

    def groups(self) -> list[int]:
        """The process groups the worker's processes are in: its own session's, and a confined worker's inside
        bubblewrap (its ``child-pid``, in a session of its own)."""
        return [g for g in (self.proc.pid, self.status.get("child-pid")) if isinstance(g, int) and g > 1]

    def group_peak_mb(self) -> float:
        """Peak resident memory of the worker's processes (the leader of its process group and every
        descendant: the process guard keeps them in the group), summed, in MiB. Per process the highest
        VmHWM ever seen counts, so that clearing it (``/proc/self/clear_refs``) does not hide a peak; a
        process that has exited no longer counts. Memory files they hold open (``memfd_create``, files in
        /dev/shm: memory no RSS shows until mapped) count too, each once."""
        leader = self._read_status().get("child-pid") if self._status_fd is not None else self.proc.pid
        if not isinstance(leader, int):
            return 0.0
        alive, todo, files = set(), [leader], {}
        while todo and len(alive) < 100_000:
            pid = todo.pop()
            if pid in alive:
                continue
            try:
                with open(f"/proc/{pid}/status", "rb") as f:
                    hwm = next((int(line.split()[1]) for line in f if line.startswith(b"VmHWM:")), 0)
            except (OSError, ValueError):
                continue  # gone meanwhile
            try:  # its children, thread by thread (a kernel without CONFIG_PROC_CHILDREN: the leader only)
                for task in os.scandir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task.name}/children", "rb") as f:
                        todo.extend(int(c) for c in f.read().split())
            except (OSError, ValueError):
                pass
            alive.add(pid)
            self._peaks[pid] = max(self._peaks.get(pid, 0), hwm)
            self._look_at_oom_score(pid)
            _memory_files(pid, files)
        self._peaks = {p: k for p, k in self._peaks.items() if p in alive}
        return (sum(self._peaks.values()) * 1024 + sum(files.values())) / 2**20

    def _look_at_oom_score(self, pid: int) -> None:
        """A process may raise its own ``oom_score_adj`` (no privilege needed; it is process-wide, so a
        thread's ``/proc/self/task/TID/oom_score_adj``, writable in a GPU worker's jail, sets it too) and
        so become the OOM killer's first choice, turning its failure into a harness_error. The watchdog
        looks at it with the memory, four times a second: a raise seen before the kill makes that kill
        the worker's own (docs/sandbox.md says what a raise between two looks can still do)."""
        adj = _oom_score_adj(str(pid))
        if self.oom_score_raised is None and adj is not None and self._oom_score_adj is not None \
                and adj > self._oom_score_adj:
            self.oom_score_raised = (f"process {pid} of the {self.label} worker raised its oom_score_adj to {adj} "
                                     f"(the harness runs at {self._oom_score_adj})")

    def _read_status(self) -> dict:
        with self._status_lock:  # the memory watchdog reads it too
            if self._status_fd is not None:
                self.status.update(read_status(self._status_fd, self._status_pending))
            return self.status

    def setup_failed(self) -> bool:
        """Did bubblewrap exit without ever starting the worker (a jail that cannot be set up)? Told by
        bwrap itself, not by anything the worker prints: bwrap reports ``exit-code`` only for a child
        that reached exec, and the worker never holds the status pipe."""
        if self._status_fd is None:
            return False
        try:
            if self.proc.wait(timeout=5) < 0:  # bwrap itself killed: not a setup failure
                return False
        except subprocess.TimeoutExpired:
            return False
        return "exit-code" not in self._read_status()

    def read_log(self, limit: int = 6000) -> str:
        try:
            text = Path(self.log_file.name).read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.conn.send_bytes(pickle.dumps({"op": "exit"}))
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self, wait: bool = True) -> None:
        """SIGKILL the worker's process group. ``wait=False`` leaves the reaping (the driver's
        teardown of a CUDA context can take a while) to a background thread. A confined worker is in a
        session of its own inside bwrap's: its group (every process it started: the guard forbids
        setsid and setpgid) is killed too, even after the worker itself has exited."""
        alive = self.proc.poll() is None
        if alive:
            self.killed_by_harness = True
        child = self._read_status().get("child-pid")
        if isinstance(child, int) and child > 1 and not self._group_killed:
            self._group_killed = not alive  # once the worker is gone: its PID could be reused later
            _killpg(child)
        if alive:
            if not _killpg(self.proc.pid):
                self.proc.kill()
            if wait:
                self.proc.wait()
            else:
                threading.Thread(target=self.proc.wait, daemon=True).start()
        try:
            self.conn.close()
        except OSError:
            pass

    def cleanup(self, wait: bool = True) -> None:
        self.kill(wait)
        with self._status_lock:
            if self._status_fd is not None:
                os.close(self._status_fd)
                self._status_fd = None
        try:
            os.unlink(self.log_file.name)
        except OSError:
            pass
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> "WorkerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self.cleanup()


def parse_cpu_list(text: str) -> set[int]:
    """CPU numbers from the kernel's list format (``0-3,8,10-11``)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.update(range(int(lo), int(hi) + 1))
        elif part.strip():
            cpus.add(int(part))
    return cpus


def compact_cpus(cpus) -> str:
    """The kernel's list format for a set of CPUs (``0-3,8``)."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def cpus_of(pid: int) -> str | None:
    """The CPUs process ``pid`` may run on (``compact_cpus``), None where Linux does not say. A bench lane
    pins itself and so every worker it starts (bench.lanes.split_cpus)."""
    try:
        return compact_cpus(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return None


def _killpg(group: int) -> bool:
    """SIGKILL process group ``group``; False where there is none (or it is not the harness's to kill)."""
    try:
        os.killpg(group, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _oom_score_adj(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/oom_score_adj", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _memory_files(pid: int, files: dict) -> None:
    """Add the memory files ``pid`` holds open (memfd, /dev/shm) to ``files``: (device, inode) -> bytes."""
    try:
        fds = list(os.scandir(f"/proc/{pid}/fd"))
    except OSError:
        return
    for fd in fds:
        try:
            target = os.readlink(fd.path)
            if target.startswith(("/memfd:", "/dev/shm/")):
                st = os.stat(fd.path)
                files[(st.st_dev, st.st_ino)] = st.st_blocks * 512
        except OSError:
            continue


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f" (signal {signal.Signals(-code).name})"
        except ValueError:
            return f" (signal {-code})"
    return ""


class SparePool:
    """Workers started before they are needed, keyed by their environment (see the module doc)."""

    def __init__(self) -> None:
        self._free: list[tuple[tuple, WorkerProcess]] = []
        self._lock = threading.Lock()
        self.taken = 0
        atexit.register(self.close)

    def take(self, env: dict[str, str], label: str, keep: int, jail: Jail | None = None) -> WorkerProcess:
        """A started worker for ``env``: a spare if one is ready, else a new one; then top the
        spares for ``env`` up to ``keep`` (they start in the background)."""
        key = _key(env, jail)
        with self._lock:
            dead = [w for _, w in self._free if w.proc.poll() is not None]
            self._free = [(k, w) for k, w in self._free if w.proc.poll() is None]  # drop any that died
            for w in dead:  # their log, scratch and status pipe
                w.cleanup()
            worker = next((w for k, w in self._free if k == key), None)
            if worker is not None:
                self._free = [(k, w) for k, w in self._free if w is not worker]
                self.taken += 1
            waiting = sum(1 for k, _ in self._free if k == key)
            for _ in range(max(0, keep - waiting)):  # an unconfined one may be a reference, which compiles
                self._free.append((key, WorkerProcess(env=env, label="spare", jail=jail, preload=jail is None)))
        if worker is None:
            return WorkerProcess(env=env, label=label, jail=jail)
        worker.label = label
        worker.from_pool = True
        return worker

    def add(self, env: dict[str, str], jail: Jail | None = None, warm: bool = False) -> None:
        """Start one worker for ``env`` now, for the next :meth:`take` of that ``env``."""
        worker = WorkerProcess(env=env, label="spare", jail=jail, warm=warm)
        with self._lock:
            self._free.append((_key(env, jail), worker))

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for _, w in free:
            w.cleanup()


def _key(env: dict[str, str], jail: Jail | None) -> tuple:
    return tuple(sorted(env.items())), repr(jail)


SPARES = SparePool()


def start_worker(env: dict[str, str], label: str, spares: int = 0, jail: Jail | None = None) -> WorkerProcess:
    """A worker process for one role of one evaluation: one started ahead for ``env`` if there is one (a
    spare, or one :func:`prestart` started), else a new one; ``spares`` > 0 keeps that many started ahead."""
    return SPARES.take(env, label, max(spares, 0), jail)


def prestart(config: SandboxConfig, solution_kind: str | None) -> bool:
    """Start the two workers an evaluation of a ``solution_kind`` solution (None: a calibration) under
    ``config`` will ask for, warm (their CUDA context made at once), for a caller that is about to load its
    task and call ``evaluate``: their start-up then overlaps the caller's own. The candidate's is started
    only where its environment is known before the build (not an unconfined load_inline file). Nothing
    is started on a host without a GPU. Workers nobody takes are stopped at exit. True if any started."""
    if no_gpu_reason():
        return False
    try:
        SPARES.add(worker_env(config), warm=True)
        cand = candidate_env(config, solution_kind)
        if cand is not None and not confine.unavailable(config.isolation):  # else evaluate() says why
            SPARES.add(cand, candidate_jail(config), warm=True)
    except OSError:  # no process to spare here: evaluate() starts its own, and reports what fails
        return False
    return True


def candidate_jail(config: SandboxConfig) -> Jail | None:
    """How the candidate's worker is confined: None when isolation is off. On a GPU it shares the PID
    namespace with the reference worker (CUDA IPC needs it; see confine's module doc)."""
    if config.isolation == "none":
        return None
    on_gpu = not rehearsal()
    return Jail(share_pid=on_gpu, gpu=on_gpu, hidden=[str(config.cache_dir)])


def worker_env(config: SandboxConfig, built: BuildResult | None = None) -> dict[str, str]:
    """The environment of a worker: only the configured GPU visible; for a load_inline solution,
    the extensions directory its build filled (confined: the worker's own copy of it)."""
    return _env(config, built.extensions_dir if built is not None else None)


def candidate_env(config: SandboxConfig, solution_kind: str | None) -> dict[str, str] | None:
    """The candidate's worker environment as known before the build (None where only the build tells)."""
    if solution_kind != FILE:  # a workspace, or the task's own Model: no extensions directory
        return _env(config, None)
    return _env(config, "(the worker's own copy)") if config.isolation != "none" else None


_TORCH_WRITES = ("TORCHINDUCTOR_CACHE_DIR",)
"""Variables torch writes into its own process's environment (inductor's cache directory, on import): the
evaluator's default is no worker's business (each works out its own; a confined one's TMPDIR differs), and
a worker started before the evaluator imported inductor must match one asked for after."""
_SET_BY_USER = frozenset(k for k in _TORCH_WRITES if k in os.environ)


def _env(config: SandboxConfig, extensions_dir: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if extensions_dir:
        ext = extensions_dir if config.isolation == "none" else f"{confine.INSIDE}/torch_extensions"
        env.update(inline_env(ext, resolve_arch(config)))  # (os.environ again, with the build's variables)
    env["CUDA_VISIBLE_DEVICES"] = _visible(config.device)
    return {k: v for k, v in env.items() if k not in _TORCH_WRITES or k in _SET_BY_USER}


def _visible(device: int) -> str:
    current = os.environ.get("CUDA_VISIBLE_DEVICES")
    if current:
        parts = [p for p in current.split(",") if p.strip()]
        if 0 <= device < len(parts):
            return parts[device]
    return str(device)
