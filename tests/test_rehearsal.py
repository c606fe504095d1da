"""An evaluation end to end on the CPU (a rehearsal: CUDA_AGENT_REHEARSAL=cpu). The CPU stands in
for the GPU: real worker processes, real builds (nvcc, host code registered for the CPU), trials,
baselines, timing with the timed-output checksums, re-check and verdict. Timings mean nothing here;
what is tested is the choreography and the dynamic defenses. The GPU suite (tests/gpu) is the real thing.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from cuda_agent.sandbox import SandboxConfig, evaluate, load_solution, timing
from cuda_agent.tasks import load_task

from .conftest import SOLUTIONS, TASKS

pytestmark = pytest.mark.nvcc

TASK = TASKS / "swish_small.py"
HONEST = SOLUTIONS / "rehearsal_swish_cpu"


@pytest.fixture
def rehearse(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    cache = tmp_path_factory.getbasetemp() / "rehearsal_cache"  # one cache for the module: builds, baselines

    def run(solution, task=TASK, **overrides):
        cfg = dict(cache_dir=cache, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0, profile=False)
        cfg.update(overrides)
        return evaluate(load_task(task), load_solution(solution), SandboxConfig(**cfg))

    return run


def test_gpu_work_before_the_trials_holds_the_gpu_lock_so_no_other_timing_overlaps_it(rehearse, monkeypatch,
                                                                                       tmp_path):
    """The compile baseline's first run (inputs drawn and the compiled model run on the GPU) and the
    candidate's import, construction and prepare() run kernels before the trials. They hold the GPU lock
    shared: on an H100 shared by two bench lanes, a compile run beside another evaluation's exclusive timing
    had made that evaluation's eager baseline up to 2x slow (benchmarks/RESULTS.md, levels 1-3 calibration)."""
    import fcntl

    from cuda_agent.sandbox import process
    from cuda_agent.sandbox.gpu import GpuLock

    cache = tmp_path / "cache"  # a fresh cache: the compile baseline is not cached yet, so it is run
    held: dict[tuple[str, str], bool] = {}
    request = process.WorkerProcess.request

    def probing(self, msg, timeout):
        if msg.get("op") in ("compile", "setup"):
            with open(GpuLock(cache).main, "a") as f:  # could a timer take the lock now?
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(f, fcntl.LOCK_UN)
                    held[(self.label, msg["op"])] = False
                except BlockingIOError:
                    held[(self.label, msg["op"])] = True
        return request(self, msg, timeout)

    monkeypatch.setattr(process.WorkerProcess, "request", probing)
    v = rehearse(HONEST, cache_dir=cache)
    assert v.verdict == "correct", (v.reasons, v.log)
    assert held == {("candidate", "setup"): True, ("reference", "compile"): True}
    # held, but recorded apart from the holds that say the GPU was busy (test_gpu_lock.py)
    assert v.timing["gpu_lock_setup_s"] > 0


def test_the_baselines_are_timed_before_any_of_the_candidates_code_is_loaded(rehearse, tmp_path):
    """Timed after the candidate's import, eager and compile could be slowed by a thread or a kernel (on a side
    stream) that the import left running, which no check of the candidate's own timing sees: its speed-ups
    would rise, and the slow baseline would be cached for every later evaluation of the task. Here the
    candidate's import writes down when it ran."""
    stamp = tmp_path / "imported_at"
    source = (f"import time\nopen({str(stamp)!r}, 'w').write(repr(time.time()))\n"
              + (HONEST / "model_new.py").read_text())
    # a fresh cache, so that the baselines are timed; the static rules and the jail off, which would refuse the
    # file write and hide the file
    v = rehearse(_variant(tmp_path, source), cache_dir=tmp_path / "cache", static_rules=False, isolation="none")
    assert v.verdict == "correct" and not v.baseline_cached, (v.reasons, v.log)
    imported = float(stamp.read_text())
    windows = v.timing["timed_windows"]  # eager, compile (unless it failed), then the candidate
    baselines = 2 if v.compile_ms else 1
    assert len(windows) > baselines and all(end < imported for _, end in windows[:baselines]), (windows, imported)
    assert all(start > imported for start, _ in windows[baselines:]), (windows, imported)
    # each side's host issue time over its GPU time (timing.HOST_BOUND), eager's kept with the cached baseline
    hb = v.timing["host_bound"]
    assert hb["threshold"] == timing.HOST_BOUND and all(isinstance(hb[k], float) and hb[k] > 0 for k in ("candidate", "eager")), hb
    again = rehearse(HONEST, cache_dir=tmp_path / "cache")
    assert again.baseline_cached and again.timing["host_bound"]["eager"] == hb["eager"], again.timing["host_bound"]


