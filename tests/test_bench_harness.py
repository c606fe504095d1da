"""bench and harness errors (issue 15), on the CPU rehearsal (CUDA_AGENT_REHEARSAL=cpu: real lanes,
workers and verdicts, the CPU standing in for the GPU): a harness_error is evaluated once more with the
first verdict kept, and reports count harness errors apart; ``bench --calibrate`` evaluates every
task's own Model, resumes, refuses to mix with a solutions run, and reports its calibration."""

import json
import shutil
from pathlib import Path

import pytest

from cuda_agent.bench.metrics import Attempt, CalibrationRow, calibrated_share, calibration_row, summarize
from cuda_agent.bench.report import load, write_report
from cuda_agent.bench.runner import Bench, BenchConfig, needs_retry
from cuda_agent.bench.sources import BenchError
from cuda_agent.cli import main
from cuda_agent.sandbox import SandboxConfig

from .bench_helpers import fill_run, verdict
from .conftest import SOLUTIONS, TASKS

HONEST = SOLUTIONS / "rehearsal_swish_cpu"
SWISH = (TASKS / "swish_small.py").read_text()
FORWARD = "        return x * torch.sigmoid(x)\n"


def _task(body: str) -> str:
    return "import os\nimport time\n" + SWISH.replace(FORWARD, "".join(f"        {ln}\n" for ln in body.splitlines()))


def _sandbox(tmp: Path, **kw) -> SandboxConfig:
    return SandboxConfig(cache_dir=tmp / "cache", rep_ms=20.0, warmup_ms=5.0, run_timeout_s=60.0, profile=False, **kw)


