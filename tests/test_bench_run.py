"""bench runs against the real sandbox on a host without a GPU: static rejections and compile
errors are real verdicts there, and a solution that builds needs a GPU (reported, not recorded).

One property per test: a SIGKILLed run resumes with exact counts and no duplicates; bad input is a
per-task failure or a clear error; a lane that dies or overruns costs one attempt; the agent mode
runs a scripted policy and does not repeat finished episodes; baselines travel per GPU.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.bench.lanes import Lane, evaluate_one
from cuda_agent.bench.runner import Bench, BenchConfig
from cuda_agent.bench.store import ResultsDB
from cuda_agent.cli import main
from cuda_agent.sandbox import SandboxConfig
from cuda_agent.tasks import load_task

from .bench_helpers import broken_file, compile_error, needs_gpu, rejected, write_problems
from .conftest import ROOT

# only the tests that build (compile errors are real nvcc errors) need nvcc: they carry the nvcc mark


def _no_gpu_here() -> bool:
    from cuda_agent.sandbox.gpu import list_gpus

    return not list_gpus()


needs_gpu_less_host = pytest.mark.skipif(not _no_gpu_here(), reason="checks the GPU-less behaviour")


def _tree(tmp: Path) -> tuple[Path, Path]:
    """14 attempts: 13 get a row (2 compile errors, 7 rejections, 2 corrupt KernelBench files,
    a dangling link, a task without a solution); L2_1 builds and needs a GPU."""
    kb = write_problems(tmp / "kb", 1, range(1, 13))
    write_problems(kb, 2, [1, 2])
    sols = tmp / "solutions"
    sols.mkdir()
    for pid in range(1, 9):
        (compile_error if pid in (1, 6) else rejected)(sols / f"L1_{pid}", pid)
    broken_file(sols / "level_1_problem_9_sample_0_kernel.py")
    (sols / "level_1_problem_10_sample_0_kernel.py").write_bytes(bytes(range(256)) * 8)
    (sols / "L1_11.py").symlink_to(tmp / "gone" / "L1_11.py")
    needs_gpu(sols / "L2_1")
    rejected(sols / "L2_2", 2)
    return kb, sols


EXPECTED = {"L1_1": "compile_error", "L1_2": "rejected", "L1_3": "rejected", "L1_4": "rejected",
            "L1_5": "rejected", "L1_6": "compile_error", "L1_7": "rejected", "L1_8": "rejected",
            "L1_9": "compile_error", "L1_10": "compile_error", "L1_11": "compile_error", "L1_12": "compile_error",
            "L2_2": "rejected"}


def _rows(out: Path) -> dict[tuple[str, int], tuple]:
    if not (out / "results.sqlite").exists():
        return {}
    db = sqlite3.connect(out / "results.sqlite", timeout=30)
    try:
        return {(t, s): (status, verdict, finished) for t, s, status, verdict, finished in
                db.execute("SELECT task, sample, status, verdict, finished FROM results")}
    except sqlite3.OperationalError:  # the schema is not there yet
        return {}
    finally:
        db.close()


def _live_in_group(pgid: int) -> list[int]:
    """Processes of a process group that are still running (zombies excluded)."""
    live = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                live.append(int(d.name))
    return live


@needs_gpu_less_host
@pytest.mark.nvcc
def test_a_sigkilled_run_resumes_with_exact_counts_and_no_duplicates(tmp_path):
    kb, sols = _tree(tmp_path)
    out = tmp_path / "run"
    env = dict(os.environ, CUDA_AGENT_CACHE=str(tmp_path / "cache"), PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "cuda_agent.cli", "bench", "--kernelbench", str(kb), "--levels", "1,2",
           "--solutions", str(sols), "--out", str(out), "--no-progress", "--build-jobs", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while len(_rows(out)) < 2:
            assert proc.poll() is None, f"bench ended before the kill: {proc.stderr.read()}"
            assert time.time() < deadline, "no result within 120 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # the main process only: its lanes must notice and go
        proc.wait()
        before = _rows(out)
        assert 2 <= len(before) < 13, "the kill should land mid-run"
        t0 = time.time()
        while _live_in_group(proc.pid) and time.time() - t0 < 20:
            time.sleep(0.1)
        assert not _live_in_group(proc.pid), "evaluation lanes outlived their killed parent"

        again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        for pid in _live_in_group(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert again.returncode == 3, again.stderr  # L2_1 needs a GPU
    assert "no GPU on this host: 1 attempt(s)" in again.stderr
    after = _rows(out)
    assert {t: v for (t, s), (_, v, _) in after.items()} == EXPECTED
    assert all(s == 0 for _, s in after)
    for key, row in before.items():  # finished before the kill: kept, not evaluated again
        assert after[key] == row
    log = (out / "bench.log").read_text()
    assert f"start: 14 attempts, {len(before)} already recorded, {14 - len(before)} to do" in log
    assert "L2_1 sample 0: not evaluated: no GPU on this host" in log
    lines = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["task"], r["sample"]) for r in lines) == sorted(after)  # 13 rows, no duplicate

    # per-task artifacts, and the per-task failures of bad input
    l1_11 = json.loads((out / "tasks" / "L1_11" / "sample_0" / "verdict.json").read_text())
    assert after[("L1_11", 0)][0] == "error" and l1_11["flags"] == ["bad_solution"]
    assert "dangling link" in l1_11["reasons"][0] and "Traceback" in l1_11["log"]
    assert after[("L1_12", 0)][0] == "no_solution"
    l1_10 = (out / "tasks" / "L1_10" / "sample_0" / "eval.log").read_text()
    assert "syntax error" in l1_10 and "null bytes" in l1_10
    assert (out / "tasks" / "L1_1" / "sample_0" / "solution" / "kernels" / "relu_add.cu").is_file()
    assert "error: expected an expression" in (out / "tasks" / "L1_1" / "sample_0" / "eval.log").read_text()
    assert not (out / "tasks" / "L2_1" / "sample_0" / "verdict.json").exists()



@pytest.mark.nvcc
def test_a_lane_that_overruns_or_dies_costs_one_attempt(tmp_path):
    kb = write_problems(tmp_path / "kb", 1, [1])
    task = load_task(kb / "level1" / "1_relu_add_1.py")
    solution = compile_error(tmp_path / "sol", 1)
    config = SandboxConfig(cache_dir=tmp_path / "cache")
    lane = Lane("test", {"CUDA_VISIBLE_DEVICES": ""}, timeout_s=0.2)  # still importing torch when it runs out
    try:
        r = lane.evaluate(task, solution, config)
        assert r["status"] == "error" and r["timeout"] and "--task-timeout 0.2 s" in r["error"]
        assert lane.restarts == 1
        lane.timeout_s = 120
        threading.Timer(0.5, lane.proc.kill).start()
        r = lane.evaluate(task, solution, config)
        assert r["status"] == "error" and "died with exit code -9" in r["error"]
        assert lane.restarts == 2 and lane.proc.is_alive()
    finally:
        lane.kill()


def test_an_interrupted_bench_stops_a_lane_mid_evaluation_without_starting_another(tmp_path):
    """Ctrl-C (or `timeout -s INT`) kills the lanes while their threads wait on an evaluation: the wait ends
    with an interrupted reply, no new lane process is started (the interpreter's exit would wait on it: a
    bench on an H100 hung there for minutes), and nothing raises."""
    task = load_task(write_problems(tmp_path / "kb", 1, [1]) / "level1" / "1_relu_add_1.py")
    solution = compile_error(tmp_path / "sol", 1)
    lane = Lane("test", {"CUDA_VISIBLE_DEVICES": ""}, timeout_s=120)  # importing torch: still busy in 0.5 s
    first = lane.proc
    interrupt = threading.Timer(0.5, lane.kill)
    interrupt.start()
    r = lane.evaluate(task, solution, SandboxConfig(cache_dir=tmp_path / "cache"))
    interrupt.join()  # the kill itself waits for the process to end
    assert r["status"] == "error" and r["interrupted"], r
    assert lane.restarts == 0 and lane.proc is first and not first.is_alive()
    lane.kill()  # a second kill (the bench's cleanup after the thread's) is harmless


def test_an_exception_from_loading_or_evaluating_is_a_failure_with_its_traceback(tmp_path):
    task = load_task(write_problems(tmp_path / "kb", 1, [1]) / "level1" / "1_relu_add_1.py")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a solution")
    r = evaluate_one(task, str(notes), SandboxConfig(cache_dir=tmp_path / "cache"))
    assert r["status"] == "error"
    assert "Traceback" in r["error"] and "SolutionError" in r["error"] and "notes.txt" in r["error"]


@pytest.mark.nvcc
def test_agent_mode_runs_the_policy_keeps_trajectories_and_does_not_repeat_episodes(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    kb = write_problems(tmp_path / "kb", 1, [1, 2, 3, 4])
    calls, out = tmp_path / "calls.txt", tmp_path / "run"
    config = BenchConfig(kernelbench=kb, out=out, levels=(1,), agent="tests.bench_helpers:scripted_solver",
                         agent_argv=["--calls", str(calls)], progress=False, build_jobs=2, agent_jobs=2,
                         sandbox=SandboxConfig(cache_dir=tmp_path / "cache"))
    outcome = Bench(config).run()
    assert (outcome.total, outcome.recorded, outcome.no_gpu) == (4, 4, [])
    rows = {r.task: r for r in _results(out)}
    assert {t: (r.status, r.verdict["verdict"]) for t, r in rows.items()} == {
        "L1_1": ("evaluated", "rejected"), "L1_2": ("evaluated", "compile_error"),
        "L1_3": ("error", "runtime_error"), "L1_4": ("evaluated", "rejected")}
    assert rows["L1_3"].verdict["flags"] == ["agent_error"]
    assert "the LLM backend went away" in rows["L1_3"].verdict["reasons"][0]
    assert all(r.source == "agent" for r in rows.values())
    sample = out / "tasks" / "L1_2" / "sample_0"
    assert (sample / "trajectory.jsonl").read_text().count("\n") == 2
    assert (sample / "solution" / "model_new.py").is_file() and (sample / "agent.json").is_file()
    assert sorted(calls.read_text().split()) == ["L1_1", "L1_2", "L1_3", "L1_4"]

    # the evaluation of L1_4 is lost (as in a kill after the episode): it is redone, the episode is not
    db = ResultsDB(out / "results.sqlite")
    db.remove([("L1_4", 0)])
    db.close()
    outcome = Bench(config).run()
    assert (outcome.done_before, outcome.recorded) == (3, 1)
    assert len(calls.read_text().split()) == 4
    assert {r.task: r.verdict["verdict"] for r in _results(out)}["L1_4"] == "rejected"


def _results(out: Path):
    db = ResultsDB(out / "results.sqlite")
    try:
        return db.results()
    finally:
        db.close()


def test_bad_input_is_a_clear_error_and_no_run_starts(tmp_path, capsys):
    kb = write_problems(tmp_path / "kb", 1, [1, 2])
    sols = tmp_path / "sols"
    rejected(sols / "L1_1", 1)
    broken_file(sols / "level_1_problem_1_sample_0_kernel.py")
    base = ["bench", "--kernelbench", str(kb), "--levels", "1", "--out", str(tmp_path / "run")]
    cases = [
        (base + ["--solutions", str(sols)], "duplicate solution for task L1_1 sample 0"),
        (base + ["--solutions", str(sols), "--agent"], "exactly one of --solutions DIR, --agent and --calibrate"),
        (["bench", "--kernelbench", str(tmp_path / "nope"), "--out", str(tmp_path / "r"), "--solutions", str(sols)],
         "no such directory"),
        (base + ["--agent-solver", "json:run_episode"], "json has no function run_episode"),
        (base + ["--agent-solver", "no_such_module_here:solve"], "cannot import no_such_module_here"),
        (base + ["--solutions", str(sols), "--problems", "1-x"], "--problems '1-x'"),
        (["bench", "--kernelbench", str(kb), "--levels", "3", "--out", str(tmp_path / "r"), "--solutions", str(sols)],
         "level3: missing"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err, (argv, err)
    assert not (tmp_path / "run").exists() and not (tmp_path / "r").exists()


def test_words_after_double_dash_go_to_the_agent_untouched():
    from cuda_agent.bench.command import passthrough
    from cuda_agent.cli import build_parser

    args = build_parser().parse_args(["bench", "--kernelbench", "kb", "--agent", "--out", "run", "--", "--model", "m",
                                      "--out", "the-agents-own"])
    assert args.out == Path("run") and args.agent
    assert passthrough(args) == ["--model", "m", "--out", "the-agents-own"]


def test_ray_is_optional_and_its_absence_is_said_plainly(tmp_path, capsys):
    try:
        import ray  # noqa: F401
        pytest.skip("Ray is installed here")
    except ImportError:
        pass
    kb = write_problems(tmp_path / "kb", 1, [1])
    rejected(tmp_path / "sols" / "L1_1", 1)
    argv = ["bench", "--kernelbench", str(kb), "--levels", "1", "--solutions", str(tmp_path / "sols"), "--out",
            str(tmp_path / "run"), "--ray", "127.0.0.1:6379"]
    assert main(argv) == 2
    assert "--ray needs Ray, which is not installed here" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_baselines_are_exported_per_gpu_and_imported(tmp_path, monkeypatch, capsys):
    from cuda_agent.sandbox.baselines import Baseline, BaselineStore

    src, dst, exported = tmp_path / "src", tmp_path / "dst", tmp_path / "h200.json"
    store = BaselineStore(src / "baselines.sqlite")
    store.put(Baseline("sha1", "NVIDIA H200", "2.9.1", "fp32", 1.5, 0.75, 0.01))
    store.put(Baseline("sha2", "NVIDIA A100", "2.9.1", "fp32", 2.0, None, 0.01, "compile failed"))
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(src))
    assert main(["bench", "--export-baselines", str(exported), "--baseline-gpu", "NVIDIA H200"]) == 0
    assert "1 for NVIDIA H200" in capsys.readouterr().out
    assert [r["gpu"] for r in json.loads(exported.read_text())] == ["NVIDIA H200"]
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(dst))
    assert main(["bench", "--import-baselines", str(exported)]) == 0
    got = BaselineStore(dst / "baselines.sqlite").get("sha1", "NVIDIA H200", "2.9.1", "fp32")
    assert (got.eager_ms, got.compile_ms) == (1.5, 0.75)
    assert BaselineStore(dst / "baselines.sqlite").get("sha2", "NVIDIA A100", "2.9.1", "fp32") is None
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    assert main(["bench", "--import-baselines", str(tmp_path / "bad.json")]) == 2
    assert "not a baselines file" in capsys.readouterr().err