def test_no_other_evaluations_candidate_code_runs_while_a_baseline_is_timed(rehearse, monkeypatch, tmp_path):
    """The GPU lock keeps out only the harness's requests. Between them another evaluation's candidate stays
    loaded in its worker, and a thread (or a side-stream kernel) its import started runs on: beside a baseline
    being timed, it would slow that baseline, and the slow figure would be cached for every later evaluation of
    the task. So the baselines are timed quiet (GpuLock.quiet): after every other candidate's processes are gone.
    Here one evaluation's candidate starts a thread at import that writes down the time every 2 ms, and waits
    between its setup and its trials (holding no GPU lock) until another evaluation, of a task whose baselines are
    not cached, asks to time them. The candidates' workers are killed a second late: the hold ends with their
    processes, not with the signal (a SIGKILLed worker's queued kernels run until its process is gone)."""
    import threading

    from cuda_agent.sandbox import evaluator, process
    from cuda_agent.sandbox.gpu import GpuLock

    cache, ticks = tmp_path / "cache", tmp_path / "ticks"
    ticker = (f"import threading, time\n\n\ndef _tick(path={str(ticks)!r}):\n    with open(path, 'a') as f:\n"
              "        while True:\n            f.write(repr(time.time()) + '\\n')\n            f.flush()\n"
              "            time.sleep(0.002)\n\n\nthreading.Thread(target=_tick, daemon=True).start()\n")
    noisy = _variant(tmp_path, ticker + (HONEST / "model_new.py").read_text())
    other_task = tmp_path / "swish_other.py"  # another task (another hash): its baselines are not cached
    other_task.write_text(TASK.read_text() + "\n# another task\n")
    real_gpu_phase, real_quiet, asked = evaluator._Evaluation._gpu_phase, GpuLock.quiet, threading.Event()

    def gpu_phase(self, module):
        if self.solution.root == noisy:  # loaded, idle, and holding no GPU lock, until the other asks for quiet
            assert asked.wait(240), "the other evaluation never came to its baselines"
            time.sleep(0.5)  # its thread ticks on
        return real_gpu_phase(self, module)

    def quiet(self, *args, **kwargs):
        if ticks.exists():  # the other evaluation's (the first one's came before its candidate was loaded)
            asked.set()
        return real_quiet(self, *args, **kwargs)

    monkeypatch.setattr(evaluator._Evaluation, "_gpu_phase", gpu_phase)
    monkeypatch.setattr(GpuLock, "quiet", quiet)
    real_cleanup = process.WorkerProcess.cleanup

    def late_cleanup(self, wait=True):
        if self.label == "candidate":
            threading.Timer(1.0, real_cleanup, args=(self, wait)).start()
        else:
            real_cleanup(self, wait)

    monkeypatch.setattr(process.WorkerProcess, "cleanup", late_cleanup)
    box = {}
    first = threading.Thread(target=lambda: box.update(v=rehearse(noisy, cache_dir=cache, static_rules=False,
                                                                   isolation="none")))
    first.start()
    deadline = time.time() + 180
    while not ticks.exists() and time.time() < deadline and first.is_alive():
        time.sleep(0.05)
    assert ticks.exists(), "the first evaluation's candidate never started its thread"
    v = rehearse(HONEST, task=other_task, cache_dir=cache)
    first.join(300)
    assert box["v"].verdict == "correct" and v.verdict == "correct", (box["v"].reasons, v.reasons)
    assert not v.baseline_cached
    stamps = [float(x) for x in ticks.read_text().split()]
    start, end = v.timing["quiet"]["window"]
    asked = start - v.timing["quiet"]["waited_s"]
    assert any(t > asked for t in stamps), "the other candidate's thread had stopped before: nothing was tested"
    assert not [t for t in stamps if start <= t <= end], (v.timing["quiet"], [t for t in stamps if t > asked][:5])
    eager = v.timing["timed_windows"][0]  # the first timing: the eager baseline, inside the quiet window
    assert start <= eager[0] <= eager[1] <= end, (eager, v.timing["quiet"])


def test_baselines_timed_without_quiet_are_not_cached(rehearse, tmp_path):
    """Candidate code that does not end (a stuck evaluation, an agent's long command) does not hold every later
    baseline back for ever: after quiet_wait_s the baselines are timed beside it, for this verdict only."""
    from cuda_agent.sandbox.gpu import GpuLock

    cache = tmp_path / "cache"
    hold = GpuLock(cache).candidate_code()
    v = rehearse(HONEST, cache_dir=cache, quiet_wait_s=0.5)
    hold.release()
    assert v.verdict == "correct" and not v.baseline_cached, (v.reasons, v.log)
    assert v.timing["quiet"]["quiet"] is False and v.timing["quiet"]["waited_s"] >= 0.5, v.timing["quiet"]
    assert any("quiet_wait_s" in r for r in v.reasons), v.reasons
    again = rehearse(HONEST, cache_dir=cache)  # not cached: timed again, quiet this time
    assert not again.baseline_cached and again.timing["quiet"]["quiet"] is True, again.timing.get("quiet")
    assert rehearse(HONEST, cache_dir=cache).baseline_cached


def _variant(tmp_path, model_new: str):
    """The honest CPU workspace with another model_new.py (the kernels stay the same)."""
    ws = tmp_path / "ws"
    shutil.copytree(HONEST, ws)
    (ws / "model_new.py").write_text(model_new)
    return ws