@pytest.fixture
def rehearsal(monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")  # the lanes inherit it


# ----------------------------------------------------------------------------- units

def test_which_replies_are_retried():
    he = {"status": "evaluated", "verdict": {"verdict": "harness_error", "flags": ["reference_error"]}}
    assert needs_retry(he)
    assert not needs_retry({"status": "evaluated", "verdict": {"verdict": "harness_error", "flags": ["does_not_fit"]}})
    assert not needs_retry({"status": "evaluated",
                            "verdict": {"verdict": "harness_error", "flags": ["reference_not_repeatable"]}})
    assert not needs_retry({"status": "evaluated", "verdict": {"verdict": "runtime_error", "flags": []}})
    assert not needs_retry({"status": "error", "error": "Traceback"})


def test_harness_errors_are_counted_apart_and_stay_in_the_denominator():
    attempts = [Attempt.from_verdict(v) for v in (
        {"verdict": "correct", "speedup_vs_eager": 2.0, "flags": ["harness_retried"]},
        {"verdict": "harness_error", "flags": ["reference_error", "harness_retried"]},
        {"verdict": "runtime_error"}, {"verdict": "correct", "speedup_vs_eager": 0.5})]
    s = summarize("Overall", attempts, ["correct", "harness_error", "runtime_error", "correct"])
    assert (s.harness_errors, s.retried, s.attempts, s.pass_rate) == (1, 2, 4, 0.5)


def test_calibration_rows_and_the_share_within_three_percent():
    v = {"verdict": "correct", "speedup_vs_eager": 0.98, "eval_s": 20.0,
         "timing": {"phases_s": {"gpu_phase": 5.0}, "peak_host_rss_mb": 900.0}}
    row = calibration_row("L1_1", v)
    assert (row.gpu_phase_share, row.peak_host_rss_mb, row.peak_gpu_mb, row.within) == (0.25, 900.0, None, True)
    rows = [row, CalibrationRow("b", "correct", 1.03), CalibrationRow("c", "correct", 1.031),
            CalibrationRow("d", "harness_error")]
    assert [r.within for r in rows] == [True, True, False, False] and calibrated_share(rows) == 0.5


def test_reports_show_harness_errors_in_every_form(tmp_path):
    he = verdict("L1_2", "harness_error", flags=("reference_error", "harness_retried"), reason="the reference died")
    assert he["reward"] is None
    run = fill_run(tmp_path / "run", [(1, 1, verdict("L1_1", "correct", 1.0, 1.0, 0.5)), (1, 2, he)])
    paths = write_report([load(run)], tmp_path / "report")
    md = paths["markdown"].read_text()
    assert "## Harness errors" in md and "| Overall | 2 | 1 | 1 |" in md
    assert "harness_error" in paths["html"].read_text() and "Harness errors" in paths["html"].read_text()
    overall = json.loads(paths["summary"].read_text())["runs"][0]["summaries"][-1]
    assert (overall["harness_errors"], overall["retried"], overall["verdicts"]["harness_error"]) == (1, 1, 1)
    assert "| L1_2 | 0 |" in paths["tasks"].read_text()  # a null reward renders as "-", not a crash


# ----------------------------------------------------------------------------- runs (rehearsal)

@pytest.mark.nvcc
def test_a_harness_error_is_evaluated_once_more_and_the_first_verdict_kept(tmp_path, rehearsal, capsys):
    marker = tmp_path / "first_call_done"
    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    # problem 1: the reference worker dies setting up the first time only (a flaky host); problem 2: always
    flaky = (f"        if not os.path.exists({str(marker)!r}):\n            open({str(marker)!r}, 'w').close()\n"
             "            os._exit(9)\n")
    (kb / "1_flaky.py").write_text(_task("return x * torch.sigmoid(x)").replace(
        "        super().__init__()\n", "        super().__init__()\n" + flaky))
    (kb / "2_broken.py").write_text(_task("raise RuntimeError('the reference is broken')"))
    sols = tmp_path / "sols"
    for pid in (1, 2):
        shutil.copytree(HONEST, sols / f"L1_{pid}")
    out = tmp_path / "run"
    config = BenchConfig(kernelbench=tmp_path / "kb", out=out, levels=(1,), solutions=sols, progress=False,
                         build_jobs=1, sandbox=_sandbox(tmp_path))
    outcome = Bench(config).run()
    assert outcome.recorded == 2 and not outcome.no_gpu
    from cuda_agent.bench.command import _print_summary

    _print_summary(config, outcome)  # what the command prints after the table
    assert "1 attempt(s) ended in harness_error (not the candidate's failure; 1 of them evaluated twice)" in \
        capsys.readouterr().out
    v1 = json.loads((out / "tasks/L1_1/sample_0/verdict.json").read_text())
    first1 = json.loads((out / "tasks/L1_1/sample_0/verdict.first.json").read_text())
    assert v1["verdict"] == "correct" and "harness_retried" in v1["flags"], (v1["verdict"], v1["reasons"])
    assert first1["verdict"] == "harness_error" and first1["reward"] is None and "reference_error" in first1["flags"]
    v2 = json.loads((out / "tasks/L1_2/sample_0/verdict.json").read_text())
    assert v2["verdict"] == "harness_error" and v2["reward"] is None
    assert {"reference_error", "harness_retried"} <= set(v2["flags"])
    assert json.loads((out / "tasks/L1_2/sample_0/verdict.first.json").read_text())["verdict"] == "harness_error"
    assert "evaluated again" in (out / "bench.log").read_text()
    overall = load(out).summaries[-1]
    assert (overall.harness_errors, overall.retried, overall.correct) == (1, 2, 1)


@pytest.mark.nvcc
def test_bench_calibrate_runs_each_tasks_own_model_resumes_and_refuses_to_mix(tmp_path, rehearsal, capsys):
    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    (kb / "1_swish.py").write_text(SWISH)
    (kb / "2_swish_again.py").write_text(SWISH.replace("cols = 1024", "cols = 512"))
    out = tmp_path / "run"

    def config(**kw):
        return BenchConfig(kernelbench=tmp_path / "kb", out=out, levels=(1,), progress=False,
                           sandbox=_sandbox(tmp_path), **kw)

    first = Bench(config(calibrate=True)).run()
    assert (first.total, first.recorded, first.no_gpu) == (2, 2, [])
    run = load(out)
    assert run.config["mode"] == "calibrate"
    assert [(r.task, r.status, r.verdict["verdict"], r.source) for r in run.results] == \
        [("L1_1", "evaluated", "correct", "calibrate"), ("L1_2", "evaluated", "correct", "calibrate")]
    assert all(r.verdict["solution"].startswith("reference:") for r in run.results), run.results[0].verdict["solution"]
    rows = run.calibration
    assert [r.task for r in rows] == ["L1_1", "L1_2"]
    assert all(r.eval_s > 0 and 0 < r.gpu_phase_share < 1 and r.speedup_vs_eager > 0 for r in rows)
    assert all(r.host_bound is not None for r in rows)  # the verdicts' timing.host_bound reached the rows

    again = Bench(config(calibrate=True)).run()  # resumes: nothing left to do
    assert (again.done_before, again.recorded) == (2, 0)
    # --redo: the named task's result is dropped and evaluated again (after a harness fix, say); the other stays
    before = {r.task: r.finished for r in load(out).results}
    redone = Bench(config(calibrate=True, redo=("L1_2",))).run()
    assert (redone.done_before, redone.recorded) == (1, 1)
    after = {r.task: r.finished for r in load(out).results}
    assert after["L1_1"] == before["L1_1"] and after["L1_2"] > before["L1_2"] and len(load(out).results) == 2
    with pytest.raises(ValueError, match="--redo names tasks this run does not select: L1_9"):
        Bench(config(calibrate=True, redo=("L1_9",))).run()
    with pytest.raises(BenchError, match="mode 'calibrate'"):
        Bench(config(solutions=tmp_path)).run()

    paths = write_report([run], tmp_path / "report")
    md = paths["markdown"].read_text()
    assert "## Calibration: run" in md and "within 1.00 ± 0.03 of eager" in md and "GPU phase share" in md
    assert "Calibration: run" in paths["html"].read_text()
    cal = json.loads(paths["summary"].read_text())["runs"][0]["calibration"]
    assert cal["tolerance"] == 0.03 and [t["task"] for t in cal["tasks"]] == ["L1_1", "L1_2"]
    assert all(t["eval_s"] > 0 and t["gpu_phase_share"] is not None for t in cal["tasks"])
    assert all(t["host_bound"] in (True, False) for t in cal["tasks"])  # each row's verdict shares, reported

    # the command line: one of --solutions, --agent and --calibrate; a resume in another mode is refused
    common = ["bench", "--kernelbench", str(tmp_path / "kb"), "--levels", "1", "--no-progress"]
    assert main(common + ["--out", str(tmp_path / "x"), "--calibrate", "--solutions", str(tmp_path)]) == 2
    assert "exactly one of --solutions DIR, --agent and --calibrate" in capsys.readouterr().err
    assert main(common + ["--out", str(out), "--solutions", str(tmp_path)]) == 2
    assert "holds a run with mode 'calibrate'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- lanes on their own cores

def _sysfs(tmp: Path, siblings: dict[int, str]) -> Path:
    for cpu, text in siblings.items():
        (tmp / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(text + "\n")
    return tmp


def test_lanes_get_disjoint_whole_physical_cores(tmp_path):
    from cuda_agent.bench.lanes import core_groups, split_cpus
    from cuda_agent.sandbox.process import compact_cpus, parse_cpu_list

    # 8 cores, 2 threads each, siblings numbered apart (0 and 8 share a core), as on most x86 hosts
    sysfs = _sysfs(tmp_path, {c: f"{c % 8},{c % 8 + 8}" for c in range(16)})
    assert split_cpus(2, set(range(16)), sysfs) == [{0, 8, 1, 9, 2, 10, 3, 11}, {4, 12, 5, 13, 6, 14, 7, 15}]
    assert split_cpus(3, set(range(16)), sysfs) == [{0, 8, 1, 9, 2, 10}, {3, 11, 4, 12, 5, 13}, {6, 14, 7, 15}]
    assert split_cpus(4, set(range(16)), sysfs) == [{0, 8, 1, 9}, {2, 10, 3, 11}, {4, 12, 5, 13}, {6, 14, 7, 15}]
    # under MIN_CORES_PER_LANE (2) physical cores a lane, or one lane: every lane shares every CPU
    assert split_cpus(5, set(range(16)), sysfs) is None
    assert split_cpus(1, set(range(16)), sysfs) is None
    # only the CPUs this process may use are given out; a sibling outside them is not
    assert split_cpus(2, {0, 1, 2, 3, 8}, sysfs) == [{0, 8, 1}, {2, 3}]
    # no topology to read (a container without sysfs): each CPU is its own core
    assert split_cpus(2, {0, 1, 2, 3, 4}, tmp_path / "none") == [{0, 1, 2}, {3, 4}]
    # inconsistent sibling lists never put one CPU in two groups (and so in two lanes)
    odd = _sysfs(tmp_path / "odd", {0: "0,1", 1: "1,2", 2: "2", 3: "3"})
    assert core_groups({0, 1, 2, 3}, odd) == [(0, 1), (2,), (3,)]
    assert parse_cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert compact_cpus({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"


def test_two_lanes_on_one_gpu_run_their_workers_on_their_own_cpus(tmp_path, rehearsal, monkeypatch):
    """On an H100 shared by two lanes, level 3's launch-bound models (MobileNet, EfficientNet) were timed up
    to 2x off, mostly while the other lane compiled (inductor starts a thread per CPU): each lane, and every
    worker it starts, now runs on its own physical cores. The task's Model records where its worker may run."""
    import os

    from cuda_agent.bench import lanes as bench_lanes
    from cuda_agent.sandbox.gpu import GpuInfo
    from cuda_agent.sandbox.process import parse_cpu_list

    monkeypatch.setattr(bench_lanes, "MIN_CORES_PER_LANE", 1)  # so that a 2-CPU box (CI) splits too
    if bench_lanes.split_cpus(2) is None:
        pytest.skip("needs 2 physical cores to split (these CPUs are one core's hyper-threads)")
    seen = tmp_path / "affinity.txt"
    record = (f"        with open({str(seen)!r}, 'a') as f:\n"
              "            f.write(','.join(map(str, sorted(os.sched_getaffinity(0)))) + '\\n')\n")
    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    for pid in (1, 2):
        (kb / f"{pid}_swish.py").write_text(_task("return x * torch.sigmoid(x)").replace(
            "        super().__init__()\n", "        super().__init__()\n" + record))
    monkeypatch.setattr(Bench, "_selected_gpus", lambda self: [GpuInfo(0, "Fake GPU", "9.0", "GPU-fake", 81559)])
    out = tmp_path / "run"

    def config(**kw):
        return BenchConfig(kernelbench=tmp_path / "kb", out=out, levels=(1,), progress=False, per_gpu=2,
                           calibrate=True, sandbox=_sandbox(tmp_path), **kw)

    outcome = Bench(config()).run()
    assert (outcome.recorded, outcome.no_gpu) == (2, [])
    lanes = [parse_cpu_list(c) for c in json.loads((out / "bench.json").read_text())["invocations"][0]["lane_cpus"]]
    assert len(lanes) == 2 and not lanes[0] & lanes[1] and lanes[0] | lanes[1] == set(os.sched_getaffinity(0))
    assert {r.lane for r in load(out).results} <= {"gpu0.0", "gpu0.1"}
    rows = seen.read_text().splitlines()
    assert rows  # every worker that built the Model (reference and candidate, both lanes) ran on one lane's CPUs
    for cpus in rows:
        assert set(map(int, cpus.split(","))) in lanes, (cpus, lanes)
    # each verdict says where its workers ran (a reader of a GPU run can see the split took effect)
    for r in load(out).results:
        workers = r.verdict["timing"]["workers"]
        assert {frozenset(parse_cpu_list(workers[role]["cpus"])) for role in ("reference", "candidate")} <= \
            {frozenset(c) for c in lanes}, workers

    # --shared-cpus: every lane may use every CPU, and bench.json says so
    seen.unlink()
    Bench(config(split_cpus=False, redo=("L1_1",))).run()
    assert json.loads((out / "bench.json").read_text())["invocations"][1]["lane_cpus"] is None
    assert set(seen.read_text().splitlines()) == \
        {",".join(map(str, sorted(os.sched_getaffinity(0))))}
