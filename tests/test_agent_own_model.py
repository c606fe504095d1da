"""`cuda-agent optimize` on your own nn.Module: the task built from --module/--inputs/--init-args,
the drop-in module written back, and the command end to end with a replayed model."""

import importlib.util
import json
import sys

import pytest
import torch

from cuda_agent import cli
from cuda_agent.agent.own_model import parse_inputs, task_from_module, write_dropin
from cuda_agent.tasks import TaskError

from .agent_support import IDENTITY_MODEL_NEW

BLOCK = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.scale = scale

    def forward(self, x, bias):
        return torch.relu(self.lin(x)) * self.scale + bias


if __name__ == "__main__":
    raise SystemExit("not when imported")
'''

# a Python-only ModelNew standing in for a built solution (the drop-in mechanics need no GPU)
SOLUTION_MODEL_NEW = '''import torch
import torch.nn as nn

PREPARED = []


class ModelNew(nn.Module):
    def __init__(self, dim, scale=2.0):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.scale = scale

    def prepare(self):
        PREPARED.append(1)
        self.register_buffer("w_t", self.lin.weight.t().contiguous(), persistent=False)

    def forward(self, x, bias):
        return torch.relu(x @ self.w_t + self.lin.bias) * self.scale + bias
'''


@pytest.fixture
def block_file(tmp_path):
    path = tmp_path / "myblocks.py"
    path.write_text(BLOCK)
    return path


def test_input_specs():
    assert parse_inputs("float32[8,1024]; int64[8] ;bool[3]") == [("float32", (8, 1024)), ("int64", (8,)),
                                                                   ("bool", (3,))]
    for bad in ("float32(8)", "complex64[2]", "", "float32[8,a]"):
        with pytest.raises(TaskError):
            parse_inputs(bad)


@pytest.mark.parametrize("init_args", ['[16]', '{"dim": 16, "scale": 3.0}'])
def test_task_from_a_module_file(block_file, init_args):
    task = task_from_module(f"{block_file}:Block", "float32[4,16];float32[16]", init_args)
    module = task.load_module()
    assert module.Model.__name__ == "Block"
    model = module.Model(*module.get_init_inputs())
    x, bias = module.get_inputs()
    assert x.shape == (4, 16) and bias.shape == (16,) and model(x, bias).shape == (4, 16)
    assert "class Block" in task.source  # inlined: the workers need nothing on their path
    if init_args.startswith("{"):
        assert module.get_init_inputs() == [16, 3.0]


def test_task_from_an_importable_module(block_file, monkeypatch):
    monkeypatch.syspath_prepend(str(block_file.parent))
    task = task_from_module("myblocks:Block", "float32[2,8];float32[8]", "[8]")
    assert task.name == "Block" and task.meta["init_args"] == [8]
    with pytest.raises(TaskError, match="no class"):
        task_from_module("myblocks:Nope", "float32[2]")
    with pytest.raises(TaskError, match="do not fit"):
        task_from_module("myblocks:Block", "float32[2]", '{"width": 3}')


def test_dropin_has_the_same_constructor_and_state_dict(tmp_path, block_file):
    solution = tmp_path / "out" / "solution"
    (solution / "kernels").mkdir(parents=True)
    (solution / "model_new.py").write_text(SOLUTION_MODEL_NEW)
    verdict = {"speedup_vs_eager": 1.8, "speedup_vs_compile": 1.2, "gpu": "NVIDIA H200"}
    path = write_dropin(tmp_path / "out", f"{block_file}:Block", solution, verdict)
    assert path.name == "myblocks_optimized.py"
    text = path.read_text()
    assert "1.80x faster than eager" in text and "NVIDIA H200" in text
    spec = importlib.util.spec_from_file_location("myblocks_optimized", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.path.insert(0, str(block_file.parent))
    try:
        from myblocks import Block
    finally:
        sys.path.remove(str(block_file.parent))
    original, fast = Block(16, 3.0), mod.Block(16, 3.0)
    fast.load_state_dict(original.state_dict())
    assert set(fast.state_dict()) == set(original.state_dict())
    x, bias = torch.randn(4, 16), torch.randn(16)
    torch.testing.assert_close(fast(x, bias), original(x, bias))
    fast(x, bias)
    prepared = sys.modules[mod._ModelNew.__module__].PREPARED
    assert len(prepared) == 1  # prepare ran once ...
    with torch.no_grad():
        original.lin.weight.mul_(2)
        fast.lin.weight.mul_(2)
    torch.testing.assert_close(fast(x, bias), original(x, bias))
    assert len(prepared) == 2  # ... and again after the weights changed


def test_optimize_command_with_a_replayed_model(tmp_path, block_file, capsys):
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps({"steps": [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "model.py"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "model_new.py", "content": IDENTITY_MODEL_NEW}}]},
        {"tool_calls": [{"name": "submit", "arguments": {}}]},
    ]}))
    out = tmp_path / "out"
    code = cli.main(["optimize", "--module", f"{block_file}:Block", "--inputs", "float32[4,16];float32[16]",
                     "--init-args", "[16]", "--replay", str(steps), "--out", str(out), "--quiet", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ended_by"] == "submitted" and summary["out"] == str(out)
    record = json.loads((out / "trajectory.jsonl").read_text())
    assert "class Block" in record["messages"][1]["content"]
    assert (out / "run" / "workspace" / "model.py").read_text().count("Model = Block") == 1


def test_optimize_command_bad_input(tmp_path, capsys):
    assert cli.main(["optimize", "--module", "nowhere:Thing"]) == 2
    assert "--inputs" in capsys.readouterr().err
    assert cli.main(["optimize"]) == 2
    assert cli.main(["optimize", str(tmp_path / "missing.py"), "--replay", "x.json"]) == 2


def test_bench_solver_runs_one_episode_in_a_workdir(tmp_path):
    from cuda_agent.agent import solve

    from .agent_support import tiny_task

    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps({"steps": [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "model_new.py", "content": IDENTITY_MODEL_NEW}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "scratch.py", "content": "print(1)\n"}}]},
    ]}))
    solution, trajectory = solve(tiny_task(tmp_path), tmp_path / "work", ["--replay", str(steps), "--quiet"])
    assert (solution / "model_new.py").read_text() == IDENTITY_MODEL_NEW  # no correct solution: the final sources
    assert not (solution / "scratch.py").exists()
    (record,) = [json.loads(line) for line in trajectory.read_text().splitlines()]
    assert record["ended_by"] == "replay_exhausted"