def test_honest_solution_is_correct_and_every_timed_output_is_checked(rehearse):
    v = rehearse(HONEST)
    assert v.verdict == "correct", (v.reasons, v.log)
    assert v.reward >= 1 and v.num_trials >= 7 and "rehearsal" in v.gpu
    # a second timing attempt (host load on this CPU can call for one) has its outputs checked as well
    iters = v.timing["retimed"]["attempt_iters"] if "retimed" in v.timing else [v.timing["iters"]]
    assert v.timing["timed_outputs_checked"] == sum(iters) > 0 and v.timing["iters"] in iters, v.timing
    # in this order: the baselines (cached by now, or timed) come before any of the candidate's code is loaded
    assert list(v.timing["phases_s"]) == ["build", "reference_setup", "compile", "baselines", "candidate_setup",
                                          "gpu_phase"]
    assert v.timing["warmup"]["warmup_calls"] > 0
    # each worker's peak resident set at the end of each phase, from the phase its setup answered in, never falling
    by_phase = v.timing["peak_rss_by_phase_mb"]
    assert list(by_phase) == ["reference_setup", "compile", "baselines", "candidate_setup", "gpu_phase"], by_phase
    assert by_phase["reference_setup"]["reference"] > 100 and by_phase["candidate_setup"]["candidate"] > 100, by_phase
    # memory figures: every process's peak host RSS (a torch process holds > 100 MiB), the task's footprint
    mem = v.timing["memory"]
    assert all(mem[f"{p}_peak_rss_mb"] > 100 for p in ("evaluator", "reference", "candidate")), mem
    assert v.timing["peak_host_rss_mb"] == pytest.approx(sum(mem[f"{p}_peak_rss_mb"]
                                                             for p in ("evaluator", "reference", "candidate")), abs=0.2)
    # the same with the pages of torch's libraries, which all three map, counted once among them (PSS)
    share = [mem[f"{p}_others_share_mb"] for p in ("evaluator", "reference", "candidate")]
    assert all(x > 10 for x in share), mem
    assert v.timing["peak_host_pss_mb"] == pytest.approx(v.timing["peak_host_rss_mb"] - sum(share), abs=0.2)
    assert v.timing["footprint"]["input_mib"] > 0 and v.timing["footprint"]["output_mib"] > 0
    # the roofline block: the task's bytes as drawn, its FLOPs from FlopCounterMode, which has no formula for
    # swish's elementwise ops (said, not guessed); no bound on a CPU (no peaks, no measured bandwidth)
    r = v.roofline
    assert r["input_bytes"] == r["output_bytes"] == 256 * 1024 * 4 and r["param_bytes"] == 0
    assert r["flops"] == 0 and not r["flops_counted"] and {"aten.mul", "aten.sigmoid"} <= set(r["uncounted_ops"])
    assert r["flops_counted_on"] == "meta"
    assert r["bound_ms"] is None and r["fraction"] is None and "no peaks known" in r["note"]
    assert v.timing["gpu_lock_intervals"] and all(b >= a for a, b in v.timing["gpu_lock_intervals"])
    # every timing request (eager, compile unless cached, candidate) lies inside an exclusive hold of one GPU
    assert v.timing["gpu_uuid"] and v.timing["timed_windows"]
    assert all(any(a - 1e-3 <= s <= e <= b + 1e-3 for a, b in v.timing["gpu_lock_intervals"])
               for s, e in v.timing["timed_windows"])
    again = rehearse(HONEST)
    assert again.verdict == "correct" and again.baseline_cached and again.build_s < 0.5
    # the footprint and FLOPs as the first evaluation of the task read them on the meta device, from the cache
    assert again.timing["footprint"] == {**v.timing["footprint"], "cached": True}
    assert again.roofline["flops_counted_on"] == "meta" and again.roofline["uncounted_ops"] == r["uncounted_ops"]


def test_skipping_work_while_timed_is_caught(rehearse, tmp_path):
    ws = _variant(tmp_path, (SOLUTIONS / "cheat_skip_while_timed" / "model_new.py").read_text())
    v = rehearse(ws)
    assert v.verdict == "incorrect" and "timed_outputs_wrong" in v.flags, (v.verdict, v.reasons)
    assert v.reward == -1


def test_short_lived_thread_is_seen_without_the_static_rules(rehearse, tmp_path):
    ws = _variant(tmp_path, (SOLUTIONS / "cheat_thread" / "model_new.py").read_text())
    v = rehearse(ws, static_rules=False)
    assert v.verdict == "rejected" and v.flags == ["threads"], (v.verdict, v.flags, v.reasons)
    _from_a_trial(v, "trial 0 (task inputs)")


def test_lazy_tensor_output_is_rejected_without_the_static_rules(rehearse, tmp_path):
    ws = _variant(tmp_path, (SOLUTIONS / "cheat_lazy_tensor" / "model_new.py").read_text())
    v = rehearse(ws, static_rules=False)
    assert v.verdict == "rejected" and v.flags == ["lazy_output"], (v.verdict, v.flags, v.reasons)
    _from_a_trial(v, "trial 0 (task inputs)")


def _forward(body: str, init: str = "pass") -> str:
    """A model_new.py whose ModelNew has the given forward body (static rules are off in these tests)."""
    ind = "\n" + " " * 8
    return ("import torch\nimport torch.nn as nn\n\nimport cuda_ext\n\n\nclass ModelNew(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n        {ind.join(init.splitlines())}\n\n"
            f"    def forward(self, x):\n        {ind.join(body.splitlines())}\n")


def _from_a_trial(v, label: str) -> None:
    """The verdict's first reason comes from a trial with this label, not from a source line (a static
    finding reads 'model_new.py:LINE: [rule] ...')."""
    assert v.reasons and v.reasons[0].startswith(label), v.reasons
    assert not any("model_new.py:" in r for r in v.reasons), v.reasons


# One dynamic defense per test, static rules off: (what, model_new forward body, __init__ body, verdict,
# the exact flags, the label of the trial that must catch it)
DYNAMIC = [
    ("the dispatch guard sees torch compute", "return x * torch.sigmoid(x)", "pass", "rejected",
     ["torch_compute"], "trial 0 (task inputs)"),
    ("an input mutated, a fresh output returned", "out = cuda_ext.ew(x.contiguous())\nx.zero_()\nreturn out",
     "pass", "rejected", ["input_mutated"], "trial 0 (task inputs)"),
    ("an output that aliases the input", "return x.view(x.shape)", "pass", "rejected",
     ["output_aliases_input"], "trial 0 (task inputs)"),
    ("an output buffer reused across calls",
     "if self.buf is None:\n    self.buf = torch.empty_like(x)\nself.buf.copy_(cuda_ext.ew(x.contiguous()))\n"
     "return self.buf", "self.buf = None", "rejected", ["output_reused"], "trial 1 (signed inputs)"),
    ("an output cache keyed by the input's address, defeated by reused buffers",
     "key = x.data_ptr()\nif key not in self.cache:\n    self.cache[key] = cuda_ext.ew(x.contiguous())\n"
     "return self.cache[key].clone()", "self.cache = {}", "incorrect", [],  # a fresh copy: output_reused stays quiet
     "trial 2 (task inputs, same buffers as before)"),
]


@pytest.mark.parametrize("what,body,init,verdict,flags,label", DYNAMIC, ids=[d[0] for d in DYNAMIC])
def test_each_dynamic_defense_catches_its_cheat_without_the_static_rules(rehearse, tmp_path, what, body, init,
                                                                         verdict, flags, label):
    v = rehearse(_variant(tmp_path, _forward(body, init)), static_rules=False)
    assert (v.verdict, v.flags) == (verdict, flags), (what, v.verdict, v.flags, v.reasons)
    _from_a_trial(v, label)
    assert v.reward == -1


