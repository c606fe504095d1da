"""Harness failures are not the candidate's (issue 15): the reference crashing or hanging, a worker
killed from outside, the harness raising: verdict ``harness_error``, reward null, one flag saying which.
The candidate's own crash stays ``runtime_error``. Rehearsal mode (CUDA_AGENT_REHEARSAL=cpu): real
worker processes, the CPU standing in for the GPU."""

import os
import signal
import threading
import time

import pytest

from cuda_agent.sandbox import REWARDS, SandboxConfig, Verdict, evaluate, load_solution
from cuda_agent.sandbox import evaluator as evaluator_module
from cuda_agent.sandbox.verdict import HARNESS_ERROR, VERDICTS
from cuda_agent.tasks import load_task

from .conftest import SOLUTIONS, TASKS
from .test_rehearsal import _forward, _variant

TASK = TASKS / "swish_small.py"
HONEST = SOLUTIONS / "rehearsal_swish_cpu"


def test_every_reward_is_null_for_a_harness_error_and_only_for_it():
    assert HARNESS_ERROR in VERDICTS
    for kind, fn in REWARDS.items():
        assert fn(Verdict(verdict=HARNESS_ERROR)) is None, kind
        for verdict in VERDICTS:
            if verdict != HARNESS_ERROR:
                r = fn(Verdict(verdict=verdict, speedup_vs_eager=1.2, speedup_vs_compile=1.2))
                assert isinstance(r, float), (kind, verdict)
    v = Verdict.from_dict(Verdict(verdict=HARNESS_ERROR, reward=None).to_dict())
    assert v.reward is None and v.harness_error and not v.ok


