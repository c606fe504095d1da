"""``cuda-agent train recipe``: the four stages chained on CPU with a tiny model made from a config
(the ``cpu`` preset), killed with SIGKILL part-way through RFT, then run again to the end.

What a second run must do: skip every step whose output is complete (``done.json``), resume the
stage that was cut from its newest complete checkpoint, finish the rest, and leave a summary with
each step's status and the reward curve. On CPU ``verify`` has no GPU, so the rewards are -1; the
"it learns" figures need the H200 (``cuda-agent train recipe --preset smoke``).
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from cuda_agent.cli import main  # noqa: E402

from .conftest import ROOT  # noqa: E402

LONG_RFT = "rft.max_steps=100000"
"""The first run's RFT cannot finish before the kill: the kill always lands inside the stage."""


def _wait_for(path, proc, deadline_s=600):
    """Poll until ``path`` exists (the run's own progress, not a clock race); fail if the run died."""
    end = time.monotonic() + deadline_s
    while not path.exists():
        assert proc.poll() is None, f"the recipe exited early ({proc.returncode}):\n{proc.stdout.read()[-3000:]}"
        assert time.monotonic() < end, f"{path} did not appear"
        time.sleep(0.2)


def test_recipe_resumes_after_a_kill(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "recipe", "--preset", "cpu", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               PYTHONWARNINGS="ignore", CUDA_AGENT_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", *argv, "--set", LONG_RFT], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait_for(out / "rft" / "checkpoint-2" / "trainer_state.json", proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the recipe and anything it started
        proc.wait()
    assert not (out / "rft" / "done.json").exists() and not (out / "rft" / "final").exists()
    first_st = (out / "single_turn" / "metrics.jsonl").read_text()
    assert (out / "eval_before_rft" / "done.json").exists()

    os.environ["CUDA_AGENT_CACHE"] = str(tmp_path / "cache")
    try:
        assert main([*argv, "--set", "rft.max_steps=4"]) == 0
    finally:
        del os.environ["CUDA_AGENT_CACHE"]
    summary = json.loads((out / "summary.json").read_text())
    steps = summary["steps"]
    assert list(steps) == ["data", "single_turn", "eval_before_rft", "rft", "eval_after_rft", "value", "agentic",
                           "eval_after_grpo"]
    for name in ("data", "single_turn", "eval_before_rft"):
        assert steps[name]["status"] == "skipped (complete)", name
    for name in ("rft", "eval_after_rft", "value", "agentic", "eval_after_grpo"):
        assert steps[name]["status"] == "done", name
    assert (out / "single_turn" / "metrics.jsonl").read_text() == first_st  # not trained again
    # RFT picked up from a checkpoint of the killed run and trained on to step 4
    resumed = steps["rft"]["resumed_from"]
    assert resumed and int(resumed.rpartition("-")[2]) >= 2 and steps["rft"]["steps"] == 4
    rft_steps = [json.loads(line)["step"] for line in (out / "rft" / "metrics.jsonl").read_text().splitlines()]
    assert rft_steps[0] == 1 and rft_steps[-1] == 4  # the killed run's rows, then the resumed run's
    for stage in ("single_turn", "rft", "value", "agentic"):
        assert (out / stage / "final" / "config.json").is_file(), stage
    assert [p["point"] for p in summary["reward_curve"]] == ["before RFT", "after RFT", "after GRPO"]
    assert all(p["rewards"] == [-1.0] for p in summary["reward_curve"])  # no GPU: verify cannot pass here
    assert summary["learned"] is False and (out / "reward_curve.png").is_file()
    assert "summary:" in capsys.readouterr().out

    # a third run has nothing left to do
    assert main(argv) == 0
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert {s["status"] for s in steps.values()} == {"skipped (complete)"}