def test_signed_inputs_defeat_an_identity_kernel_on_a_task_with_non_negative_inputs(rehearse, tmp_path):
    v = rehearse(_variant(tmp_path, _forward("return x.clone()")), task=TASKS / "relu_nonneg_small.py",
                 static_rules=False)
    assert v.verdict == "incorrect" and v.flags == [], (v.verdict, v.flags, v.reasons)
    _from_a_trial(v, "trial 1 (signed inputs)")  # trial 0 (the task's own, non-negative inputs) passed
    assert v.num_trials == 2


def test_a_patched_timer_is_seen_by_the_integrity_check_without_the_static_rules(rehearse, tmp_path):
    patch = "\ntorch.cuda.Event.elapsed_time = lambda self, end: 1e-3\n"
    v = rehearse(_variant(tmp_path, _forward("return cuda_ext.ew(x.contiguous())") + patch), static_rules=False)
    assert v.verdict == "rejected" and v.flags == ["monkey_patch"], (v.verdict, v.flags, v.reasons)
    assert "torch.cuda.Event.elapsed_time" in v.reasons[0] and "model_new.py:" not in v.reasons[0]


def test_wrong_output_is_incorrect(rehearse, tmp_path):
    ws = _variant(tmp_path, "import torch.nn as nn\n\nimport cuda_ext\n\n\nclass ModelNew(nn.Module):\n"
                            "    def forward(self, x):\n        return cuda_ext.ew(cuda_ext.ew(x.contiguous()))\n")
    v = rehearse(ws)
    assert v.verdict == "incorrect" and v.reward == -1, (v.verdict, v.reasons)


def test_spare_workers_serve_the_next_evaluation(rehearse):
    from cuda_agent.sandbox.process import SPARES

    try:
        assert rehearse(HONEST, spare_workers=2).verdict == "correct"
        before = SPARES.taken
        v = rehearse(HONEST, spare_workers=2)
        assert v.verdict == "correct", (v.reasons, v.log)
        assert SPARES.taken - before == 2  # the reference and the candidate both came ready
        ref, cand = v.timing["workers"]["reference"], v.timing["workers"]["candidate"]
        # the unconfined spare imported torch.compile's modules while idle; the confined candidate's did not
        assert 0 < ref["boot_steps_s"]["harness_s"] <= ref["boot_steps_s"]["compiler_s"] <= ref["boot_s"], ref
        assert "compiler_s" not in cand["boot_steps_s"], cand
    finally:
        SPARES.close()