@pytest.fixture
def rehearse(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    cache = tmp_path_factory.getbasetemp() / "rehearsal_cache"

    def run(solution=HONEST, task=TASK, **overrides):
        cfg = dict(cache_dir=cache, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0, profile=False)
        cfg.update(overrides)
        return evaluate(load_task(task), load_solution(solution), SandboxConfig(**cfg))

    run.cache = cache
    return run


@pytest.fixture
def started(monkeypatch) -> list:
    """Every WorkerProcess the evaluation starts, in order (the tests find the candidate's among them)."""
    from cuda_agent.sandbox import process

    out = []
    real_init = process.WorkerProcess.__init__

    def remember(self, *a, **kw):
        real_init(self, *a, **kw)
        out.append(self)

    monkeypatch.setattr(process.WorkerProcess, "__init__", remember)
    return out


def _task_with_forward(tmp_path, body: str, name: str = "task.py"):
    """swish_small with another reference forward (the honest CPU candidate still fits it)."""
    src = (TASKS / "swish_small.py").read_text()
    src = src.replace("        return x * torch.sigmoid(x)\n", "".join(f"        {ln}\n" for ln in body.splitlines()))
    src = "import os\nimport time\n" + src
    path = tmp_path / name
    path.write_text(src)
    return path


REFERENCE_FAILURES = [
    # its first call is now the eager baseline's (timed before the candidate's code loads), not a trial
    ("raises", "raise RuntimeError('the reference is broken')", "RuntimeError: the reference is broken"),
    ("exits", "os._exit(7)", "the reference worker died"),
    ("hangs", "time.sleep(60)\nreturn x", "the reference Model timed out"),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("what,body,reason", REFERENCE_FAILURES, ids=[r[0] for r in REFERENCE_FAILURES])
def test_a_failing_reference_is_a_harness_error_not_the_candidates(rehearse, tmp_path, what, body, reason):
    task = _task_with_forward(tmp_path, body)
    limit = 6.0 if what == "hangs" else 120.0  # 6 s only where a hang is the point: a loaded machine is slow
    v = rehearse(task=task, run_timeout_s=limit, baseline_timeout_s=limit, use_baseline_cache=False)
    assert v.verdict == HARNESS_ERROR and v.reward is None, (what, v.verdict, v.reasons)
    assert "reference_error" in v.flags and "worker_killed" not in v.flags, v.flags
    assert any(reason in r for r in v.reasons), v.reasons


def test_a_reference_that_dies_compiling_leaves_the_eager_baseline_and_the_candidate_whole(rehearse, started):
    """torch.compile kills the reference's worker (before any of the candidate's code is loaded): the compile
    baseline is missing, with its reason, and not a harness error; a fresh reference times eager, and the
    candidate (here the task's own Model: a calibration) is correct against it. (That it loads the fresh worker's
    weights, not the dead one's, shows on a GPU only: here weights travel by value, and the seed makes them equal.
    tests/gpu/test_sandbox_gpu.py has that case.)"""
    v = evaluate(load_task(TASKS / "compile_kills_reference.py"), None,
                 SandboxConfig(cache_dir=rehearse.cache, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0,
                               profile=False, calibrate=True, use_baseline_cache=False))
    assert v.verdict == "correct" and v.reward is not None, (v.verdict, v.reasons, v.log)
    assert v.compile_ms is None and v.eager_ms and v.speedup_vs_compile is None, (v.compile_ms, v.eager_ms)
    assert any(r.startswith("torch.compile baseline unavailable") for r in v.reasons), v.reasons
    assert [w.label for w in started].count("reference") == 2, [w.label for w in started]
    assert not {"reference_error", "worker_killed", "harness_exception"} & set(v.flags), v.flags


@pytest.mark.nvcc
@pytest.mark.parametrize("isolation", ["bwrap", "none"])
@pytest.mark.parametrize("oom", [True, False], ids=["the OOM killer acted", "no OOM kill"])
def test_a_candidate_worker_killed_from_outside_is_a_harness_error(rehearse, tmp_path, monkeypatch, started, isolation,
                                                                  oom):
    """The out-of-memory killer, as far as the harness can tell: a SIGKILL it did not send while the host
    counted an OOM kill (/proc/vmstat, faked here). Without one, the SIGKILL is the candidate's doing (its
    process guard closes the routes by which it could send one itself; an operator's kill is rare): -1.
    Confined, the worker cannot tell its pid to the outside (its own PID namespace, no shared files), and
    bwrap reports the SIGKILL as exit 137: the test finds the worker as the harness's own child, and the
    evaluator still reads a SIGKILL."""
    from cuda_agent.sandbox import memory

    counts = iter([7] + [8 if oom else 7] * 1000)  # the evaluator reads it once at its start
    monkeypatch.setattr(memory, "oom_kills", lambda: next(counts))

    ws = _variant(tmp_path, "import time\n" + _forward("time.sleep(60)\nreturn x"))
    killer = threading.Thread(target=_kill_the_candidate_in_forward, args=(started,), daemon=True)
    killer.start()
    v = rehearse(ws, static_rules=False, isolation=isolation)
    killer.join(timeout=5)
    if not oom:
        assert v.verdict == "runtime_error" and v.reward == -1, (v.verdict, v.reasons)
        assert "neither the harness nor the out-of-memory killer" in v.reasons[0]
        return
    assert v.verdict == HARNESS_ERROR and v.reward is None, (v.verdict, v.reasons)
    assert v.flags == ["worker_killed"], v.flags
    assert "SIGKILL" in v.reasons[0] and "not counted against the candidate" in v.reasons[0]


@pytest.mark.nvcc
def test_a_candidate_that_raised_its_oom_score_is_not_excused_by_the_oom_killer(rehearse, tmp_path, monkeypatch,
                                                                                started):
    """A candidate can offer itself to the OOM killer (``oom_score_adj`` up: no privilege needed, and a
    GPU worker's jail leaves its per-thread copy writable), so that host memory pressure kills it before
    its failure is seen, as a harness_error. The harness's watchdog sees the raise: the kill is then -1.
    Unconfined here, where the process-wide file is writable (a CPU jail's /proc is read-only)."""
    from cuda_agent.sandbox import memory, process

    if process._oom_score_adj("self") >= 1000:  # e.g. inside a Ray worker: no raise is possible, nor seen
        pytest.skip("this process already runs at oom_score_adj 1000")
    counts = iter([7] + [8] * 1000)  # the host counted an OOM kill meanwhile
    monkeypatch.setattr(memory, "oom_kills", lambda: next(counts))
    raise_it = ("import threading\nfor path in ('/proc/self/oom_score_adj',\n"
                "             f'/proc/self/task/{threading.get_native_id()}/oom_score_adj'):\n"
                "    try:\n        with open(path, 'w') as f:\n            f.write('1000')\n"
                "    except OSError:\n        pass\n")
    ws = _variant(tmp_path, "import time\n" + _forward(raise_it + "time.sleep(60)\nreturn x"))
    killer = threading.Thread(target=_kill_the_candidate_in_forward, daemon=True,
                              args=(started, lambda w: w.oom_score_raised is not None))
    killer.start()
    v = rehearse(ws, static_rules=False, isolation="none")
    killer.join(timeout=5)
    assert v.verdict == "runtime_error" and v.reward == -1, (v.verdict, v.reasons)
    assert "offered itself to the out-of-memory killer" in v.reasons[0] and "oom_score_adj to 1000" in v.reasons[0]
    assert "worker_killed" not in v.flags


def _kill_the_candidate_in_forward(started: list, ready=lambda worker: True) -> None:
    """SIGKILL the candidate's worker from outside once it sleeps in its forward and ``ready(worker)``."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        cand = [w for w in started if w.label == "candidate"]
        if cand and _sleeping_python(cand[0].proc.pid) and ready(cand[0]):
            os.kill(_sleeping_python(cand[0].proc.pid), signal.SIGKILL)
            return
        time.sleep(0.05)


def _sleeping_python(pid: int) -> int | None:
    """The worker's Python process (``pid`` itself unconfined; bwrap's descendant confined) once it is
    inside the candidate's forward (sleeping), else None."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
        if b"cuda_agent.sandbox.worker" in cmd and b"bwrap" not in cmd.split(b"\0")[0] \
                and stat.rsplit(")", 1)[1].split()[0] == "S" and _in_forward(p):
            return p
    return None


def _in_forward(pid: int) -> bool:
    """Whether the worker is inside the candidate's forward: its wait channel is a sleep, not a read on
    its pipe."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return "nanosleep" in f.read()
    except OSError:
        return False


@pytest.mark.nvcc
def test_the_candidates_own_crash_stays_a_runtime_error(rehearse, tmp_path):
    v = rehearse(_variant(tmp_path, "import os\n" + _forward("os._exit(3)")), static_rules=False)
    assert v.verdict == "runtime_error" and v.reward == -1, (v.verdict, v.reasons)
    assert not {"worker_killed", "reference_error", "harness_exception"} & set(v.flags)


@pytest.mark.nvcc
def test_a_candidate_hang_stays_a_timeout_although_the_harness_kills_it(rehearse, tmp_path):
    v = rehearse(_variant(tmp_path, "import time\n" + _forward("time.sleep(60)\nreturn x")),
                 static_rules=False, run_timeout_s=4.0)
    assert v.verdict == "timeout" and v.reward == -1, (v.verdict, v.reasons)
    assert "worker_killed" not in v.flags


@pytest.mark.nvcc
def test_an_exception_in_the_harness_is_a_harness_error_with_its_traceback(rehearse, monkeypatch):
    def broken_compare(*a, **kw):  # the evaluator reading the reference worker's comparison
        raise ZeroDivisionError("a bug in the judge")

    monkeypatch.setattr(evaluator_module, "Comparison", broken_compare)
    v = rehearse()
    assert v.verdict == HARNESS_ERROR and v.reward is None, (v.verdict, v.reasons)
    assert "harness_exception" in v.flags
    assert v.reasons[0].startswith("the harness raised ZeroDivisionError: a bug in the judge")
    assert "broken_compare" in v.log and "Traceback" in v.log
    assert v.eval_s is not None


def test_bad_input_still_raises(tmp_path, monkeypatch):
    from cuda_agent.tasks import Task, TaskError

    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    with pytest.raises(TaskError):
        evaluate(Task(name="t", source="x = 1\n"), load_solution(HONEST), SandboxConfig(cache_dir=tmp_path))


def test_eval_prints_a_null_reward():
    from cuda_agent.sandbox.commands.eval_cmd import summarize

    v = Verdict(verdict=HARNESS_ERROR, reward=None, flags=["worker_killed"])
    assert summarize(v).splitlines()[0].startswith("verdict: harness_error   reward: null")
