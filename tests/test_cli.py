"""The ``cuda-agent`` command, run as a user runs it (``python3 -m cuda_agent.cli``, a subprocess).

Every command imports torch (seconds each), so the module fixture starts all of them at once
and the tests read their results.
"""

import json
import os
import subprocess
import sys

import pytest

from .conftest import EXAMPLES, HAS_CUDA, ROOT, SOLUTIONS

BROKEN_TASK = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    pass\n\n" \
              "def get_init_inputs():\n    return []\n"


def _has_gpu_for_eval() -> bool:
    if HAS_CUDA:
        return True
    from cuda_agent.sandbox.gpu import list_gpus
    return bool(list_gpus())


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "broken_task.py").write_text(BROKEN_TASK)
    swish_task, swish = str(EXAMPLES / "swish" / "task.py"), str(EXAMPLES / "swish" / "solution")
    commands = {
        "check_cheat": ["check", str(SOLUTIONS / "cheat_thread")],
        "check_json": ["check", "--json", swish],
        "eval_missing_task": ["eval", str(tmp / "missing_task.py"), swish],
        "eval_broken_task": ["eval", str(tmp / "broken_task.py"), swish],
    }
    if not _has_gpu_for_eval():
        commands["eval_no_gpu"] = ["eval", swish_task, swish]
    env = dict(os.environ, CUDA_AGENT_CACHE=str(tmp / "cache"), PYTHONWARNINGS="ignore")
    procs = {name: subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", *args], cwd=ROOT, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for name, args in commands.items()}
    results = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return results


def test_check_on_a_cheat_prints_rejected_and_exits_1(cli):
    """Exit 1 on rejected (it was 0 until issue 16: scripts could not tell a cheat from a pass)."""
    r = cli["check_cheat"]
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "verdict: rejected   rules: cuda-agent"
    assert any("[threads]" in ln and "model_new.py:1" in ln for ln in lines[1:]), r.stdout


def test_check_json_on_the_example_is_ok(cli):
    r = cli["check_json"]
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["verdict"] == "ok" and result["reasons"] == [] and result["rules"] == "cuda-agent"
    assert result["solution"].startswith("workspace:")


def test_eval_on_a_missing_task_file_exits_2_naming_it(cli):
    r = cli["eval_missing_task"]
    assert r.returncode == 2
    assert "missing_task.py" in r.stderr and "Traceback" not in r.stderr


def test_eval_with_a_broken_task_exits_2(cli):
    r = cli["eval_broken_task"]
    assert r.returncode == 2
    assert "broken_task.py" in r.stderr and "get_inputs" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(HAS_CUDA, reason="checks the behaviour on a host without a CUDA GPU")
def test_eval_without_a_gpu_says_so_and_exits_3(cli):
    if "eval_no_gpu" not in cli:
        pytest.skip("nvidia-smi lists a GPU here")
    r = cli["eval_no_gpu"]
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "no CUDA GPU" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