def test_bench_runs_real_evaluations_and_leaves_no_worker_behind(tmp_path, monkeypatch):
    """`cuda-agent bench --solutions` in its own process, with lanes, spare workers and the real sandbox."""
    import json
    import os
    import subprocess
    import sys

    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    (kb / "1_Swish.py").write_text(TASK.read_text())
    (kb / "2_Swish.py").write_text(TASK.read_text().replace("cols = 1024", "cols = 512"))
    sols = tmp_path / "solutions"
    shutil.copytree(HONEST, sols / "L1_1")
    shutil.copytree(HONEST, sols / "L1_2")
    shutil.copy(SOLUTIONS / "cheat_skip_while_timed" / "model_new.py", sols / "L1_2" / "model_new.py")
    env = dict(os.environ, CUDA_AGENT_REHEARSAL="cpu", CUDA_AGENT_CACHE=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "bench", "--kernelbench", str(tmp_path / "kb"),
                        "--levels", "1", "--solutions", str(sols), "--out", str(tmp_path / "run"), "--no-progress"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    rows = {r["task"]: r["verdict"] for r in map(json.loads, (tmp_path / "run" / "results.jsonl").read_text().splitlines())}
    assert rows["L1_1"]["verdict"] == "correct"
    assert rows["L1_2"]["verdict"] == "incorrect" and "timed_outputs_wrong" in rows["L1_2"]["flags"]
    assert not _workers_with_env_containing(str(tmp_path))


def _workers_with_env_containing(text: str) -> list[str]:
    """Live sandbox workers (read from /proc) whose environment mentions ``text``."""
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            env = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if "cuda_agent.sandbox.worker" in cmd and text in env:
            found.append(pid)
    return found


@pytest.mark.parametrize("loaded_control", [True, False], ids=["host load", "worker under-reports"])
def test_evaluator_clock_remeasures_the_harness_cost_before_distrusting_the_worker(rehearse, monkeypatch,
                                                                                  loaded_control):
    """The evaluator's clock sees more per call than the candidate's worker reported. Under host load
    (the reference, timed again in the same window, sees the same extra cost) that is no evidence; a
    worker whose report alone falls short is flagged and its figure replaced."""
    from cuda_agent.sandbox import evaluator

    real_time, extra_ms = evaluator._Evaluation._time, 100.0

    def slow_clock(self, worker, rotation, target, wrap, extra=None, first_step=0):
        t = real_time(self, worker, rotation, target, wrap, extra, first_step)
        after_baseline = getattr(self, "baseline", None) is not None
        if t is not None and (worker is self.cand or (loaded_control and after_baseline)):
            t.evaluator_ms_per_iter += extra_ms
        return t

    rehearse(HONEST)  # baselines cached: the harness cost now comes from an earlier, quieter moment
    monkeypatch.setattr(evaluator._Evaluation, "_time", slow_clock)
    v = rehearse(HONEST)
    assert v.verdict == "correct", (v.reasons, v.log)
    assert "control_overhead_ms" in v.timing
    tm = v.timing
    unexplained = tm["evaluator_ms_per_iter"] - tm["gpu_median_ms"] - tm["harness_overhead_ms"]
    if loaded_control:
        # the re-measured cost explains the extra 100 ms (what is left is this CPU's noise: under 1 ms on a
        # quiet machine, up to 25 ms seen on a busy 2-core box)
        assert tm["harness_overhead_ms"] == pytest.approx(tm["control_overhead_ms"], abs=1e-3)
        assert tm["control_overhead_ms"] >= extra_ms
        assert unexplained < extra_ms / 2, tm  # without the re-measure it would be >= extra_ms
    else:
        # flagged, and the worker's figure replaced by the evaluator's own less the harness's cost (which a
        # loaded runner's control measurement can raise to tens of ms: 48.9 ms seen on a busy 2-core box)
        assert "timer_mismatch" in v.flags, (v.flags, tm)
        assert v.ms == pytest.approx(tm["evaluator_ms_per_iter"] - tm["harness_overhead_ms"], abs=0.05), (v.ms, tm)
        assert v.ms > tm["gpu_median_ms"] + 1.0, (v.ms, tm)


CLOCK_ONE_CASES = [
    # (id, the curve the candidate's worker reports at median m, its wall - events, flagged)
    ("honest", lambda m: [[m / 2, 0.02], [2 * m, 0.15]], lambda m, gap: gap + 0.02, False),
    ("hidden work", lambda m: [[m / 2, 0.02], [2 * m, 0.15]], lambda m, gap: gap + 0.02 + 0.2 * (1 + m), True),
    # a curve rewritten from inside the worker (its reply is the candidate's word): capped, the work still seen
    ("inflated curve", lambda m: [[m / 10, 50.0], [10 * m, 50.0]], lambda m, gap: 0.3 * (1 + m), True),
]


@pytest.mark.parametrize("curve, excess, flagged", [c[1:] for c in CLOCK_ONE_CASES], ids=[c[0] for c in CLOCK_ONE_CASES])
def test_clock_one_allows_the_honest_overhead_of_a_call_of_the_candidate_s_own_length(rehearse, monkeypatch, curve,
                                                                                   excess, flagged):
    """The wall clock exceeds the events by more for a longer call (on an H100 0.015-0.027 ms for a trivial add,
    up to 0.065 ms for a 2.7 ms spin). The check reads the worker's gap curve at the candidate's own length: an
    honest call that exceeds its events by that much is not flagged (one figure from the trivial call flagged it,
    as on the H100's sm_90a kernel), while 0.2 ms more is flagged and charged. The curve is the candidate's
    worker's word: it allows at most GAP_SLACK_MS more than the reference's own trivial call."""
    from cuda_agent.sandbox import process, timing

    real_request, seen = process.WorkerProcess.request, []

    def request(self, msg, timeout):
        r = real_request(self, msg, timeout)
        if msg["op"] == "time" and self.label == "candidate":
            m = r["gpu_median_ms"]
            assert timing.valid_curve(r["gap_curve"]), r["gap_curve"]  # measured by the worker itself
            r["gap_curve"] = curve(m)
            r["wall_median_ms"] = m + excess(m, timing.gap_at(r["gap_curve"], m))  # (over 10% of m however slow)
            seen.append(r)
        return r

    monkeypatch.setattr(process.WorkerProcess, "request", request)
    v = rehearse(HONEST)
    assert v.verdict == "correct", (v.reasons, v.log)
    tm = v.timing
    # the gap and the curve on record are the kept attempt's (a loaded host can bring a second one about)
    kept = [r for r in seen if r["gap_curve"] == tm["gap_curve"] and r["wall_median_ms"] == tm["wall_median_ms"]]
    assert kept, (tm, seen)
    gap = timing.gap_at(tm["gap_curve"], tm["gpu_median_ms"])
    if gap < 1.0:  # read off the curve at the kept attempt's own length: 0.02 + 0.13 / 3 on the rising one
        assert gap == pytest.approx(0.02 + 0.13 / 3) and tm["gap_ms"] == pytest.approx(gap), tm
    else:  # capped: the reference's trivial gap (this CPU's, about 0) plus GAP_SLACK_MS
        assert timing.GAP_SLACK_MS - 0.05 < tm["gap_ms"] < timing.GAP_SLACK_MS + 0.05, tm
    if flagged:
        assert "timing_mismatch" in v.flags, (v.flags, tm)
        # charged the wall figure less the gap (or more, where a loaded host also brings the evaluator's clock in)
        charged = tm["wall_median_ms"] - tm["gap_ms"]
        assert v.ms == pytest.approx(charged, abs=1e-6) or ("timer_mismatch" in v.flags and v.ms > charged), (v.ms, tm)
    else:
        assert "timing_mismatch" not in v.flags, (v.flags, v.reasons, tm)
        # charged the events' figure. A loaded CI host can also trip clock 2, the evaluator's own clock, which this
        # test does not steer (2.03 ms charged on 1.54 ms of events, seen in CI); then that clock's figure is charged
        expected = tm["gpu_median_ms"]
        if "timer_mismatch" in v.flags:
            expected = max(expected, tm["evaluator_ms_per_iter"] - tm["harness_overhead_ms"])
        assert v.ms == pytest.approx(expected, abs=1e-5), (v.ms, v.flags, tm)


@pytest.mark.parametrize("field, value", [("gpu_median_ms", "0.1"), ("wall_median_ms", float("nan")), ("n", 0),
                                          ("gpu_median_ms", 10**400)])
def test_timing_figures_that_are_not_numbers_are_a_tampered_reply(rehearse, monkeypatch, field, value):
    """Figures the harness would never send (a string, NaN, no calls, an int past any float) reject the
    candidate as tampering, never a harness error (whose null reward would be a gain)."""
    from cuda_agent.sandbox import process

    real_request = process.WorkerProcess.request

    def request(self, msg, timeout):
        r = real_request(self, msg, timeout)
        if msg["op"] == "time" and self.label == "candidate":
            r[field] = value
        return r

    monkeypatch.setattr(process.WorkerProcess, "request", request)
    v = rehearse(HONEST)
    assert v.verdict == "rejected" and "bad_reply" in v.flags, (v.verdict, v.flags, v.reasons)
    assert "not finite numbers" in v.reasons[0], v.reasons


@pytest.mark.parametrize("value", [10**400, "0.1"])
def test_a_tampered_issue_time_is_no_figure_and_no_harness_error(rehearse, monkeypatch, value):
    """The host's issue time (timing.host_bound) is informative only: what a candidate's worker sends there, an
    int past any float or a string, leaves the candidate's share unknown. It neither raises (which would make a
    harness_error of the verdict, and spare a cheat its rejection) nor moves the verdict."""
    from cuda_agent.sandbox import process

    real_request = process.WorkerProcess.request

    def request(self, msg, timeout):
        r = real_request(self, msg, timeout)
        if msg["op"] == "time" and self.label == "candidate":
            r["issue_median_ms"] = value
        return r

    monkeypatch.setattr(process.WorkerProcess, "request", request)
    v = rehearse(HONEST)
    assert v.verdict == "correct", (v.verdict, v.flags, v.reasons)
    assert v.timing["host_bound"]["candidate"] is None and v.timing["host_bound"]["eager"] is not None, v.timing


def test_a_candidate_slowed_once_by_the_host_is_timed_again_and_both_attempts_outputs_are_checked(rehearse,
                                                                                                    monkeypatch):
    """Load that comes and goes (other evaluations, builds) slows one timing request of an honest
    candidate as the evaluator's clock sees it, not the control's. The candidate is timed once more and
    the attempt the clock agrees with is kept: the extra time is not charged, the first attempt is on record, and the
    timed outputs of both attempts checked against the reference."""
    from cuda_agent.sandbox import evaluator

    real_time, extra_ms, seen, steps = evaluator._Evaluation._time, 100.0, [], []

    def once_slow(self, worker, rotation, target, wrap, extra=None, first_step=0):
        t = real_time(self, worker, rotation, target, wrap, extra, first_step)
        if t is not None and worker is self.cand:
            seen.append(t.n)
            steps.append((first_step, t.reply["start_step"]))
            if len(seen) == 1:
                t.evaluator_ms_per_iter += extra_ms
        return t

    rehearse(HONEST)
    monkeypatch.setattr(evaluator._Evaluation, "_time", once_slow)
    v = rehearse(HONEST)
    assert v.verdict == "correct", (v.reasons, v.log)
    tm = v.timing
    # the 100 ms the host added once is not charged (this CPU's own noise may still flag the kept attempt)
    assert v.ms < extra_ms / 2, (v.ms, v.reasons, tm)
    assert len(seen) == 2, seen  # timed twice (each attempt prepared and warmed up afresh)
    assert tm["retimed"]["first_excess_ms"] >= extra_ms / 2, tm["retimed"]
    assert tm["retimed"]["excess_ms"] < extra_ms / 2, tm["retimed"]
    assert tm["evaluator_ms_per_iter"] < tm["retimed"]["first_evaluator_ms_per_iter"] - extra_ms / 2
    assert tm["timed_outputs_checked"] == sum(seen), (seen, tm)
    assert tm["retimed"]["attempt_iters"] == seen, (seen, tm["retimed"])
    # the second attempt's ring goes on past every step the first one timed: no input values repeat
    (_, first_start), (second_from, second_start) = steps
    assert second_from == first_start + seen[0] and second_start > second_from, steps


@pytest.mark.parametrize("claimed", [-1, 10**18], ids=["before its first step", "past any step it could reach"])
def test_a_timing_reply_that_claims_steps_the_attempt_never_ran_is_rejected(rehearse, monkeypatch, claimed):
    """The reference recomputes the timed outputs' checksums from the step the reply names: a reply that
    names steps its attempt never ran (an earlier attempt's inputs, whose outputs could have been kept;
    or so far on that the refresh factors repeat) is tampering."""
    from cuda_agent.sandbox import evaluator

    real_time = evaluator._Evaluation._time

    def claims(self, worker, rotation, target, wrap, extra=None, first_step=0):
        t = real_time(self, worker, rotation, target, wrap, extra, first_step)
        if t is not None and worker is self.cand:
            t.reply["start_step"] = claimed
        return t

    monkeypatch.setattr(evaluator._Evaluation, "_time", claims)
    v = rehearse(HONEST)
    assert v.verdict == "rejected" and "bad_reply" in v.flags, (v.verdict, v.flags, v.reasons)
    assert "first timed step" in v.reasons[0], v.reasons


CONTENT_CACHE = """import torch
import torch.nn as nn

import cuda_ext

_seen = {}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        key = x.contiguous().numpy().tobytes()  # the inputs' values (CPU tensors in rehearsal)
        if key in _seen:
            with open(HITS, "a") as f:
                f.write("hit\\n")
            return _seen[key].clone()
        out = cuda_ext.ew(x.contiguous())
        _seen[key] = out.clone()
        return out
"""


def test_a_retimed_candidate_never_sees_an_input_again_so_a_content_keyed_cache_never_hits(rehearse, tmp_path,
                                                                                          monkeypatch):
    """A cache keyed on the inputs' values would hit on every call of a second timing attempt that
    replayed the first one's steps, and a candidate can bring the retry about itself (a few slow calls
    move the evaluator's clock, not the worker's median). Every call, in every attempt, sees values no
    call saw before: the cache never hits."""
    from cuda_agent.sandbox import evaluator

    hits = tmp_path / "hits.txt"
    real_time, seen = evaluator._Evaluation._time, []

    def first_slow(self, worker, rotation, target, wrap, extra=None, first_step=0):
        t = real_time(self, worker, rotation, target, wrap, extra, first_step)
        if t is not None and worker is self.cand:
            seen.append(t.n)
            if len(seen) == 1:
                t.evaluator_ms_per_iter += 100.0
        return t

    monkeypatch.setattr(evaluator._Evaluation, "_time", first_slow)
    ws = _variant(tmp_path, CONTENT_CACHE.replace("HITS", repr(str(hits))))
    v = rehearse(ws, static_rules=False, isolation="none")
    assert "retimed" in v.timing and len(seen) == 2, (seen, v.verdict, v.reasons)
    assert not hits.exists(), hits.read_text().count("hit")


HANGING_FORWARD = """import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = 0
        while n >= 0:  # never returns
            n += 1
        return cuda_ext.ew(x.contiguous())
"""


def test_a_bench_sigkilled_mid_evaluation_leaves_no_worker_and_resumes_exactly(tmp_path):
    """SIGKILL the bench while a candidate is stuck in forward: no sandbox worker outlives it (an orphan
    would keep a GPU busy under the next run), and the same command again evaluates only the rest."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    sols = tmp_path / "solutions"
    for pid, cols in ((1, 1024), (2, 512)):
        (kb / f"{pid}_Swish.py").write_text(TASK.read_text().replace("cols = 1024", f"cols = {cols}"))
        shutil.copytree(HONEST, sols / f"L1_{pid}")
    (sols / "L1_2" / "model_new.py").write_text(HANGING_FORWARD)
    env = dict(os.environ, CUDA_AGENT_REHEARSAL="cpu", CUDA_AGENT_CACHE=str(tmp_path / "cache"))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "cuda_agent.cli", "bench", "--kernelbench", str(tmp_path / "kb"), "--levels", "1",
           "--solutions", str(sols), "--out", str(run), "--no-progress", "--per-gpu", "1"]

    def rows() -> dict:
        path = run / "results.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return {r["task"]: r for r in map(json.loads, lines)}

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while len(rows()) < 1:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline, "no evaluation finished within 300 s"
            time.sleep(0.2)
        time.sleep(6)  # L1_2's candidate is now spinning in forward
        assert set(rows()) == {"L1_1"}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.time()
        while _workers_with_env_containing(str(tmp_path)) and time.time() - t0 < 20:
            time.sleep(0.2)
        assert not _workers_with_env_containing(str(tmp_path)), "sandbox workers outlived the killed bench"
    finally:
        for pid in _workers_with_env_containing(str(tmp_path)):
            os.kill(int(pid), signal.SIGKILL)
    before = rows()
    (sols / "L1_2" / "model_new.py").write_text((HONEST / "model_new.py").read_text())  # ends this time
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    after = rows()
    assert {t: r["verdict"]["verdict"] for t, r in after.items()} == {"L1_1": "correct", "L1_2": "correct"}
    assert all(after[t] == before[t] for t in before)  # finished before the kill: kept as they were
    assert len((run / "results.jsonl").read_text().splitlines()) == 2  # no duplicates
    assert "start: 2 attempts, 1 already recorded, 1 to do" in (run / "bench.log").read_text()
    assert not _workers_with_env_containing(str(tmp_path))


DATA_DEPENDENT = '''"""A forward the meta device cannot run (.item()): its FLOPs are counted on the first reference trial."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        scale = 2.0 if x.abs().sum().item() > 0 else 1.0
        return self.fc(x) * scale


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''


def test_flops_the_meta_device_cannot_count_are_counted_on_the_reference_run(rehearse, tmp_path):
    task = tmp_path / "data_dependent.py"
    task.write_text(DATA_DEPENDENT)
    v = evaluate(load_task(task), None, SandboxConfig(cache_dir=tmp_path / "cache", rep_ms=20.0, warmup_ms=5.0,
                                                       run_timeout_s=120.0, profile=False, calibrate=True))
    assert v.verdict == "correct", (v.reasons, v.log)
    r = v.roofline
    assert r["flops_counted_on"] == "reference run" and r["flops"] == 2 * 16 * 64 * 32
    assert r["param_bytes"] == (64 * 32 + 32) * 4 and r["input_bytes"] == 16 * 64 * 4
    assert {"aten.abs", "aten.sum", "aten.mul"} <= set(r["uncounted_ops"]) and not r["flops_counted"]


def test_profiled_workers_still_evaluate_and_leave_a_whole_profile_each(rehearse, monkeypatch, tmp_path):
    """CUDA_AGENT_WORKER_PROFILE (benchmarks/sandbox_profile.py's diagnostics): each worker serves as before and
    leaves one whole cProfile file, rewritten after every reply (a worker killed while it writes leaves a .tmp
    beside it, never a partial .prof)."""
    import pstats

    from cuda_agent.sandbox import worker

    prof = tmp_path / "prof"
    prof.mkdir()
    monkeypatch.setenv(worker.PROFILE_ENV, str(prof))
    v = rehearse(HONEST, cache_dir=tmp_path / "cache", isolation="none")
    assert v.verdict == "correct", (v.reasons, v.log)
    files = sorted(prof.glob("*.prof"))
    assert len(files) >= 2, sorted(prof.iterdir())  # the reference's and the candidate's at least
    assert all(pstats.Stats(str(f)).total_calls > 0 for f in files)


PYBIND_BINDING = """#include <torch/extension.h>
extern "C" void swish_host(const float* x, float* y, long n);
torch::Tensor ew(torch::Tensor x) {
  auto y = torch::empty_like(x);
  swish_host(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
PYBIND11_MODULE(cuda_ext, m) { m.def("ew", &ew); }
"""


def test_a_workspace_with_a_pybind_module_is_imported_as_cuda_ext(rehearse, tmp_path):
    """A binding that defines PYBIND11_MODULE (not a torch library) is built as a Python module and imported
    under the name model_new.py imports, `cuda_ext`."""
    ws = _variant(tmp_path, (HONEST / "model_new.py").read_text())
    (ws / "kernels" / "ew_binding.cpp").write_text(PYBIND_BINDING)
    v = rehearse(ws)
    assert v.verdict == "correct", (v.reasons, v.log)


DROPOUT = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.dropout = nn.Dropout(p)  # in training mode, as a KernelBench task leaves it (L2_66)

    def forward(self, x):
        return torch.softmax(self.dropout(x), dim=1)


def get_inputs():
    return [torch.rand(16, 64)]


def get_init_inputs():
    return [{p}]
'''


@pytest.mark.parametrize("p, verdict", [(0.2, "harness_error"), (0.0, "correct")])
def test_a_reference_that_does_not_repeat_itself_is_the_tasks_harness_error_not_the_candidates(p, verdict,
                                                                                              rehearse, tmp_path):
    """KernelBench L2_66 (dropout in training mode) calibrated as `incorrect` on an H100: its own Model cannot
    match itself. The reference's worker runs it again on the same inputs under another random state when a
    candidate fails the comparison, and says so: harness_error, flagged, no reward. With p=0 it repeats."""
    task = tmp_path / "dropout.py"
    task.write_text(DROPOUT.replace("{p}", str(p)))
    v = evaluate(load_task(task), None, SandboxConfig(cache_dir=tmp_path / "cache", rep_ms=20.0, warmup_ms=5.0,
                                                       run_timeout_s=120.0, profile=False, calibrate=True))
    assert v.verdict == verdict, (v.reasons, v.log)
    if verdict == "harness_error":
        assert v.flags == ["reference_not_repeatable"] and v.reward is None
        assert "the reference does not repeat itself" in v.reasons[0] and v.reasons[0].startswith("trial 0")


def test_the_cli_starts_both_workers_before_it_loads_the_task(tmp_path):
    """``cuda-agent eval`` starts the reference's and the candidate's workers first thing (process.prestart),
    and the evaluation takes those two rather than starting its own; each says where its setup went."""
    env = dict(os.environ, CUDA_AGENT_CACHE=str(tmp_path / "cache"), CUDA_AGENT_REHEARSAL="cpu")
    r = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "eval", str(TASK), str(HONEST), "--json",
                        "--trials", "1"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["verdict"] == "correct", (v["reasons"], v["log"])
    ref, cand = v["timing"]["workers"]["reference"], v["timing"]["workers"]["candidate"]
    assert ref["from_pool"] and cand["from_pool"], v["timing"]["workers"]
    assert ref["boot_s"] > 0 and ref["waited_s"] >= 0 and cand["boot_s"] > 0
    assert {"cuda", "gap", "task", "footprint", "flops", "model", "weights"} <= set(ref["steps_s"])
    assert {"cuda", "gap", "harness", "import", "model"} <= set(cand["steps_s"])
    for w in (ref, cand):  # where the start went: interpreter, torch, the harness, in that order
        b = w["boot_steps_s"]
        assert 0 <= b["python_s"] <= b["torch_s"] <= b["harness_s"] <= w["boot_s"], w


def test_a_variable_torch_writes_itself_does_not_reach_the_workers(monkeypatch):
    """Inductor writes its default cache directory into the environment when it is imported: a worker started
    before that (process.prestart) must match the one asked for after, and a confined worker works out its own."""
    from cuda_agent.sandbox import process

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cfg = SandboxConfig()
    before = process.worker_env(cfg)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_test")
    assert process.worker_env(cfg) == before and "TORCHINDUCTOR_CACHE_DIR" not in before
    # a confined load_inline candidate's environment too (the build's variables start from os.environ again)
    inline = process.candidate_env(SandboxConfig(isolation="bwrap"), "file")
    assert "TORCHINDUCTOR_CACHE_DIR" not in inline and "TORCH_EXTENSIONS_DIR" in inline
    monkeypatch.setattr(process, "_SET_BY_USER", frozenset({"TORCHINDUCTOR_CACHE_DIR"}))  # the user's own choice
    assert process.worker_env(cfg)["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/torchinductor_test"


SCALAR_INPUT = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, s):
        return A * s


def get_inputs():
    return [torch.randn(64, 128), 3.5]


def get_init_inputs():
    return []
'''


def test_a_model_new_whose_weights_do_not_match_is_told_every_key_that_differs(rehearse, tmp_path):
    """ModelNew gets Model's weights through load_state_dict; when its parameters differ, the verdict quotes
    torch's whole list (missing and unexpected keys), not only the last line of it."""
    task = tmp_path / "scaled_swish.py"
    task.write_text(TASK.read_text().replace("        super().__init__()\n",
                                             "        super().__init__()\n        self.scale = nn.Parameter(torch.ones(4))\n", 1))
    ws = _variant(tmp_path, (HONEST / "model_new.py").read_text().replace(
        "        super().__init__()\n",
        "        super().__init__()\n        self.other = nn.Parameter(torch.ones(4))\n", 1).replace(
        "import torch.nn as nn", "import torch\nimport torch.nn as nn", 1))
    v = rehearse(ws, task=task)
    assert v.verdict == "runtime_error", (v.verdict, v.reasons, v.log)
    text = " ".join(v.reasons) + v.log
    assert "ModelNew must accept load_state_dict" in text, (v.reasons, v.log)
    # ModelNew's own parameter is missing from Model's weights, and Model's is unexpected to ModelNew
    assert 'Missing key(s) in state_dict: "other"' in text and 'Unexpected key(s) in state_dict: "scale"' in text, \
        (v.reasons, v.log)


def test_a_plain_number_among_the_inputs_travels_to_both_workers(rehearse, tmp_path):
    """KernelBench L1_5 passes a float beside its matrix: the reference draws it, shares it by value with the
    candidate's worker (share.Exporter), and both compute with it; the calibration comes out correct."""
    task = tmp_path / "scalar_input.py"
    task.write_text(SCALAR_INPUT)
    v = evaluate(load_task(task), None, SandboxConfig(cache_dir=tmp_path / "cache", rep_ms=20.0, warmup_ms=5.0,
                                                       run_timeout_s=120.0, profile=False, calibrate=True))
    assert v.verdict == "correct", (v.reasons, v.log)
    assert v.roofline["input_bytes"] == 64 * 128 * 4 and v.roofline["output_bytes"] == 64 * 128 * 4  # the number: none
