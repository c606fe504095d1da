"""The agent on a real GPU: a hand-written honest trajectory for examples/swish/task.py is replayed
through the real compile, verify and profile tools to a verified solution faster than eager, and
the trajectory it writes round-trips. Then `cuda-agent optimize --module` on a user's module
writes a drop-in class that runs the built kernel.

    python -m pytest -m gpu tests/gpu/test_agent_gpu.py -v -s
"""

import importlib.util
import json
import sys

import pytest
import torch

from cuda_agent import cli
from cuda_agent.agent import AgentConfig, load_jsonl, make_backend, run_episode, to_trl
from cuda_agent.agent.progress import ConsoleProgress
from cuda_agent.sandbox import SandboxConfig
from cuda_agent.tasks import load_task

from ..conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.gpu

REPLAY = ROOT / "tests" / "data" / "agent" / "swish_replay.json"
SWISH_MODULE = ROOT / "tests" / "data" / "agent" / "swish_module.py"


def sandbox(cache_dir):
    return SandboxConfig(cache_dir=cache_dir, rep_ms=50.0, warmup_ms=10.0, run_timeout_s=120.0)


@pytest.mark.timing
def test_replayed_honest_episode_reaches_a_verified_faster_solution(tmp_path, cache_dir):
    config = AgentConfig(sandbox=sandbox(cache_dir))  # stops early if the kernel beats torch.compile by > 5%
    traj = tmp_path / "trajectories.jsonl"
    rec = run_episode(load_task(EXAMPLES / "swish" / "task.py", name="swish"),
                      make_backend("replay", path=str(REPLAY)), config, run_dir=tmp_path / "run",
                      trajectories=traj, progress=ConsoleProgress(use_rich=False))
    tools = {m["tool_call_id"]: m["content"] for m in rec["messages"] if m["role"] == "tool"}
    calls = [c for m in rec["messages"] for c in m.get("tool_calls", [])]
    by_name = {c["function"]["name"]: tools[c["id"]] for c in calls}
    print(json.dumps(rec["timings"]), "\n", by_name["profile"][:1500], "\n", by_name["verify"][:1500])

    if rec["ended_by"] == "target_reached":
        assert rec["turns"] == 7 and rec["best"]["speedup_vs_compile"] > 1.05
    else:
        assert rec["ended_by"] == "submitted" and rec["turns"] == 8
    assert "== eager" in by_name["profile"] and "== torch.compile" in by_name["profile"]
    assert by_name["compile"].startswith("build ok")
    (verified,) = rec["verdicts"]
    v = verified["verdict"]
    assert v["verdict"] == "correct", (v["reasons"], v["log"])
    assert v["speedup_vs_eager"] > 1.05 and rec["reward"] >= 2
    assert rec["best"]["files"]["kernels/swish.cu"].startswith("// Pure CUDA")
    assert (tmp_path / "run" / "best" / "verdict.json").is_file()
    assert rec["timings"]["sandbox_s"] > 0.5 * rec["timings"]["wall_s"]

    (loaded,) = load_jsonl(traj)
    assert loaded == json.loads(json.dumps(rec))
    assert to_trl(loaded)["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"path": "model.py"}


@pytest.mark.timing
def test_optimize_own_module_writes_a_working_dropin(tmp_path, cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(cache_dir))
    out = tmp_path / "out"
    code = cli.main(["optimize", "--module", f"{SWISH_MODULE}:Swish", "--inputs", "float32[4096,8192]",
                     "--replay", str(REPLAY), "--no-stop-at-target", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["best"]["speedup_vs_eager"] > 1.0, summary
    assert (out / "solution" / "cuda_ext.so").is_file()
    dropin = out / "swish_module_optimized.py"
    spec = importlib.util.spec_from_file_location("swish_module_optimized", dropin)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.path.insert(0, str(SWISH_MODULE.parent))
    try:
        from swish_module import Swish
    finally:
        sys.path.remove(str(SWISH_MODULE.parent))
    x = torch.randn(999, 37, device="cuda")  # any shape (a tail too), not only the example's
    fast = mod.Swish().cuda()
    fast.load_state_dict(Swish().state_dict())
    torch.testing.assert_close(fast(x), Swish()(x), rtol=1e-5, atol=1e-6)
