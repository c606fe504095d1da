"""`bash`: a shell command in the workspace, confined, with a timeout and a scrubbed environment.

The command runs under the sandbox's confinement (sandbox/confine.py): it sees a read-only system
(compilers, Python, the GPU's device nodes), the workspace read-write at :data:`WORKSPACE`, and
nothing else: not the harness's cache or baselines, not other workspaces, not the network, not the
harness's processes (its own PID namespace). It runs in its own process group (killed whole on
timeout), with no stdin, HOME set to the workspace and an environment reduced to what a compiler and
Python need: proxies, tokens, keys and credentials are not passed on. A command that tries to reach
beyond fails like any failed command, and the model reads its error. With the sandbox's isolation off
(--unsafe-no-isolation) it runs unconfined in the workspace's real directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from ...sandbox.confine import SECRET, Jail, read_status
from ...sandbox.gpu import every_gpu_code_hold, wait_gone
from . import Tool, ToolResult, obj, truncate

WORKSPACE = "/workspace"
"""Where a confined command finds the workspace (the harness's own path of it stays unsaid)."""

KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
        "LD_LIBRARY_PATH", "CC", "CXX", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "TORCH_CUDA_ARCH_LIST",
        "NVIDIA_VISIBLE_DEVICES", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def scrubbed_env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEEP and not SECRET.search(k)}
    env.update(HOME=home, PWD=home, TERM="dumb", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


class Bash(Tool):
    name = "bash"
    description = ("Run a bash command in the workspace directory (HOME is the workspace). Use it for nvidia-smi, "
                   "quick Python checks, listing files. Output (stdout and stderr) is truncated when long. "
                   "Build, verify and profile with the compile/verify/profile tools, not by hand.")
    parameters = obj({"command": {"type": "string", "description": "the command line"},
                      "timeout": {"type": "integer", "description": "seconds before the command is killed "
                                                                    "(default 120, at most 600)"}},
                     required=("command",))

    def run(self, args, env) -> ToolResult:
        limits = env.config.limits
        timeout = min(float(args.get("timeout") or limits.bash_timeout_s), limits.bash_max_timeout_s)
        if timeout <= 0:
            return ToolResult("timeout must be positive", ok=False)
        root = str(env.workspace.root)
        argv, cwd, home, status = ["bash", "-c", args["command"]], root, root, None
        if env.config.sandbox.isolation != "none":
            # bwrap says on this pipe which process is the jail's init: its session holds every process of the
            # command, and it lives until the jail's PID namespace is empty
            status = list(os.pipe())  # [read, write]; an entry is None once closed
            jail = Jail(gpu=True, binds={root: WORKSPACE}, hidden=[str(env.config.sandbox.cache_dir)])
            argv = jail.command(argv, scratch=None, cwd=WORKSPACE, status_fd=status[1])
            cwd, home = None, WORKSPACE
        environ = scrubbed_env(home)
        if cwd is None:  # confined: the jail's /tmp, not a host TMPDIR it does not mount
            environ["TMPDIR"] = "/tmp"
        # A command may run kernels on any GPU of the host: no evaluation times a baseline while it runs
        # (GpuLock.quiet), and it waits (at most its own timeout) while one does. What it left running is killed
        # when it ends, and the hold lasts until all of it is gone.
        t0 = time.perf_counter()
        try:
            with every_gpu_code_hold(env.config.sandbox.cache_dir, wait_s=timeout):
                waited = time.perf_counter() - t0
                r = self._run(argv, cwd, environ, timeout, limits, status)
        except TimeoutError:
            return ToolResult(f"[not run: the GPU was kept for another evaluation's baseline timing for {timeout:.0f} s "
                              "(this command's timeout); try again]", ok=False, info={"exit_code": None})
        finally:
            for fd in status or ():
                if fd is not None:
                    _close(fd)
        if waited >= 1.0:  # said, so that a slow command is not read as the command's own doing
            r.output = f"[waited {waited:.0f} s to start: another evaluation was timing its baselines]\n{r.output}"
        r.info["waited_s"] = round(waited, 3)
        return r

    def _run(self, argv, cwd, environ, timeout, limits, status) -> ToolResult:
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=environ, pass_fds=(status[1],) if status else (),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except (ValueError, OSError) as e:  # e.g. a NUL byte in the command
            return ToolResult(f"cannot run this command: {e}", ok=False)
        if status:
            _close(status[1])  # bwrap has its own copy
            status[1] = None
        groups = [proc.pid]
        try:
            out, _ = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill(proc.pid)
            try:
                out, _ = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a child left the group and holds the pipe
                out = b""
            timed_out = True
        finally:
            if status:
                init = read_status(status[0], bytearray()).get("child-pid")
                groups += [init] if isinstance(init, int) and init > 1 else []
            for group in groups:
                _kill(group)
            wait_gone(groups, 10.0)
        text = out.decode(errors="replace")
        text = truncate(text, limits.max_output_chars)
        took = time.perf_counter() - t0
        if timed_out:
            return ToolResult(f"{text}\n[killed after {timeout:.0f} s timeout]", ok=False,
                              info={"exit_code": None, "s": round(took, 3)})
        status_line = f"[exit code {proc.returncode}]"
        return ToolResult(f"{text}\n{status_line}" if text else status_line, ok=proc.returncode == 0,
                          info={"exit_code": proc.returncode})


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _kill(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
