"""Training leaves harness errors out (issue 15): a harness_error verdict's reward is None through the
service and its client, the TRL reward function hands TRL None for it (never a number), the agentic
environment does the same for an episode whose last verification was a harness error, and the
batch statistics count them apart."""

import inspect
import json

import pytest

from cuda_agent.sandbox import Verdict
from cuda_agent.sandbox.verdict import HARNESS_ERROR
from cuda_agent.tasks import load_task
from cuda_agent.train.client import EvalClient
from cuda_agent.train.evaluator import EvalResult
from cuda_agent.train.rewards import SandboxReward, batch_stats
from cuda_agent.train.service import EvalService, EvalServiceConfig
from cuda_agent.train.solution_io import read_files, render_files

from .conftest import EXAMPLES, SOLUTIONS, TASKS

SWISH = load_task(EXAMPLES / "swish" / "task.py", name="swish")
CHEAT = read_files(SOLUTIONS / "cheat_torch_fallback")
REHEARSAL = read_files(SOLUTIONS / "rehearsal_swish_cpu")


def _harness_error() -> EvalResult:
    v = Verdict(verdict=HARNESS_ERROR, task="swish", reward=None, flags=["reference_error"])
    v.add_reason("the reference worker died")
    return EvalResult(verdict=v, reward=None)


class _Scripted:
    """An evaluator that answers harness_error for the files named in ``broken``, else the real sandbox's
    verdict of a static rejection (no GPU needed)."""

    def __init__(self, broken=("harness",)):
        self.broken, self.calls = broken, 0

    def evaluate(self, task, files, reward_kind="paper"):
        from cuda_agent.train.evaluator import LocalEvaluator

        self.calls += 1
        if any(b in text for text in files.values() for b in self.broken):
            return _harness_error()
        return LocalEvaluator().evaluate(task, files, reward_kind)


def test_the_reward_function_gives_trl_none_for_a_harness_error_and_counts_it(tmp_path):
    reward = SandboxReward(SandboxReward.Config(log_path=tmp_path / "rollouts.jsonl"), [SWISH], _Scripted())
    harness = render_files({"model_new.py": "# harness\n" + REHEARSAL["model_new.py"]})
    out = reward(prompts=[None] * 2, completions=[harness, render_files(CHEAT)], task_name=["swish"] * 2)
    assert out == [None, -1.0]
    assert reward.stats["harness_error_rate"] == 0.5 and reward.stats["sandbox_reward_mean"] == -1.0
    assert reward.stats["reward_frac_-1"] == 1.0 and reward.stats["verdict_harness_error"] == 0.5
    rows = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in rows] == [None, -1.0] and rows[0]["verdict"] == HARNESS_ERROR


def test_batch_stats_of_only_harness_errors_have_no_reward_mean():
    stats = batch_stats([_harness_error(), _harness_error()])
    assert stats["harness_error_rate"] == 1.0 and "sandbox_reward_mean" not in stats
    assert not any(k.startswith("reward_frac_") for k in stats)


def test_trl_leaves_a_sample_whose_every_reward_is_none_out_of_the_batch():
    """What the stages rely on (TRL >= 1.16): None -> NaN, 'unscorable' rows out of the group mean and
    std, their advantage forced to 0. If TRL changes this, the stages must filter explicitly."""
    trl = pytest.importorskip("trl")
    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer)
    assert "reward if reward is not None else torch.nan" in src, trl.__version__
    assert "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)" in src, trl.__version__
    assert "advantages = torch.nan_to_num(advantages, nan=0.0)" in src, trl.__version__


@pytest.mark.nvcc
def test_a_harness_error_through_the_service_has_a_null_reward(tmp_path, monkeypatch):
    """The real service and sandbox (CPU rehearsal), a task whose reference raises."""
    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    src = (TASKS / "swish_small.py").read_text().replace(
        "        return x * torch.sigmoid(x)\n", "        raise RuntimeError('the reference is broken')\n")
    task = load_task(_write(tmp_path / "broken.py", src), name="broken")
    svc = EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=1, cache_dir=tmp_path / "cache", rep_ms=20.0)).start()
    try:
        r = EvalClient(svc.url, retries=0).evaluate(task, REHEARSAL)
        assert r.verdict.verdict == HARNESS_ERROR and r.reward is None, (r.verdict.verdict, r.verdict.reasons)
        assert "reference_error" in r.verdict.flags
        health = svc.health()
        assert health["done"] == 1 and health["harness_errors"] == 1
    finally:
        svc.stop()


def _write(path, text):
    path.write_text(text)
    return path


def test_an_agentic_episode_ending_on_a_harness_error_is_left_out(tmp_path):
    pytest.importorskip("transformers")
    from cuda_agent.train.agent_env import SessionConfig, start_episode
    from cuda_agent.train.trl_env import CudaAgentEnv

    cfg = SessionConfig(run_root=str(tmp_path / "env"))
    evaluator = _Scripted()
    env = CudaAgentEnv(lambda row: start_episode(SWISH, cfg, evaluator))
    env.reset(prompt=[], task_name="swish")
    env.write_file(path="model_new.py", content=CHEAT["model_new.py"])
    assert '"verdict": "rejected"' in env.verify()
    env.write_file(path="model_new.py", content="# harness\n" + REHEARSAL["model_new.py"])
    assert HARNESS_ERROR in env.verify()
    env.submit(summary="x")
    assert env.get_reward() is None and env.get_reward() is None  # scored once, stays None
    assert evaluator.calls == 2

    # the same episode whose last verification was the candidate's own failure keeps its -1
    env.reset(prompt=[], task_name="swish")
    env.write_file(path="model_new.py", content="# harness\n" + REHEARSAL["model_new.py"])
    env.verify()
    env.write_file(path="model_new.py", content=CHEAT["model_new.py"])
    env.verify()
    env.submit(summary="x")
    assert env.get_reward() == -1.0
